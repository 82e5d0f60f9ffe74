"""Run in a fresh subprocess: the growth of this process's resident memory (its peak, VmHWM, against VmRSS just
before) while one call runs. tracemalloc sees none of torch's memory and torch's profiler none of what the process
holds beside the tensors; the server's budget is about resident memory, so that is what is measured here. (The Heads
forming page's Grow run is measured as the server runs it by benchmarks/bench_grow_induction.py, peak_growth.)

    python tests/support/rss_growth.py wiring gpt2-small 4 768 128     -> prints the growth in bytes
    python tests/support/rss_growth.py page_capture gpt2-small 384
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import torch  # noqa: E402

torch.set_num_threads(1)


def status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def wiring_call(preset: str, depth: str, width: str, T: str):
    from gptviz import PRESETS
    from gptviz.methods import wiring

    config = PRESETS[preset].replace(n_layers=int(depth), d_model=int(width))
    ids = tuple(int(i) for i in wiring.random_tokens(int(T), config.vocab_size, 0))
    wiring.compare_wirings(config.replace(n_layers=1, d_model=2 * config.n_heads), ids[:4])  # torch's first-use costs
    return lambda: wiring.compare_wirings(config, ids)


def page_capture_call(preset: str, T: str):
    """The Attention page's capture (gptviz.app.model_service.get_capture: the capture, the finiteness check, the
    patterns
    in one block) on a preset's random weights; the model is loaded and a short capture run first."""
    import os

    os.environ.setdefault("GPTVIZ_MEMORY_MB", "8192")
    from gptviz.app import keys, model_service
    from gptviz.serve import allocator

    allocator.keep_freed_memory()  # as the app runs
    spec = model_service.ModelSpec(keys.SOURCE_PRESET, preset, "pre")
    cfg = model_service.load_model(spec).config
    names = model_service.attention_page_names(cfg.n_layers, cfg.norm)
    model_service.get_capture(spec, (1, 2, 3, 4), names)
    ids = tuple(int(i) for i in torch.randint(0, cfg.vocab_size, (int(T),), generator=torch.Generator().manual_seed(0)))
    allocator.release_freed_memory()  # what the warm-up left freed is not the call's
    return lambda: model_service.get_capture(spec, ids, names)


CALLS = {"wiring": wiring_call, "page_capture": page_capture_call}


def main(kind: str, *args: str) -> None:
    call = CALLS[kind](*args)
    try:  # reset the peak (VmHWM) to the current RSS, so the warm-up's own peak cannot hide the call's (Linux 4.0+)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = status("VmRSS")
    assert status("VmHWM") - before < 64 * 2**20, "the warm-up's peak must sit well below the call's"
    call()
    print(status("VmHWM") - before)


if __name__ == "__main__":
    main(*sys.argv[1:])
