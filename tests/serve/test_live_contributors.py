"""Each written token's top contributors as a live generation writes (issue 58, gptviz.serve.live_contributors): a
generation started with `explain=True` gets every step's, the same as the library computes from a capture of the
text so far; they are found in batches in the generation's own thread (full, due, or past the context at once);
a failure stops them and not the text; their memory is reserved with the generation's."""

from __future__ import annotations

import threading

import pytest
import torch

from gptviz import PRESETS
from gptviz.methods.graph_direct import DirectStep, direct_contributors, direct_hooks
from gptviz.model.generate import stream
from gptviz.model.sizes import (
    LIVE_CONTRIBUTORS_HELD_BYTES,
    generation_nbytes,
    live_contributors_batch,
    live_contributors_nbytes,
)
from gptviz.serve import live_contributors
from gptviz.serve.live_contributors import LiveContributors
from gptviz.serve.live_generation import LiveGeneration
from tests.support.models import build

PROMPT = [5, 17, 3, 42]
SAMPLED = dict(max_new_tokens=12, temperature=1.0, seed=4)


def test_every_step_gets_the_contributors_the_library_finds_for_it(monkeypatch):
    model = build(seed=3)
    threads = set()
    real = live_contributors.direct_contributors

    def spy(model, steps, n):
        threads.add(threading.current_thread().name)
        return real(model, steps, n)

    monkeypatch.setattr(live_contributors, "direct_contributors", spy)
    job = LiveGeneration(model, PROMPT, SAMPLED, explain=True)
    assert job.wait(30) and job.error is None and job.contributors.error is None
    assert threads == {"gptviz-generation"}  # in the model's own thread: no second thread to share a core with
    found = job.contributors.found
    assert sorted(found) == list(range(12)) and job.contributors.waiting == 0
    # the library on the same run, step by step (sampled with the same seed: the same tokens)
    steps = []
    for rec in stream(model, PROMPT, attention=True, capture=direct_hooks(model.config), **SAMPLED):
        values = [rec.values[layer].clone() for layer in range(len(rec.values))]
        logit = float(rec.logits[rec.token_id])
        steps.append(DirectStep(rec.captured, values, rec.attention, rec.position - 1, rec.token_id, logit))
    assert [s.target for s in steps] == [s.token_id for s in job.steps]
    for i, want in enumerate(direct_contributors(model, steps)):
        assert [c.id for c in found[i].top] == [c.id for c in want.top]
        assert [c.source for c in found[i].top] == [c.source for c in want.top]
        assert [c.value for c in found[i].top] == pytest.approx([c.value for c in want.top], abs=1e-6)
        assert found[i].metric == pytest.approx(want.metric)
    assert len(job.contributors.lag) == 12 and all(lag >= 0 for lag in job.contributors.lag.values())
    assert job.contributors.model is None  # the finished run's page keeps the job, not the model


def test_without_explain_nothing_is_captured_or_found():
    job = LiveGeneration(build(seed=3), PROMPT, SAMPLED)
    assert job.wait(30) and job.contributors is None


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def records(model, new: int = 40) -> list:
    return list(stream(model, PROMPT, max_new_tokens=new, seed=0, attention=True, capture=direct_hooks(model.config)))


def test_a_batch_is_taken_when_due_when_full_and_at_once_past_the_context(monkeypatch):
    model = build(seed=3)  # a context of 16: past 12 new tokens every step makes a KV cache of its own
    steps = records(model)
    batches = []
    real = live_contributors.direct_contributors
    monkeypatch.setattr(
        live_contributors, "direct_contributors", lambda m, s, n: batches.append(len(s)) or real(m, s, n)
    )
    clock = Clock()
    found = LiveContributors(model, clock=clock)
    found.submit(0, steps[0])  # the first at once
    assert batches == [1]
    for i in range(1, 4):
        clock.t += 0.03
        found.submit(i, steps[i])
    assert batches == [1] and found.waiting == 3  # 0.09 s after the last batch: not yet
    clock.t += 0.03
    found.submit(4, steps[4])
    assert batches == [1, 4] and found.waiting == 0  # 0.1 s after: the four since
    full = live_contributors_batch(model.config)
    for i in range(5, 5 + full):  # no time passes: only a full batch is taken
        found.submit(i, steps[i % 12])
    assert batches == [1, 4, full]
    shifted = [r for r in steps if r.context_shifted]
    assert len(shifted) >= 4 and len({id(r.values._layers[0]) for r in shifted}) == len(shifted)  # a cache each
    one = shifted[0].values.storage_size
    assert one == model.config.n_layers * model.config.n_ctx * model.config.d_model * 4  # every layer's values
    monkeypatch.setattr(live_contributors, "HELD_BYTES", int(2.5 * one))
    waiting = []
    for r in shifted[:4]:  # past the context: the caches waiting steps keep alive are bounded
        found.submit(100 + r.step, r)
        waiting.append(found.waiting)
    assert waiting == [1, 2, 0, 1] and batches[-1] == 3
    found.flush()
    assert sorted(found.found) == [*range(5 + full), *(100 + r.step for r in shifted[:4])]


def test_a_costly_batch_spaces_the_next_ones_out(monkeypatch):
    clock = Clock()

    def slow(model, steps, n):
        clock.t += 0.02  # a batch taking 20 ms: the next one 0.4 s later (5% of the time between them)
        return [None] * len(steps)

    monkeypatch.setattr(live_contributors, "direct_contributors", slow)
    model = build(seed=3)
    step = records(model, 1)[0]
    found = LiveContributors(model, clock=clock)
    found.submit(0, step)
    clock.t += 0.3
    found.submit(1, step)
    assert found.waiting == 1  # 0.32 s after: not yet
    clock.t += 0.11
    found.submit(2, step)
    assert found.waiting == 0


def test_a_failure_stops_them_and_not_the_text(monkeypatch):
    def broken(model, steps, n):
        raise RuntimeError("out of luck")

    monkeypatch.setattr(live_contributors, "direct_contributors", broken)
    job = LiveGeneration(build(seed=3), PROMPT, SAMPLED, explain=True)
    assert job.wait(30) and job.error is None and len(job.steps) == 12
    assert job.contributors.error == "RuntimeError: out of luck" and job.contributors.found == {}


def test_their_memory_is_reserved_with_the_generation():
    small, big = PRESETS["tiny"], PRESETS["gpt2-small"]
    assert 0 < live_contributors_nbytes(small, 10, 20) < live_contributors_nbytes(big, 10, 20)
    longer = live_contributors_nbytes(big, 110, 20) - live_contributors_nbytes(big, 10, 20)  # the first step's capture
    per_position = 4 * (big.n_layers * (big.d_model + big.d_ff) + 3 * big.d_model)
    assert longer == 100 * per_position
    assert live_contributors_nbytes(big, 100, 200) < generation_nbytes(big, 100, 200) / 2  # a share of the generation's
    past = live_contributors_nbytes(big, 1000, 100) - live_contributors_nbytes(big, 1000, 24)  # past the context
    assert past == LIVE_CONTRIBUTORS_HELD_BYTES + big.n_layers * big.n_ctx * big.d_model * 4  # the bound and one more
    table = torch.zeros(live_contributors_batch(big), 1 + big.n_layers * (big.n_heads + big.d_ff + 4))
    assert table.numel() * 4 <= 16 * 2**20
