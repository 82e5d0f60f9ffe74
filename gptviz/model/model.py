"""The GPT model: GPT-2's module names, pre- or post-norm blocks from one flag, hook points throughout.

Module names follow GPT-2 (`wte, wpe, blocks.{i}.ln_1, blocks.{i}.attn.c_attn, ...`), so Hugging Face
weights load by a key rename plus a transpose. Pre- and post-norm use the same parameters, so one set of
weights can be run both ways.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import GPTConfig
from .hooks import HookPoint, current_wants, name_hook_points, note_offset
from .variants import NoNorm, fixed_zero_bias, make_linear


class _HookedNorm:
    """A torch norm (the class after this one in the bases) whose output passes the hook point `hook_normalized`."""

    def __init__(self, d_model: int, eps: float):
        super().__init__(d_model, eps=eps)
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(super().forward(x))


class LayerNorm(_HookedNorm, nn.LayerNorm):
    pass


class RMSNorm(_HookedNorm, nn.RMSNorm):
    pass


def make_norm(config: GPTConfig) -> nn.Module:
    cls = LayerNorm if config.norm_type == "layernorm" else RMSNorm
    norm = cls(config.d_model, config.ln_eps)
    return fixed_zero_bias(norm) if not config.bias and getattr(norm, "bias", None) is not None else norm


@dataclass
class LayerKV:
    """Preallocated key/value storage for one layer: appending is a slice write, not a concatenation."""

    k: torch.Tensor  # (B, nh, n_ctx, hs)
    v: torch.Tensor


class KVCache:
    """Keys and values of every layer for the tokens seen so far (generation without recomputation)."""

    def __init__(self, config: GPTConfig, batch: int, device, dtype):
        shape = (batch, config.n_heads, config.n_ctx, config.d_head)
        self.layers = [
            LayerKV(torch.empty(shape, device=device, dtype=dtype), torch.empty(shape, device=device, dtype=dtype))
            for _ in range(config.n_layers)
        ]
        self.length = 0  # tokens stored
        self.capacity = config.n_ctx


def in_out_layout(matrix: torch.Tensor) -> torch.Tensor:
    """The same [out, in] matrix with its memory laid out [in, out] (column-major): the transpose of a
    contiguous [in, out] copy."""
    return matrix.t().contiguous().t()


def row_major_copy(model: GPT) -> GPT:
    """The same weights with every matrix stored row-major (nn.Linear's default): what the [in, out] layout is
    compared against, in the tests and benchmarks."""
    twin = GPT(model.config).train(model.training)
    twin.load_state_dict(model.state_dict())
    for module in twin.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight = nn.Parameter(module.weight.detach().contiguous())
    if twin.config.tie_weights:
        twin.lm_head.weight = twin.wte.weight
    return twin


@torch.no_grad()
def rewired_copy(model: GPT, norm: str) -> GPT:
    """A copy of `model` with the other LayerNorm placement ("pre" or "post") and the same weights, copied, not
    drawn: both wirings hold the same tensors under the same names, and a seed draws the same values for both, so a
    random preset's other wiring is its twin's weights (copying them is far cheaper than drawing them again)."""
    with torch.device(model.device):
        twin = GPT(model.config.replace(norm=norm), init="empty").to(dtype=model.wte.weight.dtype)
    ours, theirs = twin.state_dict(), model.state_dict()
    if ours.keys() != theirs.keys():
        raise ValueError("the two wirings do not hold the same tensors")
    for name, tensor in ours.items():
        tensor.copy_(theirs[name])  # in place: the [in, out] layout of the twin's matrices is kept
    return twin.train(model.training)


@torch.no_grad()
def _draw(param: torch.Tensor, fill) -> None:
    """Fill `param` by drawing into a row-major buffer: random fills follow memory order, so drawing in place
    would make a seed's weights depend on the storage layout."""
    buffer = torch.empty(param.shape, dtype=param.dtype, device=param.device)
    fill(buffer)
    param.copy_(buffer)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_heads, self.d_head = config.n_heads, config.d_head
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.qkv_bias)
        self.c_proj = make_linear(config.d_model, config.d_model, config)
        self.dropout = config.dropout
        self.attn_dropout = nn.Dropout(config.dropout)
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_scores, self.hook_pattern, self.hook_z = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None, past: int = 0) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = self.hook_q(q.view(B, T, self.n_heads, self.d_head))  # (B, T, nh, hs)
        k = self.hook_k(k.view(B, T, self.n_heads, self.d_head))
        v = self.hook_v(v.view(B, T, self.n_heads, self.d_head))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs)
        if kv is not None:  # append to the cache, then attend over everything stored so far
            kv.k[:, :, past : past + T] = k
            kv.v[:, :, past : past + T] = v
            k, v = kv.k[:, :, : past + T], kv.v[:, :, : past + T]
        explicit = current_wants(self.hook_pattern.name) or current_wants(self.hook_attn_scores.name)
        if explicit:
            z = self._explicit_attention(q, k, v)
        else:  # fused kernel; no weights to show, same result
            z = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if T == 1 or past == 0 else _causal_mask(T, past, x.device),
                is_causal=past == 0 and T > 1,
                dropout_p=self.dropout if self.training else 0.0,
            )
        z = self.hook_z(z.transpose(1, 2))  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, C))

    def _explicit_attention(self, q, k, v) -> torch.Tensor:
        T, S = q.shape[2], k.shape[2]
        # scale q (T x hs) rather than the scores (T x S), and mask in place: one (B, nh, T, S) tensor fewer
        scores = (q * (1.0 / math.sqrt(self.d_head))) @ k.transpose(-2, -1)  # (B, nh, T, S)
        scores.masked_fill_(~_causal_mask(T, S - T, q.device), float("-inf"))
        scores = self.hook_attn_scores(scores)
        pattern = self.hook_pattern(F.softmax(scores, dim=-1))
        return self.attn_dropout(pattern) @ v  # (B, nh, T, hs)


def _causal_mask(T: int, past: int, device) -> torch.Tensor:
    """True where query i (at absolute position past + i) may attend to key j: j <= past + i."""
    return torch.ones(T, past + T, dtype=torch.bool, device=device).tril(diagonal=past)


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = make_linear(config.d_model, config.d_ff, config)
        self.c_proj = make_linear(config.d_ff, config.d_model, config)
        self.activation = config.activation
        self.hook_pre, self.hook_post = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.hook_pre(self.c_fc(x))
        return self.c_proj(self.hook_post(activate(pre, self.activation)))


def activate(x: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    return F.relu(x)


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.pre_norm = config.norm == "pre"
        # Registration order is forward order, so hook names list in the order they fire.
        self.hook_resid_pre = HookPoint()
        self.ln_1, self.attn = make_norm(config), CausalSelfAttention(config)
        self.hook_attn_out, self.hook_resid_mid = HookPoint(), HookPoint()
        self.ln_2, self.mlp = make_norm(config), MLP(config)
        self.hook_mlp_out, self.hook_resid_post = HookPoint(), HookPoint()
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None, past: int = 0) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        if self.pre_norm:  # GPT-2: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
            x = self.hook_resid_mid(x + self._attn(self.ln_1(x), kv, past))
            return self.hook_resid_post(x + self._mlp(self.ln_2(x)))
        # GPT-1: normalise after each residual addition
        x = self.hook_resid_mid(self.ln_1(x + self._attn(x, kv, past)))
        return self.hook_resid_post(self.ln_2(x + self._mlp(x)))

    def _attn(self, x, kv, past):
        return self.hook_attn_out(self.resid_dropout(self.attn(x, kv, past)))

    def _mlp(self, x):
        return self.hook_mlp_out(self.resid_dropout(self.mlp(x)))


class GPT(nn.Module):
    """Decoder-only transformer returning logits at every position: [batch, T, vocab]."""

    def __init__(self, config: GPTConfig, init: str = "gpt2", seed: int | None = None):
        super().__init__()
        self.config = config
        # The modules are made on the meta device and each tensor is allocated once, on the device asked for
        # (torch.device(...) around the call), then drawn by reset_parameters: torch's own default init, the
        # [in, out] copies and the untied LM head that tying drops took a large share more than the model at its peak
        # (`python -m benchmarks build` measures each preset's peak against its weights).
        target = torch.get_default_device()
        with torch.device("meta"):
            # given their (meta) tensors, the embeddings skip their own normal_ init: that call on the meta
            # device runs a Python reference kernel whose first use imports torch._dynamo (seconds of a cold start;
            # `python -m benchmarks latency` times a cold server's first page)
            self.wte = nn.Embedding(
                config.vocab_size, config.d_model, _weight=torch.empty(config.vocab_size, config.d_model)
            )
            self.wpe = nn.Embedding(config.n_ctx, config.d_model, _weight=torch.empty(config.n_ctx, config.d_model))
            self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()
            self.drop = nn.Dropout(config.dropout)
            self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
            # both wirings keep it, so one set of weights runs either way; a model trained without one has NoNorm
            self.ln_f = make_norm(config) if config.final_norm else NoNorm()
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
            self._store_matrices_in_out()
            if config.tie_weights:
                self.lm_head.weight = self.wte.weight
            self.hook_logits = HookPoint()
        self.hook_names = name_hook_points(self)
        if target.type != "meta":
            self._allocate(target)  # strides kept: the [in, out] layout survives
            if config.tie_weights:  # each module got its own tensor: tie them again
                self.lm_head.weight = self.wte.weight
        self.reset_parameters(init, seed)

    def _allocate(self, device: torch.device) -> None:
        """nn.Module.to_empty's work, each meta tensor replaced by an uninitialised one of the same shape and strides
        on `device`, through torch.empty_strided: to_empty's empty_like on a meta tensor runs Python reference
        kernels whose first use imports sympy and torch's symbolic shapes (seconds of a cold start)."""
        for module in self.modules():
            for name, p in module.named_parameters(recurse=False):
                fresh = torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=device)
                setattr(module, name, nn.Parameter(fresh, requires_grad=p.requires_grad))
            for name, b in module.named_buffers(recurse=False):  # fixed values (bias=False's zeros), not loaded
                module._buffers[name] = torch.zeros_like(b, device=device)

    def _store_matrices_in_out(self) -> None:
        """Keep every matrix the forward pass multiplies by (nn.Linear's [out, in] weights, and the token
        embedding the tied LM head reads) stored [in, out] in memory, GPT-2's Conv1D layout. Shapes, names and
        values are unchanged; only the strides differ. For one row at a time (every generated token), BLAS
        streams this layout faster (docs/benchmarks-history.md, "Notes"; `python -m benchmarks engine` compares
        generation with the row-major layout). Row lookups into the embedding get slower, but they read a few rows,
        not all."""
        matrices = [m for m in self.modules() if isinstance(m, nn.Linear)]
        if self.config.tie_weights:
            matrices = [m for m in matrices if m is not self.lm_head] + [self.wte]
        for module in matrices:
            module.weight = nn.Parameter(in_out_layout(module.weight.detach()))

    def reset_parameters(self, init: str = "gpt2", seed: int | None = None) -> None:
        """GPT-2 init: normal(0, 0.02), residual output projections scaled by 1/sqrt(2 * n_layers).
        "xavier": Xavier-uniform matrices (the scheme in Xiong et al. 2020), for comparison. "empty": none drawn."""
        if init not in ("gpt2", "xavier", "empty"):
            raise ValueError(f"init must be 'gpt2', 'xavier' or 'empty', got {init!r}")
        # "empty": the memory as allocated, for weights loaded next (weights.load_checkpoint checks every tensor is
        # there); drawing 1.5 billion numbers only to overwrite them cost seconds for GPT-2 XL.
        if (
            init == "empty" or self.device.type == "meta"
        ):  # no values to draw (and meta's normal_ would import torch._dynamo)
            return
        # A seed draws from a private generator: the weights then depend on the seed alone, even while other
        # threads (Streamlit sessions, background training) draw from torch's global generator.
        gen = None
        if seed is not None and self.device.type != "meta":
            gen = torch.Generator(device=self.device).manual_seed(seed)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if init == "xavier":
                    _draw(module.weight, lambda w: nn.init.xavier_uniform_(w, generator=gen))
                else:
                    std = residual_std if name.endswith("c_proj") else 0.02
                    _draw(module.weight, lambda w, std=std: nn.init.normal_(w, mean=0.0, std=std, generator=gen))
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                _draw(module.weight, lambda w: nn.init.normal_(w, mean=0.0, std=0.02, generator=gen))
            elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
                module.reset_parameters()

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    def check_length(self, past: int, T: int) -> None:
        """ValueError when `past` cached positions and T new ones do not fit the context."""
        if past + T > self.config.n_ctx:
            raise ValueError(
                f"sequence of {past + T} tokens is longer than the context of "
                f"{self.config.n_ctx} positions; keep the last {self.config.n_ctx} tokens"
            )

    def check_ids(self, ids: torch.Tensor, past: int = 0) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):
            ids = torch.as_tensor(ids)
        if ids.numel() == 0:  # before the dtype check: torch.as_tensor([]) is float32
            raise ValueError("no tokens: the sequence is empty")
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"token ids must be integers, got {ids.dtype}")
        if ids.dim() == 1:
            ids = ids.unsqueeze(0)
        if ids.dim() != 2:
            raise ValueError(f"token ids must be [batch, T] or [T], got shape {tuple(ids.shape)}")
        T = ids.shape[1]
        if T == 0:
            raise ValueError("no tokens: the sequence is empty")
        self.check_length(past, T)
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.config.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(f"token id {bad} is outside the vocabulary [0, {self.config.vocab_size})")
        return ids

    def forward(self, ids: torch.Tensor, kv_cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, vocab]; with `last_only`, [B, 1, vocab] for the last position only (generation needs
        no more, and the LM head is a large share of a long prompt's cost)."""
        x = self.final_hidden(ids, kv_cache, last_only)
        return self.hook_logits(self.lm_head(x))  # (B, T, vocab)

    def token_embedding(self, ids: torch.Tensor) -> torch.Tensor:
        """wte(ids), the same values. With the embedding stored [in, out] (_store_matrices_in_out), a token's row is
        strided, one cache line a value; on the CPU, outside autograd, the rows are gathered as columns of the
        row-major transpose instead, several times faster for a batch of the index scan (`python -m benchmarks index`
        times the scan). Autograd keeps nn.Embedding's own path and backward."""
        w = self.wte.weight
        if (
            w.device.type == "cpu"
            and w.stride(0) == 1
            and ids.numel() > 1
            and not (torch.is_grad_enabled() and w.requires_grad)
        ):
            return w.t().index_select(1, ids.reshape(-1)).t().contiguous().reshape(*ids.shape, w.shape[1])
        return self.wte(ids)

    def final_hidden(self, ids: torch.Tensor, kv_cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """The final norm's output [B, T, d_model]: what the LM head (unembedding) reads."""
        past = kv_cache.length if kv_cache is not None else 0
        ids = self.check_ids(ids, past).to(self.device)
        return self.final_hidden_from(self.token_embedding(ids), kv_cache, last_only)

    def final_hidden_from(
        self, tok_emb: torch.Tensor, kv_cache: KVCache | None = None, last_only: bool = False
    ) -> torch.Tensor:
        """final_hidden from the tokens' embeddings [B, T, d_model] (what wte gives for their ids) rather than the ids:
        a trainer that keeps some of the embedding's rows as their own tensor looks them up itself
        (gptviz.training.train.Trainer)."""
        past = kv_cache.length if kv_cache is not None else 0
        note_offset(past)  # edits that target positions need the absolute position of this call's first token
        T = tok_emb.shape[1]
        self.check_length(past, T)  # ids were checked already; embeddings come straight from a trainer
        pos = torch.arange(past, past + T, device=tok_emb.device)
        tok_emb = self.hook_embed(tok_emb)  # (B, T, C)
        pos_emb = self.hook_pos_embed(self.wpe(pos)[None])  # (1, T, C): one row for every sequence
        x = self.drop(tok_emb + pos_emb)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache.layers[i] if kv_cache is not None else None, past)
        if kv_cache is not None:
            kv_cache.length = past + T
        if last_only:
            x = x[:, -1:]
        return self.ln_f(x)  # kept in post-norm too (the GPT-1 count in the spec includes it); see config.py

    def forward_from(
        self,
        layer: int,
        resid: torch.Tensor,
        last_only: bool = False,
        past_kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Logits from the residual stream entering block `layer`, [B, T, d_model]: the rest of a forward pass,
        for interventions that change that stream (patching sweeps skip the blocks before it). With `past_kv`,
        `resid` holds only the positions after `past` earlier ones whose keys and values each block from `layer`
        on takes from past_kv[i] = (k, v), each [1 or B, heads, past, d_head] (they attend as a KV cache would)."""
        if not 0 <= layer < self.config.n_layers:
            raise ValueError(f"layer {layer} is not in 0..{self.config.n_layers - 1}")
        blocks = self.blocks[layer:]
        if past_kv is not None and len(past_kv) != len(blocks):
            raise ValueError(f"past_kv needs one (k, v) for each of the {len(blocks)} blocks from layer {layer}")
        x = resid.to(device=self.device, dtype=self.wte.weight.dtype)
        B, T, _ = x.shape
        for i, block in enumerate(blocks):
            kv, past = None, 0
            if past_kv is not None:
                k, v = past_kv[i]
                past = k.shape[2]
                kv = LayerKV(
                    torch.empty(B, k.shape[1], past + T, k.shape[3], dtype=x.dtype, device=x.device),
                    torch.empty(B, k.shape[1], past + T, k.shape[3], dtype=x.dtype, device=x.device),
                )
                kv.k[:, :, :past], kv.v[:, :, :past] = k, v
            x = block(x, kv, past)
        if last_only:
            x = x[:, -1:]
        return self.hook_logits(self.lm_head(self.ln_f(x)))

    def new_kv_cache(self, batch: int = 1) -> KVCache:
        return KVCache(self.config, batch, self.device, self.wte.weight.dtype)
