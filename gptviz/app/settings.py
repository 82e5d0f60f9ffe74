"""Every setting a visitor picks, declared once: its session key, default, label and help, its name in a shared link
(if the view travels in links) and the rule that checks a value from outside.

The widget that shows a setting draws from its record (`S.GEN_N.number_input(col)`), links.py reads and writes the
linked ones through the same records, and the tests walk them. A widget key is its session-state key, and the key of
a linked setting is also its link name unless the record names a shorter one: keep both stable, or links people
have shared stop opening the view they showed. keys.py re-exports each key as a plain string, so `K.GEN_N` names it
as before.

The records are declared by group: the sidebar's (settings_sidebar.py), those of the pages' views that links carry
(settings_linked.py) and those a page keeps to itself (settings_local.py), with the choices and rules they share in
settings_choices.py. This module gathers them, so `S.NAME` finds any of them, and walks them in that order.
"""

from __future__ import annotations

from . import settings_choices, settings_linked, settings_local, settings_sidebar
from .rules import Setting

# the settings in the order they are declared: a link writes them in this order (the sidebar's first)
GROUPS = (settings_sidebar, settings_linked, settings_local)


def records() -> dict[str, Setting]:
    """Every setting by its name (the name keys.py gives its key), in the order GROUPS declare them."""
    return {name: value for group in GROUPS for name, value in vars(group).items() if isinstance(value, Setting)}


def linked() -> tuple[Setting, ...]:
    """The settings a link carries, in the order a link writes them (the sidebar's first)."""
    return tuple(s for s in records().values() if s.link)


def __getattr__(name: str):
    """A record, choice or help text by its name (`S.GEN_N`, `S.PACES`), from the module that declares it: looked up
    when asked, as keys.py looks up keys, so a new setting is declared in one place and a typo is still an
    AttributeError. Upper-case names only (the records' classes and helpers stay in their modules)."""
    for group in (settings_choices, *GROUPS):
        if name.isupper() and name in vars(group):
            return vars(group)[name]
    raise AttributeError(f"gptviz.app.settings has no setting or choice {name!r}")
