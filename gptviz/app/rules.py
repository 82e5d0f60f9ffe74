"""What a setting is (gptviz.app.settings declares them): a record of its key, default, label, link name and rule, and
the rules that check a value from outside (a link) and give its widget a range or options."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..model.unit_id import Unit


class BadValue(ValueError):
    """A value from outside (a link) that a setting's rule refuses; its text completes "must be ..."."""


# ---- rules: what a value from outside may be, and the range or options its widget offers ---------------------------
NUMERIC_WIDGETS = ("number_input", "slider")
CHOICE_WIDGETS = ("selectbox", "radio", "select_slider", "pills", "segmented_control")


@dataclass(frozen=True)
class Choice:
    options: tuple
    codes: dict | None = None  # {link code: option}, where a link writes a short code instead of the label

    def parse(self, raw: str):
        allowed = tuple(self.codes or self.options)
        if raw not in allowed:
            raise BadValue(f"one of {', '.join(map(str, allowed))}")
        return self.codes[raw] if self.codes else raw

    def format(self, value) -> str | None:
        if self.codes:
            return {label: code for code, label in self.codes.items()}.get(value)  # None: no link names it
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return {"options": list(self.options)} if widget in CHOICE_WIDGETS else {}


@dataclass(frozen=True)
class Whole:
    lo: int
    hi: int
    none_ok: bool = False  # an empty value means None (e.g. the last token)

    def parse(self, raw: str) -> int | None:
        if self.none_ok and raw == "":
            return None
        try:
            value = int(raw)
        except ValueError:
            raise BadValue(f"a whole number from {self.lo} to {self.hi}") from None
        if not self.lo <= value <= self.hi:
            raise BadValue(f"a whole number from {self.lo} to {self.hi}")
        return value

    def format(self, value) -> str | None:
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return _range_args(widget, self.lo, self.hi, 1, default)


def _range_args(widget: str, lo, hi, step, default) -> dict:
    """A numeric widget's range, step and default from a rule's bounds (nothing for other widgets)."""
    if widget not in NUMERIC_WIDGETS:
        return {}
    return {"min_value": lo, "max_value": hi, "step": step, **({"value": default} if default is not None else {})}


@dataclass(frozen=True)
class Number:
    lo: float
    hi: float
    step: float

    def parse(self, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            raise BadValue(f"a number from {self.lo:g} to {self.hi:g}") from None
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise BadValue(f"a number from {self.lo:g} to {self.hi:g}")
        return value

    def format(self, value) -> str | None:
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return _range_args(widget, self.lo, self.hi, self.step, default)


@dataclass(frozen=True)
class Flag:
    def parse(self, raw: str) -> bool:
        if raw not in ("0", "1"):
            raise BadValue("0 or 1")
        return raw == "1"

    def format(self, value) -> str | None:
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return {"value": bool(default)} if widget in ("checkbox", "toggle") else {}


@dataclass(frozen=True)
class Text:
    limit: int  # characters a link may carry (the widget's own limit is the page's)

    def parse(self, raw: str) -> str:
        if len(raw) > self.limit:
            raise BadValue(f"at most {self.limit:,} characters")
        return raw

    def format(self, value) -> str | None:
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return {}


@dataclass(frozen=True)
class Heads:
    """Heads as "layer.head" pairs joined by commas ("1.0,2.3"); the page drops those its model lacks."""

    most: int = 4096

    def parse(self, raw: str) -> list[tuple[int, int]]:
        if raw == "":
            return []
        pairs = raw.split(",")
        if len(pairs) > self.most:
            raise BadValue(f"at most {self.most:,} heads")
        try:
            heads = [tuple(int(part) for part in pair.split(".")) for pair in pairs]
        except ValueError:
            raise BadValue("heads written layer.head, joined by commas (1.0,2.3)") from None
        if any(len(h) != 2 or not (0 <= h[0] <= 4095 and 0 <= h[1] <= 4095) for h in heads):
            raise BadValue("heads written layer.head, joined by commas (1.0,2.3)")
        return sorted(set(heads))

    def format(self, value) -> str | None:
        if not isinstance(value, (list, tuple)) or not value:
            return None  # no heads: nothing to carry
        return ",".join(f"{layer}.{head}" for layer, head in value)

    def widget_args(self, widget: str, default) -> dict:
        return {}


@dataclass(frozen=True)
class UnitRule:
    """A neuron or head id, "L2N26" or "L1H2" (the page checks it against the model)."""

    def parse(self, raw: str) -> str:
        try:
            return str(Unit.parse(raw))
        except ValueError:
            raise BadValue("a neuron or head id such as L2N26 or L1H2") from None

    def format(self, value) -> str | None:
        return _format(value)

    def widget_args(self, widget: str, default) -> dict:
        return {}


def _format(value) -> str | None:
    """A value as a link writes it; None for what a link does not carry (unset, or a list or mapping)."""
    if value is None or isinstance(value, (list, dict, tuple)):
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


# ---- the record ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    key: str  # its session-state key and widget key
    label: str = ""  # the widget's label ("": drawn without one, e.g. a row of tabs)
    default: Any = None  # the value before a visitor or a link sets one (None: the page decides)
    help: str | None = None
    link: str | None = None  # its name in a link; None: not carried by links
    rule: Any = field(default=None, repr=False)  # Choice, Whole, Number, Flag, Text, Heads or UnitRule

    def parse(self, raw: str):
        """A link's text as this setting's value; BadValue when the rule refuses it."""
        return self.rule.parse(raw)

    def format(self, value) -> str | None:
        """The value as a link writes it; None when a link leaves it out."""
        return self.rule.format(value)

    def draw(self, where, widget: str, **override):
        """`where.<widget>(...)` (where: st, a column or a container) with this record's label, key, help, and its
        rule's range or options and default; `override` replaces or adds arguments (a range the model decides)."""
        args = {"label": self.label, "key": self.key}
        if self.help:
            args["help"] = self.help
        if self.rule is not None:
            args.update(self.rule.widget_args(widget, self.default))
        args.update(override)
        return getattr(where, widget)(**args)

    def setdefault(self, state):
        """Put the default in `state` unless the setting has a value (a choice widget then opens on it)."""
        return state.setdefault(self.key, self.default)


# One method per widget kind (`S.GEN_N.number_input(col)`), so a page's call reads like Streamlit's own.
def _draws(widget: str) -> Callable:
    def draw(self, where, **override):
        return self.draw(where, widget, **override)

    draw.__name__ = widget
    draw.__doc__ = f"The setting's {widget} (see draw)."
    return draw


for _widget in NUMERIC_WIDGETS + CHOICE_WIDGETS + ("checkbox", "toggle", "text_input", "text_area", "multiselect"):
    setattr(Setting, _widget, _draws(_widget))
