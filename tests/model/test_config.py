"""GPTConfig: validation messages name the field; frozen; variants; round-trips; presets."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gptviz import PRESETS, ConfigError, GPTConfig, get_preset

BASE = dict(vocab_size=101, n_ctx=16, d_model=32, n_layers=2, n_heads=4)


def make(**changes) -> GPTConfig:
    return GPTConfig(**{**BASE, **changes})


@pytest.mark.parametrize(
    "changes, field_name",
    [
        (dict(d_model=30, n_heads=4), "d_model"),
        (dict(n_layers=0), "n_layers"),
        (dict(n_layers=-3), "n_layers"),
        (dict(n_ctx=0), "n_ctx"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(n_heads=0), "n_heads"),
        (dict(d_ff=0), "d_ff"),
        (dict(activation="swish"), "activation"),
        (dict(norm="middle"), "norm"),
        (dict(norm_type="batchnorm"), "norm_type"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(dropout="0.1"), "dropout"),
        (dict(ln_eps=0), "ln_eps"),
        (dict(d_model=32.0), "d_model"),
        (dict(n_ctx="16"), "n_ctx"),
        (dict(n_layers=True), "n_layers"),  # bool is an int subclass; still refused
        (dict(vocab_size=False), "vocab_size"),
        (dict(tie_weights=1), "tie_weights"),
        (dict(qkv_bias="yes"), "qkv_bias"),
    ],
)
def test_invalid_field_raises_naming_it(changes, field_name):
    with pytest.raises(ConfigError) as info:
        make(**changes)
    message = str(info.value)
    assert message.startswith(field_name + " ") or f"{field_name} (" in message, message
    assert isinstance(info.value, ValueError)


def test_divisibility_message_names_both_fields_and_suggests_heads():
    with pytest.raises(ConfigError, match=r"d_model \(30\) must be divisible by n_heads \(4\)") as info:
        make(d_model=30, n_heads=4)
    suggestions = str(info.value).split("n_heads in ")[1]
    assert "5" in suggestions and "15" in suggestions  # divisors of 30


@pytest.mark.parametrize("dropout", [0, 0.0, 0.5, 0.999])
def test_dropout_accepted_in_half_open_unit_interval(dropout):
    assert make(dropout=dropout).dropout == dropout


def test_frozen():
    cfg = make()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layers = 4  # type: ignore[misc]
    assert cfg.n_layers == 2


def test_d_ff_defaults_to_four_times_d_model_and_explicit_value_is_kept():
    assert make().d_ff == 128
    assert make(d_model=48, n_heads=4).d_ff == 192
    assert make(d_ff=77).d_ff == 77
    assert make().d_head == 8


def test_dataclasses_replace_gives_a_validated_variant():
    cfg = make()
    post = dataclasses.replace(cfg, norm="post")
    assert post.norm == "post" and cfg.norm == "pre"
    assert {f.name: getattr(post, f.name) for f in dataclasses.fields(post) if f.name != "norm"} == {
        f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "norm"
    }
    with pytest.raises(ConfigError, match="activation"):
        dataclasses.replace(cfg, activation="tanh")


def test_cfg_replace_keeps_default_d_ff_in_step_with_d_model():
    cfg = make()
    wider = cfg.replace(d_model=64)
    assert wider.d_ff == 256  # followed d_model
    assert cfg.replace(d_model=64, d_ff=100).d_ff == 100  # explicit wins
    assert make(d_ff=77).replace(d_model=64).d_ff == 77  # a custom d_ff is not overwritten
    assert dataclasses.replace(cfg, d_model=64).d_ff == 128  # plain dataclasses.replace copies the field
    with pytest.raises(ConfigError, match="n_heads"):
        cfg.replace(n_heads=5)


def test_to_dict_from_dict_round_trip():
    cfg = make(
        norm="post",
        norm_type="rmsnorm",
        activation="relu",
        tie_weights=False,
        qkv_bias=False,
        dropout=0.1,
        ln_eps=1e-6,
        d_ff=100,
        name="variant",
    )
    data = cfg.to_dict()
    assert data["d_ff"] == 100 and data["name"] == "variant" and data["norm_type"] == "rmsnorm"
    again = GPTConfig.from_dict(data)
    assert again == cfg and again.name == "variant"
    assert GPTConfig.from_dict(json.loads(cfg.to_json())) == cfg


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="n_embd"):
        GPTConfig.from_dict({**BASE, "n_embd": 32})


def test_name_is_a_label_not_part_of_equality():
    assert make(name="a") == make(name="b")
    assert hash(make(name="a")) == hash(make(name="b"))
    assert make() != make(norm="post")


def test_presets_are_valid_configs_with_their_own_names():
    assert {"gpt1", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt2-small-untied-noqkvbias", "tiny"} <= set(
        PRESETS
    )
    for name, cfg in PRESETS.items():
        assert isinstance(cfg, GPTConfig) and cfg.name == name
    xl = PRESETS["gpt2-xl"]
    assert (xl.n_layers, xl.d_model, xl.n_heads, xl.d_ff, xl.vocab_size, xl.n_ctx) == (48, 1600, 25, 6400, 50257, 1024)
    gpt1 = PRESETS["gpt1"]
    assert (gpt1.norm, gpt1.vocab_size, gpt1.n_ctx, gpt1.tie_weights) == ("post", 40000, 512, True)
    untied = PRESETS["gpt2-small-untied-noqkvbias"]
    assert (untied.tie_weights, untied.qkv_bias) == (False, False)


def test_gpt1_uses_the_tanh_approximation_of_gelu_without_changing_its_parameter_count():
    """GPT-1 (Radford et al. 2018, and its released code) used GELU's tanh approximation, like GPT-2; the
    activation has no parameters, so the reference total stays 116,169,216."""
    from gptviz.model.params import total_params

    gpt1 = PRESETS["gpt1"]
    assert gpt1.activation == "gelu_tanh"
    assert total_params(gpt1) == 116_169_216
    assert total_params(gpt1.replace(activation="gelu")) == total_params(gpt1)


def test_get_preset_unknown_name_lists_choices():
    assert get_preset("gpt2-small") is PRESETS["gpt2-small"]
    with pytest.raises(ConfigError, match="unknown preset 'gpt5'.*gpt2-small"):
        get_preset("gpt5")
