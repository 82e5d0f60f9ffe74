"""The view in the URL: the sidebar's and the open page's settings as query parameters, so a copied link opens the
same view for someone else. Pure functions over a session-state mapping; the router does the Streamlit part.

A link is untrusted input: every value is parsed and range-checked here; a bad one is dropped with a notice and the
widget keeps its default. Values a model decides (a layer past the last one) are checked by the page's
`sidebar.keep_valid`, which reports link values it had to replace."""
from __future__ import annotations

import base64
import math
import re
import urllib.parse
import zlib
from typing import Callable

from ..config import PRESETS
from ..figures.attention import SCALES
from . import keys as K

MAX_LINK_PROMPT = 600  # characters; a longer prompt travels compressed ("pz"), if that fits MAX_PACKED_PROMPT
MAX_PACKED_PROMPT = 2000  # characters of the compressed prompt (long URLs break in mail and chat); past it, left out
MAX_UNPACKED_PROMPT = 20_000  # characters a compressed prompt may unpack to (the sidebar's own limit)
MAX_LINK_MODEL = 300   # characters of a folder path or Hub id
MAX_LINK_VALUE = MAX_PACKED_PROMPT  # characters of any one value, checked before it is parsed (no value is longer)
# The sidebar's model sources by their code in a link (a session's trained runs exist only there: no code)
SOURCE_CODES = {"bundled": K.SOURCE_BUNDLED, "preset": K.SOURCE_PRESET, "pretrained": K.SOURCE_PRETRAINED}


class BadValue(ValueError):
    pass


def _choice(options) -> Callable[[str], str]:
    options = tuple(options)

    def parse(raw: str) -> str:
        if raw not in options:
            raise BadValue(f"one of {', '.join(options)}")
        return raw
    return parse


def _int(lo: int, hi: int, none_ok: bool = False) -> Callable[[str], int | None]:
    def parse(raw: str) -> int | None:
        if none_ok and raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            raise BadValue(f"a whole number from {lo} to {hi}") from None
        if not lo <= value <= hi:
            raise BadValue(f"a whole number from {lo} to {hi}")
        return value
    return parse


def _float(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise BadValue(f"a number from {lo:g} to {hi:g}") from None
        if not (math.isfinite(value) and lo <= value <= hi):
            raise BadValue(f"a number from {lo:g} to {hi:g}")
        return value
    return parse


def _text(limit: int) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if len(raw) > limit:
            raise BadValue(f"at most {limit:,} characters")
        return raw
    return parse


def pack_prompt(text: str) -> str:
    """A prompt for a link: zlib-compressed UTF-8 in URL-safe base64, without padding."""
    return base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8"), 9)).rstrip(b"=").decode("ascii")


def _packed(raw: str) -> str:
    """pack_prompt's inverse for a link's "pz", bounded: a link cannot make the server inflate more than
    MAX_UNPACKED_PROMPT characters' worth of bytes (a zip bomb stops there)."""
    if len(raw) > MAX_PACKED_PROMPT:
        raise BadValue(f"at most {MAX_PACKED_PROMPT:,} characters")
    try:
        data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        inflate = zlib.decompressobj()
        out = inflate.decompress(data, 4 * MAX_UNPACKED_PROMPT + 1)
        if inflate.unconsumed_tail or len(out) > 4 * MAX_UNPACKED_PROMPT or not inflate.eof:
            raise ValueError("too long or cut")
        text = out.decode("utf-8")
    except (ValueError, zlib.error) as err:
        raise BadValue("a prompt packed by gptviz (this one does not unpack)") from err
    if len(text) > MAX_UNPACKED_PROMPT:
        raise BadValue(f"a prompt of at most {MAX_UNPACKED_PROMPT:,} characters")
    return text


def _heads(raw: str) -> list[tuple[int, int]]:
    """Heads as "layer.head" pairs joined by commas ("1.0,2.3"); the page drops those its model lacks."""
    if raw == "":
        return []
    pairs = raw.split(",")
    if len(pairs) > 4096:
        raise BadValue("at most 4,096 heads")
    try:
        heads = [tuple(int(part) for part in pair.split(".")) for pair in pairs]
    except ValueError:
        raise BadValue("heads written layer.head, joined by commas (1.0,2.3)") from None
    if any(len(h) != 2 or not (0 <= h[0] <= 4095 and 0 <= h[1] <= 4095) for h in heads):
        raise BadValue("heads written layer.head, joined by commas (1.0,2.3)")
    return sorted(set(heads))


def _format_heads(heads) -> str:
    return ",".join(f"{layer}.{head}" for layer, head in heads)


def _bool(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise BadValue("0 or 1")
    return raw == "1"


_UNIT_ID = re.compile(r"L(\d{1,4})([NH])(\d{1,7})")


def _unit(raw: str) -> str:
    """A neuron or head id, "L2N26" or "L1H2" (the page checks it against the model)."""
    if not _UNIT_ID.fullmatch(raw.strip().upper()):
        raise BadValue("a neuron or head id such as L2N26 or L1H2")
    return raw.strip().upper()


_SEED = _int(0, 2**31 - 1)
_LAYER, _HEAD = _int(0, 4095), _int(-1, 4095)  # head -1: the mean of the layer's heads
_TOKENS = _int(1, 200)
_TOP_K = _int(0, 1_000_000)  # the page replaces a value past the model's vocabulary (sidebar.keep_valid)

# URL name -> (session-state key, parser). The sidebar's settings get short names; a page's are their keys.
LINKED: dict[str, tuple[str, Callable[[str], object]]] = {
    "source": (K.MODEL_SOURCE, lambda raw: SOURCE_CODES[_choice(SOURCE_CODES)(raw)]),
    "norm": (K.NORM, _choice(("pre", "post"))),
    "preset": (K.PRESET, _choice(PRESETS)),
    "seed": (K.SEED, _SEED),
    "model": (K.HF_NAME, _text(MAX_LINK_MODEL)),
    "prompt": (K.PROMPT, _text(MAX_LINK_PROMPT)),
    "pz": (K.PROMPT, _packed),
    **{key: (key, parse) for key, parse in {
        K.ATT_VIEW: _choice(K.ATTENTION_VIEWS), K.ATT_LAYER: _LAYER, K.ATT_HEAD: _HEAD, K.ATT_SCALE: _choice(SCALES),
        K.ATT_QUERY: _int(0, 100_000, none_ok=True),
        K.ATT_GEN_N: _TOKENS, K.ATT_GEN_TEMP: _float(0, 2), K.ATT_GEN_TOPK: _TOP_K, K.ATT_GEN_TOPP: _float(0.05, 1),
        K.ATT_GEN_SEED: _SEED,
        K.GEN_LAYER: _LAYER, K.GEN_HEAD: _HEAD, K.GEN_SCALE: _choice(SCALES),
        K.GEN_N: _TOKENS, K.GEN_TEMP: _float(0, 2), K.GEN_TOPK: _TOP_K, K.GEN_TOPP: _float(0.05, 1),
        K.GEN_SEED: _SEED, K.GEN_EOS: _bool, K.UNIT: _unit, K.ATT_GEN_PACE: _choice(K.PACES), K.GEN_PACE: _choice(K.PACES),
        K.WHY_VIEW: _choice(K.WHY_VIEWS), K.WHY_TARGET: _int(0, 1_000_000), K.WHY_OTHER: _int(0, 1_000_000),
        K.WHY_ABLATED: _heads, K.WHY_EXAMPLE: _choice(K.PATCH_PAIRS),
        K.PAR_MODEL: _choice((K.PAR_MODEL_IN_USE, *PRESETS)),
        K.TL_DETECTOR: _choice(K.TIMELINE_DETECTORS), K.TL_PROBE: _int(0, 15), K.TL_STEP: _int(0, 10_000_000),
    }.items()},
}


# list values a link carries, and how they are written
LIST_FORMATS: dict[str, Callable[[list], str]] = {K.WHY_ABLATED: _format_heads}


def apply_link(state, params: dict[str, str]) -> list[str]:
    """Put a link's valid values into `state` (before any widget is drawn); return a notice for each bad or
    unknown parameter. Records which keys came from the link, so a page can say when it had to replace one."""
    notices, linked = [], {}
    if len(params) > len(LINKED):  # no link gptviz writes has more: one notice, not one per crafted name
        state[K.LINKED_KEYS] = linked
        return [f"The link has {len(params):,} parameters, more than gptviz knows ({len(LINKED)}); it was ignored."]
    for name, raw in params.items():
        if len(raw) > MAX_LINK_VALUE:  # a websocket's query string can be 100 MB: refused before any parsing
            notices.append(f"The link's `{_shown(name)}` is longer than {MAX_LINK_VALUE:,} characters; it was ignored.")
            continue
        if name not in LINKED:
            notices.append(f"The link's parameter `{_shown(name)}` is not one gptviz knows; it was ignored.")
            continue
        key, parse = LINKED[name]
        try:
            state[key] = parse(raw)
        except BadValue as why:
            notices.append(f"The link's `{name}` must be {why}; the default is shown instead.")
            continue
        linked[key] = name
    state[K.LINKED_KEYS] = linked
    return notices


def link_params(state) -> dict[str, str]:
    """The URL parameters for the settings in `state` (those of the sidebar and of the page drawn last)."""
    params = {}
    for name, (key, _) in LINKED.items():
        value = state.get(key)
        if key in LIST_FORMATS and isinstance(value, (list, tuple)):
            if value:
                params[name] = LIST_FORMATS[key](value)
            continue
        if value is None or isinstance(value, (list, dict, tuple)) or name == "pz":
            continue
        if key == K.PROMPT and len(value) > MAX_LINK_PROMPT:
            packed = pack_prompt(value)
            if len(packed) <= MAX_PACKED_PROMPT:
                params["pz"] = packed
            continue
        if key == K.MODEL_SOURCE:
            value = {label: code for code, label in SOURCE_CODES.items()}.get(value)
            if value is None:
                continue
        params[name] = _format(value)
    return params


UNIT_PAGE = "units"  # the unit page's URL path (router.PAGE_LIST)
SIDEBAR_PARAMS = ("source", "norm", "preset", "seed", "model", "prompt", "pz")


def unit_params(state, unit, norm: str | None = None) -> dict[str, str]:
    """The unit page's URL parameters for `unit` (a neuron or head id, or anything whose str() is one), with the
    sidebar's model and prompt. `norm`: the bundled twin of that wiring instead (a page comparing both twins links
    each head to its own)."""
    params = {name: value for name, value in link_params(state).items() if name in SIDEBAR_PARAMS}
    if norm is not None:
        params.update({"source": "bundled", "norm": _choice(("pre", "post"))(norm)})
    params["unit"] = _unit(str(unit))
    return params


def unit_url(state, unit, norm: str | None = None) -> str:
    """A relative link to the unit page (unit_params), for a link copied or opened in a new tab. Inside the app,
    unit ids open in the same session (gptviz.app.unit_nav), which skips a new session's start."""
    return f"{UNIT_PAGE}?{urllib.parse.urlencode(unit_params(state, unit, norm))}"


def prompt_left_out(state) -> bool:
    """Whether the prompt is too long for a link even compressed (the sidebar says so under the prompt)."""
    prompt = state.get(K.PROMPT) or ""
    return len(prompt) > MAX_LINK_PROMPT and len(pack_prompt(prompt)) > MAX_PACKED_PROMPT


def replaced_link_value(state, key: str) -> str | None:
    """A notice when a page replaces a value the link set (e.g. a layer the model does not have), else None."""
    linked = state.get(K.LINKED_KEYS) or {}
    if key not in linked:
        return None
    name = linked.pop(key)  # once: later replacements come from the visitor's own changes
    return f"The link's `{name}` does not fit this model or prompt; the default is shown instead."


def _format(value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _shown(name: str) -> str:
    """A visitor's parameter name, short and without backticks, for a notice."""
    name = name.replace("`", "'")
    return name if len(name) <= 40 else name[:40] + "..."


def sync_address() -> None:
    """Put the view's settings in the address bar now. The router does it after every full run; a fragment that
    holds pickers calls it at its end, since a pick there reruns only the fragment (the address stayed at the old
    layer, head, scale or tab until the next full run, so a copied link opened the wrong view)."""
    import streamlit as st
    params = link_params(st.session_state)
    if params != st.query_params.to_dict():
        st.query_params.from_dict(params)
