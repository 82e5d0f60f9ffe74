"""The live page at the engine's pace (issue 60, item 3): Generate at "as fast as it writes" on the Attention page, in
Chromium, against the engine's own time for the same N tokens; the bound is 1.1x the engine's time plus 0.3 s.

For each run, by the page's clock from Generate's input event:
  - "all N drawn": the first painted frame that shows every token: the map with N rows, the next-token list of the
    last step and the progress at N of N (the live view's last frame), or the finished view's caption, whichever
    comes first; the bound is read against it;
  - "finished view": the finished run's caption painted (the page's rerun after the live view: replay slider,
    figures);
  - the server's own "wrote them in" (the model's time in the server, beside the page's work), and the server's
    CPU seconds from the click to the finished view (/proc), steadier than the clock on a shared machine.
The engine: stream(attention=True) in this process on one thread (the server's generation setting), the same prompt,
settings and N, median of 3, measured between the page's runs (so it sees the same load).

With --before DIR (another checkout, e.g. `git archive main | tar -x -C DIR`), a second server runs that app and the
runs alternate between them (before, after, after, before, ...), so both see the same load.

    python -m benchmarks live-pace                                  # both models, 4 runs each
    python -m benchmarks live-pace -- --models bundled --runs 6 --before /tmp/before
    python -m benchmarks live-pace -- --models gpt2-small --extra '&live_why=0'   # a setting in the address
    python -m benchmarks live-pace -- --engine-beside                 # the engine alone, then beside a neighbour

--engine-beside times the engine only (no page), quiet and then beside one neighbour process on the other core: a
Python loop (CPU only), then a NumPy sum over 256 MiB again and again (memory traffic). It says how much of the page's
gap to the engine a neighbour alone could explain (a model that reads its weights from memory for every token may
slow beside the second), apart from the page's own work.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from benchmarks import run_folder
from benchmarks.bench_browser import FREE_PACE, MODELS, engine_tokens_per_s, prompt_of
from benchmarks.load_test import ARGS, CHROMIUM, ROOT, Server
from benchmarks.servers import cpu_seconds

TOKENS = 60
PROMPT_TOKENS = 40


def load() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def bound(engine_s: float) -> float:
    """The issue's bound on the page's time for what the engine wrote in `engine_s`."""
    return 1.1 * engine_s + 0.3


def done_caption(n: int) -> str:
    """A JS regex literal for the finished run's caption (gptviz.app.live_text.text_so_far)."""
    return f"/{re.escape(f'then {n} new ones: the model wrote')}/"


def all_drawn(n: int) -> str:
    """A JS condition (gv, bench_latency.INIT_JS): every token of n painted, in the live view's last frame (progress at
    n of n, the last step's next-token list, the map with n rows; Streamlit may already mark that frame stale, as the
    page's rerun to the finished view has begun: it is on the screen all the same) or in the finished view."""
    painted = "[...document.querySelectorAll('p, [data-testid=\"stText\"]')].some((e) => {re}.test(e.textContent))"
    return (
        f"gv.text({done_caption(n)}) || ({painted.format(re=f'/Generating: {n} of {n} tokens/')} && "
        f"{painted.format(re=f'/Step {n - 1}: sampled/')} && gv.deep('.gv-map').some((m) => m.__gv && "
        f"m.__gv.data && m.__gv.data.Q === {n}))"
    )


def generate_runs(page, runs: int, n: int, server_pid: int | None = None) -> tuple[list[dict], list[dict]]:
    """Generate clicked `runs` times on an open Attention page (N = n, the free pace): per run, the first token drawn
    ({seen}: bench_latency's sample) and {page: all N drawn, finished: the finished view, server: the server's own
    "wrote them in", cpu: the server's CPU seconds}, all in seconds."""
    from benchmarks.bench_latency import GENERATING, idle, timed

    firsts, out = [], []
    button = page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Generate")
    done = done_caption(n)
    gone = f"(gv.s.gone = gv.s.gone || !gv.text({done}))"  # the last run's caption must go first
    for _ in range(runs):
        cpu = cpu_seconds(server_pid) if server_pid else None
        firsts.append(timed(page, f"{gone} && (gv.text({GENERATING}) || gv.text({done}))", button.click, settle=False))
        page.evaluate("src => gv.mark('all', src)", f"{gone} && ({all_drawn(n)})")
        page.evaluate("src => gv.mark('done', src)", f"{gone} && gv.text({done})")
        finished = page.wait_for_function("() => gv.s.marks.done", timeout=600_000, polling=100).json_value()
        page.wait_for_function("() => gv.s.marks.all", timeout=60_000, polling=50)
        caption = page.get_by_text(re.compile(f"then {n} new ones: the model wrote")).first.inner_text()
        written = float(re.search(r"wrote them in ([0-9.]+) s", caption).group(1))
        got = {"page": page.evaluate("() => gv.s.marks.all"), "finished": finished, "server": written}
        if cpu is not None:
            got["cpu"] = cpu_seconds(server_pid) - cpu
        out.append(got)
        idle(page)
    return firsts, out


def open_page(browser, url: str, model: str, n: int, extra: str = ""):
    from benchmarks.bench_latency import INIT_JS, open_attention

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(INIT_JS)
    page = context.new_page()
    page.set_default_timeout(300_000)
    open_attention(page, url, model, prompt_of(PROMPT_TOKENS), f"&att_gen_n={n}&att_gen_pace={quote(FREE_PACE)}{extra}")
    return context, page


def engine_s(model: str, n: int) -> float:
    """The engine's seconds for n tokens on one thread (median of 3)."""
    return n / engine_tokens_per_s(model, prompt_of(PROMPT_TOKENS), n)[1]


NEIGHBOURS = {
    "quiet": None,
    "beside a Python loop (CPU)": "while True: pass",
    "beside a 256 MiB NumPy sum (memory)": "import numpy as np\na = np.ones(2**25)\nwhile True: a.sum()",
}


def engine_beside(models: list[str], n: int) -> list[str]:
    """The engine's seconds for n tokens on one thread (median of 3), quiet and beside each neighbour: table lines."""
    lines = ["| model | engine quiet | " + " | ".join(list(NEIGHBOURS)[1:]) + " |", "|---|---|---|---|"]
    for model in models:
        cells = []
        for code in NEIGHBOURS.values():
            neighbour = subprocess.Popen([sys.executable, "-c", code]) if code else None
            try:
                time.sleep(0.5 if code else 0)  # the neighbour under way
                cells.append(engine_s(model, n))
            finally:
                if neighbour is not None:
                    neighbour.kill()
                    neighbour.wait()
        quiet = cells[0]
        lines.append(
            f"| {MODELS[model][1]} | {quiet:.2f} s | "
            + " | ".join(f"{x:.2f} s ({x / quiet:.2f}x)" for x in cells[1:])
            + " |"
        )
        print(lines[-1], flush=True)
    return lines


def measure(browser, servers: dict[str, Server], model: str, runs: int, n: int, extra: str = "") -> dict:
    """{app: [per-run samples]} with runs alternating between the apps, and the engine measured between them."""
    pages = {app: open_page(browser, s.url, model, n, extra) for app, s in servers.items()}
    samples: dict[str, list[dict]] = {app: [] for app in servers}
    engine: list[float] = []
    apps = list(servers)
    for r in range(runs):
        for app in apps if r % 2 == 0 else apps[::-1]:
            _, page = pages[app]
            _, got = generate_runs(page, 1, n, servers[app].proc.pid)
            got[0]["load"] = os.getloadavg()[0]
            samples[app] += got
            print(
                f"  {model} {app}: all {n} drawn {got[0]['page']:.2f} s, finished view {got[0]['finished']:.2f} s, "
                f"server wrote them in {got[0]['server']:.2f} s, server CPU {got[0].get('cpu', 0):.2f} s "
                f"(load {load()})",
                flush=True,
            )
        if r % 2 == 1 or r == runs - 1:
            engine.append(engine_s(model, n))
            print(f"  {model}: engine {engine[-1]:.2f} s (load {load()})", flush=True)
    for context, _ in pages.values():
        context.close()
    return {"samples": samples, "engine": statistics.median(engine), "engines": engine}


def report(results: dict[str, dict], n: int) -> list[str]:
    lines = [
        f'| model | app | runs | all {n} drawn, p50 (range) | finished view, p50 | the server\'s "wrote them in" '
        "| server CPU, p50 | engine (1 thread) | bound 1.1x + 0.3 s | within | load (1 min) during |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, res in results.items():
        eng = res["engine"]
        for app, xs in res["samples"].items():
            page = [x["page"] for x in xs]
            med = statistics.median(page)
            cpu = [x["cpu"] for x in xs if "cpu" in x]
            loads = [x["load"] for x in xs]
            cpu_s = f"{statistics.median(cpu):.2f} s" if cpu else "-"
            lines.append(
                f"| {MODELS[model][1]} | {app} | {len(xs)} | {med:.2f} s ({min(page):.2f}-{max(page):.2f}) | "
                f"{statistics.median(x['finished'] for x in xs):.2f} s | "
                f"{statistics.median(x['server'] for x in xs):.2f} s | {cpu_s} | {eng:.2f} s | "
                f"{bound(eng):.2f} s | {'ok' if med <= bound(eng) else '**over**'} | "
                f"{min(loads):.1f}-{max(loads):.1f} |"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--runs", type=int, default=4, help="Generate runs per model and app")
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--before", metavar="DIR", help="another checkout to run beside this one, interleaved")
    parser.add_argument("--engine-beside", action="store_true", help="time the engine beside neighbours, no page")
    parser.add_argument("--extra", default="", help="more of the page's address, e.g. '&live_why=0'")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"load average at the start: {load()}", flush=True)
    started = time.perf_counter()
    if args.engine_beside:
        text = "\n".join(engine_beside(args.models, args.tokens))
        text += f"\n\n{time.perf_counter() - started:.0f} s; load average at the end: {load()}"
        print("\n" + text)
        (run_folder.run_folder() / "engine-beside.md").write_text(text + "\n", encoding="utf-8")
        return 0
    servers: dict[str, Server] = {}
    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            if args.before:
                servers["before"] = Server(root=Path(args.before))
            servers["after" if args.before else "this checkout"] = Server(root=ROOT)
            for model in args.models:
                results[model] = measure(browser, servers, model, args.runs, args.tokens, args.extra)
        finally:
            for s in servers.values():
                s.close()
            browser.close()
    lines = report(results, args.tokens)
    lines.append(f"\n{time.perf_counter() - started:.0f} s; load average at the end: {load()}")
    text = "\n".join(lines)
    print("\n" + text)
    out = run_folder.run_folder() / "live-pace.md"
    out.write_text(
        f"# The live page at the engine's pace (`python -m benchmarks live-pace`)\n\n{text}\n", encoding="utf-8"
    )
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
