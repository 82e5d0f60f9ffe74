"""Settings declared once (gptviz.app.settings): every linked setting travels through a link and comes back equal,
every rule refuses what it should with a notice, and the keys the rest of the app names are the records' keys."""

from __future__ import annotations

import math

import pytest

from gptviz.app import keys as K
from gptviz.app import links
from gptviz.app import settings as S
from gptviz.app.rules import BadValue, Choice, Flag, Heads, Number, Text, UnitRule, Whole
from gptviz.model.unit_id import Unit

LINKED = S.linked()


def valid_values(setting) -> list:
    """Values a visitor can pick for `setting`, from its own rule: both ends of a range, every option."""
    rule = setting.rule
    if isinstance(rule, Choice):
        return list(rule.codes.values()) if rule.codes else list(rule.options)
    if isinstance(rule, Whole):
        return [rule.lo, rule.hi, (rule.lo + rule.hi) // 2] + ([None] if rule.none_ok else [])
    if isinstance(rule, Number):
        return [rule.lo, rule.hi, rule.lo + rule.step]
    if isinstance(rule, Flag):
        return [True, False]
    if isinstance(rule, Text):
        return ["", "A B\nC ✓ <b>", "x" * rule.limit]
    if isinstance(rule, Heads):
        return [[(0, 1)], [(0, 0), (2, 3), (4095, 4095)]]
    if isinstance(rule, UnitRule):
        return ["L3N47", "L1H0", "L0N0", "L4095H9999999"]
    raise AssertionError(f"{setting.key}: a rule this test does not know")


def invalid_values(setting) -> list[str]:
    """Link texts `setting`'s rule must refuse."""
    rule = setting.rule
    if isinstance(rule, Choice):
        return ["not-an-option", "", (rule.codes and list(rule.codes.values())[0]) or "x" + str(rule.options[0])]
    if isinstance(rule, Whole):
        return [str(rule.lo - 1), str(rule.hi + 1), "two", "1.5"] + ([] if rule.none_ok else [""])
    if isinstance(rule, Number):
        return ["nan", "inf", str(rule.lo - 1), str(rule.hi + 1), "abc"]
    if isinstance(rule, Flag):
        return ["yes", "true", "2", ""]
    if isinstance(rule, Text):
        return ["x" * (rule.limit + 1)]
    if isinstance(rule, Heads):
        return ["1-2", "1.2.3", "a.b", "1.4096", ",".join(["1.1"] * 4097)]
    if isinstance(rule, UnitRule):
        return ["neuron 5", "L1X2", "L1H", "H1"]
    raise AssertionError(f"{setting.key}: a rule this test does not know")


def test_the_linked_settings_are_the_app_s_link_parameters():
    assert len(LINKED) >= 30
    names = [s.link for s in LINKED]
    assert len(names) == len(set(names)) and links.PACKED not in names
    assert set(links.LINKED) == set(names) and all(links.LINKED[s.link] is s for s in LINKED)
    # every linked setting has a rule, and the sidebar's settings keep their short names in links
    assert all(s.rule is not None for s in LINKED)
    assert {S.MODEL_SOURCE.link, S.HF_NAME.link, S.PROMPT.link} == {"source", "model", "prompt"}


@pytest.mark.parametrize("setting", LINKED, ids=lambda s: s.link)
def test_every_linked_setting_round_trips_through_a_link(setting):
    for value in valid_values(setting):
        params = links.link_params({setting.key: value})
        if value is None or value == []:
            assert setting.link not in params  # nothing to carry: the page's default
            continue
        name = links.PACKED if setting is S.PROMPT and len(value) > S.MAX_LINK_PROMPT else setting.link
        assert list(params) == [name], (setting.key, value, params)
        back = {}
        assert links.apply_link(back, params) == []
        got = back[setting.key]
        assert got == value and type(got) is type(value), (setting.key, value, got)
        assert back[K.LINKED_KEYS] == {setting.key: name}


@pytest.mark.parametrize("setting", LINKED, ids=lambda s: s.link)
def test_an_invalid_link_value_is_refused_by_the_setting_s_rule(setting):
    for raw in invalid_values(setting):
        with pytest.raises(BadValue):
            setting.parse(raw)
        state = {}
        notices = links.apply_link(state, {setting.link: raw})
        assert setting.key not in state, (setting.key, raw)
        if len(raw) > links.MAX_LINK_VALUE:  # refused by its length before any rule reads it (4,097 heads)
            assert notices == [
                f"The link's `{setting.link}` is longer than {links.MAX_LINK_VALUE:,} characters; it was ignored."
            ]
            continue
        assert len(notices) == 1 and notices[0].startswith(f"The link's `{setting.link}` must be "), notices
        assert notices[0].endswith("; the default is shown instead.")


def test_a_rule_s_message_says_what_a_value_may_be():
    with pytest.raises(BadValue, match="^a whole number from 0 to 2147483647$"):
        S.SEED.parse("-1")
    with pytest.raises(BadValue, match="^one of pre, post$"):
        S.NORM.parse("sideways")
    with pytest.raises(BadValue, match="^one of bundled, preset, pretrained$"):  # a session's runs have no code
        S.MODEL_SOURCE.parse("trained")
    with pytest.raises(BadValue, match="^a number from 0 to 2$"):
        S.GEN_TEMP.parse("2.5")


def test_a_unit_in_a_link_is_read_as_the_unit_type_prints_it():
    assert S.UNIT.parse(" l3h1 ") == "L3H1" == str(Unit.head(3, 1))
    assert links.unit_params({}, Unit.neuron(2, 26))["unit"] == "L2N26"


def test_the_source_travels_by_its_code_and_a_session_run_stays_out():
    assert links.link_params({S.MODEL_SOURCE.key: S.SOURCE_BUNDLED}) == {"source": "bundled"}
    assert links.link_params({S.MODEL_SOURCE.key: S.SOURCE_TRAINED}) == {}


def test_a_number_keeps_its_value_through_the_link():
    for value in (0.35, 0.05, 1.0, 1.95):
        assert S.GEN_TEMP.parse(S.GEN_TEMP.format(value)) == value
    assert math.isclose(S.ATT_GEN_TOPP.parse(S.ATT_GEN_TOPP.format(0.9)), 0.9)


def test_every_setting_s_key_is_the_one_keys_py_names():
    records = S.records()
    assert {name: getattr(K, name) for name in records} == {name: s.key for name, s in records.items()}
    keys = [s.key for s in records.values()]
    assert len(keys) == len(set(keys))
    others = {v for n, v in vars(K).items() if n.isupper() and isinstance(v, str) and n not in records}
    assert not others & set(keys)  # a key is a setting's or keys.py's own, never both


def test_a_record_draws_its_widget_with_its_label_range_and_default():
    """The widget call reads the record: label, key, help, the rule's range and the default; a page's override
    (a range the model decides) wins."""
    calls = []

    class Where:
        def __getattr__(self, widget):
            return lambda **args: calls.append((widget, args)) or args.get("value")

    S.GEN_TOPK.number_input(Where(), max_value=50257)
    S.GEN_TEMP.slider(Where())
    S.GEN_PACE.select_slider(Where())
    S.GEN_EOS.checkbox(Where())
    assert calls[0] == (
        "number_input",
        dict(label="Top-k (0 = off)", key=K.GEN_TOPK, help=S.TOP_K_HELP, min_value=0, max_value=50257, step=1, value=0),
    )
    assert calls[1] == (
        "slider",
        dict(label="Temperature", key=K.GEN_TEMP, help=S.TEMP_HELP, min_value=0.0, max_value=2.0, step=0.05, value=1.0),
    )
    assert calls[2][1]["options"] == list(S.PACES) and "value" not in calls[2][1]
    assert calls[3][1]["value"] is False and calls[3][1]["label"] == "Stop at <|endoftext|>"
