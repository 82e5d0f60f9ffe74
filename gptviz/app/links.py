"""The view in the URL: the sidebar's and the open page's settings as query parameters, so a copied link opens the
same view for someone else. Pure functions over a session-state mapping; the router does the Streamlit part.

A link is untrusted input: every value is parsed and range-checked here; a bad one is dropped with a notice and the
widget keeps its default. Values a model decides (a layer past the last one) are checked by the page's
`sidebar.keep_valid`, which reports link values it had to replace."""

from __future__ import annotations

import base64
import urllib.parse
import zlib

from . import keys as K
from . import settings as S
from .rules import BadValue, Setting
from .settings_choices import MAX_LINK_MODEL, MAX_LINK_PROMPT, SOURCE_CODES  # noqa: F401 (the link's limits, for tests)

MAX_PACKED_PROMPT = 2000  # characters of the compressed prompt (long URLs break in mail and chat); past it, left out
MAX_UNPACKED_PROMPT = 20_000  # characters a compressed prompt may unpack to (the sidebar's own limit)
MAX_LINK_VALUE = MAX_PACKED_PROMPT  # characters of any one value, checked before it is parsed (no value is longer)
PACKED = "pz"  # a prompt longer than MAX_LINK_PROMPT travels compressed under this name, if that fits


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


# URL name -> the setting it sets (settings.py: each linked setting's record names its parameter and rule)
LINKED: dict[str, Setting] = {setting.link: setting for setting in S.linked()}


def apply_link(state, params: dict[str, str]) -> list[str]:
    """Put a link's valid values into `state` (before any widget is drawn); return a notice for each bad or
    unknown parameter. Records which keys came from the link, so a page can say when it had to replace one."""
    notices, linked = [], {}
    known = len(LINKED) + 1  # the linked settings and the packed prompt
    if len(params) > known:  # no link gptviz writes has more: one notice, not one per crafted name
        state[K.LINKED_KEYS] = linked
        return [f"The link has {len(params):,} parameters, more than gptviz knows ({known}); it was ignored."]
    for name, raw in params.items():
        if len(raw) > MAX_LINK_VALUE:  # a websocket's query string can be 100 MB: refused before any parsing
            notices.append(f"The link's `{_shown(name)}` is longer than {MAX_LINK_VALUE:,} characters; it was ignored.")
            continue
        if name not in LINKED and name != PACKED:
            notices.append(f"The link's parameter `{_shown(name)}` is not one gptviz knows; it was ignored.")
            continue
        setting, parse = (S.PROMPT, _packed) if name == PACKED else (LINKED[name], LINKED[name].parse)
        try:
            state[setting.key] = parse(raw)
        except BadValue as why:
            notices.append(f"The link's `{name}` must be {why}; the default is shown instead.")
            continue
        linked[setting.key] = name
    state[K.LINKED_KEYS] = linked
    return notices


def link_params(state) -> dict[str, str]:
    """The URL parameters for the settings in `state` (those of the sidebar and of the page drawn last)."""
    params = {}
    for name, setting in LINKED.items():
        value = state.get(setting.key)
        if setting is S.PROMPT and isinstance(value, str) and len(value) > MAX_LINK_PROMPT:
            packed = pack_prompt(value)
            if len(packed) <= MAX_PACKED_PROMPT:
                params[PACKED] = packed
            continue
        text = setting.format(value)
        if text is not None:
            params[name] = text
    return params


UNIT_PAGE = "units"  # the unit page's URL path (router.PAGE_LIST)
SIDEBAR_PARAMS = tuple(s.link for s in (S.MODEL_SOURCE, S.NORM, S.PRESET, S.SEED, S.HF_NAME, S.N_HEAD, S.PROMPT)) + (
    PACKED,
)


def unit_params(state, unit, norm: str | None = None) -> dict[str, str]:
    """The unit page's URL parameters for `unit` (a neuron or head id, or anything whose str() is one), with the
    sidebar's model and prompt. `norm`: the bundled twin of that wiring instead (a page comparing both twins links
    each head to its own)."""
    params = {name: value for name, value in link_params(state).items() if name in SIDEBAR_PARAMS}
    if norm is not None:
        params.update({S.MODEL_SOURCE.link: "bundled", S.NORM.link: S.NORM.parse(norm)})
    params[S.UNIT.link] = S.UNIT.parse(str(unit))
    return params


def unit_url(state, unit, norm: str | None = None) -> str:
    """A relative link to the unit page (unit_params), for a link copied or opened in a new tab. Inside the app,
    unit ids open in the same session (gptviz.app.unit_nav), which skips a new session's start."""
    return f"{UNIT_PAGE}?{urllib.parse.urlencode(unit_params(state, unit, norm))}"


WHY_PAGE = "why"  # the Why this token? page's URL path


def why_params(state, prompt: str, target: int) -> dict[str, str]:
    """The Why page's URL parameters for the token `target` written after `prompt` (text): the sidebar's model, that
    prompt (compressed past MAX_LINK_PROMPT, left out when too long even so) and the attribution graph's tab."""
    params = {
        name: value
        for name, value in link_params(state).items()
        if name in SIDEBAR_PARAMS and name not in (S.PROMPT.link, PACKED)
    }
    if len(prompt) <= MAX_LINK_PROMPT:
        params[S.PROMPT.link] = prompt
    elif len(pack_prompt(prompt)) <= MAX_PACKED_PROMPT:
        params[PACKED] = pack_prompt(prompt)
    params[S.WHY_TARGET.link] = S.WHY_TARGET.format(int(target))
    params[S.WHY_VIEW.link] = S.WHY_GRAPH_VIEW
    return params


def why_url(state, prompt: str, target: int) -> str:
    """A relative link that opens the Why page's attribution graph for `target` after `prompt` (why_params)."""
    return f"{WHY_PAGE}?{urllib.parse.urlencode(why_params(state, prompt, target))}"


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
