"""Why this token: direct logit attribution, activation-patching sweeps and input saliency.

Every function here reads captures or runs edited forward passes (gptviz.methods.interventions); none re-implements
the model. The metric throughout is a logit difference at one position: logit(target) - logit(other).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..model.hooks import act_name, capture, capturing, direct_attribution_names, edits_by_hook
from ..model.sizes import sweep_rows_per_batch
from ..model.unit_id import head_id
from .clock import UNBOUNDED, Clock
from .interventions import Edit


def logit_difference(logits: torch.Tensor, target: int, other: int, position: int = -1) -> torch.Tensor:
    """logit(target) - logit(other) at `position`, for each sequence of a [batch, T, vocab] tensor: [batch]."""
    return (logits[:, position, target] - logits[:, position, other]).float()


# ---- direct logit attribution -------------------------------------------------------------------------------


class DirectAttribution(NamedTuple):
    labels: list[str]  # "embeddings", "L0H3", "L0 attn bias", "L0 MLP", ..., "final norm bias"
    values: torch.Tensor  # [parts]: each part's direct contribution to the logit difference
    head_values: torch.Tensor  # [layers, heads]: the heads' parts, as a grid
    mlp_values: torch.Tensor  # [layers]
    logit_diff: float  # the model's own logit difference; values.sum() equals it
    target: int
    other: int


def direct_logit_attribution(model, ids, target: int, other: int, position: int = -1) -> DirectAttribution:
    """Split the final residual stream at `position` into its additive parts (token and position embeddings,
    each head's output through its slice of W_O, each attention output bias, each MLP's output), pass each
    through the final norm with its scale frozen at this run's value (a linear map), and project it on
    W_U[target] - W_U[other]. The parts sum to the model's logit difference.

    Pre-norm only: in post-norm every block's LayerNorm rescales the whole stream, so the final stream is not a
    sum of the blocks' outputs and no such split exists."""
    _pre_norm_only(model.config)
    logits, cache = capture(model, ids, direct_attribution_names(model.config.n_layers))
    if logits.shape[0] != 1:  # the split is of one prompt's stream at one position
        raise ValueError(
            f"direct logit attribution reads one prompt: got a batch of {logits.shape[0]}; pass one "
            "sequence of ids (or a batch of one)"
        )
    return direct_logit_attribution_of(model, logits[0], cache.prompt(0).__getitem__, target, other, position)


def _pre_norm_only(cfg) -> None:
    if cfg.norm != "pre":
        raise ValueError(
            "direct logit attribution needs a pre-norm model: in post-norm each block's LayerNorm "
            "rescales the whole residual stream, so it is not a sum of the blocks' outputs"
        )


def direct_logit_attribution_of(
    model, logits: torch.Tensor, read, target: int, other: int, position: int = -1
) -> DirectAttribution:
    """direct_logit_attribution from a capture already made of one prompt: its `logits` [T, vocab] (logits[0] of a
    batched capture) and `read(name)`, its [T, ...] tensor at a hook point of direct_attribution_names (e.g.
    cache.prompt(0).__getitem__; a page that switches target and rival reads one cached capture instead of running
    the model again for each pair)."""
    cfg = model.config
    _pre_norm_only(cfg)
    L = cfg.n_layers
    T = logits.shape[0]
    pos = position % T
    weight = lambda t: t.detach().float().cpu()  # noqa: E731  (parameters as float32 on the CPU)

    parts, labels = [read("hook_embed")[pos] + read("hook_pos_embed")[pos]], ["embeddings"]
    for i in range(L):
        attn = model.blocks[i].attn
        W_O = weight(attn.c_proj.weight).view(cfg.d_model, cfg.n_heads, cfg.d_head)  # [out, head, d_head]
        z = read(act_name("z", i))[pos]  # [head, d_head]
        heads = torch.einsum("hd,ohd->ho", z, W_O)  # [head, d_model]
        parts += list(heads)
        labels += [head_id(i, h) for h in range(cfg.n_heads)]
        parts.append(weight(attn.c_proj.bias))
        labels.append(f"L{i} attn bias")
        parts.append(read(act_name("mlp_out", i))[pos])
        labels.append(f"L{i} MLP")
    stack = torch.stack(parts)  # [parts, d_model]
    resid = read(act_name("resid_post", L - 1))[pos]

    direction = weight(model.lm_head.weight[target]) - weight(model.lm_head.weight[other])
    gamma = weight(model.ln_f.weight) if model.ln_f.weight is not None else torch.ones(cfg.d_model)
    if not cfg.final_norm:  # no final norm (final_norm=False): the unembedding reads the stream itself
        normed = stack
    elif cfg.norm_type == "layernorm":  # (x - mean) / std * gamma + beta: centring is linear, std is frozen
        scale = torch.sqrt(resid.var(unbiased=False) + cfg.ln_eps)
        normed = (stack - stack.mean(-1, keepdim=True)) / scale * gamma
    else:  # x / rms * gamma
        scale = torch.sqrt(resid.pow(2).mean() + cfg.ln_eps)
        normed = stack / scale * gamma
    values = normed @ direction
    bias = getattr(model.ln_f, "bias", None)
    if bias is not None:
        values = torch.cat([values, (weight(bias) @ direction)[None]])
        labels.append("final norm bias")
    per_layer = cfg.n_heads + 2
    block_values = values[1 : 1 + L * per_layer].view(L, per_layer)
    return DirectAttribution(
        labels,
        values,
        block_values[:, : cfg.n_heads],
        block_values[:, -1],
        float(logit_difference(logits[None], target, other, pos)),
        target,
        other,
    )


# ---- activation patching ------------------------------------------------------------------------------------


def normalised(metric: torch.Tensor, clean: float, corrupted: float) -> torch.Tensor:
    """0 at the corrupted run's metric, 1 at the clean run's."""
    if abs(clean - corrupted) < 1e-6:
        raise ValueError("the clean and corrupted prompts give the same logit difference: nothing to restore")
    return (metric - corrupted) / (clean - corrupted)


class PatchingResult(NamedTuple):
    scores: torch.Tensor  # normalised metric per cell (0 = corrupted, 1 = clean)
    clean: float  # logit difference on the clean prompt
    corrupted: float  # ... on the corrupted prompt


def _check_pair(clean_ids, corrupted_ids) -> tuple[torch.Tensor, torch.Tensor]:
    clean, corrupted = torch.as_tensor(clean_ids).reshape(1, -1), torch.as_tensor(corrupted_ids).reshape(1, -1)
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"patching needs prompts of the same length in tokens: the clean one has "
            f"{clean.shape[1]}, the corrupted one {corrupted.shape[1]}"
        )
    return clean, corrupted


def saliency_work(config, T: int, steps: int) -> int:
    """Integrated gradients (`steps` points) and gradient x input in token-block passes: each point a forward and a
    backward pass (about three forwards' work), the two ends one forward each."""
    return config.n_layers * T * (3 * (steps + 1) + 2)


def _both_runs(
    model, clean, corrupted, clean_names: list[str], corrupted_names: list[str], target: int, other: int, clock: Clock
):
    """What a patching sweep starts from: the clean run captured at `clean_names`, the corrupted run at
    `corrupted_names` and every layer's keys and values, the two metrics (clean, corrupted), and the corrupted keys
    and values per layer as [1, heads, T, d_head]."""
    L = model.config.n_layers
    clean_logits, clean_cache = capture(model, clean, clean_names)
    clock.check()
    corrupted_logits, corrupted_cache = capture(
        model, corrupted, corrupted_names + [act_name(n, i) for i in range(L) for n in ("k", "v")]
    )
    clock.check()
    base = (
        float(logit_difference(clean_logits, target, other)),
        float(logit_difference(corrupted_logits, target, other)),
    )
    kv = [
        (corrupted_cache[act_name("k", i)].transpose(1, 2), corrupted_cache[act_name("v", i)].transpose(1, 2))
        for i in range(L)
    ]
    return clean_cache, corrupted_cache, base, kv


@torch.no_grad()
def residual_patching(
    model, clean_ids, corrupted_ids, target: int, other: int, clock: Clock | None = None
) -> PatchingResult:
    """[layers, T]: the corrupted run with the clean residual stream entering block l at position t patched in.

    Computed from what the metric needs, never a copy of the model per cell at once: a patched run starts at block
    l, and only from its first patched position on (the positions before it are the corrupted run's, whose keys
    and values it reuses); it reads only the last position's logits; runs are batched within SWEEP_BATCH_BYTES.
    Where the two streams are equal at (l, t) (every position before the first difference) the patched run is the
    corrupted run, so that cell is 0 without running."""
    clean, corrupted = _check_pair(clean_ids, corrupted_ids)
    clock = clock or UNBOUNDED
    L, T = model.config.n_layers, clean.shape[1]
    names = [act_name("resid_pre", i) for i in range(L)]
    clean_cache, corrupted_cache, base, kv = _both_runs(model, clean, corrupted, names, names, target, other, clock)
    per_batch = sweep_rows_per_batch(model.config, T)
    scores = torch.full((L, T), base[1])
    for layer, name in enumerate(names):
        src, dst = clean_cache[name][0], corrupted_cache[name][0]  # [T, d_model]
        differ = [t for t in range(T) if not torch.equal(src[t], dst[t])]
        for start in range(0, len(differ), per_batch):
            rows = differ[start : start + per_batch]
            first = rows[0]  # positions before it: unchanged
            resid = dst[first:].expand(len(rows), T - first, -1).clone()
            resid[range(len(rows)), [t - first for t in rows]] = src[rows]
            logits = model.forward_from(
                layer, resid, last_only=True, past_kv=[(k[:, :, :first], v[:, :, :first]) for k, v in kv[layer:]]
            )
            scores[layer, rows] = logit_difference(logits, target, other).cpu()
            clock.check()
    return PatchingResult(normalised(scores, *base), *base)


@torch.no_grad()
def head_patching(
    model, clean_ids, corrupted_ids, target: int, other: int, clock: Clock | None = None
) -> PatchingResult:
    """[layers, heads]: the corrupted run with one head's output (hook_z, every position) from the clean run.

    Like the residual sweep, computed from what the metric needs: a run patching a head of layer l is the corrupted
    run up to block l, so it starts there from the corrupted stream; and only from the first position where the two
    runs' heads differ (before it the clean and corrupted heads are equal, so the patch changes nothing there), with
    the corrupted run's keys and values for the positions before. The heads of one layer run as one batch (within
    SWEEP_BATCH_BYTES). Each cell equals a whole patched run (tests/methods/test_attribution.py)."""
    clean, corrupted = _check_pair(clean_ids, corrupted_ids)
    clock = clock or UNBOUNDED
    L, H, T = model.config.n_layers, model.config.n_heads, clean.shape[1]
    z_names = [act_name("z", i) for i in range(L)]
    clean_cache, corrupted_cache, base, kv = _both_runs(
        model, clean, corrupted, z_names, z_names + [act_name("resid_pre", i) for i in range(L)], target, other, clock
    )
    per_batch = sweep_rows_per_batch(model.config, T)
    scores = torch.full((L, H), base[1])
    for layer, name in enumerate(z_names):
        src, dst = clean_cache[name][0], corrupted_cache[name][0]  # [T, heads, d_head]
        differ = [t for t in range(T) if not torch.equal(src[t], dst[t])]
        if not differ:
            continue  # every head equal: the corrupted run
        first = differ[0]
        patch = src[first:]  # [T - first, heads, d_head]
        for start in range(0, H, per_batch):
            heads = list(range(start, min(H, start + per_batch)))

            def one_head_per_row(value: torch.Tensor, offset: int, heads=heads, patch=patch) -> torch.Tensor:
                value = value.clone()  # [rows, T - first, heads, d_head]
                for row, head in enumerate(heads):
                    value[row, :, head] = patch[:, head].to(value.dtype)
                return value

            resid = corrupted_cache[act_name("resid_pre", layer)][0, first:].expand(len(heads), T - first, -1)
            with capturing(
                frozenset(), edits_by_hook([Edit(name, one_head_per_row, "one head per row")], model.hook_names)
            ):
                logits = model.forward_from(
                    layer, resid, last_only=True, past_kv=[(k[:, :, :first], v[:, :, :first]) for k, v in kv[layer:]]
                )
            scores[layer, heads] = logit_difference(logits, target, other).cpu()
            clock.check()
    return PatchingResult(normalised(scores, *base), *base)


# ---- how long a sweep takes, before it starts -----------------------------------------------------------------


def _first_difference(clean: torch.Tensor, corrupted: torch.Tensor) -> int:
    return int((clean[0] != corrupted[0]).nonzero()[0])


def patching_work(config, clean_ids, corrupted_ids) -> int:
    """Both sweeps' work in token-block passes (one token through one block), as they will run: the residual sweep's
    batches (layer 0 patches the positions whose tokens differ; later layers every position from the first
    difference on, each batch from its first row's position to the end, through the blocks from its layer on) and
    the head sweep's (each layer's heads from the first difference on, through the blocks from that layer on)."""
    clean, corrupted = _check_pair(clean_ids, corrupted_ids)
    L, H, T = config.n_layers, config.n_heads, clean.shape[1]
    first = _first_difference(clean, corrupted)
    per_batch = sweep_rows_per_batch(config, T)
    work = 4 * T * L  # each sweep's clean and corrupted runs
    for layer in range(L):
        rows = (
            [t for t in range(T) if int(clean[0, t]) != int(corrupted[0, t])] if layer == 0 else list(range(first, T))
        )
        for start in range(0, len(rows), per_batch):
            batch = rows[start : start + per_batch]
            work += len(batch) * (T - batch[0]) * (L - layer)
        work += H * (T - first) * (L - layer)
    return work


def block_pass_rate(model, T: int, rows: int = 4) -> float:
    """Token-block passes per second on this machine now: one timed batch of `rows` copies of a T-token stream
    through the last block (a sweep's unit of work; the first call warms up, the second is timed)."""
    import time

    x = torch.zeros(rows, T, model.config.d_model, dtype=model.wte.weight.dtype, device=model.device)
    with torch.no_grad():
        model.forward_from(model.config.n_layers - 1, x[:1, :8], last_only=True)
        started = time.perf_counter()
        model.forward_from(model.config.n_layers - 1, x, last_only=True)
        seconds = time.perf_counter() - started
    return rows * T / max(seconds, 1e-6)


# ---- saliency -----------------------------------------------------------------------------------------------


def _metric_with_embeddings(
    model, ids: torch.Tensor, embeddings: torch.Tensor, target: int, other: int | None, position: int
) -> torch.Tensor:
    """The metric for each row of `embeddings` [batch, T, d_model] used as the token embeddings of `ids`."""
    edit = Edit("hook_embed", lambda value, offset: embeddings, "token embeddings replaced")
    with capturing(frozenset(), edits_by_hook([edit], model.hook_names)):
        logits = model(ids.expand(embeddings.shape[0], -1))
    if other is None:
        return logits[:, position, target].float()
    return logit_difference(logits, target, other, position)


def _embeddings(model, ids: torch.Tensor) -> torch.Tensor:
    return model.wte(ids.to(model.device)).detach().float()


class Saliency(NamedTuple):
    scores: torch.Tensor  # [T]: each prompt token's attribution
    metric: float  # the metric on the prompt
    baseline_metric: float | None  # integrated gradients: the metric with every token embedding at zero


def gradient_x_input(model, ids, target: int, other: int | None = None, position: int = -1) -> Saliency:
    """Per token: the gradient of the metric (the target's logit, or its difference with `other`) with respect to
    the token's embedding, dotted with that embedding."""
    ids = torch.as_tensor(ids).reshape(1, -1)
    emb = _embeddings(model, ids).requires_grad_(True)
    with torch.enable_grad():
        metric = _metric_with_embeddings(model, ids, emb.to(model.wte.weight.dtype), target, other, position)
        (grad,) = torch.autograd.grad(metric.sum(), emb)
    return Saliency((grad * emb).sum(-1)[0].detach().cpu(), float(metric.detach()), None)


def integrated_gradients(
    model,
    ids,
    target: int,
    other: int | None = None,
    position: int = -1,
    steps: int = 64,
    batch: int = 16,
    clock: Clock | None = None,
) -> Saliency:
    """Integrated gradients from an all-zero token embedding (position embeddings kept) to the prompt's, with
    the midpoint rule over `steps` points, `batch` at a time. Completeness: the scores sum to the metric minus
    its value at the baseline, up to the integration error."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    ids = torch.as_tensor(ids).reshape(1, -1)
    emb = _embeddings(model, ids)
    alphas = (torch.arange(steps, dtype=torch.float32) + 0.5) / steps
    total = torch.zeros_like(emb[0])
    with torch.enable_grad():
        for chunk in alphas.split(batch):
            scaled = (chunk[:, None, None] * emb).requires_grad_(True)  # [b, T, d]
            metric = _metric_with_embeddings(model, ids, scaled.to(model.wte.weight.dtype), target, other, position)
            (grad,) = torch.autograd.grad(metric.sum(), scaled)
            total += grad.sum(0).float()
            if clock is not None:
                clock.check()
    with torch.no_grad():
        ends = _metric_with_embeddings(
            model,
            ids,
            torch.stack([emb[0], torch.zeros_like(emb[0])]).to(model.wte.weight.dtype),
            target,
            other,
            position,
        )
    scores = (total / steps * emb[0]).sum(-1)
    return Saliency(scores.detach().cpu(), float(ends[0]), float(ends[1]))
