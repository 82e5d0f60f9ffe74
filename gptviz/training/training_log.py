"""The bundled models' whole training history, read from their train.log.

The bundled twins were trained in stages (`python -m gptviz train --init-from ...`); history.csv beside a checkpoint
holds only the last stage, train.log every stage's logged steps. A stage starts at a "# stage N: ..." comment line;
its steps are numbered from 1 again, so the cumulative step of a line is the steps of every earlier stage plus its
own. Lines look like `step   100/1000 loss 7.4514 val 10.7158 prev 0.038 ind 0.014 rep 10.76 lr 1.00e-03 |g| 0.67 ...`
(val, prev, ind and rep only at evaluation steps).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

STEP = re.compile(r"^step\s+(\d+)/(\d+)\s+loss\s+(\S+)(.*)$")
FIELDS = {
    "val": "val_loss",
    "prev": "prev_token",
    "ind": "induction",
    "rep": "repeat_loss",
    "lr": "lr",
    "|g|": "grad_norm",
}
STAGE = re.compile(r"^#\s*stage\s+(\d+)\s*:\s*(.*)$", re.IGNORECASE)


@dataclass
class Stage:
    number: int
    title: str
    start: int  # cumulative step before this stage's first step
    steps: int  # the stage's planned steps (the "/N" of its lines)
    records: list[dict] = field(default_factory=list)  # each: step (cumulative), stage_step, train_loss, ...

    @property
    def end(self) -> int:
        return self.start + self.steps


def parse_step(line: str) -> dict | None:
    """One `step` line as a record (stage_step, stage_steps, train_loss and the optional fields), or None."""
    m = STEP.match(line.strip())
    if m is None:
        return None
    record = {"stage_step": int(m[1]), "stage_steps": int(m[2]), "train_loss": float(m[3])}
    words = m[4].split()
    for key, value in zip(words, words[1:], strict=False):
        if key in FIELDS and key not in ("eta",):
            try:
                record[FIELDS[key]] = float(value)
            except ValueError:
                continue
    return record


def parse_train_log(text: str) -> list[Stage]:
    """Every stage of a train.log with its records on a cumulative step axis. Steps before any stage comment form
    stage 1. ValueError when the log holds no step line."""
    stages: list[Stage] = []
    for line in text.splitlines():
        head = STAGE.match(line.strip())
        if head is not None:
            start = stages[-1].end if stages else 0
            stages.append(Stage(int(head[1]), head[2].strip(), start, 0))
            continue
        record = parse_step(line)
        if record is None:
            continue
        if not stages:
            stages.append(Stage(1, "", 0, 0))
        stage = stages[-1]
        stage.steps = max(stage.steps, record["stage_steps"])
        record["step"] = stage.start + record["stage_step"]
        stage.records.append(record)
    stages = [s for s in stages if s.records]
    if not stages:
        raise ValueError("no training steps in this log")
    for before, after in zip(
        stages, stages[1:], strict=False
    ):  # a stage's start is where the one before it planned to end
        after.start = before.end
        for r in after.records:
            r["step"] = after.start + r["stage_step"]
    return stages


def read_train_log(folder) -> list[Stage] | None:
    """A model folder's train.log parsed, or None when it is missing or holds no steps."""
    try:
        return parse_train_log((Path(folder) / "train.log").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def first_crossing(stages: list[Stage], key: str, threshold: float) -> int | None:
    """The first cumulative step whose logged `key` (prev_token, induction) reaches `threshold`; None if never."""
    for stage in stages:
        for r in stage.records:
            if r.get(key) is not None and r[key] >= threshold:
                return r["step"]
    return None
