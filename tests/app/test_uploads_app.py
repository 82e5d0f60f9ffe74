"""The sidebar's upload and head count (issue 59): an uploaded file becomes the session's model (another session is
refused it), a refused file is one sentence under the uploader, a Raschka GPTModel file asks for its head count (in
the folder field, where the count travels in links with the folder, and in an upload), and an operator can turn
uploads off."""

from __future__ import annotations

import pytest
import torch
from streamlit.testing.v1 import AppTest

from gptviz.app import keys as K
from gptviz.app import links, model_service
from gptviz.app import settings as S
from gptviz.serve import model_access
from gptviz.serve.limits import ServerLimits
from tests.reference import raschka as raschka_ref
from tests.support.models import nanogpt_bytes
from tests.support.small_configs import raschka_config

RASCHKA = raschka_config()


def raschka_pth(path):
    torch.manual_seed(1)
    ref = raschka_ref.GPTModel(RASCHKA).eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ref.state_dict(), path)
    return ref


def upload_script(data: bytes, name: str) -> None:
    """The sidebar after a file went through the uploader's callback (AppTest cannot upload a file itself)."""
    import io as io_

    import streamlit as st

    from gptviz.app import keys, model_files, sidebar

    class File(io_.BytesIO):
        pass

    if "_sent" not in st.session_state:
        st.session_state["_sent"] = True
        file = File(data)
        file.name, file.size = name, len(data)
        st.session_state["_fake_uploader"] = file
        st.session_state[keys.MODEL_SOURCE] = keys.SOURCE_UPLOAD
        model_files._take_upload("_fake_uploader")
    sidebar.sidebar()


def uploaded(data: bytes, name: str, **state) -> AppTest:
    at = AppTest.from_function(upload_script, args=(data, name), default_timeout=120)
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


@pytest.mark.slow
def test_an_upload_becomes_this_sessions_model_and_no_one_elses(monkeypatch):
    from tests.support.pagetest import run_page

    at = uploaded(nanogpt_bytes(), "ckpt.pt")
    assert not at.exception and not at.error, (at.exception, at.error)
    spec = at.session_state[K.MODEL_SPEC]
    assert spec.source == K.SOURCE_UPLOAD and spec.name.endswith("/ckpt.pt") and spec.label().startswith("ckpt.pt")
    caption = " ".join(c.value for c in at.sidebar.caption).replace("\\", "")
    assert "ckpt.pt: 0.1 MB, 2 layers, d_model 32" in caption and "removes it when the tab closes" in caption
    assert S.MODEL_SOURCE.link not in links.link_params(at.session_state)  # an upload never travels in a link
    try:
        with monkeypatch.context() as m:  # another session (AppTest gives every run one id), the same spec
            m.setattr(model_service, "session_id", lambda: "another visitor")
            other = run_page("attention", "ROMEO", spec)  # refused, in one sentence
        assert "that upload is gone" in other.error[0].value and "/tmp" not in other.error[0].value
        at.button(key=K.UPLOAD_REMOVE).click().run()
        assert K.UPLOAD not in at.session_state and at.session_state[K.MODEL_SPEC] is None
    finally:
        model_service.model_store().clear()


@pytest.mark.slow
def test_a_refused_upload_is_one_sentence_under_the_uploader():
    at = uploaded(b"PK\x03\x04 not really a zip", "ckpt.pt")
    assert not at.exception
    assert [e.value.replace("\\", "") for e in at.sidebar.error] == [
        "ckpt.pt was not loaded: ckpt.pt is corrupt or not a PyTorch file: PytorchStreamReader failed reading zip "
        "archive: not a ZIP archive"
    ]
    assert at.session_state[K.MODEL_SPEC] is None and K.UPLOAD not in at.session_state
    at = uploaded(b"x" * 100, "notes.txt")
    assert "gptviz reads uploads ending in .pt, .pth, .bin, .ckpt" in at.sidebar.error[0].value.replace("\\", "")


@pytest.mark.slow
def test_an_uploaded_raschka_file_asks_for_its_head_count(tmp_path):
    raschka_pth(tmp_path / "model.pth")
    at = uploaded((tmp_path / "model.pth").read_bytes(), "model.pth")
    assert "do not record how many attention heads" in at.sidebar.info[0].value
    assert at.session_state[K.MODEL_SPEC] is None
    at.number_input(key=S.UPLOAD_N_HEAD.key).set_value(4).run()
    assert at.session_state[K.MODEL_SPEC].n_head == 4


@pytest.mark.slow
def test_the_folder_field_asks_a_raschka_files_head_count_and_the_link_carries_it(tmp_path, monkeypatch):
    from tests.support.pagetest import open_app

    ref = raschka_pth(tmp_path / "ops" / "book" / "model.pth")
    limits = ServerLimits.from_env({"GPTVIZ_MODEL_DIRS": str(tmp_path / "ops")})
    monkeypatch.setattr(model_access, "server_limits", lambda: limits)
    path = str(tmp_path / "ops" / "book" / "model.pth")
    at = open_app(**{K.MODEL_SOURCE: K.SOURCE_PRETRAINED, S.HF_NAME.key: path})
    assert not at.exception and at.session_state[K.MODEL_SPEC] is None
    assert "do not record how many attention heads" in " ".join(i.value for i in at.sidebar.info)
    assert S.N_HEAD.link not in links.link_params(at.session_state)
    at.number_input(key=S.N_HEAD.key).set_value(4).run()
    spec = at.session_state[K.MODEL_SPEC]
    try:
        assert spec.n_head == 4 and not at.error
        ids = torch.arange(10)[None]
        with torch.no_grad():
            torch.testing.assert_close(model_service.load_model(spec)(ids), ref(ids), atol=1e-4, rtol=1e-4)
        from gptviz.app.reproduce.core import model_lines

        assert f"load_pretrained({path!r}, norm='pre', n_head=4)" in model_lines(spec)  # Copy as Python
        params = links.link_params(at.session_state)
        assert (params[S.N_HEAD.link], params[S.HF_NAME.link]) == ("4", path)
        state = {}
        assert links.apply_link(state, params) == []
        assert open_app(**state).session_state[K.MODEL_SPEC] == spec  # the link opens the same model
        at = open_app(**{K.MODEL_SOURCE: K.SOURCE_PRESET, S.N_HEAD.key: 4})  # no folder: the count does not travel
        assert S.N_HEAD.link not in links.link_params(at.session_state)
    finally:
        model_service.model_store().clear()


@pytest.mark.slow
def test_an_operator_can_turn_uploads_off(monkeypatch):
    import gptviz.app.sidebar as sidebar
    from tests.support.pagetest import open_app

    monkeypatch.setattr(sidebar, "server_limits", lambda: ServerLimits(upload_mb=0))
    at = open_app()
    assert K.SOURCE_UPLOAD not in at.selectbox(key=K.MODEL_SOURCE).options  # so no uploader is ever drawn
    assert not at.get("file_uploader")
