"""Small models that run in milliseconds, their inputs, and checkpoints of other code's layouts."""

from __future__ import annotations

import functools
import io

import torch

from gptviz import GPT, GPTConfig
from tests.reference import nanogpt as nanogpt_ref

SMALL = GPTConfig(vocab_size=101, n_ctx=16, d_model=32, n_layers=2, n_heads=4, name="test-small")


def build(config: GPTConfig = SMALL, seed: int = 0, **changes) -> GPT:
    """A GPT with seeded GPT-2 init, in eval mode. `changes` are GPTConfig fields to override."""
    if changes:
        config = config.replace(**changes)
    torch.manual_seed(seed)
    return GPT(config).eval()


def model_with_silent_neurons():
    """A model whose neurons include the cases that broke the active share: all -0.0 (GELU far below 0 returns
    -0.0), all tiny negatives (GELU(-5) ~ -1e-6), rarely active, and ordinary ones."""
    model = build(seed=1)
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            bias = block.mlp.c_fc.bias
            bias[0:8] = -60.0  # x * Phi(x) underflows: exactly -0.0 at every token
            bias[8:16] = -5.0  # tiny negatives (about -1e-6)
            bias[16:24] = -0.12 - 0.02 * layer  # active now and then
    return model


def random_ids(n: int, vocab: int = SMALL.vocab_size, batch: int | None = None, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    shape = (n,) if batch is None else (batch, n)
    return torch.randint(0, vocab, shape, generator=g)


def unit_scale(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn from N(0, 1) (norm gains and biases too, so a mis-mapped one shows)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model.eval()


@functools.cache
def nanogpt_bytes(vocab: int = 101) -> bytes:
    args = dict(block_size=16, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32, bias=False)
    torch.manual_seed(0)
    buf = io.BytesIO()
    model = nanogpt_ref.GPT(nanogpt_ref.GPTConfig(**args))
    torch.save({"model": model.state_dict(), "model_args": args, "iter_num": 0}, buf)
    return buf.getvalue()
