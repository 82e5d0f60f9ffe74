"""The app's "Folder or Hub id" field takes the new checkpoint files inside the server's model folders (and nothing
outside them): a nanoGPT ckpt.pt shows its attention maps and its parameter count; a Raschka model.pth takes its
head count from the book's config dict saved beside it as config.json."""

from __future__ import annotations

import json

import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.params import total_params
from gptviz.model.weights import CheckpointError
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits
from gptviz.serve.model_access import FOLDER_REFUSED, load_allowed
from tests.reference import nanogpt as nanogpt_ref
from tests.reference import raschka as raschka_ref
from tests.support.small_configs import raschka_config


def nanogpt_ckpt(folder, vocab: int = 50304):
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    ref = nanogpt_ref.GPT(
        nanogpt_ref.GPTConfig(block_size=64, vocab_size=vocab, n_layer=2, n_head=4, n_embd=32, bias=False)
    )
    nanogpt_ref.save_ckpt(ref, folder / "ckpt.pt")
    return ref, folder / "ckpt.pt"


@pytest.mark.slow
def test_visitors_load_checkpoint_files_only_inside_the_allowed_roots(tmp_path):
    allowed, outside = tmp_path / "models", tmp_path / "elsewhere"
    _, inside = nanogpt_ckpt(allowed / "nano", vocab=101)
    nanogpt_ckpt(outside / "nano", vocab=101)
    (allowed / "notes.txt").write_text("not a model")
    (allowed / "link.pt").symlink_to(outside / "nano" / "ckpt.pt")
    roots = [allowed]
    assert load_allowed(str(inside), roots=roots).config.n_heads == 4
    assert load_allowed(str(inside.parent), roots=roots).config.vocab_size == 101
    for name in (
        str(outside / "nano" / "ckpt.pt"),
        str(outside / "nano"),
        str(allowed / "notes.txt"),
        str(allowed / "link.pt"),
        str(allowed / "missing.pt"),
        str(allowed),
    ):
        with pytest.raises(CheckpointError) as info:
            load_allowed(name, roots=roots)
        assert str(info.value) == FOLDER_REFUSED, name


@pytest.mark.slow
def test_raschka_head_count_from_the_books_config_dict_beside_the_file(tmp_path):
    cfg = raschka_config()
    torch.manual_seed(1)
    ref = raschka_ref.GPTModel(cfg).eval()
    folder = tmp_path / "models" / "book"
    folder.mkdir(parents=True)
    torch.save(ref.state_dict(), folder / "model.pth")
    (folder / "config.json").write_text(json.dumps(cfg))
    for name in (folder, folder / "model.pth"):
        model = load_allowed(str(name), roots=[tmp_path / "models"])
        ids = torch.arange(10)[None]
        with torch.no_grad():
            torch.testing.assert_close(model(ids), ref(ids), atol=1e-4, rtol=1e-4)
    cfg["n_heads"] = "four"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="n_heads must be a whole number"):
        load_allowed(str(folder), roots=[tmp_path / "models"])


@pytest.mark.slow
def test_a_nanogpt_checkpoint_in_the_model_folder_shows_its_attention_and_parameters(tmp_path, monkeypatch):
    from gptviz import capture
    from gptviz.model.tokenizer import encode
    from tests.support.pagetest import attention_map, run_page

    _, path = nanogpt_ckpt(tmp_path / "ops" / "nano")
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    spec = model_service.ModelSpec(K.SOURCE_PRETRAINED, str(path), "pre", 0)
    try:
        model = model_service.load_model(spec)
        assert (model.config.vocab_size, model.config.bias) == (50257, False)
        prompt = "ROMEO: But soft, what light"
        at = run_page("attention", prompt, spec)
        assert not at.exception and not at.error, (at.exception, at.error)
        data, drawn = attention_map(at)  # [layers, heads + mean, rows, keys]: the checkpoint's own patterns
        _, cache = capture(model, [encode(prompt)], ["blocks.0.attn.hook_pattern"])
        assert drawn.shape[:2] == (2, 5) and data["layers"] == [0, 1]
        assert abs(drawn[0, :4] - cache["blocks.0.attn.hook_pattern"][0].numpy()).max() < 0.01
        at = run_page("parameters", "ROMEO", spec)
        assert not at.exception and not at.error
        total = total_params(model.config)
        assert ("Parameters", f"{total:,}") in [(m.label, m.value) for m in at.metric]
        assert "No biases (nanoGPT's bias=False)" in " ".join(m.value for m in at.markdown)
    finally:
        model_service.model_store().clear()


def test_the_wiring_a_checkpoint_was_trained_with_is_read_without_loading_it(tmp_path):
    from gptviz.model.weights import save_checkpoint
    from gptviz.serve.model_access import trained_norm
    from tests.support.models import build

    roots = [tmp_path / "models"]
    save_checkpoint(build(norm="post"), roots[0] / "gpt1-like")
    nanogpt_ckpt(roots[0] / "nano", vocab=101)
    nanogpt_ckpt(tmp_path / "outside", vocab=101)
    assert trained_norm(str(roots[0] / "gpt1-like"), roots) == "post"
    assert trained_norm(str(roots[0] / "nano" / "ckpt.pt"), roots) == "pre"
    assert trained_norm(str(tmp_path / "outside" / "ckpt.pt"), roots) is None  # outside: not even read
    assert trained_norm("gpt2", roots) is None and trained_norm(str(roots[0] / "missing"), roots) is None


@pytest.mark.slow
def test_the_sidebar_warns_when_the_wiring_chosen_is_not_the_checkpoints(tmp_path, monkeypatch):
    from gptviz.app import settings as S
    from gptviz.model.weights import save_checkpoint
    from tests.support.models import build
    from tests.support.pagetest import open_app

    save_checkpoint(build(norm="post"), tmp_path / "ops" / "gpt1-like")
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    try:
        for norm, warned in (("pre", True), ("post", False)):
            at = open_app(
                **{
                    K.MODEL_SOURCE: K.SOURCE_PRETRAINED,
                    S.HF_NAME.key: str(tmp_path / "ops" / "gpt1-like"),
                    S.NORM.key: norm,
                }
            )
            assert not at.exception
            warnings = " ".join(w.value for w in at.sidebar.warning)
            assert ("This checkpoint was trained post-norm" in warnings) == warned, warnings
            assert "GPT-2's weights were trained pre-norm" not in warnings
    finally:
        model_service.model_store().clear()
