"""llm.c's PyTorch reference GPT-2 (github.com/karpathy/llm.c, train_gpt2.py; MIT) and its `write_model`,
re-implemented from the published design and file layout for the loader's tests: GPT-2 with nn.Linear layers
(transformer.wte/wpe/h.N.ln_1/attn.c_attn/attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj/ln_f, lm_head tied to wte), the tanh
GELU ("NewGELU"), nn.LayerNorm; the .bin file: a 256-int32 header (magic 20240326, version 3 float32 or 5 bfloat16,
maxT, V, L, NH, C, Vp) and then the tensors grouped by type across layers, wte padded to Vp rows with zeros."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 50257
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 32


class NewGELU(nn.Module):
    def forward(self, input):
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.n_head, self.n_embd = config.n_head, config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = NewGELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd), CausalSelfAttention(config)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd), MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


_PER_LAYER = (
    "ln_1.weight",
    "ln_1.bias",
    "attn.c_attn.weight",
    "attn.c_attn.bias",
    "attn.c_proj.weight",
    "attn.c_proj.bias",
    "ln_2.weight",
    "ln_2.bias",
    "mlp.c_fc.weight",
    "mlp.c_fc.bias",
    "mlp.c_proj.weight",
    "mlp.c_proj.bias",
)


def pad_vocab(tensor: torch.Tensor, multiple: int = 128) -> torch.Tensor:
    V = tensor.size(0)
    Vp = ((V + multiple - 1) // multiple) * multiple
    return F.pad(tensor, (0, 0, 0, Vp - V), value=0)


def write_model(model: GPT, filename, dtype: str = "float32") -> None:
    version = {"float32": 3, "bfloat16": 5}[dtype]
    header = torch.zeros(256, dtype=torch.int32)
    c = model.config
    header[:7] = torch.tensor([20240326, version, c.block_size, c.vocab_size, c.n_layer, c.n_head, c.n_embd])
    params = {name: param.detach().cpu() for name, param in model.named_parameters()}
    params["transformer.wte.weight"] = pad_vocab(params["transformer.wte.weight"])
    header[7] = params["transformer.wte.weight"].size(0)
    order = ["transformer.wte.weight", "transformer.wpe.weight"]
    order += [f"transformer.h.{i}.{name}" for name in _PER_LAYER for i in range(c.n_layer)]
    order += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
    with open(filename, "wb") as file:
        file.write(header.numpy().tobytes())
        for name in order:
            t = params[name]
            data = t.to(torch.float32) if dtype == "float32" else t.to(torch.bfloat16).view(torch.int16)
            file.write(data.numpy().tobytes())
