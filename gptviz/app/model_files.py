"""The sidebar's weights from outside: the head count a Raschka GPTModel file cannot record, the warning when the
wiring chosen is not the one a checkpoint was trained with, and a visitor's upload (a checkpoint file, checked before
it is written, kept in a private folder of the session's until it ends: gptviz.serve.uploads)."""

from __future__ import annotations

import streamlit as st

from ..model.params import total_params
from ..model.weights import CHECKPOINT_SUFFIXES, CheckpointError, needs_n_head
from ..serve.limits import LimitError, server_limits
from ..serve.model_access import allowed_folder
from . import keys as K
from . import settings as S
from .display import md_text
from .jobs import session_id
from .model_service import ModelSpec, upload_folders
from .services import cached

UPLOAD_HELP = (
    "A checkpoint file from the code that trained it: nanoGPT's ckpt.pt, the model.pth or "
    "model_and_optimizer.pth of Raschka's GPTModel, or an llm.c .bin. It is checked before it is stored "
    "(its size, its format, the server's model limits), read without running any code it may hold, and "
    "kept in a folder only this browser tab can load from, removed when the tab closes."
)


def wiring_warning(trained: str | None, norm: str, what: str = "This checkpoint") -> None:
    """Say when the wiring chosen is not the one the weights were trained with (None: not known, taken as GPT-2's)."""
    if trained is not None and trained != norm:
        st.warning(
            f"{what} was trained {trained}-norm. {norm.capitalize()}-norm runs the same weights with the "
            f"LayerNorms moved, so what it outputs is not what the model learned: choose {trained}-norm to see "
            f"the model itself."
        )
    elif trained is None and norm == "post":
        st.warning(
            "GPT-2's weights were trained pre-norm. Post-norm runs the same weights with the LayerNorms "
            "moved, so what it outputs is not what the model learned."
        )


@cached
def _needs_n_head(path: str, mtime_ns: int, size: int) -> bool:
    """needs_n_head, once per version of a file (the sidebar asks on every run)."""
    return needs_n_head(path)


def folder_needs_n_head(name: str) -> bool:
    """Whether the folder field names a Raschka GPTModel file (inside the server's model folders) whose head count
    must be given."""
    found = allowed_folder(name)
    if found is None:
        return False
    try:
        stat = found.stat()
    except OSError:
        return False
    return _needs_n_head(str(found), stat.st_mtime_ns, stat.st_size)


def head_count_box(setting: S.Setting, filename: str) -> int | None:
    """The number box for a head count the file cannot record, with why it is asked; its value (None: not given)."""
    st.info(
        f"{md_text(filename)} holds a GPTModel from Raschka's book, whose files do not record how many "
        "attention heads it has. Give the number it was trained with (his GPT_CONFIG_124M has 12)."
    )
    value = setting.number_input(st, value=None, placeholder="e.g. 12")
    return int(value) if value is not None else None


# ---- uploads --------------------------------------------------------------------------------------------------


def _uploader_key() -> str:
    return K.per_item(K.UPLOAD_FILE, st.session_state.get(K.UPLOAD_SEQ, 0))


def _take_upload(key: str) -> None:
    """The uploader's callback (before the script runs): check and store the file, or keep why not; then a fresh
    uploader (a new key) and the bytes let go of in Streamlit's memory, where an upload otherwise stays until the
    session ends."""
    state = st.session_state
    file = state.get(key)
    if file is None:
        return
    try:
        state[K.UPLOAD] = store_upload(file)
        state.pop(K.UPLOAD_N_HEAD, None)  # another file: its own count
    except (CheckpointError, LimitError) as err:
        state[K.UPLOAD_ERROR] = f"{file.name} was not loaded: {err}"
    finally:
        state[K.UPLOAD_SEQ] = state.get(K.UPLOAD_SEQ, 0) + 1
        _let_go(file)


def store_upload(file):
    """Check and store an uploaded file (anything with `name`, `size` and a binary stream's read/seek) in this
    session's folder; its Upload record. CheckpointError or LimitError, with the reason, otherwise."""
    return upload_folders().save(session_id() or "", file, int(file.size), file.name, server_limits().upload_bytes)


def _let_go(file) -> None:
    """Drop an upload's bytes from Streamlit's memory (it keeps them for the session otherwise)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx, file_id = get_script_run_ctx(), getattr(file, "file_id", None)
    if ctx is not None and file_id is not None:
        ctx.uploaded_file_mgr.remove_file(ctx.session_id, file_id)


def _remove_upload() -> None:
    st.session_state.pop(K.UPLOAD, None)
    upload_folders().remove(session_id() or "")


def upload_picker(norm: str, device: str, dtype: str) -> ModelSpec | None:
    """The uploader, what the stored upload is, a way to remove it, its head count where it needs one; its spec."""
    state, cap = st.session_state, server_limits().upload_mb
    held = state.get(K.UPLOAD) is not None  # the uploader is a fresh one after each file: say what it does now
    st.file_uploader(
        "Another checkpoint file (replaces yours)" if held else "Checkpoint file",
        type=[suffix.lstrip(".") for suffix in CHECKPOINT_SUFFIXES],
        key=_uploader_key(),
        max_upload_size=cap,
        on_change=_take_upload,
        args=(_uploader_key(),),
        help=UPLOAD_HELP,
    )
    error = state.pop(K.UPLOAD_ERROR, None)
    if error:
        st.error(md_text(error))  # the file's name is the visitor's text
    upload = state.get(K.UPLOAD)
    if upload is not None and upload_folders().folder(session_id() or "") is None:
        upload = state.pop(K.UPLOAD)  # removed (the server restarted its folders): say so, once
        st.info(f"{md_text(upload.filename)} is no longer on the server: upload it again.")
        return None
    if upload is None:
        st.caption(
            f"nanoGPT's ckpt.pt, Raschka's model.pth or an llm.c .bin, up to {cap:,} MB. Only this tab can "
            "load it, and the server removes it when the tab closes."
        )
        return None
    c = upload.config
    st.caption(
        f"{md_text(upload.filename)}: {upload.size / 2**20:,.1f} MB, {c.n_layers} layers, d_model "
        f"{c.d_model}, {total_params(c):,} parameters. Only this tab can load it; the server removes it when "
        "the tab closes."
    )
    st.button("Remove the upload", key=K.UPLOAD_REMOVE, on_click=_remove_upload, icon=":material/delete:")
    n_head = head_count_box(S.UPLOAD_N_HEAD, upload.filename) if upload.needs_n_head else None
    if upload.needs_n_head and n_head is None:
        return None
    wiring_warning(c.norm, norm, "This file")
    return ModelSpec(K.SOURCE_UPLOAD, upload.name, norm, 0, device, dtype, n_head)
