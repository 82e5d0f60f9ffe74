"""gptviz.notebook's attention heatmap in JupyterLab against CircuitsVis's attention_heads, on the same random
pattern: the time from a cell's execution to the heatmap drawn, and the bytes the browser received meanwhile.

A random causal pattern of 12 layers x 12 heads (softmax-like rows: uniform weights under the diagonal, normalised)
at 256 and 1,024 tokens is made in the kernel first (not timed). Then each measured cell is one call:
`attention(p, tokens)` (all 12 layers given; the widget sends what it draws: one layer, the picked head in full,
every head as a max-pooled thumbnail when the whole would be too large) or `attention_heads(p[0], tokens)`
(CircuitsVis draws one layer's heads: it is given layer 0's 12 heads). Timing runs in the page: from the command
that runs the cell (performance.now) to the first animation frame after the drawing appears in that cell's output
(gptviz: its canvas carries data-cell once painted; CircuitsVis: a canvas with a size inside its root). Bytes: the
kernel websocket's frames received in that time (JupyterLab's own traffic included, a few KB).

CircuitsVis offline: its HTML checks the network (urlopen of google.com, 1 s at most) and, without one, inlines its
whole JavaScript bundle (dist/cdn/iife.js) in every output; with a network it loads the bundle from unpkg. This
machine has no network, so the offline path is what is measured. JupyterLab runs on 127.0.0.1 (port --port).

    python -m benchmarks notebook                       # 256 and 1,024 tokens, 3 runs each (median)
    python -m benchmarks notebook -- --tokens 256 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.load_test import ARGS, CHROMIUM  # the same browser setup
from benchmarks.servers import jupyterlab, stop_process

ROOT = Path(__file__).resolve().parents[1]
L, H = 12, 12

SETUP = f"""\
import numpy as np
from gptviz.notebook import attention
try:
    from circuitsvis.attention import attention_heads
except ImportError:
    attention_heads = None

def pattern(T, seed=0):
    p = np.random.default_rng(seed).random(({L}, {H}, T, T), dtype=np.float32)
    p *= np.tril(np.ones((T, T), dtype=np.float32))
    p /= p.sum(-1, keepdims=True)
    return p
"""

# a cell's drawing: what appears in its output once the heatmap is on screen
DRAWN = {"gptviz": "canvas.gv-heat[data-cell]", "circuitsvis": "[id^='circuits-vis'] canvas"}

MEASURE = """async ([index, selector, timeoutMs]) => {
  const app = window.jupyterapp, panel = app.shell.currentWidget, nb = panel.content;
  window.__gvBytes = 0;
  nb.activeCellIndex = index;
  const node = nb.widgets[index].node;
  const start = performance.now();
  app.commands.execute('notebook:run-cell');
  return await new Promise((resolve) => {
    const tick = () => {
      const el = node.querySelector(selector);
      const ready = el && (el.tagName !== 'CANVAS' || el.width > 0);
      if (ready) requestAnimationFrame(() => resolve({ms: performance.now() - start, bytes: window.__gvBytes}));
      else if (performance.now() - start > timeoutMs) resolve({ms: null, bytes: window.__gvBytes});
      else requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  });
}"""


def notebook(sizes: list[int], repeats: int, with_cv: bool) -> tuple[dict, list[tuple[str, int]]]:
    """The notebook's cells: setup, the patterns, then one cell per (tool, size, repeat); and which is which."""
    cells = [SETUP] + [f"p{T} = pattern({T})\ntokens{T} = [f'tok{{i}}' for i in range({T})]\n'ready'" for T in sizes]
    plan = []
    for T in sizes:
        for _ in range(repeats):
            for tool in ("gptviz", "circuitsvis") if with_cv else ("gptviz",):
                plan.append((tool, T, len(cells)))
                cells.append(
                    f"attention(p{T}, tokens{T})" if tool == "gptviz" else f"attention_heads(p{T}[0], tokens{T})"
                )
    nb = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None} for c in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return nb, plan


def run_cell_until(page, index: int, text: str, timeout_s: float) -> None:
    """Run a setup cell and wait for its output to hold `text`."""
    page.evaluate(
        """(i) => { const nb = window.jupyterapp.shell.currentWidget.content; nb.activeCellIndex = i;
                     window.jupyterapp.commands.execute('notebook:run-cell'); }""",
        index,
    )
    page.wait_for_function(
        """([i, t]) => { const nb = window.jupyterapp.shell.currentWidget.content;
        return (nb.widgets[i].node.querySelector('.jp-OutputArea') || {}).textContent?.includes(t); }""",
        arg=[index, text],
        timeout=timeout_s * 1000,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, nargs="+", default=[256, 1024])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--port", type=int, default=8640)
    ap.add_argument("--without-circuitsvis", action="store_true", help="gptviz alone")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one drawing may take before it is a miss")
    args = ap.parse_args()
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    try:
        import circuitsvis

        with_cv, cv_version = True, circuitsvis.__version__
    except ImportError:
        with_cv, cv_version = False, None
    with_cv = with_cv and not args.without_circuitsvis
    folder = Path(tempfile.mkdtemp(prefix="gptviz-bench-nb-"))
    nb, plan = notebook(args.tokens, args.repeats, with_cv)
    (folder / "bench.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    lab = jupyterlab(folder, args.port, ROOT)
    results: dict[tuple[str, int], list[tuple[float | None, int]]] = {}
    crashed: dict[tuple[str, int], int] = {}  # (tool, tokens) -> the run whose tab crashed
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(args.timeout * 1000)
            # every frame the kernel's websocket brings, counted in the page (bytes of text or binary)
            page.add_init_script("""(() => { window.__gvBytes = 0;
              // a subclass keeps WebSocket.OPEN and the other statics JupyterLab reads
              window.WebSocket = class extends window.WebSocket { constructor(...a) { super(...a);
                this.addEventListener('message', (e) => { window.__gvBytes += typeof e.data === 'string'
                  ? new TextEncoder().encode(e.data).length : (e.data.byteLength || e.data.size || 0); }); } };
            })()""")
            page.goto(f"http://127.0.0.1:{args.port}/lab/tree/bench.ipynb")
            page.wait_for_function(
                "window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                "window.jupyterapp.shell.currentWidget.content && "
                "window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel"
            )
            print("JupyterLab open, kernel started", flush=True)
            time.sleep(3)
            run_cell_until(page, 0, "", args.timeout)  # setup (imports)
            page.wait_for_function(
                """() => { const nb = window.jupyterapp.shell.currentWidget.content;
                return nb.widgets[0].model.sharedModel.execution_count != null; }""",
                timeout=args.timeout * 1000,
            )
            for i, _ in enumerate(args.tokens):
                run_cell_until(page, 1 + i, "ready", args.timeout)
            print("patterns made", flush=True)
            for tool, T, index in plan:
                try:
                    got = page.evaluate(MEASURE, [index, DRAWN[tool], args.timeout * 1000])
                except PlaywrightError as err:  # the tab ran out of memory: a result, and the end of this page
                    if "crashed" not in str(err):
                        raise
                    crashed[(tool, T)] = len(results.get((tool, T), [])) + 1
                    print(f"{tool:12s} {T:5d} tokens: the tab crashed (run {crashed[(tool, T)]}); stopping", flush=True)
                    break
                results.setdefault((tool, T), []).append((got["ms"], got["bytes"]))
                shown = "not drawn" if got["ms"] is None else f"{got['ms'] / 1000:.2f} s"
                print(f"{tool:12s} {T:5d} tokens: {shown}, {got['bytes'] / 1e6:.2f} MB received", flush=True)
                # the outputs stay: clearing them would time JupyterLab's disposal in the next run
            browser.close()
    finally:
        stop_process(lab, timeout=20)
        shutil.rmtree(folder, ignore_errors=True)
    load = os.getloadavg()
    print(
        f"\n{L} layers x {H} heads, random causal pattern; JupyterLab in Chromium; median of {args.repeats}; "
        f"circuitsvis {cv_version or 'not installed'}; load average {load[0]:.1f} / {load[1]:.1f} / "
        f"{load[2]:.1f}"
    )
    print(
        "| tokens | gptviz: cell to heatmap | gptviz: bytes received | CircuitsVis: cell to heatmap | "
        "CircuitsVis: bytes received |"
    )
    print("|---|---|---|---|---|")
    for T in args.tokens:
        cols = []
        for tool in ("gptviz", "circuitsvis"):
            runs = results.get((tool, T), [])
            times = [ms for ms, _ in runs if ms is not None]
            crash = f"; the tab crashed on run {crashed[(tool, T)]}" if (tool, T) in crashed else ""
            if not runs:
                cols += ["not measured" + crash, "-"]
                continue
            missed = len(runs) - len(times)
            cols.append(
                (f"{statistics.median(times) / 1000:.2f} s" if times else f"not drawn in {args.timeout:.0f} s")
                + (f" ({missed} of {len(runs)} not drawn)" if missed and times else "")
                + crash
            )
            cols.append(f"{statistics.median(b for _, b in runs) / 1e6:.2f} MB")
        print(f"| {T:,} | " + " | ".join(cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
