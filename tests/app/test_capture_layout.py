"""The app's shared capture keeps the library's layout end to end: the capture store holds [1, ...] tensors and logits
[1, T, vocab] exactly as `capture` returns them, a one-prompt reader takes ActivationCache.prompt(0) (views, no copy),
and mean ablation's reference is the batched capture itself (no axis stripped, then re-added)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from gptviz.app import model_service
from gptviz.app.services import why
from gptviz.methods.interventions import ablate_heads, run_with_edits
from gptviz.model.hooks import act_name, capture, storage_nbytes
from gptviz.model.sizes import capture_nbytes
from gptviz.serve.bounded_cache import BoundedCache
from tests.support import ROOT
from tests.support.pagetest import TINY

IDS = (464, 3290, 286, 1110, 3290, 286, 464)


@pytest.fixture
def store(monkeypatch) -> BoundedCache:
    """A capture store of its own: every capture in the test is built here, none found from another test."""
    fresh = BoundedCache(10**9, "capture")
    monkeypatch.setattr(model_service, "capture_store", lambda: fresh)
    return fresh


def test_the_shared_capture_has_captures_own_shapes_values_and_bytes(store):
    model = model_service.load_model(TINY)
    cfg, T = model.config, len(IDS)
    names = model_service.attention_page_names(cfg.n_layers, cfg.norm) + (act_name("z", 1), act_name("mlp_out", 0))
    logits, stored = model_service.get_capture(TINY, IDS, names)
    want_logits, want = capture(model, torch.tensor([IDS]), list(names))
    assert logits.shape == want_logits.shape == (1, T, cfg.vocab_size)
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=0)
    assert sorted(stored) == sorted(want) == sorted(names)
    for name in names:
        assert stored[name].shape == want[name].shape and stored[name].shape[0] == 1, name
        torch.testing.assert_close(stored[name], want[name], rtol=0, atol=0)
    # what the store counts is what the size estimate says (the batch of one adds no bytes)
    assert storage_nbytes([logits, *stored.values()]) == capture_nbytes(cfg, names, T) == store.nbytes


def test_patterns_stay_one_block_and_a_prompt_is_views_of_it(store):
    cfg = model_service.load_model(TINY).config
    L, H, T = cfg.n_layers, cfg.n_heads, len(IDS)
    _, cache = model_service.capture_cache(TINY, IDS, model_service.pattern_names(L))
    block = cache.patterns()
    assert block.shape == (L, 1, H, T, T)
    assert all(cache.pattern(i).data_ptr() == block[i].data_ptr() for i in range(L))  # the block itself: no copy
    one = cache.prompt(0)
    assert one.patterns().shape == (L, H, T, T) and one.pattern(1).shape == (H, T, T)
    assert one.patterns().data_ptr() == block.data_ptr()  # a view of the same block
    assert torch.equal(one.patterns(), block[:, 0])


def test_a_prompt_view_keeps_the_captured_dict_alive_for_the_stores_witness(store):
    """The capture store counts a dropped capture until its dict (the witness) is gone: a page holding only
    cache.prompt(0) still holds the capture's storages, so the dict must live as long as that view."""
    _, cache = model_service.capture_cache(TINY, IDS, model_service.pattern_names(2))
    witness = weakref.ref(cache._store)
    one = cache.prompt(0)
    del cache
    store.clear()
    gc.collect()
    assert witness() is not None and isinstance(witness(), model_service.Captured)
    del one
    gc.collect()
    assert witness() is None


def test_mean_ablation_reference_is_each_heads_mean_over_the_prompts_positions(store):
    """head_edits reads the cached capture's hook_z [1, T, heads, d_head] as the library documents it: each ablated
    head set to its own mean over the prompt's positions, recomputed here from a fresh batched capture."""
    model = model_service.load_model(TINY)
    T, heads = len(IDS), ((1, 2), (0, 1))
    z_names = [act_name("z", 0), act_name("z", 1)]
    _, fresh = capture(model, torch.tensor([IDS]), z_names)
    edits = why.head_edits(TINY, IDS, heads, "mean")
    assert [e.hook for e in edits] == z_names
    for edit, (layer, head) in zip(edits, sorted(heads), strict=True):
        z = fresh[act_name("z", layer)]  # [1, T, heads, d_head]
        manual = z[0].mean(0)  # [heads, d_head]: each head's own mean over the positions
        assert not torch.allclose(manual[0], manual[1])  # the heads' means differ: a mixed-up mean would show
        out = edit.fn(torch.zeros_like(z), 0)
        torch.testing.assert_close(out[0, :, head], manual[head].expand(T, -1))
        others = [h for h in range(z.shape[2]) if h != head]
        assert not out[:, :, others].any()
    # the probabilities the page shows: the library's own mean ablation on the fresh capture
    probs = why.next_token.__wrapped__(TINY, IDS, heads, "mean")
    reference = [ablate_heads(layer, [head], "mean", reference=fresh) for layer, head in sorted(heads)]
    logits, _ = run_with_edits(model, torch.tensor([IDS]), reference)
    torch.testing.assert_close(probs, torch.softmax(logits[0, -1].float(), -1))


def test_no_app_or_server_code_re_adds_a_batch_axis():
    """The capture keeps its batch axis, so nothing in the app or the server puts one back."""
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("gptviz/app", "gptviz/serve", "app_pages")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "unsqueeze(0)" in line
    ]
    assert found == []
