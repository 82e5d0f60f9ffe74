"""The last step of a scan (scan.py): the index's arrays and metadata from a partial scan that covers every batch of
its plan: top examples as (document, position), histograms and quantiles, means, standard deviations and active
shares, the tokens each unit fires on most and the units most above their mean on each token, and the bands'
examples."""

from __future__ import annotations

import numpy as np
import torch

from .accumulate import PartialScan
from .bands import band_arrays, band_edges
from .constants import QUANTILES, TOKEN_UNITS, TOP_TOKENS
from .histograms import _edges, _quantiles
from .plan import ScanPlan
from .store import NeuronIndex


def finish_scan(plan: ScanPlan, part: PartialScan) -> NeuronIndex:
    """The index from a partial scan that covers every batch of the plan."""
    if part.key != plan.key:
        raise ValueError("this partial scan comes from another plan")
    if part.batches != [(0, plan.n_batches)] or part.tokens != plan.tokens:
        raise ValueError(
            f"the partial scans cover batches {part.batches} of 0..{plan.n_batches - 1}: "
            f"{part.tokens:,} of {plan.tokens:,} tokens"
        )
    meta = dict(plan.meta)
    c = meta["config"]
    L, F, H = c["n_layers"], c["d_ff"], c["n_heads"]
    U, total, bins = L * (F + H), plan.tokens, plan.settings["bins"]
    mean = part.token_sums.double().sum(1) / total
    std = (part.vsq / total - mean * mean).clamp(min=0).sqrt()
    vmin, vmax = part.vmin, part.best_v[:, 0]
    # active (> 0): the bins from the 0 edge on, which hold exactly the values > 0 (_bin_of decides by the sign)
    zero_bin = torch.from_numpy(plan.zero_bin)
    active = part.counts.masked_fill(torch.arange(bins)[None] < zero_bin[:, None], 0).sum(1)
    lo, hi = torch.from_numpy(plan.hist_range[:, 0]), torch.from_numpy(plan.hist_range[:, 1])
    arrays = {
        "top_values": part.best_v.numpy().astype(np.float32),
        "hist_counts": part.counts.numpy().astype(np.int32),
        "hist_range": plan.hist_range.astype(np.float32),
        "min_max": torch.stack([torch.minimum(lo, vmin), torch.maximum(hi, vmax)], 1).numpy().astype(np.float32),
        "value_range": torch.stack([vmin, vmax], 1).numpy().astype(np.float32),
        "mean": mean.numpy().astype(np.float32),
        "std": std.numpy().astype(np.float32),
        "active_share": np.where(np.arange(U) < L * F, active.numpy() / total, np.nan).astype(np.float32),
    }
    arrays["top_doc"], arrays["top_pos"] = _doc_pos(plan.offsets, part.best_loc.numpy())
    arrays["quantiles"] = np.clip(
        _quantiles(_edges(arrays["hist_range"], arrays["min_max"], bins), arrays["hist_counts"], QUANTILES),
        arrays["value_range"][:, :1],
        arrays["value_range"][:, 1:],
    ).astype(np.float32)
    arrays.update(_token_arrays(plan, part, mean, std, L * F, L * H))
    edges = band_edges(
        _edges(arrays["hist_range"], arrays["min_max"], bins),
        arrays["hist_counts"],
        plan.zero_bin,
        arrays["value_range"][:, 1],
    )
    bands = band_arrays(edges, part.samp_v.numpy(), part.samp_loc.numpy())
    arrays["band_edges"], arrays["band_values"] = edges.astype(np.float32), bands["band_values"]
    arrays["band_doc"], arrays["band_pos"] = _doc_pos(plan.offsets, bands["band_loc"])
    arrays["band_sampled"] = bands["band_sampled"]
    # seconds: the scan's wall clock where one process saw it (Ray's driver sets its own); task_seconds: the parts'
    # scan times summed; shards: how many parts (a merge or Ray sets it)
    meta["scan"] = {
        "seconds": round(part.seconds, 2),
        "tokens_per_s": round(total / max(part.seconds, 1e-9)),
        "task_seconds": round(part.seconds, 2),
        "shards": 1,
        "batch": plan.settings["batch"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "statistics": part.statistics,
    }
    return NeuronIndex(meta, arrays)


def _doc_pos(offsets: np.ndarray, loc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Global positions (-1: none) as (document, position in it), int32, -1 where none."""
    doc = np.searchsorted(offsets, loc, side="right") - 1
    return (
        np.where(loc >= 0, doc, -1).astype(np.int32),
        np.where(loc >= 0, loc - offsets[np.clip(doc, 0, None)], -1).astype(np.int32),
    )


def _token_arrays(plan: ScanPlan, part: PartialScan, mean, std, n_neurons: int, n_heads: int) -> dict:
    """Per unit the tokens with the highest means; per token the units with the highest z-scored means."""
    frequent = plan.frequent
    means = (part.token_sums[:, : len(frequent)] / torch.from_numpy(plan.frequent_counts).float()[None]).t()  # (V', U)
    kt = min(TOP_TOKENS, len(frequent))
    if kt:
        top_tok = means.topk(kt, dim=0)
        ids, tok_mean = frequent[top_tok.indices.t().numpy()], top_tok.values.t().numpy()
    else:
        ids, tok_mean = np.zeros((means.shape[1], 0)), np.zeros((means.shape[1], 0))
    z = (means - mean.float()) / std.float().clamp(min=1e-12)
    zn = z[:, :n_neurons].topk(min(TOKEN_UNITS, n_neurons), dim=1)
    zh = z[:, n_neurons:].topk(min(TOKEN_UNITS, n_heads), dim=1)
    return {
        "top_token_ids": ids.astype(np.int32),
        "top_token_mean": tok_mean.astype(np.float32),
        "token_ids": frequent.astype(np.int32),
        "token_counts": plan.frequent_counts.astype(np.int32),
        "token_neurons": zn.indices.numpy().astype(np.int32),
        "token_neuron_z": zn.values.numpy().astype(np.float32),
        "token_heads": (zh.indices + n_neurons).numpy().astype(np.int32),
        "token_head_z": zh.values.numpy().astype(np.float32),
    }
