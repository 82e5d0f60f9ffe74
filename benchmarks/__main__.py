"""One entry point for the benchmarks: list them, run one, several or all; each run's results in a folder of its own,
and the tracked table of current figures updated only when asked.

    python -m benchmarks                     # list the benchmarks
    python -m benchmarks index patching      # run these
    python -m benchmarks index -- --only ray    # a script's own flags after --
    python -m benchmarks --quick             # a few minutes' subset, each with its quick flags
    python -m benchmarks --all               # everything (an hour or more on 2 cores; browser ones need chromium)
    python -m benchmarks gpu --update-current   # also replace the benchmark's row in benchmarks/current.md

Each benchmark runs as its own process, `python -m benchmarks.SCRIPT` from the checkout's root (so the scripts import
the package you are editing, and each other as `benchmarks.x`), its output shown as it goes. Every run writes to a
run folder, benchmarks/runs/<UTC time>/ (ignored by git; --out DIR for another): each benchmark's whole output in
NAME.log, a table of its last lines with the date, the command, the time and the exit status in current.md, and the
reports the scripts write there (the engine's results.md). With --update-current the run's rows also replace those
benchmarks' rows in the tracked benchmarks/current.md, and the engine's report, when it ran, replaces
benchmarks/results.md; without it no tracked file changes. What changed the figures, dated, is
docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import run_folder

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# The tracked table --update-current updates; the tracked reports it copies live beside it. The variable: for tests.
TABLE = Path(os.environ.get("GPTVIZ_BENCH_TABLE") or HERE / "current.md")


@dataclass(frozen=True)
class Bench:
    script: str
    what: str
    quick: tuple[str, ...] | None = None  # flags for --quick; None: not in the quick subset
    report: str | None = None  # a file the script writes in the run folder; --update-current copies it beside TABLE


HELPERS = (
    "servers.py",
    "run_folder.py",
    "forward_passes.py",
    "memory_peak.py",
)  # modules the scripts (and tests) share, not benchmarks themselves

BENCHMARKS = {
    "engine": Bench(
        "run.py",
        "gptviz against transformers on GPT-2 small: capture, generate, load",
        ("--repeats", "3"),
        report="results.md",
    ),
    "sampling": Bench("bench_sampling.py", "top-p sampling against a full sort of the vocabulary", ()),
    "interventions": Bench("bench_interventions.py", "patching sweeps and edited passes against plain passes"),
    "patching": Bench("bench_patching.py", "the residual patching sweep's time and peak memory", ()),
    "sizes": Bench("bench_sizes.py", "every job's size estimate against its measured peak, on the bundled model"),
    "build": Bench("bench_build.py", "peak memory of building each preset with random weights"),
    "index": Bench(
        "bench_index.py",
        "the neuron index scan against the forward pass alone, on Ray, its memory",
        ("--only", "overhead", "--tokens", "30000", "--gpt2-tokens", "600", "--repeats", "1"),
    ),
    "index-stats": Bench(
        "check_index_stats.py",
        "a shipped index's statistics against a direct count",
        ("shakespeare-pre", "--units", "40"),
    ),
    "app": Bench("bench_app.py", "the Attention page's rerun times (AppTest)"),
    "browser": Bench("bench_browser.py", "what a visitor feels, in Chromium, against the engine"),
    "latency": Bench(
        "bench_latency.py",
        "every frequent interaction in Chromium, input to final frame, against budgets",
        report="latency.md",
    ),
    "live-pace": Bench(
        "bench_live_pace.py",
        'the live page at "as fast as it writes" against the engine\'s time',
        report="live-pace.md",
    ),
    "unit-page": Bench("bench_unit_page.py", "the unit page's load time in Chromium"),
    "notebook": Bench(
        "bench_notebook.py", "the notebook heatmap in JupyterLab against CircuitsVis: time to drawn, bytes"
    ),
    "load": Bench("load_test.py", "several visitors at once, in real browsers"),
    "hostile": Bench("hostile_load.py", "a hostile visitor's audit replayed against a real server"),
    "replay": Bench("hostile_replay.py", "issue 57's audit replayed: Grow's memory, the index CLI, model folders"),
    "word-box": Bench("hostile_word_box.py", "a 10 MB value in the unit page's one-token boxes: page time, memory"),
    "model-folders": Bench(
        "model_folders.py", "model folders opened one after another: the server's memory after each"
    ),
    "warmup": Bench("bench_warmup.py", "does post-norm need warmup: the Train page's scenario"),
    "grow": Bench("bench_grow_induction.py", "the Heads forming page's grow-an-induction-head run"),
    "graph": Bench("bench_graph.py", "the attribution graph of 64 tokens against one forward+backward pass"),
    "live-why": Bench("bench_live_why.py", "the live text's top contributors against the generation's rate"),
    "gpu": Bench("gpu_check.py", "the prepared CUDA check (exits 0 with a note without a GPU)", ()),
}


def run(name: str, extra: list[str], quick: bool, folder: Path) -> dict:
    """Runs one benchmark with `folder` as its run folder (GPTVIZ_BENCH_RUN_DIR); its whole output goes to the
    screen and to folder/NAME.log."""
    bench = BENCHMARKS[name]
    flags = list(bench.quick or ()) if quick else []
    module = f"benchmarks.{bench.script.removesuffix('.py')}"
    command = [sys.executable, "-m", module, *flags, *extra]
    shown = " ".join(["python", "-m", module, *flags, *extra])
    print(f"\n=== {name}: {shown}", flush=True)
    started = time.perf_counter()
    tail: list[str] = []
    env = {**os.environ, run_folder.ENV: str(folder)}
    # from the root, `-m` puts the checkout first on the path: its gptviz and benchmarks, nothing else to set
    with (
        open(folder / f"{name}.log", "w", encoding="utf-8") as log,
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        for line in proc.stdout:
            print(line, end="", flush=True)
            log.write(line)
            if line.strip():
                tail = (tail + [line.rstrip()])[-4:]
    return {
        "name": name,
        "command": shown,
        "seconds": round(time.perf_counter() - started),
        "status": "ok" if proc.returncode == 0 else f"exit {proc.returncode}",
        "tail": tail,
        "date": datetime.date.today().isoformat(),
    }


def write_table(results: list[dict], table: Path) -> None:
    """These results' rows into the table at `table`, replacing theirs; the other benchmarks' rows kept."""
    rows = _read_rows(table)
    for r in results:
        tail = " / ".join(line.replace("|", "\\|") for line in r["tail"])[:600]
        rows[r["name"]] = f"| {r['name']} | {r['date']} | `{r['command']}` | {r['seconds']} | {r['status']} | {tail} |"
    lines = [
        "# Benchmarks: the latest run of each (`python -m benchmarks`)",
        "",
        "| benchmark | date | command | seconds | status | last lines of its output |",
        "|---|---|---|---|---|---|",
    ]
    lines += [rows[name] for name in BENCHMARKS if name in rows]
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _read_rows(table: Path) -> dict[str, str]:
    if not table.exists():
        return {}
    rows = {}
    for line in table.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 2 and cells[1] in BENCHMARKS:
            rows[cells[1]] = line
    return rows


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="benchmarks to run (see the list)")
    parser.add_argument("--quick", action="store_true", help="the quick subset, or the named ones with quick flags")
    parser.add_argument("--all", action="store_true", help="every benchmark")
    parser.add_argument("--out", metavar="DIR", help="the run folder (default: a new benchmarks/runs/<UTC time>/)")
    parser.add_argument(
        "--update-current",
        action="store_true",
        help="also replace these benchmarks' rows in the tracked benchmarks/current.md (and the "
        "engine's report, benchmarks/results.md); without it no tracked file changes",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    names = (
        list(BENCHMARKS)
        if args.all
        else args.names or ([n for n, b in BENCHMARKS.items() if b.quick is not None] if args.quick else [])
    )
    if not names:
        width = max(map(len, BENCHMARKS))
        for name, bench in BENCHMARKS.items():
            print(f"{name:<{width}}  {bench.what}{'  [quick]' if bench.quick is not None else ''}")
        print(
            "\npython -m benchmarks NAME... | --quick | --all   (results: benchmarks/runs/<UTC time>/; "
            "--update-current: also benchmarks/current.md)"
        )
        return 0
    folder = Path(args.out) if args.out else run_folder.new_run_folder()
    folder.mkdir(parents=True, exist_ok=True)
    print(f"run folder: {folder}", flush=True)
    results = [run(name, extra, args.quick, folder) for name in names]
    write_table(results, folder / "current.md")
    updated = []
    if args.update_current:
        write_table(results, TABLE)
        updated.append(TABLE)
        for r in results:
            report = BENCHMARKS[r["name"]].report
            if report and r["status"] == "ok" and (folder / report).exists():
                shutil.copyfile(folder / report, TABLE.parent / report)
                updated.append(TABLE.parent / report)
    print(
        f"\n{sum(r['status'] == 'ok' for r in results)}/{len(results)} ran; results: {folder}; "
        + (
            f"updated: {', '.join(map(str, updated))}"
            if updated
            else f"{TABLE} unchanged (--update-current updates it)"
        )
    )
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
