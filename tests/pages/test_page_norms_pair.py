"""Issue 59, item 3: with Hugging Face's GPT-2 small and GPT-1 both on disk (here tiny ones, made with transformers,
in a model folder the operator lists), the Pre-norm vs post-norm page offers them as a pair beside the bundled twins:
each reads the prompt through its own tokenizer, every twins view draws them, and the page says what else differs.
Without them, the page is as it was."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gptviz import load_pretrained
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.app.services import norms_pair
from gptviz.model.generate import generate
from gptviz.model.gpt1_tokenizer import OpenAIGPTTokenizer
from gptviz.model.tokenizer import encode
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits
from tests.support import pagetest
from tests.support.gpt1 import gpt1_tokenizer_files
from tests.support.norms_page import TINY, array
from tests.support.small_configs import hf_gpt1_config, hf_gpt2_config

PAGE = "app_pages/norms.py"
PROMPT = "ROMEO. But soft! what light through yonder window breaks? It is the east, and Juliet is the sun!"


def hf_pair(folder, gpt1_tokenizer: bool = True) -> None:
    """Tiny GPT-2 and GPT-1 in Hugging Face's layout, in folders named as their Hub ids (same depth, heads, width)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(hf_gpt2_config(50257, 64))
    gpt2.save_pretrained(folder / "gpt2")
    if gpt1_tokenizer:
        gpt1_tokenizer_files(folder / "openai-gpt")
        vocab = OpenAIGPTTokenizer.from_folder(folder / "openai-gpt").n_vocab
    else:
        vocab = 300
    gpt1 = transformers.OpenAIGPTLMHeadModel(hf_gpt1_config(vocab, 40))
    gpt1.save_pretrained(folder / "openai-gpt")


@pytest.fixture
def model_dirs(tmp_path, monkeypatch):
    """An operator's model folder (empty until a test fills it), read by the page and the loaders."""
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")})
    (tmp_path / "ops").mkdir()
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    monkeypatch.setattr(norms_pair, "server_limits", lambda: limits)
    yield tmp_path / "ops"
    model_service.model_store().clear()


def open_pair_page() -> pagetest.AppTest:
    at = pagetest.open_page(PAGE, **TINY, prompt=PROMPT, twins_stem=norms_pair.HUB_STEM)
    assert not at.exception and not at.error, (at.exception, [e.value for e in at.error])
    return at


@pytest.mark.slow
@pytest.mark.hf
def test_gpt2_and_gpt1_on_disk_are_offered_as_a_pair_each_on_its_own_tokens(model_dirs):
    hf_pair(model_dirs)
    at = open_pair_page()
    assert at.selectbox(key=K.TWINS_STEM).value == norms_pair.HUB_STEM
    gpt1_tok = OpenAIGPTTokenizer.from_folder(model_dirs / "openai-gpt")
    ids = {"pre": encode(PROMPT), "post": gpt1_tok.encode(PROMPT)}
    assert len(ids["pre"]) != len(ids["post"])  # two tokenizers: other tokens, other lengths
    figs = pagetest.figures(at)
    maps = {
        norm: next(f for f in figs if pagetest.title_of(f).startswith(start))
        for norm, start in (("pre", "GPT-2 L"), ("post", "GPT-1 L"))
    }
    for norm, fig in maps.items():  # each map over its own model's tokens
        assert len(fig["data"][0]["x"]) == len(ids[norm])
    # each model's bars are the softmax of its own logits on its own ids
    bars = next(f for f in figs if pagetest.title_of(f).startswith("Next token after"))
    loaded = {"pre": load_pretrained(str(model_dirs / "gpt2")), "post": load_pretrained(str(model_dirs / "openai-gpt"))}
    for trace, norm in zip(bars["data"], ("pre", "post"), strict=True):
        with torch.no_grad():
            probs = torch.softmax(loaded[norm](torch.tensor([ids[norm]]))[0, -1], -1)
        np.testing.assert_allclose(array(trace["x"]).astype(float), probs.topk(5).values.numpy(), rtol=1e-4)
        assert trace["name"] == {"pre": "GPT-2 small (pre-norm)", "post": "GPT-1 (post-norm)"}[norm]
    captions = " ".join(c.value for c in at.caption)
    for confound in ("**Data**", "BooksCorpus", "WebText", "**Tokenizer**", "**Training length**"):
        assert confound in captions
    assert "The models guess" in at.markdown[0].value or "Both models guess" in at.markdown[0].value
    # the last tab: matched heads over each model's tokens, the next token where each read the same text, generation
    assert any("reads its own tokens" in c.value for c in at.caption)
    assert any("no training history" in i.value for i in at.info)
    texts = [c.value for c in at.code if c.language == "plaintext"]
    out = generate(loaded["post"], ids["post"], 40, 0.8, 40, None, 0)  # the page's defaults, GPT-1's own tokens
    assert len(texts) == 2 and texts[1] == gpt1_tok.decode(out[len(ids["post"]) :])


@pytest.mark.slow
@pytest.mark.hf
def test_a_gpt1_folder_without_its_tokenizer_says_what_reading_gpt2s_ids_does(model_dirs):
    hf_pair(model_dirs, gpt1_tokenizer=False)
    at = open_pair_page()
    assert any("GPT-1 reads GPT-2's token ids here" in w.value for w in at.warning)
    assert pagetest.figure(at, "GPT-1 L")["data"][0]["x"] == pagetest.figure(at, "GPT-2 L")["data"][0]["x"]


@pytest.mark.slow
def test_without_them_nothing_changes(model_dirs):
    assert norms_pair.hub_pair() is None  # nothing in the model folder, nothing in the (test's empty) Hub cache
    at = pagetest.open_page(PAGE, **TINY)
    assert not at.exception
    assert not [s for s in at.selectbox if s.key == K.TWINS_STEM]  # one pair: no picker, as before
    (model_dirs / "gpt2").mkdir()
    (model_dirs / "gpt2" / "config.json").write_text(
        '{"model_type": "gpt2", "vocab_size": 10, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 2}'
    )
    assert norms_pair.hub_pair() is None  # GPT-2 alone is no pair


def cache_repo(hub_cache, repo_id: str, folder) -> None:
    """A Hub repo in the Hugging Face cache's layout (blobs, a snapshot of links, refs/main), from a folder."""
    import os
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = hub_cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    for file in folder.iterdir():
        blob = repo / "blobs" / f"blob-{file.name}"
        shutil.copy(file, blob)
        (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))


@pytest.mark.slow
@pytest.mark.hf
def test_the_pair_is_found_in_the_hugging_face_cache_by_hub_id(tmp_path, hub_cache):
    hf_pair(tmp_path / "made")
    cache_repo(hub_cache, "gpt2", tmp_path / "made" / "gpt2")
    assert norms_pair.hub_pair() is None  # GPT-2 alone
    cache_repo(hub_cache, "openai-community/openai-gpt", tmp_path / "made" / "openai-gpt")
    pair = norms_pair.hub_pair()
    assert {n: s.name for n, s in pair.specs.items()} == {"pre": "gpt2", "post": "openai-community/openai-gpt"}
    assert pair.codecs["post"].name == "GPT-1's own BPE" and not pair.same_tokens and not pair.bundled
    try:
        assert model_service.load_model(pair.specs["post"]).config.final_norm is False  # loaded offline, by its Hub id
    finally:
        model_service.model_store().clear()
