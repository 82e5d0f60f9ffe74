"""One home for the size estimates (issue 61): every job's "how many bytes will this take" is a function of
gptviz.model.sizes (a training run's, which reads the server's job spec, of gptviz.serve.job_sizes); elsewhere a
function named like one is a measurement of what exists, or reads a file's config and length for sizes to count."""

from __future__ import annotations

import ast

import pytest

from gptviz.methods.graph_nodes import bias_names
from gptviz.model import sizes
from gptviz.model.weights import bundled_models, load_checkpoint, weights_nbytes
from tests.support import ROOT
from tests.support.memory import torch_peak
from tests.support.models import SMALL

HOMES = {"gptviz/model/sizes.py", "gptviz/serve/job_sizes.py"}
# Named like estimates, but not one: measurements of what is held, limits, serialisers, readers of a checkpoint's
# config and file length that hand them to sizes.load_nbytes, and the scan's estimate not yet moved (scan.py).
NOT_ESTIMATES = {
    "gptviz/model/hooks.py": {"storage_nbytes", "model_nbytes", "nbytes"},
    "gptviz/serve/bounded_cache.py": {"nbytes"},
    "gptviz/serve/memory.py": {"stored_bytes"},
    "gptviz/serve/allocator.py": {"resident_bytes"},
    "gptviz/model/load_limits.py": {"download_bytes"},
    "gptviz/model/params.py": {"memory_bytes"},
    "gptviz/app/services/__init__.py": {"nbytes_of", "_nbytes"},
    "gptviz/app/bundled_snapshots.py": {"snapshots_nbytes"},
    "gptviz/app/model_service.py": {"_loading_nbytes", "_stored_nbytes"},  # the folder a spec loads; the measure
    "gptviz/app/seen.py": {"pattern_bytes"},
    "gptviz/export.py": {"npz_bytes", "csv_bytes"},
    "gptviz/model/formats/load.py": {"path_nbytes", "check_file_bytes"},
    "gptviz/model/checkpoint.py": {"weights_nbytes"},
    "gptviz/model/weights.py": {"weights_nbytes"},
    "gptviz/model/gpt1_tokenizer.py": {"decode_single_token_bytes"},
    "gptviz/index/scan.py": {"scan_nbytes"},  # counts the corpus's frequent tokens; sizes.index_scan_nbytes
}


def size_functions() -> dict[str, set[str]]:
    """{module path: names of the functions and methods in it named like a size (…nbytes, …_bytes)}."""
    found = {}
    for path in sorted((ROOT / "gptviz").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and (node.name.endswith("nbytes") or node.name.endswith("_bytes"))
        }
        if names:
            found[path.relative_to(ROOT).as_posix()] = names
    return found


def test_every_size_estimate_lives_in_its_one_home():
    stray = {
        path: sorted(names - NOT_ESTIMATES.get(path, set()))
        for path, names in size_functions().items()
        if path not in HOMES and names - NOT_ESTIMATES.get(path, set())
    }
    assert stray == {}
    assert len(size_functions()["gptviz/model/sizes.py"]) >= 20  # the jobs' estimates are there, not elsewhere


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("norm_type", ["layernorm", "rmsnorm"])
def test_the_contributors_estimate_counts_the_graphs_own_bias_nodes(norm, norm_type):
    config = SMALL.replace(norm=norm, norm_type=norm_type)
    assert sizes.stream_bias_count(config) == len(bias_names(config))


@pytest.mark.slow
def test_a_folders_load_estimate_covers_its_load():
    """The bundled model's float16 file beside its float32 weights said 41.4 MiB; loading peaked at 66.0 (the build's
    transient copy of its largest tensor, the token embedding)."""
    folder = bundled_models()["shakespeare-pre"]
    _, peak = torch_peak(lambda: load_checkpoint(folder))
    assert peak <= weights_nbytes(folder) <= 1.1 * peak, (weights_nbytes(folder) / 2**20, peak / 2**20)
