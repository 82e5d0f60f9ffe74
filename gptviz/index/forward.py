"""One batch of the scan's windows through the model: every unit's value at every scored position."""
from __future__ import annotations

import numpy as np
import torch

from ..model.hooks import act_name, capturing
from .units import head_write_norms


def _unit_blocks(model, docs, offsets, windows: np.ndarray, hooks, in_place: bool = False):
    """Forward one batch of windows (right-padded: causal attention keeps padding out of earlier positions) without
    the LM head, on the model's device and dtype; -> (blocks, global locations [scored], token ids [scored]), where
    blocks are (first unit, values [scored, units] float32 on the CPU, None): each layer's neurons, then each layer's
    heads. `in_place`: a neuron block whose scored rows are not one run comes as (first unit, every row of the
    capture [rows, units], the scored rows' indices), for a reader that takes the rows where they are (native.py).

    Token-major blocks straight from the capture, not one [units, tokens] matrix: the statistics reduce over the
    token axis of each block as it comes, so no transposed copy of every value is made (that copy cost about half the
    forward pass on the bundled model), and a batch whose scored positions are one run of rows (every position, or
    one window's scored tail: gpt2-small's batches of one) needs no copy at all."""
    B, T = len(windows), int(windows[:, 2].max())
    ids = torch.zeros(B, T, dtype=torch.long)
    scored = torch.zeros(B, T, dtype=torch.bool)
    for b, (d, start, length, first) in enumerate(windows):
        ids[b, :length] = torch.from_numpy(np.asarray(docs[d].ids[start:start + length], dtype=np.int64))
        scored[b, first:length] = True
    sel = scored.reshape(-1).nonzero().squeeze(1)
    # one run of rows (every position, or the scored tail of a single window): a view of the capture, no copy
    run = slice(int(sel[0]), int(sel[-1]) + 1) if len(sel) and int(sel[-1] - sel[0]) + 1 == len(sel) else None
    cfg = model.config
    L, F, H = cfg.n_layers, cfg.d_ff, cfg.n_heads
    blocks = []
    with capturing(frozenset(hooks)) as store, torch.inference_mode():
        model.final_hidden(ids)
        on = sel.to(store[act_name("post", 0)].device) if run is None else run
        for l in range(L):
            post = store[act_name("post", l)].reshape(B * T, F)
            if in_place and run is None and post.dtype == torch.float32 and post.device.type == "cpu":
                blocks.append((l * F, post, sel))
            else:
                blocks.append((l * F, post[on].float().cpu(), None))
        for l in range(L):  # the norms of the scored rows only
            z = store[act_name("z", l)]
            norms = head_write_norms(z.reshape(B * T, H, z.shape[-1])[on], model.blocks[l].attn.c_proj.weight)
            blocks.append((L * F + l * H, norms.cpu().contiguous(), None))  # (norms is a transposed view)
    base = torch.from_numpy(offsets[windows[:, 0]] + windows[:, 1])  # global index of each window's start
    loc = (base[:, None] + torch.arange(T)[None]).reshape(-1)[sel]
    return blocks, loc, ids.reshape(-1)[sel]


def _run_windows(model, docs, offsets, windows: np.ndarray, hooks):
    """As _unit_blocks, the values as one [units, scored] matrix (for checks that read every unit at once)."""
    blocks, loc, tok = _unit_blocks(model, docs, offsets, windows, hooks)
    return torch.cat([values for _, values, _ in blocks], 1).t().contiguous(), loc, tok
