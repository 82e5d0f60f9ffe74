"""Where a model runs and in what precision: the choices torch reports on this machine.

Half precision is offered for GPU inference (CUDA, Apple's MPS), where it halves memory and speeds up the matrix
work; on a CPU float32 is the fast path, so the app offers only it there (the library converts to any of the
three anywhere, and the tests check bfloat16 and float16 against float32 on the CPU). Captures, logits and
probabilities come back as float32 whatever the model's precision (`gptviz.model.hooks`, `gptviz.model.generate`)."""

from __future__ import annotations

import functools

import torch

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def available_devices() -> list[str]:
    """ "cpu", then "cuda" and "mps" where torch reports them."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else []) + (["mps"] if mps_available() else [])


def available_dtypes(device: str) -> list[str]:
    """The precisions the app offers on `device`: float32 everywhere; float16 on a GPU; bfloat16 where the GPU
    supports it (CUDA reports it; MPS has it from macOS 14, which torch reports by accepting a bfloat16 tensor)."""
    if device == "cuda":
        return ["float32", "float16"] + (["bfloat16"] if torch.cuda.is_bf16_supported() else [])
    if device == "mps":
        return ["float32", "float16"] + (["bfloat16"] if _mps_bf16() else [])
    return ["float32"]


@functools.lru_cache(maxsize=1)
def _mps_bf16() -> bool:
    try:
        torch.ones(1, device="mps", dtype=torch.bfloat16)
        return True
    except (RuntimeError, TypeError):
        return False


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"precision must be one of {', '.join(DTYPES)}, got {name!r}")
    return DTYPES[name]


def place(model, device: str = "cpu", dtype: str = "float32"):
    """`model` moved to `device` in `dtype` (in place, as nn.Module.to does); clear errors for a device torch
    does not have here or an unknown precision."""
    if device not in available_devices():
        raise ValueError(f"device {device!r} is not available here; choose one of {', '.join(available_devices())}")
    return model.to(device=device, dtype=torch_dtype(dtype))
