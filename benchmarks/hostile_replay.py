"""Issue 57's audit replayed, with figures: the cases that got past the last audit, each bounded, on this machine only.

1. Grow an induction head (Heads forming, "Grow one yourself") on a loopback server with a 1 GB budget, at every
   size a visitor can pick (pre, post, both): the server's RSS growth over its settled idle against what the run
   reserved (gptviz.serve.job_sizes.job_nbytes of the same spec).
2. `python -m gptviz index` over a corpus file that is one line of words (200 MB by default) with --max-tokens 20000:
   seconds and peak RSS, under an address-space cap so an old build cannot take the machine down.
3. `python -m gptviz index` without --corpus and --max-tokens 20000: seconds, peak RSS and the tokens the index
   says it read (the bundled works hold 1,465,708).
8. Twenty model folders of about 100 MiB each opened one after another through the sidebar's "folder or Hub id"
   (a link `?source=pretrained&model=FOLDER`) on a server with GPTVIZ_MEMORY_MB=1024 and explicit cache sizes: RSS
   after each, against the idle server plus the budget; then a server with GPTVIZ_MEMORY_MB=1024 alone: does it
   start and draw the first page.

    python -m benchmarks replay                      # all four; Grow runs to its end (minutes per size)
    python -m benchmarks replay -- --only 2 3        # the CLI cases alone, about a minute
    python -m benchmarks replay -- --only 1 --grow-sizes pre --grow-seconds 120

Every loop is bounded in count and time; servers are stopped by their PID, temporary files removed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
from benchmarks.hostile_load import Row, Server, exception_boxes, open_page, yes  # noqa: E402
from benchmarks.load_test import ARGS, CHROMIUM, idle  # noqa: E402

MiB = 2**20
BUDGET_MB = 1024
ONE_GB = {
    "GPTVIZ_MEMORY_MB": str(BUDGET_MB),
    "GPTVIZ_CAPTURE_CACHE_MB": "256",
    "GPTVIZ_MODEL_CACHE_MB": "512",
    "GPTVIZ_GENERATIONS_PER_ADDRESS": "16",
    "GPTVIZ_TRAINING_SECONDS": "900",
}


# ---- 1. Grow within its reservation -----------------------------------------------------------------------------


def grow_reservation_mib(wiring: str) -> float:
    from gptviz.serve.job_sizes import job_nbytes
    from gptviz.serve.training_jobs import induction_growth_spec

    return job_nbytes(induction_growth_spec(("pre", "post") if wiring == "both" else (wiring,))) / MiB


async def grow_one(browser, server: Server, wiring: str, seconds: float) -> Row:
    ctx, page = await open_page(browser, f"{server.url}/timeline")
    await page.get_by_role("tab", name="Grow one yourself").click()
    await idle(page)
    if wiring != "pre":  # the segmented control starts at pre
        await page.get_by_text({"both": "both, same batches"}.get(wiring, f"{wiring}-norm"), exact=True).click()
        await idle(page)
    idle_rss = server.settled_rss(3.0)
    t0 = time.monotonic()
    await page.get_by_role("button", name="Grow").click()
    finished, message = False, ""
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(1.0)
        if await page.get_by_role("button", name="Stop").count() == 0 and time.monotonic() - t0 > 5:
            finished = True
            break
        warn = page.locator('[data-testid="stAlertContentWarning"]')
        if await warn.count():
            message = (await warn.first.inner_text())[:160]
            break
    if not finished and not message and await page.get_by_role("button", name="Stop").count():
        await page.get_by_role("button", name="Stop").click()  # bounded: stop the run at the time limit
        await asyncio.sleep(3.0)
    t1 = time.monotonic()
    boxes = await exception_boxes(page)
    await ctx.close()
    peak = server.peak_since(t0, t1)
    reserved = grow_reservation_mib(wiring)
    growth = peak - idle_rss
    how = "finished" if finished else (f"refused: {message}" if message else f"stopped after {seconds:.0f} s")
    return Row(
        f"1 Grow ({wiring})",
        f"pressed Grow, {how} in {t1 - t0:.0f} s",
        f"idle {idle_rss:,.0f} MiB, peak {peak:,.0f} (+{growth:,.0f}) against {reserved:,.0f} reserved; "
        f"exception boxes {boxes}",
        "growth <= reserved",
        yes(growth <= reserved and boxes == 0),
    )


async def grow(sizes: list[str], seconds: float) -> list[Row]:
    from playwright.async_api import async_playwright

    rows = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for wiring in sizes:  # a server per size: each run's growth from the same settled start
                server = Server(ONE_GB)
                try:
                    rows.append(await grow_one(browser, server, wiring, seconds))
                finally:
                    server.close()
                print(f"  | {rows[-1].scenario} | {rows[-1].did} | {rows[-1].measured} | {rows[-1].met} |", flush=True)
        finally:
            await browser.close()
    return rows


# ---- 2, 3. the index CLI ------------------------------------------------------------------------------------------


def run_capped(args: list[str], cap_mib: int, timeout: float) -> tuple[float, float, int, str]:
    """(seconds, peak RSS in MiB, exit code, the last lines of stderr) of `python -m gptviz ARGS` under an
    address-space cap of `cap_mib`, killed after `timeout`."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (cap_mib * MiB, cap_mib * MiB))

    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gptviz", *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=cap
        )
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-2:]
    return seconds, usage.ru_maxrss / 1024, proc.returncode, " / ".join(t.strip()[-160:] for t in tail)


def one_line_corpus(folder: Path, mb: int) -> Path:
    words = (
        b"alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
        b"quebec romeo sierra tango uniform victor whiskey xray yankee zulu "
    )
    path = folder / "oneline.txt"
    with path.open("wb") as f:
        for _ in range(mb * MiB // len(words)):
            f.write(words)
    return path


def index_tokens(out: Path) -> str:
    try:
        meta = json.loads((out / "index.json").read_text())
    except (OSError, ValueError):
        return "no index written"
    return f"{meta['corpus']['tokens']} tokens in the index"


def index_cli(mb: int, cap_mib: int) -> list[Row]:
    folder = Path(tempfile.mkdtemp(prefix="gptviz-replay-index-"))
    rows = []
    try:
        corpus = one_line_corpus(folder, mb)
        seconds, peak, code, tail = run_capped(
            [
                "index",
                "shakespeare-pre",
                "--corpus",
                str(corpus),
                "--max-tokens",
                "20000",
                "--out",
                str(folder / "one-line"),
            ],
            cap_mib,
            600,
        )
        rows.append(
            Row(
                "2 index, one long line",
                f"a {mb} MB one-line corpus, --max-tokens 20000, address space capped at {cap_mib:,} MiB",
                f"{seconds:.1f} s, peak RSS {peak:,.0f} MiB, exit {code}; "
                f"{index_tokens(folder / 'one-line')}" + (f"; {tail}" if code else ""),
                "time and memory follow --max-tokens (under 30 s, 1,000 MiB)",
                yes(code == 0 and seconds < 30 and peak < 1000),
            )
        )
        corpus.unlink()
        seconds, peak, code, tail = run_capped(
            ["index", "shakespeare-pre", "--max-tokens", "20000", "--out", str(folder / "bundled")], cap_mib, 900
        )
        read = index_tokens(folder / "bundled")
        rows.append(
            Row(
                "3 index, no --corpus",
                "the bundled works, --max-tokens 20000",
                f"{seconds:.1f} s, peak RSS {peak:,.0f} MiB, exit {code}; {read}" + (f"; {tail}" if code else ""),
                "20000 tokens read",
                yes(code == 0 and read.startswith("20000 ")),
            )
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


# ---- 8. model folders ---------------------------------------------------------------------------------------------


def model_folders(root: Path, count: int) -> list[Path]:
    """`count` folders of about 115 MiB each (d_model 512, one layer, GPT-2's vocabulary), distinct seeds."""
    import torch

    from gptviz import GPT, GPTConfig
    from gptviz.model.checkpoint import save_checkpoint

    folders = []
    for seed in range(count):
        torch.manual_seed(seed)
        cfg = GPTConfig(vocab_size=50257, n_ctx=128, d_model=512, n_layers=1, n_heads=8, name=f"folder-{seed}")
        folder = root / f"model-{seed:02d}"
        save_checkpoint(GPT(cfg).eval(), folder)
        folders.append(folder)
    return folders


async def open_folders(server: Server, folders: list[Path]) -> list[float]:
    from playwright.async_api import async_playwright

    after = []
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            ctx, page = await open_page(browser, server.url)
            for folder in folders:
                await page.goto(f"{server.url}/?source=pretrained&model={folder}", timeout=180_000)
                await page.locator('[data-testid="stSidebar"] textarea').wait_for(timeout=180_000)
                await idle(page, 180_000)
                after.append(server.settled_rss(1.5))
                print(f"  {folder.name}: {after[-1]:,.0f} MiB", flush=True)
            await ctx.close()
        finally:
            await browser.close()
    return after


def folders_case(count: int) -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="gptviz-replay-models-"))
    rows = []
    try:
        folders = model_folders(root, count)
        size = sum(f.stat().st_size for f in folders[0].iterdir()) / MiB
        server = Server({**ONE_GB, "GPTVIZ_MODEL_DIRS": str(root)})
        try:
            idle_rss = server.settled_rss(3.0)
            after = asyncio.run(open_folders(server, folders))
        finally:
            server.close()
        bound = idle_rss + BUDGET_MB
        rows.append(
            Row(
                "8 model folders",
                f"{count} folders of {size:,.0f} MiB opened one after another, "
                f"GPTVIZ_MEMORY_MB={BUDGET_MB} (model cache 512 MB)",
                f"idle {idle_rss:,.0f} MiB; after each: {', '.join(f'{v:,.0f}' for v in after)}; "
                f"last {after[-1]:,.0f}, most {max(after):,.0f}; {len(server.tracebacks())} tracebacks",
                f"<= idle + budget = {bound:,.0f}",
                yes(max(after) <= bound),
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    alone = {k: v for k, v in ONE_GB.items() if k not in ("GPTVIZ_CAPTURE_CACHE_MB", "GPTVIZ_MODEL_CACHE_MB")}
    try:
        server = Server(alone)
    except RuntimeError as err:  # the server did not start: its log says why
        why = next((line for line in str(err).splitlines() if "GPTVIZ" in line or "Error" in line), str(err))[:200]
        rows.append(
            Row("8 a budget alone", "GPTVIZ_MEMORY_MB=1024, no cache sizes", f"did not start: {why}", "starts", "NO")
        )
    else:
        try:
            rows.append(
                Row(
                    "8 a budget alone",
                    "GPTVIZ_MEMORY_MB=1024, no cache sizes",
                    f"started, idle {server.settled_rss(2.0):,.0f} MiB",
                    "starts",
                    "yes",
                )
            )
        finally:
            server.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, nargs="*", default=[1, 2, 3, 8], choices=[1, 2, 3, 8])
    parser.add_argument("--grow-sizes", nargs="*", default=["pre", "post", "both"], choices=["pre", "post", "both"])
    parser.add_argument("--grow-seconds", type=float, default=600, help="stop a Grow run after this")
    parser.add_argument("--corpus-mb", type=int, default=200)
    parser.add_argument("--cap-mib", type=int, default=6144, help="the index CLI's address-space cap")
    parser.add_argument("--folders", type=int, default=20)
    args = parser.parse_args()
    if (1 in args.only or 8 in args.only) and not Path(CHROMIUM).exists():
        print(f"cases 1 and 8 need Debian's chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows: list[Row] = []
    for case in args.only:
        print(f"[{time.strftime('%H:%M:%S')}] case {case}", flush=True)
        run = {
            1: lambda: asyncio.run(grow(args.grow_sizes, args.grow_seconds)),
            2: lambda: index_cli(args.corpus_mb, args.cap_mib) if 3 not in args.only else [],
            3: lambda: index_cli(args.corpus_mb, args.cap_mib),
            8: lambda: folders_case(args.folders),
        }[case]
        try:
            rows += run()
        except Exception as err:  # a case that cannot be driven is reported as such; the others still run
            rows.append(
                Row(str(case), "not driven to the end", f"{type(err).__name__}: {str(err)[:200]}", "-", "NOT DRIVEN")
            )
        for r in rows:
            print(f"  | {r.scenario} | {r.did} | {r.measured} | {r.target} | {r.met} |", flush=True)
    load = os.getloadavg()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(
        f"\nIssue 57 replayed on {git.strip()}, {time.strftime('%Y-%m-%d %H:%M')}, "
        f"{time.perf_counter() - started:.0f} s, "
        f"{os.cpu_count()} CPU(s), load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n"
    )
    print("| case | what it did | measured | target | met |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.scenario} | {r.did} | {r.measured} | {r.target} | {r.met} |")
    return 0 if all(r.met == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
