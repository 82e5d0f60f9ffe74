"""Unit ids (gptviz.model.unit_id): one type prints every id the library and the app write and reads each back, so an id
shown on one page opens the same unit on the unit page, in the index and in a link."""

from __future__ import annotations

import pytest

from gptviz import index as ix
from gptviz.model.unit_id import Unit, head_id, neuron_id


@pytest.mark.parametrize(
    "unit, text",
    [
        (Unit.neuron(3, 47), "L3N47"),
        (Unit.head(1, 0), "L1H0"),
        (Unit.neuron(0, 0), "L0N0"),
        (Unit.head(12, 11), "L12H11"),
        (Unit.neuron(4095, 9_999_999), "L4095N9999999"),
    ],
)
def test_an_id_prints_and_parses_back(unit, text):
    assert str(unit) == text and Unit.parse(text) == unit
    assert Unit.parse(str(unit)) == unit


def test_the_text_helpers_print_the_same_ids():
    assert head_id(1, 0) == "L1H0" == str(Unit("head", 1, 0))
    assert neuron_id(3, 47) == "L3N47" == str(Unit("neuron", 3, 47))
    assert Unit.head(2, 5).kind == "head" and Unit.neuron(2, 5).kind == "neuron"


def test_numpy_and_tensor_indices_print_as_plain_numbers():
    import numpy as np
    import torch

    assert head_id(np.int64(2), torch.tensor(3)) == "L2H3"


@pytest.mark.parametrize(
    "text, unit", [("l1h3", Unit.head(1, 3)), (" L2N26 ", Unit.neuron(2, 26)), ("l0n7\n", Unit.neuron(0, 7))]
)
def test_case_and_surrounding_spaces_do_not_matter(text, unit):
    assert Unit.parse(text) == unit


@pytest.mark.parametrize(
    "text",
    [
        "",
        "L",
        "L1",
        "L1H",
        "H1",
        "1H1",
        "L1X2",
        "L-1H2",
        "L1H-2",
        "L1 H2",
        "L1H2x",
        "neuron 5",
        "L12345H1",
        "L1N12345678",
        "L1H2L3H4",
        "L１H2",
    ],
)
def test_what_is_not_an_id_is_refused(text):
    with pytest.raises(ValueError, match="L<layer>N<neuron> or L<layer>H<head>"):
        Unit.parse(text)


def test_a_non_string_is_refused_with_the_same_error():
    with pytest.raises(ValueError):
        Unit.parse(None)


def test_the_index_reads_ids_through_the_same_type():
    """gptviz.index's Unit is this type, and its lookup by text parses with it (then checks the model's sizes)."""
    from gptviz.index.unit_ids import _as_unit

    assert ix.Unit is Unit
    assert _as_unit("l1h3", 2, 8, 4) == Unit.head(1, 3)
    assert _as_unit(str(Unit.neuron(1, 7)), 2, 8, 4) == Unit.neuron(1, 7)
    with pytest.raises(ValueError, match="does not exist"):
        _as_unit("L2H0", 2, 8, 4)
    with pytest.raises(ValueError, match="write it as"):
        _as_unit("L1X0", 2, 8, 4)


def test_a_unit_names_the_hook_that_holds_it():
    assert Unit.neuron(2, 5).hook == "blocks.2.mlp.hook_post"
    assert Unit.head(0, 1).hook == "blocks.0.attn.hook_z"
