"""A visitor's Hub id (sidebar "GPT-2 weights (folder or Hub id)") is fetched only after checks, outside the build
lock, and nothing is left on disk when it fails. A stand-in Hub (huggingface_hub's metadata and download calls
replaced) serves the files: a 2 GB repo was written in full and kept, and held up another visitor's model 38 s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model import hub as hub_downloads
from gptviz.model.weights import CheckpointError, save_checkpoint
from tests.support.models import SMALL, build


class StandInHub:
    """Repos by id: {file name: bytes}; `stated` overrides the sizes the metadata states."""

    def __init__(self, tmp_path: Path):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.stated: dict[tuple[str, str], int | None] = {}
        self.downloads: list[tuple[str, str]] = []
        self.lock_held_during_download: list[bool] = []
        self.tmp = tmp_path

    def add(self, repo_id: str, model=None, config: dict | None = None, weights_bytes: bytes | None = None):
        folder = save_checkpoint(model or build(seed=5), self.tmp / "src" / repo_id.replace("/", "_"))
        files = {name: (folder / name).read_bytes() for name in ("config.json", "model.safetensors")}
        if config is not None:
            files["config.json"] = json.dumps(config).encode()
        if weights_bytes is not None:
            files["model.safetensors"] = weights_bytes
        self.repos[repo_id] = files

    def model_info(self, repo_id, files_metadata=False):
        files = self.repos[repo_id]
        return SimpleNamespace(
            siblings=[
                SimpleNamespace(rfilename=name, size=self.stated.get((repo_id, name), len(data)))
                for name, data in files.items()
            ]
        )

    def hf_hub_download(self, repo_id, filename, local_dir):
        self.downloads.append((repo_id, filename))
        self.lock_held_during_download.append(model_service._BUILD_LOCK.locked())
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / filename).write_bytes(self.repos[repo_id][filename])
        return str(Path(local_dir) / filename)


@pytest.fixture
def hub(tmp_path, monkeypatch):
    import huggingface_hub

    stand_in = StandInHub(tmp_path)
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "model_info",
        lambda self, repo_id, files_metadata=False: stand_in.model_info(repo_id, files_metadata),
    )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", stand_in.hf_hub_download)
    monkeypatch.setattr(hub_downloads, "VISITOR_DOWNLOADS", tmp_path / "downloads")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))  # nothing cached: every id is fetched
    return stand_in


def spec(repo_id: str) -> model_service.ModelSpec:
    return model_service.ModelSpec(K.SOURCE_PRETRAINED, repo_id, "pre")


def test_a_checked_download_loads_outside_the_build_lock_and_is_kept(hub):
    hub.add("someone/tiny")
    model = model_service.load_model(spec("someone/tiny"))
    assert model.config.d_model == SMALL.d_model
    assert hub.downloads == [("someone/tiny", "config.json"), ("someone/tiny", "model.safetensors")]
    assert hub.lock_held_during_download == [False, False]  # another visitor's model is never held up
    model_service.model_store().clear()
    model_service.load_model(spec("someone/tiny"))  # from the kept folder: no second download
    assert len(hub.downloads) == 2


def test_a_repo_past_the_download_budget_is_refused_before_any_download(hub, monkeypatch):
    hub.add("someone/huge")
    hub.stated[("someone/huge", "model.safetensors")] = 2 * 2**30
    monkeypatch.setattr(hub_downloads, "hub_download_budget", lambda: 500 * 2**20)
    with pytest.raises(CheckpointError, match=r"would download 2,048 MiB; this server downloads at most 500 MiB"):
        model_service.load_model(spec("someone/huge"))
    assert hub.downloads == [] and not (hub_downloads.VISITOR_DOWNLOADS / "models--someone--huge").exists()


def test_unstated_sizes_or_a_config_past_the_caps_stop_before_the_weights(hub):
    hub.add("someone/unsized")
    hub.stated[("someone/unsized", "model.safetensors")] = None
    with pytest.raises(CheckpointError, match="does not state its files' sizes"):
        model_service.load_model(spec("someone/unsized"))
    hub.add(
        "someone/deep",
        config={
            "model_type": "gpt2",
            "vocab_size": 50,
            "n_positions": 16,
            "n_embd": 32,
            "n_layer": 100_000,
            "n_head": 4,
        },
    )
    with pytest.raises(CheckpointError, match="layers"):
        model_service.load_model(spec("someone/deep"))
    assert hub.downloads == [("someone/deep", "config.json")]  # the weights never came
    assert not (hub_downloads.VISITOR_DOWNLOADS / "models--someone--deep").exists()


def test_a_download_that_does_not_load_is_removed(hub):
    hub.add("someone/broken", weights_bytes=b"not a safetensors file" * 10)
    with pytest.raises(CheckpointError) as info:
        model_service.load_model(spec("someone/broken"))
    assert "/" not in str(info.value).replace("someone/broken", "")  # no server path in the message
    assert not (hub_downloads.VISITOR_DOWNLOADS / "models--someone--broken").exists()


def test_more_bytes_than_stated_are_refused_and_removed(hub):
    hub.add("someone/liar")
    hub.stated[("someone/liar", "model.safetensors")] = 10
    with pytest.raises(CheckpointError, match="sent more than its metadata stated"):
        model_service.load_model(spec("someone/liar"))
    assert not (hub_downloads.VISITOR_DOWNLOADS / "models--someone--liar").exists()
    shutil.rmtree(hub.tmp / "src")


# ---- GPT-2 small in one click (issue 32) -----------------------------------------------------------------------


def hub_button(at):
    return next(b for b in at.button if b.label.startswith("GPT-2 small from the Hub"))


@pytest.fixture
def empty_hf_cache(tmp_path, monkeypatch):
    """No Hub copy anywhere on this machine (the cache and the visitors' downloads both empty) and none loaded (an
    earlier test's stand-in gpt2 stays in the server's model store)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setattr(hub_downloads, "VISITOR_DOWNLOADS", tmp_path / "downloads")
    model_service.model_store().clear()


@pytest.mark.slow
def test_gpt2_small_is_one_click_that_states_its_download_and_says_plainly_when_the_hub_is_out_of_reach(
    empty_hf_cache, monkeypatch
):
    from tests.support.pagetest import open_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine cannot reach the Hub
    at = open_app()
    button = hub_button(at)
    assert button.label == "GPT-2 small from the Hub (a 548 MB download)"
    button.click().run()
    assert not at.exception
    assert (at.session_state[K.MODEL_SOURCE], at.session_state[K.HF_NAME]) == (K.SOURCE_PRETRAINED, "gpt2")
    error = " ".join(e.value for e in at.error)
    assert "Could not load gpt2" in error and "the Hub cannot be reached" in error
    assert "Bundled models that work offline" in error  # and what does work
    assert not [b for b in at.button if b.label.startswith("GPT-2 small from the Hub")]  # chosen: no second offer


@pytest.mark.slow
def test_gpt2_small_from_the_stand_in_hub_loads_in_one_click_and_is_then_on_the_server(hub, empty_hf_cache):
    from tests.support.pagetest import open_app

    hub.add("gpt2")
    at = open_app()
    hub_button(at).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert hub.downloads == [("gpt2", "config.json"), ("gpt2", "model.safetensors")]
    assert at.session_state[K.MODEL_SPEC].name == "gpt2"
    at.session_state[K.MODEL_SOURCE] = K.SOURCE_PRESET  # back to a preset: the offer now downloads nothing
    at.run()
    assert hub_button(at).label == "GPT-2 small from the Hub (on this server already)"


@pytest.mark.slow
def test_a_failed_hub_click_offers_the_way_back_to_the_model_and_view_before(empty_hf_cache, monkeypatch):
    """Offline, the Hub click left the visitor on a page with no model; "Back to ..." under the message returns to
    the model they had, on the view they had (layer, head, scale: widgets the failed runs did not draw), with the
    prompt as it is now."""
    from tests.support.pagetest import attention_map, open_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    prompt = "the cat sat on the mat and the cat sat"
    at = open_app(prompt=prompt)
    at.selectbox(key=K.ATT_LAYER).set_value(1).run()
    at.selectbox(key=K.ATT_HEAD).set_value(2).run()
    at.selectbox(key=K.ATT_SCALE).set_value("linear").run()
    before = at.session_state[K.MODEL_SPEC]
    hub_button(at).click().run()
    assert "the Hub cannot be reached" in " ".join(e.value for e in at.error)
    assert not [s for s in at.selectbox if s.key == K.ATT_LAYER]  # the page stopped: no model
    back = at.button(key=K.MODEL_BACK)
    assert back.label.replace("\\", "") == "Back to tiny (pre-norm, random init, seed 0)"  # Markdown-escaped
    assert "\\(" in back.label  # (a model name is a visitor's text)
    at.run()  # another run on the failed model
    at.button(key=K.MODEL_BACK).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.session_state[K.MODEL_SPEC] == before and at.session_state[K.MODEL_SOURCE] == K.SOURCE_PRESET
    assert at.session_state[K.PROMPT] == prompt
    assert K.HF_NAME not in at.session_state  # unset before: no Hub id left in the link
    assert (at.session_state[K.ATT_LAYER], at.session_state[K.ATT_HEAD], at.session_state[K.ATT_SCALE]) == (
        1,
        2,
        "linear",
    )
    data, _ = attention_map(at)  # the heatmap, drawn again, on that head
    assert (data["layer"], data["head"]) == (1, 2)
    assert not [b for b in at.button if b.key == K.MODEL_BACK]  # back: no second offer
    assert hub_button(at)  # and the Hub one click away again


@pytest.mark.slow
def test_the_way_back_without_an_earlier_model_is_the_bundled_one(empty_hf_cache, monkeypatch):
    """A link that opens on the Hub model offline (no click, so no model before it): back to the bundled model."""
    from gptviz.model.weights import bundled_models
    from tests.support.pagetest import open_app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = open_app(model_source=K.SOURCE_PRETRAINED, hf_name="gpt2")
    assert "the Hub cannot be reached" in " ".join(e.value for e in at.error)
    at.button(key=K.MODEL_BACK).click().run()
    assert not at.exception and not at.error
    assert at.session_state[K.MODEL_SPEC].source == K.SOURCE_BUNDLED
    assert at.session_state[K.MODEL_SPEC].name in bundled_models()
