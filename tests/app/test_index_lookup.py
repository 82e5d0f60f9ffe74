"""The unit page's index lookup hashes a model's weights only when an index of the model's shape is on disk: the hash
is a pass over every weight, and most models have no index at all."""

from __future__ import annotations

import json

from gptviz import PRESETS
from gptviz import index as ix
from gptviz.app import keys as K
from gptviz.app import unit_index as ui
from gptviz.app.model_service import ModelSpec


def fake_index(folder, config, fingerprint: str) -> None:
    """An index's meta alone: what the lookup reads before it loads anything."""
    folder.mkdir(parents=True)
    meta = {"model": {"fingerprint": fingerprint}, "config": ix.config_record(config)}
    (folder / ix.INDEX_JSON).write_text(json.dumps(meta), encoding="utf-8")


def test_no_index_of_the_models_shape_means_no_hash(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    hashed = []
    real = ix.model_fingerprint
    monkeypatch.setattr(ix, "model_fingerprint", lambda model: hashed.append(model.config.name) or real(model))
    spec = ModelSpec(K.SOURCE_PRESET, "tiny", "pre", seed=57)  # a seed no other test hashed
    assert ui.find_index(spec) is None and hashed == []  # no index folder at all
    fake_index(tmp_path / "indexes" / "other-shape", PRESETS["small-4l"], "a" * 64)
    assert ui.find_index(spec) is None and hashed == []  # an index of another shape only
    fake_index(tmp_path / "indexes" / "same-shape", PRESETS["tiny"], "b" * 64)
    assert ui.find_index(spec) is None  # its weights are another model's
    assert hashed == [PRESETS["tiny"].name]  # hashed once, now that an index could be this model's


def test_an_index_of_this_model_under_a_name_of_its_own_is_found_by_its_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    spec = ModelSpec(K.SOURCE_PRESET, "tiny", "pre", seed=58)
    fake_index(tmp_path / "indexes" / "letters", PRESETS["tiny"], ui.fingerprint(spec))
    fake_index(tmp_path / "indexes" / "same-shape-other-weights", PRESETS["tiny"], "c" * 64)
    assert ui.your_index(spec, ui.indexes_of_this_shape(spec)) == tmp_path / "indexes" / "letters"


def test_an_unreadable_meta_may_be_this_models_so_it_is_hashed(tmp_path, monkeypatch):
    monkeypatch.setenv("GPTVIZ_INDEX_DIR", str(tmp_path / "indexes"))
    spec = ModelSpec(K.SOURCE_PRESET, "tiny", "pre", seed=59)
    torn = tmp_path / "indexes" / ui.fingerprint(spec)
    torn.mkdir(parents=True)
    (torn / ix.INDEX_JSON).write_text('{"format": "gptviz-neuron-index", "ver')
    assert ui.indexes_of_this_shape(spec) == [(ui.indexes_on_disk()[0][0], torn, None)]
