"""The pieces every snippet is made of: the model and prompt lines, the snippet itself, and the closed box a page
shows it in."""

from __future__ import annotations

import re

import streamlit as st

from ...model.tokenizer import decode, encode, is_gpt2, tokenizer_for
from .. import keys as K
from ..model_service import ModelSpec

MARK = "# gptviz: "  # a snippet's first line: "# gptviz: <the view>, reproduced"


LIBRARY_NAMES = (
    "GPT",
    "PRESETS",
    "capture",
    "get_tokenizer",
    "load_pretrained",
    "tokenizer_for",
)  # from gptviz, when a snippet uses them


def model_lines(spec: ModelSpec) -> str:
    """The lines that build the model `spec` names, as the app built it."""
    if spec.source == K.SOURCE_PRESET:
        line = f"model = GPT(PRESETS[{spec.name!r}].replace(norm={spec.norm!r}), seed={spec.seed}).eval()"
    elif spec.source == K.SOURCE_BUNDLED:
        line = f"model = load_pretrained({spec.name!r})"
    elif spec.source == K.SOURCE_TRAINED:  # it lives in the server's memory only
        line = (
            "# this model was trained in your session: download its checkpoint on the Train page, then\n"
            "model = load_pretrained('path/to/the/downloaded/folder')"
        )
    elif spec.source == K.SOURCE_UPLOAD:  # the server's copy is the visitor's alone: their own file, by its name
        heads = "" if spec.n_head is None else f", n_head={spec.n_head}"
        line = f"model = load_pretrained({spec.name.rpartition('/')[2]!r}, norm={spec.norm!r}{heads})"
    else:
        heads = "" if spec.n_head is None else f", n_head={spec.n_head}"
        line = f"model = load_pretrained({spec.name!r}, norm={spec.norm!r}{heads})"
    if (spec.device, spec.dtype) != ("cpu", "float32"):
        line += f"\nmodel = model.to(device={spec.device!r}, dtype=getattr(torch, {spec.dtype!r}))"
    return line


def tokenizer_of(spec: ModelSpec | None):
    """The tokenizer the model `spec` names reads (tokenizer_for): only a folder or upload can bring its own (GPT-1's
    BPE), and its model is loaded (cached) by the page showing the snippet; GPT-2's for the rest, or no spec."""
    if spec is None or spec.source not in (K.SOURCE_PRETRAINED, K.SOURCE_UPLOAD):
        return None
    from ..model_service import load_model

    return tokenizer_for(load_model(spec))


def tokenizer_call(spec: ModelSpec | None) -> str:
    """How a snippet names the model's tokenizer: GPT-2's `get_tokenizer()`, else `tokenizer_for(model)`."""
    return "get_tokenizer()" if is_gpt2(tokenizer_of(spec)) else "tokenizer_for(model)"


def prompt_lines(
    ids: tuple[int, ...] | list[int], text: str | None = None, name: str = "ids", spec: ModelSpec | None = None
) -> str:
    """`ids = ...` for the tokens a view read: from the prompt's text where encoding it (in the tokenizer of the model
    `spec` names) gives them (its last ones when the page kept only those), else the ids themselves."""
    ids = list(ids)
    if text is not None:
        encoded = encode(text, tokenizer_of(spec))
        if encoded[len(encoded) - len(ids) :] == ids and ids:
            cut = f"[-{len(ids)}:]" if len(encoded) > len(ids) else ""
            return f"{name} = {tokenizer_call(spec)}.encode({text!r}){cut}"
    return f"{name} = {ids!r}"


def snippet(view: str, spec: ModelSpec, *body: str, imports: str = "") -> str:
    """A whole snippet: the mark, the imports it uses, the model, then `body`'s lines (which bind `result`, and may
    print what the view shows after it)."""
    code = "\n".join([model_lines(spec), *body])
    used = [name for name in LIBRARY_NAMES if re.search(rf"\b{name}\b", code)]
    head = [f"{MARK}{view}, reproduced"] + (["import torch"] if "torch." in code else [])
    head += [f"from gptviz import {', '.join(used)}"] if used else []
    return "\n".join(head + ([imports] if imports else []) + [code]) + "\n"


def script(view: str, *lines: str) -> str:
    """A snippet whose `lines` build all they use (no model line of a spec): the mark, then `lines`, one a line."""
    return "\n".join([f"{MARK}{view}, reproduced", *lines]) + "\n"


def show(code: str) -> None:
    """The closed "Copy as Python" box (st.code has its own copy button)."""
    with st.expander("Copy as Python", icon=":material/code:"):
        st.caption(
            "The library calls that reproduce this view's numbers in a notebook or script; `result` holds "
            "them. It runs in a checkout of gptviz (its folder as the working directory, or on `PYTHONPATH`) "
            "or after `pip install .` there: gptviz is on no package index."
        )
        st.code(code, language="python")


def prompt_text() -> str | None:
    """The sidebar's prompt text, for prompt_lines."""
    text = st.session_state.get(K.PROMPT)
    return text if isinstance(text, str) else None


def config_line(cfg) -> str:
    """`config = ...`: a preset by its name when it is one unchanged, else the whole GPTConfig."""
    from ...model.config import PRESETS

    if PRESETS.get(cfg.name) == cfg:
        return f"config = PRESETS[{cfg.name!r}]"
    return f"config = {cfg!r}"


def pieces_comment(*token_ids: int, spec: ModelSpec | None = None) -> str:
    """Token ids as text (the tokenizer of the model `spec` names) for a comment: repr'd and on one line, so no text
    ends the comment."""
    enc = tokenizer_of(spec)
    return ", ".join(repr(decode([t], enc)) for t in token_ids).replace("\n", "\\n")
