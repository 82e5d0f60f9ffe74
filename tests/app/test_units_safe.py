"""The unit page under hostile input (issue 43): its one-token boxes take at most TOKEN_BOX_CHARS characters,
checked by the page itself (a crafted message or session state skips the widget's max_chars), the direct effect's
memory is reserved from an estimate that covers its measured peak, and an index that cannot be read offers a
rebuild instead of a dead end."""

from __future__ import annotations

import re

import pytest

import gptviz.model.tokenizer
from gptviz import GPT, PRESETS
from gptviz import index as ix
from gptviz.app import keys as K
from gptviz.app import model_service, sidebar
from gptviz.app import unit_index as ui
from gptviz.model import sizes
from gptviz.serve import limits, memory
from tests.support.memory import covers, torch_peak
from tests.support.pagetest import TINY, run_page

PRE = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
SEARCH_TAB = {K.UNIT_TAB: K.UNIT_TABS[1]}
HUGE = "x" * 10_000_000  # the audit's 10 MB word


def plain(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def page_text(at) -> str:
    return " ".join(m.value for m in [*at.markdown, *at.info, *at.warning, *at.error, *at.caption])


@pytest.fixture
def longest_encoded(monkeypatch):
    """The longest text the page tokenises during a run (gptviz.model.tokenizer.encode, which the page imports),
    the sidebar's prompt aside: a process whose caches are cold tokenises it too (187 characters), and a test run
    alone or first on its worker saw it."""
    seen = [0]
    real = gptviz.model.tokenizer.encode

    def counting(text, *a, **kw):
        if text != sidebar.DEFAULT_PROMPT:
            seen[0] = max(seen[0], len(text))
        return real(text, *a, **kw)

    monkeypatch.setattr(gptviz.model.tokenizer, "encode", counting)
    return seen


def test_a_10mb_word_in_state_is_refused_before_it_is_tokenised(longest_encoded):
    at = run_page("units", spec=PRE, **SEARCH_TAB, **{K.UNIT_WORD: HUGE})
    assert not at.exception, at.exception
    warnings = [plain(w.value) for w in at.warning]
    assert any(
        f"too long: this box takes one token, fewer than {limits.TOKEN_BOX_CHARS} characters" in w for w in warnings
    ), warnings
    assert longest_encoded[0] <= limits.TOKEN_BOX_CHARS
    assert at.text_input(key=K.UNIT_WORD).value == ""  # not drawn back into the box
    assert len(page_text(at)) < 20_000  # nothing of it echoed


@pytest.mark.slow
def test_a_crafted_word_past_the_widgets_max_chars_is_refused(longest_encoded):
    at = run_page("units", spec=PRE, **SEARCH_TAB)
    # Streamlit cuts a widget's value to max_chars; a value that long is refused, so the page sees it was cut
    assert at.text_input(key=K.UNIT_WORD).proto.max_chars == limits.TOKEN_BOX_CHARS
    # a websocket message can send any length whatever the browser's box allows (AppTest sends it as such)
    at.text_input(key=K.UNIT_WORD).set_value("king " * 1000).run()
    assert not at.exception, at.exception
    assert any(
        f"too long: this box takes one token, fewer than {limits.TOKEN_BOX_CHARS} characters" in plain(w.value)
        for w in at.warning
    )
    assert longest_encoded[0] <= limits.TOKEN_BOX_CHARS
    assert len(at.dataframe) == 1  # the prompt search's table only: no word table
    at.text_input(key=K.UNIT_WORD).set_value("king").run()  # the box works again after
    assert not at.warning and len(at.dataframe) == 2


def test_a_word_at_the_limit_still_runs_and_its_pieces_are_listed():
    word = "ab" * (limits.TOKEN_BOX_CHARS // 2) + "a"[: limits.TOKEN_BOX_CHARS % 2]
    word = word[: limits.TOKEN_BOX_CHARS - 1]  # the longest allowed
    at = run_page("units", spec=PRE, **SEARCH_TAB, **{K.UNIT_WORD: word})
    assert not at.exception
    assert any("is not one token" in plain(w.value) for w in at.warning)
    assert not any("too long" in plain(w.value) for w in at.warning)


@pytest.mark.slow
def test_a_huge_source_token_is_refused_before_it_is_tokenised(longest_encoded):
    at = run_page("units", spec=PRE, unit="L1H2", **{K.per_item(K.UNIT_SOURCE, "L1H2"): HUGE})
    assert not at.exception, at.exception
    assert any(
        f"too long: this box takes one token, fewer than {limits.TOKEN_BOX_CHARS} characters" in plain(w.value)
        for w in at.warning
    )
    assert longest_encoded[0] <= limits.TOKEN_BOX_CHARS
    assert len(page_text(at)) < 20_000
    key = K.per_item(K.UNIT_SOURCE, "L1H2")
    at.text_input(key=key).set_value(" the" * 2000).run()  # crafted: past what the browser's box allows
    assert not at.exception
    assert any(
        f"too long: this box takes one token, fewer than {limits.TOKEN_BOX_CHARS} characters" in plain(w.value)
        for w in at.warning
    )
    assert longest_encoded[0] <= limits.TOKEN_BOX_CHARS


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("kind", ["neuron", "head"])
def test_the_direct_effects_estimate_covers_its_measured_peak(norm, kind):
    model = GPT(PRESETS["gpt2-small"].replace(norm=norm, n_layers=2), seed=0).eval()
    unit = ix.Unit(kind, 1, 3)
    if kind == "neuron":
        _, peak = torch_peak(lambda: ix.direct_effect(model, 1, 3))
    else:
        _, peak = torch_peak(lambda: ix.head_direct_effect(model, 1, 3, 262))
    assert peak >= 4 * model.config.vocab_size  # the measure sees the [vocab] product at least
    covers(sizes.direct_effect_nbytes(model.config), peak)
    assert unit.kind == kind


def test_with_no_room_for_the_direct_effect_the_page_says_so(monkeypatch):
    tight = memory.MemoryAccountant(sizes.direct_effect_nbytes(model_service.load_model(PRE).config) - 1, wait_s=0)
    monkeypatch.setattr(memory, "accountant", lambda: tight)
    at = run_page("units", spec=PRE)
    assert not at.exception, at.exception
    assert any("the direct effect of L2N26 needs about" in plain(w.value) for w in at.warning)


@pytest.fixture
def index_dir(tmp_path, monkeypatch):
    """The folder indexes are kept in (tmp_path/indexes), on a server whose index builds are small (3,000 tokens)."""
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    small = limits.ServerLimits(index_tokens=3_000, index_mb=2048)
    monkeypatch.setattr(limits, "server_limits", lambda: small)
    return tmp_path / "indexes"


def rebuild_from_the_error(spec, first_unit: str) -> None:
    """The units page of `spec` says its index could not be read; its button rebuilds one, opened at `first_unit`."""
    at = run_page("units", spec=spec)
    assert not at.exception
    assert "could not be read" in plain(at.error[0].value)
    at.button(key=K.UNIT_BUILD).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.markdown[0].value.startswith(f"**{first_unit}")


@pytest.mark.slow
def test_an_unreadable_index_offers_a_rebuild(index_dir):
    folder = index_dir / ui.fingerprint(TINY)
    folder.mkdir(parents=True)
    (folder / ix.INDEX_JSON).write_text('{"format": "gptviz-neuron-index", "ver')  # torn mid-write
    ui.index_store().clear()  # an index of this model that another test built and this process still holds
    rebuild_from_the_error(TINY, "L1N0")
    assert ix.load_index(folder).tokens <= 3_000
    assert [p.name for p in index_dir.iterdir()] == [folder.name]  # no temporary left


@pytest.mark.slow
def test_an_index_of_the_previous_format_says_why_and_offers_a_rebuild(index_dir):
    # version 2 had no band examples: the page names the version, the command that rebuilds it, and its own button
    import json

    ui.index_store().clear()
    ui.build(TINY, 2_000, lambda done, total: None)
    folder = index_dir / ui.fingerprint(TINY)
    meta = json.loads((folder / ix.INDEX_JSON).read_text())
    meta["version"] = 2
    (folder / ix.INDEX_JSON).write_text(json.dumps(meta))
    ui.index_store().clear()
    at = run_page("units", spec=TINY)
    assert not at.exception
    error = plain(at.error[0].value)
    assert "could not be read: index format version 2; this gptviz reads version 3 (version 3 adds examples" in error
    assert "rebuild it with `python -m gptviz index" in error
    at.button(key=K.UNIT_BUILD).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert ix.load_index(folder).meta["version"] == ix.VERSION
    assert any(c.value.startswith("Band 1") for c in at.caption)  # the rebuilt index has its bands


def test_a_build_that_dies_mid_save_leaves_the_folder_readable_or_absent(index_dir, monkeypatch):
    real_save = ix.save_index

    def dies_after_the_arrays(index, folder):  # what a killed server or a full disk leaves half way
        real_save(index, folder)
        (folder / ix.INDEX_JSON).write_text('{"format": "gptviz-neu')
        raise OSError("No space left on device")

    monkeypatch.setattr(ix, "save_index", dies_after_the_arrays)
    ui.index_store().clear()
    with pytest.raises(OSError):
        ui.build(TINY, 3_000, lambda done, total: None)
    assert ui.find_index(TINY) is None  # no torn index: the page offers a build
    assert list(index_dir.iterdir()) == []


@pytest.mark.slow
def test_a_torn_shipped_index_offers_a_build_beside_it_and_is_left_as_it_is(index_dir, tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    torn = '{"format": "gptviz-neuron-index", "ver'
    (shipped / ix.INDEX_JSON).write_text(torn)
    monkeypatch.setattr(ix, "index_folder", lambda name: shipped)
    ui.index_store().clear()  # the real shipped index, loaded by other tests, is not what this model finds now
    rebuild_from_the_error(PRE, "L2N26")
    assert (shipped / ix.INDEX_JSON).read_text() == torn  # never written or removed by the app
    assert [p.name for p in index_dir.iterdir()] == [ui.fingerprint(PRE)]
    ui.index_store().clear()
