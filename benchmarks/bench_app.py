"""How fast the Attention page answers, timed with Streamlit's AppTest (a measurement, not a test).

On a preset (default gpt2-small, random weights) with an N-token prompt (default 64):
  - new prompt -> first heatmap: a rerun after the prompt changes (one forward pass with the attention
    patterns captured, then the figures), each time with a prompt the cache has not seen;
  - switch head: a rerun after choosing another head (no forward pass: the capture is cached);
  - switch head in the model view: the same with every layer x head panel drawn.
The model is built once before timing (st.cache_resource). The forward-pass counter
(benchmarks/forward_passes.py) is reported next to each timing to show which reruns ran the model.

    python -m benchmarks app                      # gpt2-small, 64 tokens, 5 repeats
    python -m benchmarks app -- --preset tiny --repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

from benchmarks.forward_passes import forward_count
from gptviz import PRESETS
from gptviz.app import keys as K
from gptviz.app import model_service
from gptviz.model.tokenizer import decode, encode

ROOT = Path(__file__).resolve().parents[1]

BASE = (
    "ROMEO: But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
    "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief, that thou her "
    "maid art far more fair than she. Be not her maid, since she is envious; her vestal livery is but "
    "sick and green, and none but fools do wear it; cast it off."
)


def prompt_of(n_tokens: int, variant: int) -> str:
    """A prompt of exactly n_tokens GPT-2 tokens, different for each variant (so the cache misses)."""
    text = decode(encode(f"Take {variant}. " + BASE * (1 + n_tokens // 60))[:n_tokens])
    if len(encode(text)) != n_tokens:
        raise ValueError(f"the cut prompt re-encodes to {len(encode(text))} tokens, not {n_tokens}")
    return text


def timed_run(at: AppTest) -> tuple[float, int]:
    before = forward_count()
    start = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed, forward_count() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="gpt2-small", choices=list(PRESETS))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    spec = model_service.ModelSpec(K.SOURCE_PRESET, args.preset, "pre")
    at = AppTest.from_file(str(ROOT / "app_pages" / "attention.py"), default_timeout=600)
    at.session_state["model_spec"] = spec
    at.session_state["prompt"] = prompt_of(args.tokens, -1)
    start = time.perf_counter()
    timed_run(at)  # builds the model (cached from here on)
    build = time.perf_counter() - start
    n_heads = PRESETS[args.preset].n_heads

    rows: dict[str, list[tuple[float, int]]] = {
        "new prompt -> first heatmap": [],
        "switch head": [],
        "switch head, model view tab": [],
    }
    for r in range(args.repeats):
        at.session_state["att_view"] = "One head"
        at.session_state["prompt"] = prompt_of(args.tokens, r)
        rows["new prompt -> first heatmap"].append(timed_run(at))
        at.selectbox(key="att_head").select((r + 1) % n_heads)
        rows["switch head"].append(timed_run(at))
    at.session_state["att_view"] = "Model view: every layer and head"
    timed_run(at)
    for r in range(args.repeats):
        at.selectbox(key="att_head").select(r % n_heads)
        rows["switch head, model view tab"].append(timed_run(at))

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"Attention page, {args.preset} (random weights), {args.tokens}-token prompt, {args.repeats} repeats; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), load average {load:.1f}; first run incl. building the model "
        f"{build:.1f} s\n"
    )
    print("| rerun | median (s) | min (s) | forward passes per rerun |")
    print("|---|---|---|---|")
    for name, values in rows.items():
        times = [t for t, _ in values]
        forwards = sorted({f for _, f in values})
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {', '.join(map(str, forwards))} |")


if __name__ == "__main__":
    main()
