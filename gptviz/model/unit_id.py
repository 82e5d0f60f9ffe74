"""A unit's id: an MLP neuron ("L3N47": layer 3, neuron 47) or an attention head ("L1H0": layer 1, head 0).

One type builds and reads every id the library, the app and its links write, so an id printed anywhere opens the
same unit on the unit page and in the neuron index. Whether the unit exists is a question for a model's sizes
(gptviz.index checks them); this type only knows the syntax.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Digit limits keep an id from a link small: 4,096 layers and 10 million neurons are past any model gptviz loads.
_ID = re.compile(r"L([0-9]{1,4})([NH])([0-9]{1,7})")  # ASCII digits: int() would take others too
KINDS = {"N": "neuron", "H": "head"}
FORMS = "L<layer>N<neuron> or L<layer>H<head>, e.g. L2N26 or L1H2"


class Unit(NamedTuple):
    """A neuron (`kind` "neuron", index in 0..d_ff-1) or a head (`kind` "head", index in 0..n_heads-1)."""

    kind: str
    layer: int
    index: int

    @classmethod
    def neuron(cls, layer: int, index: int) -> Unit:
        return cls("neuron", int(layer), int(index))

    @classmethod
    def head(cls, layer: int, index: int) -> Unit:
        return cls("head", int(layer), int(index))

    @classmethod
    def parse(cls, text: str) -> Unit:
        """An id as written by str(), in either case and with spaces around it ("l1h3 " is L1H3); ValueError
        otherwise."""
        match = _ID.fullmatch(text.strip().upper()) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"unit {text!r}: write it as {FORMS}")
        layer, kind, index = match.groups()
        return cls(KINDS[kind], int(layer), int(index))

    def __str__(self) -> str:
        return f"L{self.layer}{'N' if self.kind == 'neuron' else 'H'}{self.index}"

    @property
    def hook(self) -> str:
        """The hook whose capture holds this unit's value: the MLP's activation or the heads' z."""
        from .hooks import act_name  # torch only when a capture is wanted: the id itself is plain text

        return act_name("post" if self.kind == "neuron" else "z", self.layer)


def head_id(layer: int, head: int) -> str:
    """A head's id as text ("L1H0"), for labels and lists of ids."""
    return str(Unit.head(layer, head))


def neuron_id(layer: int, neuron: int) -> str:
    """A neuron's id as text ("L3N47")."""
    return str(Unit.neuron(layer, neuron))
