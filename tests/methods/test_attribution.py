"""Direct logit attribution, patching sweeps and saliency: decompositions that sum to what they decompose."""

from __future__ import annotations

import pytest
import torch

from gptviz import capture
from gptviz.methods.attribution import (
    direct_logit_attribution,
    gradient_x_input,
    head_patching,
    integrated_gradients,
    logit_difference,
    residual_patching,
)
from gptviz.methods.interventions import Edit, run_with_edits
from gptviz.model import sizes
from tests.support.models import SMALL, build, random_ids


@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_direct_attribution_parts_sum_to_the_logit_difference(norm_type):
    model = build(norm_type=norm_type, seed=3)
    ids = random_ids(11, seed=1)
    logits, _ = capture(model, ids, ())
    dla = direct_logit_attribution(model, ids, target=7, other=40)
    assert dla.logit_diff == pytest.approx(float(logits[0, -1, 7] - logits[0, -1, 40]), abs=1e-6)
    assert float(dla.values.sum()) == pytest.approx(dla.logit_diff, abs=1e-4)
    assert len(dla.labels) == len(dla.values)
    assert dla.head_values.shape == (SMALL.n_layers, SMALL.n_heads)
    # the grid is the same numbers as the labelled list
    assert float(dla.values[dla.labels.index("L1H2")]) == float(dla.head_values[1, 2])
    assert float(dla.values[dla.labels.index("L0 MLP")]) == float(dla.mlp_values[0])
    assert dla.values.abs().min() < dla.values.abs().max()  # not one number spread evenly


def test_direct_attribution_of_a_batch_of_two_raises_naming_the_batch():
    """One prompt at a time (the split is of one position's stream); a batch of one is the same prompt."""
    model = build(seed=3)
    ids = random_ids(11, batch=2, seed=1)
    with pytest.raises(ValueError, match="one prompt.*batch of 2"):
        direct_logit_attribution(model, ids, target=7, other=40)
    one, batched = direct_logit_attribution(model, ids[0], 7, 40), direct_logit_attribution(model, ids[:1], 7, 40)
    torch.testing.assert_close(one.values, batched.values)
    assert one.logit_diff == batched.logit_diff


def test_direct_attribution_of_a_head_is_what_removing_it_from_the_final_stream_takes_away(model):
    """With the final norm's scale held fixed, a head's part is exactly the logit difference lost when its
    output is subtracted from the last residual stream."""
    ids = random_ids(9, seed=2)
    dla = direct_logit_attribution(model, ids, 3, 5, position=4)
    _, cache = capture(model, ids, ["blocks.1.attn.hook_z", f"blocks.{SMALL.n_layers - 1}.hook_resid_post"])
    attn = model.blocks[1].attn
    z = cache["blocks.1.attn.hook_z"][0, 4, 2]
    head_out = z @ attn.c_proj.weight[:, 2 * SMALL.d_head : 3 * SMALL.d_head].t()
    resid = cache[f"blocks.{SMALL.n_layers - 1}.hook_resid_post"][0, 4]
    scale = torch.sqrt(resid.var(unbiased=False) + SMALL.ln_eps)
    direction = model.lm_head.weight[3] - model.lm_head.weight[5]
    with torch.no_grad():
        expected = ((head_out - head_out.mean()) / scale * model.ln_f.weight) @ direction
    assert float(dla.head_values[1, 2]) == pytest.approx(float(expected), abs=1e-5)


def test_direct_attribution_refuses_post_norm(post_model):
    with pytest.raises(ValueError, match="pre-norm"):
        direct_logit_attribution(post_model, random_ids(5), 1, 2)


def _pair(seed=0):
    clean = random_ids(10, seed=seed)
    corrupted = clean.clone()
    corrupted[3] = (clean[3] + 17) % SMALL.vocab_size  # one token differs
    return clean, corrupted


def test_residual_patching_restores_exactly_where_the_prompts_differ(model):
    clean, corrupted = _pair()
    result = residual_patching(model, clean, corrupted, target=7, other=40)
    assert result.scores.shape == (SMALL.n_layers, 10)
    # at layer 0 the streams differ only at position 3: patching it makes the run the clean one, others nothing
    assert float(result.scores[0, 3]) == pytest.approx(1.0, abs=1e-4)
    others = torch.cat([result.scores[0, :3], result.scores[0, 4:]])
    assert others.abs().max() < 1e-4
    # positions before 3 never see the difference, at any layer
    assert result.scores[:, :3].abs().max() < 1e-4


def test_head_patching_sweep_equals_one_patched_run_per_head(model):
    clean, corrupted = _pair(seed=1)
    result = head_patching(model, clean, corrupted, target=7, other=40)
    _, clean_cache = capture(model, clean, [f"blocks.{i}.attn.hook_z" for i in range(SMALL.n_layers)])
    corrupted_logits, _ = capture(model, corrupted, ())
    for layer in range(SMALL.n_layers):
        for head in range(SMALL.n_heads):
            name = f"blocks.{layer}.attn.hook_z"
            source = clean_cache[name]

            def one_head(value, offset, source=source, head=head):
                value = value.clone()
                value[:, :, head] = source[:, :, head]
                return value

            logits, _ = run_with_edits(model, corrupted, Edit(name, one_head, "one head"))
            metric = float(logit_difference(logits, 7, 40))
            expected = (metric - result.corrupted) / (result.clean - result.corrupted)
            assert float(result.scores[layer, head]) == pytest.approx(expected, abs=1e-4)
    assert result.corrupted == pytest.approx(float(logit_difference(corrupted_logits, 7, 40)), abs=1e-6)


def test_patching_needs_prompts_of_one_length(model):
    with pytest.raises(ValueError, match="same length"):
        residual_patching(model, random_ids(6), random_ids(7), 1, 2)


def test_integrated_gradients_are_complete():
    model = build(seed=4)
    ids = random_ids(8, seed=3)
    result = integrated_gradients(model, ids, target=11, other=60, steps=64)
    gap = result.metric - result.baseline_metric
    assert abs(gap) > 0.01
    assert float(result.scores.sum()) == pytest.approx(gap, rel=0.01)
    logits, _ = capture(model, ids, ())
    assert result.metric == pytest.approx(float(logit_difference(logits, 11, 60)), abs=1e-5)


def test_gradient_x_input_is_the_derivative_along_the_embeddings():
    """sum_t grad_t . e_t is d/da metric(a * embeddings) at a = 1: compare with a central difference."""
    model = build(seed=5).double()
    ids = random_ids(7, seed=4)
    result = gradient_x_input(model, ids, target=9)
    emb = model.wte(ids[None]).detach()

    def metric(a):
        edit = Edit("hook_embed", lambda value, offset: a * emb, "scaled")
        logits, _ = run_with_edits(model, ids, edit)
        return float(logits[0, -1, 9])

    h = 1e-4
    assert float(result.scores.sum()) == pytest.approx((metric(1 + h) - metric(1 - h)) / (2 * h), rel=1e-5)
    assert result.scores.shape == (7,)


def test_patching_sweeps_run_in_batches_within_their_budget_and_give_the_same_scores(model, monkeypatch):
    """A 128-token pair took 7 GB when every patched copy ran at once with every position's logits: the sweeps
    now run batches of at most sweep_rows_per_batch rows and read only the last position's logits; the residual
    sweep starts each patched run at its layer and skips the positions where the two streams are equal."""

    clean, corrupted = random_ids(12, seed=4), random_ids(12, seed=4).clone()
    corrupted[5] = (corrupted[5] + 1) % SMALL.vocab_size
    whole = residual_patching(model, clean, corrupted, 7, 40), head_patching(model, clean, corrupted, 7, 40)
    full_runs, resumed = [], []
    model.register_forward_hook(lambda module, args, out: full_runs.append(tuple(out.shape)))
    forward_from = model.forward_from
    monkeypatch.setattr(
        model,
        "forward_from",
        lambda layer, resid, last_only=False, past_kv=None: (
            resumed.append((layer, tuple(resid.shape), last_only)) or forward_from(layer, resid, last_only, past_kv)
        ),
    )
    monkeypatch.setattr(sizes, "SWEEP_BATCH_BYTES", 3 * sizes.sweep_row_bytes(SMALL, 12))
    assert sizes.sweep_rows_per_batch(SMALL, 12) == 3
    batched = residual_patching(model, clean, corrupted, 7, 40), head_patching(model, clean, corrupted, 7, 40)
    for a, b in zip(
        whole, batched, strict=True
    ):  # normalised by clean - corrupted, so float noise of other batch shapes grows
        torch.testing.assert_close(a.scores, b.scores, rtol=0, atol=1e-4)
    # residual sweep: layer 0 differs at position 5 only (one run); layer 1 at 5..11 (7 rows: batches of 3, 3, 1),
    # each run from its first patched position on (12 - 5, 12 - 8, 12 - 11 positions)
    residual, heads = resumed[:4], resumed[4:]
    assert [(layer, shape[:2]) for layer, shape, _ in residual] == [(0, (1, 7)), (1, (3, 7)), (1, (3, 4)), (1, (1, 1))]
    assert all(last for *_, last in resumed)
    assert float(batched[0].scores[0, 4]) == 0.0 and float(batched[0].scores[1, 4]) == 0.0  # equal streams: no change
    # head sweep: each layer's 4 heads in batches of 3 and 1, from that layer on and from the first differing
    # position (5) on: 12 - 5 positions; no whole edited run, only the four unedited captures (T = 12)
    assert [(layer, shape[:2]) for layer, shape, _ in heads] == [(0, (3, 7)), (0, (1, 7)), (1, (3, 7)), (1, (1, 7))]
    assert len(full_runs) == 4 and all(shape[1] == 12 for shape in full_runs)


def _one_head_patched_run(model, clean, corrupted, layer, head, target, other):
    """The reference: a whole run of the corrupted prompt with one head's z (every position) from the clean run."""
    name = f"blocks.{layer}.attn.hook_z"
    _, clean_cache = capture(model, clean, [name])

    def one_head(value, offset, source=clean_cache[name]):
        value = value.clone()
        value[:, :, head] = source[:, :, head]
        return value

    logits, _ = run_with_edits(model, corrupted, Edit(name, one_head, "one head"))
    return float(logit_difference(logits, target, other))


@pytest.mark.parametrize("wiring", ["pre", "post"])
def test_head_patching_resumed_at_its_layer_equals_whole_runs_where_several_tokens_differ(wiring, model, post_model):
    """Issue 43: the head sweep starts each run at its layer and first differing position; it must give what a whole
    patched run gives, also where the prompts differ at several positions and in post-norm."""
    net = model if wiring == "pre" else post_model
    clean = random_ids(13, seed=7)
    corrupted = clean.clone()
    for t in (4, 9):
        corrupted[t] = (clean[t] + 11) % SMALL.vocab_size
    result = head_patching(net, clean, corrupted, target=3, other=50)
    for layer in range(SMALL.n_layers):
        for head in range(SMALL.n_heads):
            metric = _one_head_patched_run(net, clean, corrupted, layer, head, 3, 50)
            expected = (metric - result.corrupted) / (result.clean - result.corrupted)
            assert float(result.scores[layer, head]) == pytest.approx(expected, abs=1e-4), (layer, head)


def test_the_patching_work_estimate_is_the_work_the_sweeps_do(model, monkeypatch):
    """patching_work (what the page's time estimate multiplies by a measured rate) counts the token-block passes the
    two sweeps run: every resumed batch's rows x positions x blocks, and the four unedited runs."""
    from gptviz.methods import attribution

    clean = random_ids(14, seed=2)
    corrupted = clean.clone()
    corrupted[3], corrupted[8] = (clean[3] + 1) % SMALL.vocab_size, (clean[8] + 1) % SMALL.vocab_size
    monkeypatch.setattr(sizes, "SWEEP_BATCH_BYTES", 3 * sizes.sweep_row_bytes(SMALL, 14))
    done = []
    forward_from = model.forward_from
    monkeypatch.setattr(
        model,
        "forward_from",
        lambda layer, resid, last_only=False, past_kv=None: (
            done.append(resid.shape[0] * resid.shape[1] * (SMALL.n_layers - layer))
            or forward_from(layer, resid, last_only, past_kv)
        ),
    )
    residual_patching(model, clean, corrupted, 7, 40)
    head_patching(model, clean, corrupted, 7, 40)
    assert len(done) > 4
    assert attribution.patching_work(SMALL, clean, corrupted) == sum(done) + 4 * 14 * SMALL.n_layers


def test_a_sweep_stops_when_its_session_ends_or_its_time_is_up(model, monkeypatch):
    """Issue 43: a 1,000-token pair ran 24.5 minutes after its tab closed. The sweeps check a WorkClock between
    batches: a session that ends stops the sweep at the next check, and so does the operator's time limit."""
    from gptviz.serve.work_clock import WorkClock, WorkStopped

    clean, corrupted = _pair()
    monkeypatch.setattr(sizes, "SWEEP_BATCH_BYTES", 1)  # one row a batch: the residual sweep runs 1 + 7
    checks = []

    def alive():
        checks.append(1)
        return len(checks) < 3  # the tab closes during the sweep's third batch

    with pytest.raises(WorkStopped, match="browser session ended"):
        residual_patching(model, clean, corrupted, 7, 40, clock=WorkClock(60, "Patching", alive))
    assert len(checks) == 3  # stopped at the check after the tab closed, not after all 8 batches
    ticks = iter(range(100))
    clock = WorkClock(2.5, "Patching", now=lambda: float(next(ticks)))  # one second per check
    with pytest.raises(WorkStopped, match="limit of 2 s"):
        head_patching(model, clean, corrupted, 7, 40, clock=clock)
    assert clock.checks == 3  # 1 s and 2 s are within 2.5 s; at 3 s it stops (of 2 + 8 checks)
    with pytest.raises(WorkStopped, match="browser session ended"):
        integrated_gradients(model, clean, 7, 40, steps=8, batch=2, clock=WorkClock(60, "Saliency", lambda: False))


def test_direct_attribution_from_a_capture_already_made_is_the_same(model):
    # the Why page reads one cached capture for every target and rival instead of running the model for each pair
    from gptviz.methods.attribution import direct_attribution_names, direct_logit_attribution_of

    ids = random_ids(9)
    logits, cache = capture(model, ids, direct_attribution_names(SMALL.n_layers))
    for target, other in ((3, 7), (11, 2)):
        fresh = direct_logit_attribution(model, ids, target, other)
        read = direct_logit_attribution_of(model, logits[0], lambda name: cache[name][0], target, other)
        assert read.labels == fresh.labels and read.logit_diff == pytest.approx(fresh.logit_diff)
        torch.testing.assert_close(read.values, fresh.values)


def test_direct_attribution_from_a_capture_refuses_post_norm(post_model):
    from gptviz.methods.attribution import direct_logit_attribution_of

    with pytest.raises(ValueError, match="pre-norm"):
        direct_logit_attribution_of(post_model, torch.zeros(4, SMALL.vocab_size), lambda name: None, 1, 2)
