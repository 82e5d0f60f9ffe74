"""Visitors' uploads (issue 59): a checkpoint file is checked from its bytes before anything is written (size, name,
format, load limits; no tensor allocated), stored in a private folder of its session's, loadable by that session only,
and removed once the session is gone (swept on the next upload and by a timer)."""

from __future__ import annotations

import io
import time

import pytest
import torch

from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.weights import CheckpointError
from gptviz.serve import uploads
from gptviz.serve.limits import LimitError, ServerLimits
from gptviz.serve.uploads import GONE, UploadFolders, stored_name
from tests.reference import llmc as llmc_ref
from tests.reference import raschka as raschka_ref
from tests.support.models import nanogpt_bytes
from tests.support.small_configs import raschka_config

MB = 2**20


def raschka_bytes() -> bytes:
    cfg = raschka_config()
    torch.manual_seed(1)
    buf = io.BytesIO()
    torch.save(raschka_ref.GPTModel(cfg).state_dict(), buf)
    return buf.getvalue()


def registry(tmp_path, alive=lambda s: True, **kw) -> UploadFolders:
    return UploadFolders(alive, parent=str(tmp_path), **kw)


def save(folders: UploadFolders, session: str, data: bytes, name: str = "ckpt.pt", cap: int = 10 * MB, n_head=None):
    return folders.save(session, io.BytesIO(data), len(data), name, cap, n_head)


def test_an_upload_is_checked_stored_and_found_by_its_own_session_only(tmp_path):
    folders = registry(tmp_path)
    up = save(folders, "alice", nanogpt_bytes())
    assert (up.filename, up.config.n_layers, up.config.vocab_size, up.needs_n_head) == ("ckpt.pt", 2, 101, False)
    path = folders.path("alice", up.name)
    assert path.read_bytes() == nanogpt_bytes() and path.name == "ckpt.pt"
    assert (path.parent.parent.stat().st_mode & 0o777) == 0o700  # the session's folder: the server's user only
    for session, name in (
        ("bob", up.name),
        (None, up.name),
        ("alice", "../" + up.name),
        ("alice", up.name.split("/")[0] + "/../../x.pt"),
        ("alice", "/etc/passwd"),
    ):
        with pytest.raises(CheckpointError) as info:
            folders.path(session, name)
        assert str(info.value) == GONE and str(tmp_path) not in str(info.value)
    second = save(folders, "alice", nanogpt_bytes(vocab=99), "other.pt")  # replaces the first
    assert folders.path("alice", second.name).is_file()
    with pytest.raises(CheckpointError):
        folders.path("alice", up.name)


@pytest.mark.parametrize(
    "data, name, cap, error, message",
    [
        (b"\x00" * 100, "ckpt.pt", 50, LimitError, "up to 0 MB (GPTVIZ_UPLOAD_MB)"),
        (b"x", "ckpt.pt", 0, LimitError, "takes no uploads"),
        (b"x", "model.safetensors", MB, CheckpointError, "gptviz reads uploads ending in .pt, .pth, .bin, .ckpt"),
        (b"not a pickle at all", "ckpt.pt", MB, CheckpointError, "ckpt.pt is corrupt or not a PyTorch file"),
    ],
)
def test_a_refused_file_gets_one_sentence_and_nothing_is_written(tmp_path, data, name, cap, error, message):
    folders = registry(tmp_path)
    with pytest.raises(error) as info:
        save(folders, "alice", data, name, cap)
    assert message in str(info.value) and "Traceback" not in str(info.value) and str(tmp_path) not in str(info.value)
    assert folders.sessions() == [] and all(not p.is_file() for p in tmp_path.rglob("*"))


class CreatesAFile:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_pickle_that_would_run_code_is_refused_from_its_bytes_and_runs_nothing(tmp_path):
    marker, buf = tmp_path / "created", io.BytesIO()
    torch.save({"model": {}, "model_args": CreatesAFile(tmp_path / "created")}, buf)
    with pytest.raises(CheckpointError, match=r"never pickled code \(Unsupported global: GLOBAL io.open\)"):
        save(registry(tmp_path / "uploads"), "alice", buf.getvalue())
    assert not marker.exists()


def test_the_load_limits_are_checked_from_the_bytes_before_any_tensor(tmp_path, monkeypatch):
    """A file past the load limits is refused before it is written; the structure is read on the meta device."""
    from gptviz.model.formats.base import read_pickle_meta

    assert all(t.is_meta for t in read_pickle_meta(io.BytesIO(nanogpt_bytes()), "ckpt.pt")["model"].values())
    import gptviz.model.checkpoint as checkpoint
    from gptviz.model.load_limits import LoadLimits

    monkeypatch.setattr(checkpoint, "load_limits", lambda: LoadLimits(max_params=10_000))
    with pytest.raises(CheckpointError, match="GPTVIZ_MAX_LOAD_PARAMS"):
        save(registry(tmp_path), "alice", nanogpt_bytes())
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_raschka_and_llmc_files_are_read_from_their_bytes(tmp_path):
    folders = registry(tmp_path)
    up = save(folders, "alice", raschka_bytes(), "model.pth")
    assert up.needs_n_head and up.config.d_model == 32
    assert not save(folders, "alice", raschka_bytes(), "model.pth", n_head=4).needs_n_head
    ref = llmc_ref.GPT(llmc_ref.GPTConfig(block_size=16, vocab_size=101, n_layer=1, n_head=2, n_embd=16))
    llmc_ref.write_model(ref, tmp_path / "m.bin")
    data = (tmp_path / "m.bin").read_bytes()
    assert save(folders, "alice", data, "m.bin").config.n_heads == 2
    with pytest.raises(CheckpointError, match="holds 1,100 bytes; its header describes"):
        save(folders, "alice", data[:1100], "m.bin")


def test_names_are_stored_plain():
    assert stored_name("ckpt.pt") == "ckpt.pt" and stored_name("C:\\runs\\MODEL.PTH") == "MODEL.pth"
    assert stored_name("../../etc/x.pt") == "x.pt" and stored_name("a b$.bin") == "upload.bin"
    assert stored_name(".hidden.pt") == "upload.pt"


def test_a_closed_sessions_folder_is_swept_on_the_next_upload_and_by_the_timer(tmp_path):
    connected = {"alice", "bob"}
    removed = []
    folders = registry(tmp_path, alive=lambda s: s in connected, on_removed=removed.extend, sweep_s=0.05)
    alice = save(folders, "alice", nanogpt_bytes())
    folder = folders.folder("alice")
    connected.discard("alice")  # alice closed her tab
    save(folders, "bob", nanogpt_bytes())  # the next upload sweeps
    assert not folder.exists() and folders.sessions() == ["bob"]
    assert removed == [alice.name.split("/")[0] + "/"]
    bob = folders.folder("bob")
    connected.discard("bob")  # no further upload: the timer sweeps
    deadline = time.monotonic() + 5
    while bob.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not bob.exists() and folders.sessions() == []


def test_the_server_keeps_at_most_its_number_of_uploads(tmp_path):
    folders = registry(tmp_path, kept=1)
    save(folders, "alice", nanogpt_bytes())
    with pytest.raises(LimitError, match="holds 1 visitors' uploads already"):
        save(folders, "bob", nanogpt_bytes())
    save(folders, "alice", nanogpt_bytes())  # a session replacing its own is not a new one


@pytest.mark.slow
def test_a_visitor_never_loads_another_visitors_upload_even_once_it_is_cached(tmp_path, monkeypatch):
    folders = model_service.upload_folders()  # the app's own, which drops an upload's models with its folder
    up = save(folders, "alice", nanogpt_bytes())
    spec = model_service.ModelSpec(K.SOURCE_UPLOAD, up.name, "pre")
    try:
        monkeypatch.setattr(model_service, "session_id", lambda: "alice")
        assert model_service.load_model(spec).config.vocab_size == 101
        assert spec in model_service.model_store()
        monkeypatch.setattr(model_service, "session_id", lambda: "bob")
        with pytest.raises(CheckpointError, match="that upload is gone"):
            model_service.load_model(spec)  # cached, and still refused
        folders.remove("alice")  # her session ended: the model leaves the store with the folder
        assert spec not in model_service.model_store()
    finally:
        model_service.model_store().clear()


def test_uploads_default_to_streamlits_cap_and_zero_turns_them_off():
    assert ServerLimits().upload_mb == 200 and ServerLimits.from_env({"GPTVIZ_UPLOAD_MB": "0"}).upload_mb == 0
    with pytest.raises(ValueError, match="GPTVIZ_UPLOAD_MB"):
        ServerLimits.from_env({"GPTVIZ_UPLOAD_MB": "-1"})
    assert uploads.UPLOADS_KEPT >= 1
