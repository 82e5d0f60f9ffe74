"""What the attribution-graph tests compare against, written apart from gptviz.methods.graph*: models drawn at
unit-ish scale (GPT-2's init makes every effect tiny), and a plain forward pass from the weights that can remove one
node (a head's or a neuron's output at one position, the embeddings at one position, a bias at one position)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tests.support.models import build

WIRINGS = [
    dict(),
    dict(norm="post"),
    dict(norm_type="rmsnorm"),
    dict(norm="post", norm_type="rmsnorm"),
    dict(qkv_bias=False, activation="relu"),
    dict(norm="post", qkv_bias=False, activation="gelu_tanh"),
    dict(norm="post", final_norm=False, activation="gelu_tanh"),  # GPT-1: no final norm
    dict(bias=False, qkv_bias=False),
]  # nanoGPT's bias=False
WIRING_IDS = [
    "pre",
    "post",
    "pre-rms",
    "post-rms",
    "pre-nobias-relu",
    "post-nobias-tanh",
    "gpt1-no-final-norm",
    "nanogpt-no-biases",
]


def unit_model(seed: int = 1, **changes):
    """A small model whose weights are drawn at unit scale (matrices ~ 1/sqrt(fan-in), biases and betas ~ 0.5,
    gammas ~ 1 +- 0.5), so heads, neurons and biases all move the metric visibly."""
    model = build(seed=seed, **changes)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() > 1:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            elif "ln" in name and name.endswith("weight"):
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
    return model


def prompt(T: int = 7, seed: int = 0, vocab: int = 101) -> list[int]:
    return torch.randint(0, vocab, (T,), generator=torch.Generator().manual_seed(seed)).tolist()


def _norm(module, x, config):
    if not hasattr(module, "eps"):  # no final norm
        return x
    if config.norm_type == "layernorm":
        return F.layer_norm(x, (x.shape[-1],), module.weight, module.bias, module.eps)
    return F.rms_norm(x, (x.shape[-1],), module.weight, module.eps)


@torch.no_grad()
def reference_metric(model, ids, target: int, other: int | None, remove=None) -> float:
    """logit(target) - logit(other) at the last position from the weights alone, with `remove` (kind, layer, index,
    position, bias name) taken out: "head" (its z at that position set to 0), "neuron" (its activation set to 0),
    "embeddings" (token + position embedding set to 0), "bias" (the named constant not added at that position)."""
    cfg = model.config
    kind, layer, index, pos, bias = remove if remove is not None else (None,) * 5
    ids = torch.as_tensor(ids)
    T, H, dh = len(ids), cfg.n_heads, cfg.d_head
    x = model.wte.weight[ids] + model.wpe.weight[:T]
    if kind == "embeddings":
        x[pos] = 0
    for depth, block in enumerate(model.blocks):

        def attention(inp, block=block, depth=depth):
            a = block.attn
            qkv = inp @ a.c_attn.weight.T + (a.c_attn.bias if a.c_attn.bias is not None else 0)
            q, k, v = (t.view(T, H, dh).transpose(0, 1) for t in qkv.split(cfg.d_model, -1))
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
            z = (scores.softmax(-1) @ v).transpose(0, 1).clone()  # [T, H, dh]
            if kind == "head" and layer == depth:
                z[pos, index] = 0
            out = z.reshape(T, -1) @ a.c_proj.weight.T + a.c_proj.bias
            if kind == "bias" and layer == depth and bias == "attn.out-bias":
                out[pos] -= a.c_proj.bias
            return out

        def mlp(inp, block=block, depth=depth):
            m = block.mlp
            pre = inp @ m.c_fc.weight.T + m.c_fc.bias
            act = {"gelu": F.gelu, "relu": F.relu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[
                cfg.activation
            ](pre)
            if kind == "neuron" and layer == depth:
                act[pos, index] = 0
            out = act @ m.c_proj.weight.T + m.c_proj.bias
            if kind == "bias" and layer == depth and bias == "mlp.out-bias":
                out[pos] -= m.c_proj.bias
            return out

        def drop_beta(y, name, module, depth=depth):
            if kind == "bias" and layer == depth and bias == name:
                y[pos] -= module.bias
            return y

        if cfg.norm == "pre":
            x = x + attention(_norm(block.ln_1, x, cfg))
            x = x + mlp(_norm(block.ln_2, x, cfg))
        else:
            x = drop_beta(_norm(block.ln_1, x + attention(x), cfg), "ln_1.beta", block.ln_1)
            x = drop_beta(_norm(block.ln_2, x + mlp(x), cfg), "ln_2.beta", block.ln_2)
    logits = _norm(model.ln_f, x, cfg)[-1] @ model.lm_head.weight.T
    return float(logits[target] - (logits[other] if other is not None else 0))
