"""The app's small model runs (next-token probabilities, continuations, the logit lens, the .npz export, the unit
page's values and examples) each reserve an estimate in the memory accountant before they allocate
(gptviz.serve.memory), and each estimate covers what the call allocates.

Measured with torch's own allocation records (torch.profiler's memory timeline): every CPU tensor the call creates
and frees, in order; tensors that existed before the call (the weights) are not counted. tracemalloc sees none of
torch's memory. Pages: with the server's budget below a call's estimate, the page says so and runs nothing."""

from __future__ import annotations

import pytest
import torch

from gptviz import index as ix
from gptviz import methods as analysis
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app import unit_index as ui
from gptviz.export import prompt_capture_npz
from gptviz.methods import attribution
from gptviz.methods.interventions import ablate_heads, run_with_edits
from gptviz.model import sizes
from gptviz.model.generate import generate, stream
from gptviz.model.hooks import act_name, capture
from gptviz.serve import memory
from gptviz.serve.memory import MemoryAccountant
from tests.support import ROOT
from tests.support.memory import MiB, covers, torch_peak
from tests.support.pagetest import TINY, forward_calls, run_page

PRE = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")


def test_the_peak_measure_counts_what_is_held_at_once():
    def work():
        a = torch.zeros(1000, 1000)  # 4 MB
        b = a + 1
        c = b * 2  # a, b, c: 12 MB at once
        del a, b
        return (c + 1).sum()

    weights = torch.zeros(2000, 2000)  # made before: not the call's
    assert torch_peak(lambda: work() + weights.sum())[1] == pytest.approx(12_000_000, abs=4096)


@pytest.fixture(scope="module")
def pre():
    model = model_service.load_model(PRE)
    ids = torch.randint(0, 5000, (1, model.config.n_ctx), generator=torch.Generator().manual_seed(0))
    return model, ids


@pytest.mark.parametrize("heads", [(), ((1, 0), (3, 2))], ids=["plain", "ablated"])
def test_next_token_probabilities_estimate_covers_the_forward_pass(pre, heads):
    model, ids = pre
    edits = [ablate_heads(layer, [head]) for layer, head in heads]
    _, peak = torch_peak(lambda: torch.softmax(run_with_edits(model, ids, edits)[0][0, -1].float(), -1))
    covers(sizes.capture_work_nbytes(model.config, (), ids.shape[1]), peak)


def test_an_edited_patterns_estimate_covers_its_run(pre):
    model, ids = pre
    name = act_name("pattern", 2)
    _, peak = torch_peak(lambda: run_with_edits(model, ids, [ablate_heads(1, [0])], [name])[1][name][0])
    covers(sizes.capture_work_nbytes(model.config, [name], ids.shape[1]), peak)


def test_direct_attributions_estimate_covers_its_run(pre):
    model, ids = pre
    _, peak = torch_peak(lambda: attribution.direct_logit_attribution(model, ids, 5, 6))
    covers(sizes.direct_attribution_nbytes(model.config, ids.shape[1]), peak)


@pytest.mark.slow
@pytest.mark.parametrize("prompt, new", [(40, 20), (120, 40)], ids=["within-context", "past-the-context"])
def test_a_continuations_estimate_covers_its_kv_caches(pre, prompt, new):
    model, ids = pre
    prompt_ids = ids[0, :prompt].tolist()
    out, peak = torch_peak(lambda: generate(model, prompt_ids, new, temperature=0.0, edits=[ablate_heads(1, [0])]))
    assert len(out) == prompt + new
    covers(sizes.sampling_nbytes(model.config, prompt, new), peak)


def test_the_first_steps_estimate_covers_its_recorded_attention(pre):
    model, ids = pre
    _, peak = torch_peak(lambda: next(stream(model, ids[0].tolist(), 1, attention=True)))
    assert peak <= sizes.generation_nbytes(model.config, ids.shape[1], 1)  # the live estimate adds kept steps


@pytest.mark.slow
def test_the_logit_lens_estimate_covers_its_logits(pre):
    model, ids = pre
    _, cache = capture(model, ids)  # batched, as the Activations page passes its cached capture
    lens, peak = torch_peak(lambda: analysis.logit_lens(model, cache))
    assert lens.top_probs.shape == (model.config.n_layers + 1, ids.shape[1])
    covers(sizes.lens_nbytes(model.config, ids.shape[1]), peak)


@pytest.mark.slow
@pytest.mark.parametrize("attention", [True, False])
def test_the_npz_exports_estimate_covers_its_capture_and_the_file(pre, attention):
    model, ids = pre
    data, peak = torch_peak(lambda: prompt_capture_npz(model, ids[0].tolist(), attention))
    covers(sizes.prompt_capture_npz_nbytes(model.config, ids.shape[1], attention), peak + 2 * len(data))


def test_units_at_estimate_covers_every_units_value(pre):
    model, ids = pre
    shipped = ix.bundled_index("shakespeare-pre")
    found, peak = torch_peak(lambda: ix.units_at(model, ids[0], 100, index=shipped, k=8, kind="neuron"))
    assert len(found) == 8
    covers(sizes.units_at_nbytes(model.config, ids.shape[1]), peak)


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["L1N7", "L2H1"])
def test_the_top_examples_estimate_covers_their_batched_pass(pre, unit):
    model, _ = pre
    shipped = ix.bundled_index("shakespeare-pre")
    docs = ui._docs_for(shipped)
    examples = ix.top_examples(shipped, unit)
    found, peak = torch_peak(lambda: ix.example_contexts(shipped, docs, examples, model=model, before=20, after=6))
    assert len(found) == len(examples)
    # the forward pass's share is gptviz.serve.memory's batch-wide estimate: about 2.2x what a head's batch holds here
    batch = ix.context_batch(shipped, docs, examples, before=20, after=6)
    covers(sizes.example_contexts_nbytes(model.config, examples[0].unit, *batch), peak, within=2.5)


@pytest.mark.slow
def test_the_patching_sweeps_estimate_covers_the_audits_128_token_pair(pre):
    """Issue 31, finding 1: a 128-token pair (" a" x 128 and the same with " b" at token 64) took 6.9 GB on the
    bundled model; the sweeps now hold what sizes.patching_nbytes says, checked before they run."""
    from gptviz.model.tokenizer import encode

    model, _ = pre
    clean = encode(" a" * 128)
    corrupted = clean[:64] + encode(" b") + clean[65:]
    assert len(clean) == len(corrupted) == 128
    _, peak = torch_peak(
        lambda: (
            attribution.residual_patching(model, clean, corrupted, 5, 6),
            attribution.head_patching(model, clean, corrupted, 5, 6),
        )
    )
    estimate = sizes.patching_nbytes(model.config, 128)
    assert peak <= estimate < 300 * MiB, (peak / MiB, estimate / MiB)


@pytest.mark.slow
def test_a_models_build_estimate_covers_its_build():
    """Issue 31, finding 3: one gpt2-xl build from a link peaked at 8.5 GB for 6.2 GB of weights; a model is now
    made on the meta device and allocated once, and the accountant reserves sizes.model_build_nbytes first."""
    from gptviz import GPT, PRESETS
    from gptviz.model.params import total_params

    config = PRESETS["gpt2-small"].replace(n_layers=2)
    _, peak = torch_peak(lambda: GPT(config, seed=0))
    assert total_params(config) * 4 * 1.5 < peak  # embedding-heavy: the drawing buffer is 0.7x its weights
    covers(sizes.model_build_nbytes(config), peak, within=1.05)


# ---- pages: a run the server's memory has no room for is refused with a message, and runs nothing -----------------

PROMPT = "Romeo.\nBut soft! what light through yonder window breaks?"


@pytest.fixture
def budget(monkeypatch):
    """`budget(n)`: the accountant the pages' own reservations use (gptviz.serve.memory.reserve), on n bytes. The model
    and
    capture stores are made first and keep the process's accountant, so a page's model and capture still come and
    only the run under test meets the small budget. Cached results are cleared: a cached run allocates nothing."""
    from gptviz.app import services

    model_service.model_store(), model_service.capture_store(), model_service.load_model(PRE), services.results_cache()
    services.results_cache().clear()

    def use(n: int) -> MemoryAccountant:
        acc = MemoryAccountant(n, wait_s=0)
        monkeypatch.setattr(memory, "accountant", lambda: acc)
        return acc

    return use


def refusals(at) -> list[str]:
    """The page's messages that name the server's memory budget."""
    return [m.value for m in list(at.warning) + list(at.error) if "GPTVIZ_MEMORY_MB" in m.value]


def test_why_page_refuses_the_next_token_probabilities_it_has_no_memory_for(budget):
    from gptviz.model.tokenizer import encode

    acc = budget(MiB)
    before = forward_calls()
    at = run_page("why", PROMPT)
    assert not at.exception
    assert refusals(at) and refusals(at)[0].startswith(
        f"next-token probabilities for {len(encode(PROMPT))} tokens on tiny needs about"
    )
    assert forward_calls() == before and acc.in_use == 0
    assert not at.get("plotly_chart")


@pytest.mark.slow
def test_why_page_refuses_a_continuation_it_has_no_memory_for(budget):
    heads = [(0, 1), (1, 2)]
    budget(10**10)
    at = run_page("why", PROMPT, why_view="Ablate heads", why_heads=heads, why_n=12)
    assert not at.exception and not refusals(at)
    acc = budget(MiB)  # the probabilities are cached; 13 new tokens are not
    before = forward_calls()
    at.session_state[K.WHY_N] = 13
    at.run()
    assert not at.exception
    assert [r for r in refusals(at) if r.startswith("a continuation of 13 tokens on tiny needs about")]
    assert forward_calls() == before and acc.in_use == 0


def test_generation_page_refuses_the_first_step_it_has_no_memory_for(budget):
    from gptviz.app import sidebar
    from gptviz.model.tokenizer import encode

    acc = budget(MiB)
    before = forward_calls()
    at = run_page("generation", sidebar.DEFAULT_PROMPT)
    assert not at.exception
    assert refusals(at) and refusals(at)[0].startswith(
        f"the next-token distribution after {len(encode(sidebar.DEFAULT_PROMPT))} tokens needs about"
    )
    assert forward_calls() == before and acc.in_use == 0


def test_activations_page_refuses_the_lens_and_the_export_it_has_no_memory_for(budget, monkeypatch):
    from gptviz.model.tokenizer import encode

    lensed = []
    monkeypatch.setattr(analysis, "logit_lens", lambda *a: lensed.append(a))
    budget(MiB)
    at = run_page("activations", PROMPT)
    assert not at.exception
    T = len(encode(PROMPT))
    shown = refusals(at)
    assert any(m.startswith(f"The logit lens failed: the logit lens on {T} tokens needs about") for m in shown)
    assert any(m.startswith("Building this file needs about") for m in shown)
    assert [b for b in at.get("download_button") if b.proto.label == "Capture as .npz"][0].proto.disabled
    assert lensed == []


def test_the_npz_built_on_click_reserves_first(budget, monkeypatch):
    from gptviz import export

    acc = budget(MiB)
    from gptviz.app.services import activations

    monkeypatch.setattr(activations, "prompt_capture_npz", lambda *a: pytest.fail("the model ran"))
    with pytest.raises(memory.LimitError, match="a .npz of 16 tokens needs about"):
        activations.npz_within_budget(TINY, tuple(range(16)), True)
    assert acc.in_use == 0 and export.prompt_capture_npz is prompt_capture_npz


@pytest.mark.slow
def test_unit_page_refuses_the_examples_and_the_prompts_units_it_has_no_memory_for(budget, monkeypatch):
    from gptviz.model.tokenizer import encode
    from gptviz.serve.bounded_cache import BoundedCache

    ran = []
    monkeypatch.setattr(ix, "example_contexts", lambda *a, **k: ran.append("examples"))
    monkeypatch.setattr(ix, "units_at", lambda *a, **k: ran.append("units_at"))
    fresh = BoundedCache(16 * MiB, "unit's examples")
    monkeypatch.setattr(ui, "context_store", lambda: fresh)
    acc = budget(MiB // 4)
    before = forward_calls()
    at = run_page("units", PROMPT, spec=PRE, unit="L1N7")
    assert not at.exception
    shown = refusals(at)
    assert any(m.startswith("the top examples of L1N7 needs about") for m in shown), shown
    at = run_page("units", PROMPT, spec=PRE, unit="L1N7", **{K.UNIT_TAB: K.UNIT_TABS[1]})  # the search tab
    assert not at.exception
    shown = refusals(at)
    assert any(m.startswith(f"every unit's value on {len(encode(PROMPT))} tokens needs about") for m in shown), shown
    assert ran == [] and forward_calls() == before and acc.in_use == 0


def test_the_why_pages_other_runs_and_the_twins_generation_reserve_before_running(budget, monkeypatch):
    from gptviz.methods import interventions

    acc = budget(1)
    from gptviz.app.services import norms, why

    for name in ("run_with_edits", "generate"):
        monkeypatch.setattr(why, name, lambda *a, **k: pytest.fail("the model ran"))
    monkeypatch.setattr(norms, "generate", lambda *a, **k: pytest.fail("the model ran"))
    monkeypatch.setattr(attribution, "direct_logit_attribution", lambda *a, **k: pytest.fail("the model ran"))
    ids = (1, 2, 3)
    # Direct attribution runs no model of its own: it reads the prompt's shared capture, which the capture store
    # reserves (in its own accountant here), and projects one position's components (issue 60)
    got = why.direct_attribution(TINY, ids, 5, 6)
    assert abs(float(got.values.sum()) - got.logit_diff) < 1e-4 and acc.in_use == 0
    with pytest.raises(memory.LimitError, match="layer 1's attention on 3 tokens of tiny"):
        why.edited_pattern.__wrapped__(TINY, ids, ((0, 1),), "zero", 1)
    with pytest.raises(memory.LimitError, match="a continuation of 5 tokens on tiny"):
        why.continuation.__wrapped__(TINY, ids, (), "zero", 5, 0.0, 0)
    with pytest.raises(memory.LimitError, match="next-token probabilities for 3 tokens"):
        why.next_token.__wrapped__(TINY, ids, ((0, 1),), "zero")
    with pytest.raises(memory.LimitError, match="a continuation of 7 tokens on shakespeare-pre"):
        norms.generate_cached.__wrapped__(PRE, ids, 7, 0.8, 40, 0)
    assert acc.in_use == 0 and interventions.run_with_edits is run_with_edits


def test_an_index_build_reserves_its_scan_before_running(budget, monkeypatch):
    monkeypatch.setattr(ix, "build_index", lambda *a, **k: pytest.fail("the scan ran"))
    acc = budget(MiB)
    with pytest.raises(memory.LimitError, match="an index scan of shakespeare-pre needs about"):
        ui.build(PRE, 2_000, lambda done, total: None)
    assert acc.in_use == 0 and ui.build_guard()._running == []


@pytest.mark.slow
def test_the_attention_pages_capture_stays_within_its_reservation():
    """The capture the Attention page reserves for, measured as resident growth in a fresh process (gpt2-small's
    random weights, 384 tokens): it checked the logits' finiteness with a float and two bool copies of the
    [T, 50,257] block and stacked the patterns into a second block, +230 and +256 MiB past the estimate at 682
    tokens (issue 43's scenario 4)."""
    import subprocess
    import sys

    from gptviz import PRESETS
    from gptviz.app import model_service

    T, cfg = 384, PRESETS["gpt2-small"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "rss_growth.py"), "page_capture", "gpt2-small", str(T)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    growth = int(out.stdout.split()[-1])
    reserved = sizes.capture_work_nbytes(cfg, model_service.attention_page_names(cfg.n_layers, cfg.norm), T)
    assert growth <= reserved, f"grew {growth / 2**20:.0f} MiB against {reserved / 2**20:.0f} reserved"
