"""The C extension's boundary (gptviz/index/block_stats_module.c): arrays of the wrong dtype, dimensions, layout or
size, indices outside the arrays they index, read-only or shared outputs and a short workspace raise ValueError
before the pass runs, and leave every array as it was; and the library runs no compiler: a scan with an empty PATH
still takes the C pass (the extension built beforehand, as an install does)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gptviz.index import native
from gptviz.index.histograms import _Binner
from tests.support import ROOT

U, W, FIRST, N, BINS, K, R, SLOTS = 6, 4, 1, 5, 8, 3, 2, 3


def arrays(ext) -> dict:
    """A consistent call: a block of W units (FIRST ..) of U, N rows, BINS bins, a top K and a sample of R."""
    g = np.random.default_rng(0)
    return dict(
        values=g.standard_normal((N, W)).astype(np.float32),
        rows=None,
        slots=np.arange(N) % SLOTS,
        loc=np.arange(N),
        keys=g.permutation(N).astype(np.int64),
        first=FIRST,
        insert=True,
        token_sums=np.zeros((SLOTS, U), np.float32),
        zero_bin=np.full(U, BINS // 2, np.int32),
        inv_width=np.full(U, 2.0, np.float32),
        counts=np.zeros((U, BINS), np.int64),
        vmin=np.full(U, np.inf, np.float32),
        vmax=np.empty(W, np.float32),
        vsq=np.zeros(U),
        best_v=np.full((U, K), -np.inf, np.float32),
        best_loc=np.full((U, K), -1),
        samp_key=np.zeros((U, R), np.int64),
        samp_v=np.zeros((U, R), np.float32),
        samp_loc=np.full((U, R), -1),
        workspace=workspace(ext, W, BINS),
    )


@pytest.fixture
def compiled(block_stats_extension):
    return block_stats_extension[0]


def workspace(ext, w: int, bins: int) -> np.ndarray:
    """The pass's scratch, from a 64-byte boundary (as native.BlockStats gives it)."""
    size = ext.workspace_bytes(w, bins)
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + size]


def read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def shared_vmax(a: dict) -> np.ndarray:
    return a["vmin"][:W]  # vmax inside vmin


BROKEN = {  # what is changed -> (the change, what the message names)
    "values float64": (lambda a: {"values": a["values"].astype(np.float64)}, "values must hold float32"),
    "values 1-D": (lambda a: {"values": a["values"][:, 0].copy()}, "values must have 2 dimensions"),
    "values' columns strided": (lambda a: {"values": np.zeros((N, 2 * W), np.float32)[:, ::2]}, "unit-stride"),
    "values a list": (lambda a: {"values": a["values"].tolist()}, "values must be a buffer"),
    "a slot past token_sums": (lambda a: {"slots": a["slots"] + SLOTS}, "slot"),
    "a negative slot": (lambda a: {"slots": a["slots"] - 1}, "slot"),
    "a row past values": (lambda a: {"rows": np.array([0, 1, 2, 3, N])}, "outside values"),
    "one slot short": (lambda a: {"slots": a["slots"][:-1].copy()}, "slots has 4 rows, not 5"),
    "keys int32": (lambda a: {"keys": a["keys"].astype(np.int32)}, "keys must hold int64"),
    "the block past the units": (lambda a: {"first": U - W + 1}, "outside token_sums"),
    "a negative first unit": (lambda a: {"first": -1}, "outside token_sums"),
    "counts of fewer units": (lambda a: {"counts": a["counts"][:-1].copy()}, "counts has 5 units, not 6"),
    "counts transposed": (lambda a: {"counts": np.zeros((BINS, U), np.int64).T}, "counts must be C-contiguous"),
    "token_sums transposed": (lambda a: {"token_sums": np.zeros((U, SLOTS), np.float32).T}, "C-contiguous"),
    "vmax too short": (lambda a: {"vmax": a["vmax"][:-1].copy()}, "vmax has 3 units, not 4"),
    "best_loc's K apart": (lambda a: {"best_loc": np.full((U, K + 1), -1)}, "best_loc has 4 entries, not 3"),
    "samp_loc's R apart": (lambda a: {"samp_loc": np.full((U, R + 1), -1)}, "samp_loc has 3 entries, not 2"),
    "a top k of 0": (
        lambda a: {"best_v": np.zeros((U, 0), np.float32), "best_loc": np.zeros((U, 0), np.int64)},
        "top k of 0",
    ),
    "a zero bin past the bins": (lambda a: {"zero_bin": np.full(U, BINS, np.int32)}, "zero bin 8 is outside 1 .. 7"),
    "a zero bin of 0": (lambda a: {"zero_bin": np.zeros(U, np.int32)}, "zero bin 0"),
    "one bin": (lambda a: {"counts": np.zeros((U, 1), np.int64)}, "at least 2 bins"),
    "counts read-only": (lambda a: {"counts": read_only(a["counts"])}, "counts must be a writable buffer"),
    "vmax inside vmin": (lambda a: {"vmax": shared_vmax(a)}, "vmin and vmax share memory"),
    "best_v big-endian": (lambda a: {"best_v": a["best_v"].astype(">f4")}, "best_v must hold float32"),
    "a short workspace": (lambda a: {"workspace": a["workspace"][:-1]}, "the workspace must hold"),
}


def test_a_consistent_call_runs_and_writes_the_statistics(compiled):
    a = arrays(compiled)
    inserted = compiled.update(**a)
    v = a["values"]
    expected = 0  # each unit's values in row order: into the top K while a slot is empty or above its K-th
    for column in v.T:
        held = []
        for x in column:
            expected += len(held) < K or x > min(held)
            held = sorted(held + [x])[-K:]
    assert inserted == expected and K * W < expected < N * W
    assert np.array_equal(a["vmax"], v.max(0)) and np.array_equal(a["vmin"][FIRST : FIRST + W], v.min(0))
    assert np.isinf(a["vmin"][[0, 5]]).all() and a["counts"][[0, 5]].sum() == 0  # units outside the block untouched
    assert (a["counts"].sum(1)[FIRST : FIRST + W] == N).all()
    assert np.array_equal(a["best_v"][FIRST : FIRST + W], -np.sort(-v, 0)[:K].T)
    assert np.array_equal(a["best_loc"][FIRST : FIRST + W], np.argsort(-v, 0)[:K].T)  # loc = the row here


@pytest.mark.parametrize("broken", BROKEN)
def test_inconsistent_arrays_raise_value_error_and_write_nothing(compiled, broken):
    a = arrays(compiled)
    change, message = BROKEN[broken]
    a.update(change(a))
    before = {k: v.copy() for k, v in a.items() if isinstance(v, np.ndarray) and k != "workspace"}
    with pytest.raises(ValueError, match=message):
        compiled.update(**a)
    for name, array in before.items():
        assert np.array_equal(a[name], array, equal_nan=True), name


def test_the_torch_side_refuses_tensors_numpy_cannot_view(compiled):
    hist_range = np.tile(np.array([[-4.0, 4.0]], dtype=np.float32), (3, 1))
    stats = native.BlockStats(compiled, _Binner(hist_range, np.full(3, 8), 16))
    part = type("Part", (), {})()
    for name, shape, dtype in (
        ("counts", (3, 16), torch.long),
        ("vmin", (3,), torch.float32),
        ("vsq", (3,), torch.float64),
        ("best_v", (3, 2), torch.float32),
        ("best_loc", (3, 2), torch.long),
        ("samp_key", (3, 2), torch.long),
        ("samp_v", (3, 2), torch.float32),
        ("samp_loc", (3, 2), torch.long),
    ):
        setattr(part, name, torch.zeros(shape, dtype=dtype))
    loc = torch.arange(4)
    with pytest.raises(ValueError, match="values: .*BFloat16"):
        stats.update(part, torch.zeros(2, 3), loc % 2, loc, 0, torch.ones(4, 3, dtype=torch.bfloat16), None, False)
    with pytest.raises(ValueError, match="values must hold float32"):
        stats.update(part, torch.zeros(2, 3), loc % 2, loc, 0, torch.ones(4, 3, dtype=torch.float16), None, False)
    with pytest.raises(ValueError, match="slots has 3 rows, not 4"):
        stats.update(part, torch.zeros(2, 3), loc[:3] % 2, loc, 0, torch.ones(4, 3), None, False)
    assert part.counts.sum() == 0
    stats.update(part, torch.zeros(2, 3), loc % 2, loc, 0, torch.ones(4, 3), None, False)
    assert part.counts.sum() == 12  # the same arrays, consistent: counted


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
    return names


def test_the_library_holds_no_compiler_call():
    for path in sorted((ROOT / "gptviz").rglob("*.py")):
        builders = {
            m
            for m in imported_modules(path)
            if m.split(".")[0] in ("distutils", "setuptools", "cffi") or m.startswith("torch.utils.cpp_ext")
        }
        assert not builders, (path, builders)
        assert "-march" not in path.read_text(encoding="utf-8"), path
    assert not imported_modules(ROOT / "gptviz" / "index" / "native.py") & {"subprocess", "ctypes", "shutil"}


@pytest.mark.subprocess
def test_a_scan_with_no_compiler_on_path_takes_the_c_pass(block_stats_extension):
    # the extension built beforehand, as an install does (imported under its name before gptviz, which then finds it
    # where an installed package's would be), and nothing on PATH to compile with
    built = next(block_stats_extension[1].glob("_block_stats.*"))
    code = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("gptviz.index._block_stats", {str(built)!r})
sys.modules[spec.name] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
import numpy as np
from gptviz import GPT, GPTConfig, index as ix
model = GPT(GPTConfig(vocab_size=50, n_ctx=16, d_model=16, n_layers=1, n_heads=2)).eval()
index = ix.build_index(model, [ix.Document("d", np.arange(60) % 50)], top_k=3, bins=8, min_count=2)
print(index.meta["scan"]["statistics"])
"""
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "GPTVIZ_NATIVE")} | {"PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["C"]
