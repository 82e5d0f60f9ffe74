"""Devices and precision: the choices torch reports, half precision against float32 on the CPU (bfloat16 and
float16), captures and probabilities in float32 whatever the model runs in, and the app's model spec."""

from __future__ import annotations

import copy

import pytest
import torch

from gptviz import capture, generate, get_tokenizer, load_pretrained, stream
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model import devices
from gptviz.model.devices import available_devices, available_dtypes, place

PROMPT = "Ham.\nWho's there?\n\nHor.\nFriends to this ground, and liegemen to the Dane.\n"


@pytest.fixture(scope="module")
def reference():
    model = load_pretrained("shakespeare-pre")
    ids = torch.tensor([get_tokenizer().encode(PROMPT)])
    return model, ids, model(ids)


def test_the_choices_follow_what_torch_reports(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "mps_available", lambda: False)
    assert available_devices() == ["cpu"] and available_dtypes("cpu") == ["float32"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(devices, "mps_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert available_devices() == ["cpu", "cuda", "mps"]
    assert available_dtypes("cuda") == ["float32", "float16"]
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert available_dtypes("cuda") == ["float32", "float16", "bfloat16"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype, logit_tolerance", [("bfloat16", 0.3), ("float16", 0.05)])
def test_half_precision_matches_float32_on_the_cpu(reference, dtype, logit_tolerance):
    model, ids, ref = reference
    half = place(copy.deepcopy(model), "cpu", dtype)
    assert half.wte.weight.dtype == getattr(torch, dtype) and model.wte.weight.dtype == torch.float32
    out = half(ids).float()
    assert (out - ref).abs().max().item() < logit_tolerance  # logits span about +-16
    assert (out.argmax(-1) == ref.argmax(-1)).float().mean().item() >= 0.95
    # what the app shows comes back as float32 whatever the weights are
    logits, cache = capture(half, ids, ["blocks.0.attn.hook_pattern", "blocks.1.hook_resid_post"])
    assert logits.dtype == getattr(torch, dtype)  # the model's own logits, as a plain forward pass gives them
    assert all(v.dtype == torch.float32 and v.device.type == "cpu" for v in cache.values())
    _, ref_cache = capture(model, ids, ["blocks.0.attn.hook_pattern"])
    assert torch.allclose(cache["blocks.0.attn.hook_pattern"], ref_cache["blocks.0.attn.hook_pattern"], atol=0.03)
    step = next(iter(stream(half, ids[0].tolist(), 1, temperature=0)))
    assert step.probs.dtype == torch.float32 and step.probs.sum().item() == pytest.approx(1.0, abs=1e-4)
    # greedy decoding with the KV cache gives the float32 model's tokens
    assert generate(half, ids[0].tolist(), 12, temperature=0) == generate(model, ids[0].tolist(), 12, temperature=0)


@pytest.mark.slow
def test_bad_device_or_precision_is_a_clear_error(reference):
    model = reference[0]
    with pytest.raises(ValueError, match="device 'tpu' is not available here; choose one of cpu"):
        place(model, "tpu")
    with pytest.raises(ValueError, match="precision must be one of float32, float16, bfloat16, got 'int8'"):
        place(model, "cpu", "int8")


def test_the_app_loads_the_precision_the_spec_names():
    spec = model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre", 0, "cpu", "bfloat16")
    assert model_service.load_model(spec).wte.weight.dtype == torch.bfloat16
    logits, store = model_service.get_capture(spec, (464, 3290, 286), ("blocks.0.attn.hook_pattern",))
    assert logits.dtype == torch.float32 and store["blocks.0.attn.hook_pattern"].dtype == torch.float32
    assert "bfloat16" in spec.label()
    assert model_service.load_model(spec._replace(dtype="float32")).wte.weight.dtype == torch.float32
    assert model_service.ModelSpec(K.SOURCE_PRESET, "tiny", "pre").dtype == "float32"
