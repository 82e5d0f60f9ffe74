"""Training snapshots: every head's detector scores and attention maps on a few fixed probes, recorded while a
model trains, so a viewer can replay heads forming step by step.

Format (folder `snapshots/` beside a checkpoint, written by `python -m gptviz train --snapshot-every K`):

- `snapshots.json`: {"version", "model" (config name, n_layers, n_heads), "every", "dense" (min_gap, loss_delta),
  "probes": [{"name", "ids", "tokens", "kind", "length"}], "detectors": [{"name", "probe", "chance"}],
  "seconds_training", "seconds_recording", "steps_total", "extra" (anything the writer adds, e.g. the recipe)}.
- `snapshots.npz`: `steps` int32 [S]; `train_loss`, `val_loss`, `repeat_loss` float32 [S]; `scores` float32
  [S, detectors, layers, heads]; `pattern_<p>` float16 [S, layers, heads, T_p (T_p + 1) / 2] for probe p, each
  causal map's lower triangle row by row (`unpack_triangle` restores [T, T]).

Snapshots are taken at step 1, every `every` steps, and in between (at least `min_gap` steps apart) whenever the
smoothed training loss has moved by `loss_delta` nats since the last one, so they are dense where the model changes
fast. Recording runs the model in eval mode under no_grad on the probes only and draws no random numbers, so the
run's trajectory is the same with or without it.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..methods.detectors import (
    duplicate_token_chance,
    duplicate_token_scores,
    induction_chance,
    induction_scores_from,
    induction_sequence,
    previous_token_chance,
    previous_token_scores,
    uniform_attention_chance,
)
from ..model.hooks import act_name, capture
from ..model.model import GPT
from .train import summed_lm_loss

VERSION = 1
MAX_PROBE_TOKENS = 64
FOLDER = "snapshots"
LETTERS = " A B C D E F G H" * 4  # the model card's copy prompt, repeated: 32 tokens


@dataclass(frozen=True)
class Probe:
    """A fixed prompt the heads are recorded on. kind: "repeated" (ids[:length] == ids[length:]) or "text"."""

    name: str
    ids: tuple[int, ...]
    kind: str = "text"
    length: int = 0  # for "repeated": the half's length
    tokens: tuple[str, ...] = ()

    def __post_init__(self):
        if not 2 <= len(self.ids) <= MAX_PROBE_TOKENS:
            raise ValueError(f"probe {self.name!r} has {len(self.ids)} tokens; 2 to {MAX_PROBE_TOKENS} allowed")
        if self.kind == "repeated" and (
            2 * self.length != len(self.ids) or self.ids[: self.length] != self.ids[self.length :]
        ):
            raise ValueError(f"probe {self.name!r} is not a sequence repeated once")


@dataclass(frozen=True)
class Detector:
    name: str
    probe: str  # the probe it is measured on
    chance: float  # what uniform attention scores


def first_token_scores(patterns: torch.Tensor) -> torch.Tensor:
    """[layers, heads]: mean attention each query after the first puts on the first token."""
    return patterns[..., 1:, 0].mean(-1)


def default_probes(
    train_ids: torch.Tensor,
    held_out: torch.Tensor,
    copy_ids: torch.Tensor | None = None,
    length: int = 24,
    seed: int = 0,
    max_tokens: int = 48,
) -> list[Probe]:
    """A repeated random sequence (of `copy_ids`, e.g. the ids the run copies, else every training id), the
    repeated letters A..H, and 48 tokens from the middle of the held-out text; none longer than `max_tokens`
    (a model's context)."""
    length = min(length, max_tokens // 2)
    from ..model.tokenizer import get_tokenizer

    enc = get_tokenizer()
    pool = copy_ids if copy_ids is not None else torch.unique(train_ids)
    rep = induction_sequence(0, length, seed, ids=pool).tolist()
    letters = enc.encode(LETTERS)[:max_tokens]
    mid = len(held_out) // 2
    passage = held_out[mid : mid + min(48, max_tokens)].tolist()

    def named(name, ids, kind="text", half=0):
        return Probe(name, tuple(ids), kind, half, tuple(enc.decode([i]) for i in ids))

    return [
        named("repeated random tokens", rep, "repeated", length),
        named("repeated letters", letters),
        named("held-out passage", passage),
    ]


def detectors_for(probes: list[Probe]) -> list[Detector]:
    """The four detectors and their chance levels on these probes."""
    rep = next(p for p in probes if p.kind == "repeated")
    text = next(p for p in probes if p.kind == "text" and p.name != "repeated letters")
    T = len(text.ids)
    return [
        Detector("previous-token", text.name, previous_token_chance(T)),
        Detector("duplicate-token", rep.name, duplicate_token_chance(rep.ids)),
        Detector("induction", rep.name, induction_chance(rep.length)),
        Detector("first-token", text.name, uniform_attention_chance(range(1, T))),
    ]


def score(detector: Detector, patterns: torch.Tensor, probe: Probe) -> torch.Tensor:
    """One detector's [layers, heads] scores from the [layers, heads, T, T] patterns on its probe."""
    if detector.name == "previous-token":
        return previous_token_scores(patterns)
    if detector.name == "duplicate-token":
        return duplicate_token_scores(patterns, probe.ids)
    if detector.name == "induction":
        return induction_scores_from(patterns, probe.length)
    if detector.name == "first-token":
        return first_token_scores(patterns)
    raise KeyError(f"unknown detector {detector.name!r}")


def pack_triangle(patterns: torch.Tensor) -> np.ndarray:
    """[..., T, T] causal maps -> [..., T (T + 1) / 2] float16, the lower triangle row by row."""
    T = patterns.shape[-1]
    rows, cols = torch.tril_indices(T, T)
    return patterns[..., rows, cols].to(torch.float16).numpy()


def unpack_triangle(packed: np.ndarray, T: int) -> np.ndarray:
    """Inverse of pack_triangle: [..., T (T + 1) / 2] -> [..., T, T] float32, zeros above the diagonal."""
    rows, cols = np.tril_indices(T)
    out = np.zeros(packed.shape[:-1] + (T, T), dtype=np.float32)
    out[..., rows, cols] = packed
    return out


def probe_patterns(model: GPT, probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [T, vocab], patterns [layers, heads, T, T]) of one probe."""
    names = [act_name("pattern", i) for i in range(model.config.n_layers)]
    logits, cache = capture(model, torch.tensor([probe.ids]), names)
    return logits[0], cache.patterns()[:, 0]


def repeat_loss(logits: torch.Tensor, probe: Probe) -> float:
    """Loss (nats/token) on a repeated probe's predictable tokens: positions length..2 length - 2 predict them."""
    n = probe.length
    target = torch.tensor(probe.ids[n + 1 :])
    return float(F.cross_entropy(logits[n:-1].float(), target))


@torch.no_grad()
def held_out_loss(model: GPT, windows: torch.Tensor) -> float:
    """Mean next-token loss (full vocabulary) over fixed held-out windows [n, block + 1]; the LM head in chunks, so
    the windows' logits never exist at once (gptviz.training.train.summed_lm_loss)."""
    target = windows[:, 1:]
    return summed_lm_loss(model, windows[:, :-1], target) / target.numel()


def held_out_windows(held_out: torch.Tensor, block: int, n: int = 4) -> torch.Tensor:
    starts = torch.linspace(0, len(held_out) - block - 2, n).long()
    return torch.stack([held_out[s : s + block + 1] for s in starts])


@dataclass
class Snapshots:
    """A run's snapshots in memory (what the files hold); appended to while a run goes, read by viewers."""

    probes: list[Probe]
    detectors: list[Detector]
    n_layers: int
    n_heads: int
    model_name: str = ""
    every: int = 25
    min_gap: int = 5
    loss_delta: float = 0.15
    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    repeat_loss: list[float] = field(default_factory=list)
    scores: list[np.ndarray] = field(default_factory=list)  # each [detectors, layers, heads]
    patterns: list[list[np.ndarray]] = field(default_factory=list)  # each: per probe [layers, heads, tri]
    seconds_training: float = 0.0
    seconds_recording: float = 0.0
    steps_total: int = 0
    extra: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.steps)

    def detector_index(self, name: str) -> int:
        return [d.name for d in self.detectors].index(name)

    def score_array(self) -> np.ndarray:
        """[S, detectors, layers, heads] float32 (a copy, safe to read while the run appends)."""
        with self.lock:
            if not self.scores:
                return np.zeros((0, len(self.detectors), self.n_layers, self.n_heads), np.float32)
            return np.stack(self.scores)

    def pattern(self, index: int, probe: int) -> np.ndarray:
        """[layers, heads, T, T] float32: snapshot `index`'s maps on probe `probe`."""
        with self.lock:
            packed = self.patterns[index][probe]
        return unpack_triangle(packed, len(self.probes[probe].ids))

    def share_recording(self) -> float:
        """Time spent recording as a share of the training time (steps plus recording)."""
        total = self.seconds_training + self.seconds_recording
        return self.seconds_recording / total if total else 0.0

    def crossing(self, detector: str, threshold: float) -> tuple[int, int, int] | None:
        """(step, layer, head) of the first snapshot where some head's score reaches `threshold`, or None."""
        scores = self.score_array()[:, self.detector_index(detector)]
        for i, s in enumerate(scores):
            if s.max() >= threshold:
                layer, head = np.unravel_index(int(s.argmax()), s.shape)
                return self.steps[i], int(layer), int(head)
        return None


# A head "has formed" once its detector score reaches this and stays there (the one definition every page uses).
FORMED_THRESHOLD = 0.5


def formed_step(snaps: Snapshots, detector: str, threshold: float = FORMED_THRESHOLD) -> tuple[int, int, int] | None:
    """(step, layer, head): the step a head of this kind formed, or None if none did within the snapshots.

    The step is the first snapshot from which the best head's `detector` score stays at or above `threshold` at every
    later snapshot (a brief crossing that falls back does not count), and the head is the best one at that snapshot.
    Steps are the run's own: the bundled twins' snapshots cover their first training stage, so step 1 is the first
    step from random weights, and a head forms somewhere between the snapshot before this step and this step."""
    if not len(snaps):
        return None
    scores = snaps.score_array()[:, snaps.detector_index(detector)]
    best = scores.reshape(len(scores), -1).max(axis=1)
    below = np.flatnonzero(best < threshold)
    first = 0 if below.size == 0 else int(below[-1]) + 1
    if first >= len(best):
        return None
    layer, head = np.unravel_index(int(scores[first].argmax()), scores[first].shape)
    return int(snaps.steps[first]), int(layer), int(head)


def empty_snapshots(
    cfg, probes: list[Probe], every: int = 25, min_gap: int = 5, loss_delta: float = 0.15, model_name: str = ""
) -> Snapshots:
    """No snapshots yet, for a model of config `cfg` (a GPTConfig)."""
    if every < 1 or min_gap < 1 or loss_delta < 0:
        raise ValueError("every and min_gap must be at least 1 and loss_delta not negative")
    return Snapshots(
        probes, detectors_for(probes), cfg.n_layers, cfg.n_heads, model_name or cfg.name, every, min_gap, loss_delta
    )


class SnapshotRecorder:
    """Decides when to snapshot a training run and records into a Snapshots.

    `observe(step, train_loss, seconds)` after every step: returns True when a snapshot is due; `record(model,
    step, train_loss)` takes it."""

    def __init__(
        self, snapshots: Snapshots, held_out: torch.Tensor | None = None, block: int = 128, smoothing: float = 0.8
    ):
        self.snaps = snapshots
        self.windows = held_out_windows(held_out, block) if held_out is not None else None
        self.smoothing = smoothing
        self.ema: float | None = None
        self.ema_at_last: float | None = None
        self.last_step = 0

    def observe(self, step: int, train_loss: float, seconds: float = 0.0) -> bool:
        self.snaps.seconds_training += seconds
        self.snaps.steps_total = step
        self.ema = train_loss if self.ema is None else self.smoothing * self.ema + (1 - self.smoothing) * train_loss
        s = self.snaps
        if step == 1 or step % s.every == 0:
            return True
        moved = self.ema_at_last is not None and abs(self.ema - self.ema_at_last) >= s.loss_delta
        return moved and step - self.last_step >= s.min_gap

    @torch.no_grad()
    def record(self, model: GPT, step: int, train_loss: float) -> None:
        started = time.perf_counter()
        was_training = model.training
        model.eval()
        per_probe = {}
        packed, rep_loss = [], float("nan")
        for probe in self.snaps.probes:
            logits, patterns = probe_patterns(model, probe)
            per_probe[probe.name] = (probe, patterns)
            packed.append(pack_triangle(patterns))
            if probe.kind == "repeated":
                rep_loss = repeat_loss(logits, probe)
        scores = np.stack(
            [score(d, per_probe[d.probe][1], per_probe[d.probe][0]).numpy() for d in self.snaps.detectors]
        ).astype(np.float32)
        val = held_out_loss(model, self.windows.to(model.device)) if self.windows is not None else float("nan")
        model.train(was_training)
        s = self.snaps
        with s.lock:
            s.steps.append(step)
            s.train_loss.append(float(train_loss))
            s.val_loss.append(val)
            s.repeat_loss.append(rep_loss)
            s.scores.append(scores)
            s.patterns.append(packed)
        self.last_step, self.ema_at_last = step, self.ema
        s.seconds_recording += time.perf_counter() - started


# ---- files ----------------------------------------------------------------------------------------------------


def save_snapshots(snaps: Snapshots, folder: str | Path) -> Path:
    """Write snapshots.json and snapshots.npz into folder/snapshots (created); returns that folder."""
    out = Path(folder) / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    with snaps.lock:
        arrays = {
            "steps": np.asarray(snaps.steps, np.int32),
            "train_loss": np.asarray(snaps.train_loss, np.float32),
            "val_loss": np.asarray(snaps.val_loss, np.float32),
            "repeat_loss": np.asarray(snaps.repeat_loss, np.float32),
            "scores": (
                np.stack(snaps.scores)
                if snaps.scores
                else np.zeros((0, len(snaps.detectors), snaps.n_layers, snaps.n_heads), np.float32)
            ),
        }
        for p, probe in enumerate(snaps.probes):
            T = len(probe.ids)
            arrays[f"pattern_{p}"] = (
                np.stack([row[p] for row in snaps.patterns])
                if snaps.patterns
                else np.zeros((0, snaps.n_layers, snaps.n_heads, T * (T + 1) // 2), np.float16)
            )
        meta = {
            "version": VERSION,
            "model": {"name": snaps.model_name, "n_layers": snaps.n_layers, "n_heads": snaps.n_heads},
            "every": snaps.every,
            "dense": {"min_gap": snaps.min_gap, "loss_delta": snaps.loss_delta},
            "probes": [
                {"name": p.name, "ids": list(p.ids), "tokens": list(p.tokens), "kind": p.kind, "length": p.length}
                for p in snaps.probes
            ],
            "detectors": [{"name": d.name, "probe": d.probe, "chance": d.chance} for d in snaps.detectors],
            "seconds_training": round(snaps.seconds_training, 3),
            "seconds_recording": round(snaps.seconds_recording, 3),
            "steps_total": snaps.steps_total,
            "extra": snaps.extra,
        }
    np.savez_compressed(out / "snapshots.npz", **arrays)
    (out / "snapshots.json").write_text(json.dumps(meta, indent=1))
    return out


def load_snapshots(folder: str | Path) -> Snapshots:
    """Read what save_snapshots wrote (folder: the model's folder or its snapshots/ folder); checks the shapes."""
    folder = Path(folder)
    if (folder / FOLDER / "snapshots.json").is_file():
        folder = folder / FOLDER
    meta = json.loads((folder / "snapshots.json").read_text())
    if meta.get("version") != VERSION:
        raise ValueError(f"snapshot format version {meta.get('version')!r}; this gptviz reads {VERSION}")
    probes = [Probe(p["name"], tuple(p["ids"]), p["kind"], p["length"], tuple(p["tokens"])) for p in meta["probes"]]
    detectors = [Detector(d["name"], d["probe"], d["chance"]) for d in meta["detectors"]]
    L, H = meta["model"]["n_layers"], meta["model"]["n_heads"]
    with np.load(folder / "snapshots.npz", allow_pickle=False) as data:
        steps = data["steps"].tolist()
        S = len(steps)
        scores = data["scores"]
        if scores.shape != (S, len(detectors), L, H):
            raise ValueError(f"scores have shape {scores.shape}, expected {(S, len(detectors), L, H)}")
        patterns = []
        for p, probe in enumerate(probes):
            T = len(probe.ids)
            arr = data[f"pattern_{p}"]
            if arr.shape != (S, L, H, T * (T + 1) // 2):
                raise ValueError(f"probe {p}'s maps have shape {arr.shape}")
            patterns.append(arr)
        snaps = Snapshots(
            probes,
            detectors,
            L,
            H,
            meta["model"]["name"],
            meta["every"],
            meta["dense"]["min_gap"],
            meta["dense"]["loss_delta"],
            steps,
            data["train_loss"].tolist(),
            data["val_loss"].tolist(),
            data["repeat_loss"].tolist(),
            list(scores),
            [[patterns[p][i] for p in range(len(probes))] for i in range(S)],
            meta["seconds_training"],
            meta["seconds_recording"],
            meta["steps_total"],
            meta["extra"],
        )
    return snaps
