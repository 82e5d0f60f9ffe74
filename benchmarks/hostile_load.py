"""A hostile visitor's audit replayed (issue 31): a bounded run against a real server, on this machine only.

Starts `streamlit run app.py` on a free loopback port with small GPTVIZ_* limits, samples the server's resident
memory every 0.2 s in a thread (VmRSS from /proc), and drives it with Playwright (Debian's /usr/bin/chromium, one
browser context per visitor, never a downloaded browser) plus one raw WebSocket client for Streamlit's clear-cache
message. Scenarios, each under its own timeout (one that cannot be driven is reported as such, never waited on):

1. Patching a 128-token pair (" a" x 128, and the same with " b" at token 64) on the bundled model, "your own"
   pair on the Why this token? page: time until the result appears, server peak RSS above its baseline.
2. One visitor holding every slot: 4 contexts run 200-token generations and press Generate again and again while
   a fifth (the victim) presses Generate: time until the victim's generation starts, its page-switch median.
3. Cache clearing: BackMsg(clear_cache=True) over a session's WebSocket (any client can send it), then the
   generation cap (more generations than GPTVIZ_GENERATIONS from distinct sessions) and trained-model isolation.
4. Concurrent large captures: 3 contexts at once send 2,000-character prompts on the Attention page with the
   gpt2-small preset: server peak against GPTVIZ_MEMORY_MB plus the idle server's RSS with the model loaded.
5. Patching on gpt2-small (issue 43: a 1,000-token pair ran 39.5 minutes, 24.5 after its tab closed): a 999-token
   pair, time until its refusal shows (its estimate is past GPTVIZ_SWEEP_SECONDS); a 96-token pair started with
   its button, its tab closed 8 s in: seconds until the server's CPU falls idle (under 0.05 of a core).
6. The unit page's index builder (issue 43), on a loopback server of its own: one visitor builds back to back past
   GPTVIZ_INDEX_KEPT (the built indexes left on disk); a torn index.json (the page offers a rebuild, which
   succeeds). Fair turns between two visitors need two client addresses, which loopback does not give (every
   connection comes from 127.0.0.1): tests/app/test_index_turns.py checks them with the addresses set in the test.

    python -m benchmarks hostile                 # about 5 minutes
    python -m benchmarks hostile -- --only 1 3      # some scenarios

All contexts come from 127.0.0.1, one client address, so GPTVIZ_GENERATIONS_PER_ADDRESS is raised to 16 for
this run (with the default 2 the victim of scenario 2 would be refused outright: see the README section).
Every loop is bounded in count and time; the server is stopped by its PID in a finally.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchmarks.load_test import ARGS, CHROMIUM, idle, rss_mib
from benchmarks.servers import cpu_seconds, streamlit_server

ROOT = Path(__file__).resolve().parents[1]

LIMITS = {
    "GPTVIZ_MEMORY_MB": "2048",
    "GPTVIZ_CAPTURE_CACHE_MB": "512",
    "GPTVIZ_MODEL_CACHE_MB": "1024",
    "GPTVIZ_GENERATIONS": "4",
    "GPTVIZ_GENERATION_QUEUE": "8",
    "GPTVIZ_GENERATIONS_PER_ADDRESS": "16",
    "GPTVIZ_TRAINING_JOBS": "1",
    "GPTVIZ_TRAINING_SECONDS": "8",
}
SIDEBAR_PROMPT = '[data-testid="stSidebar"] textarea'
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()


class Server:
    """The app on a loopback port, started and stopped by benchmarks/servers.py's streamlit_server (the browser tests'
    own); its resident memory sampled every 0.2 s; its output copied to a log file that outlives it."""

    def __init__(self, env: dict | None = None, flags: tuple = (), port: int | None = None):
        self.log_path = Path(tempfile.mkstemp(prefix="gptviz-hostile-", suffix=".log")[1])
        self._running = streamlit_server(
            [sys.executable, "-m", "streamlit", "run", "app.py"],
            cwd=ROOT,
            env={**os.environ, **LIMITS, **(env or {})},
            flags=["--server.fileWatcherType", "none", *flags],
            port=port,
            timeout=300,
        )  # a warm start at nice 19 on a loaded machine took over 90 s
        self._server = self._running.__enter__()  # raises, with the server's log, when it does not start
        self.port, self.url, self.proc = self._server.port, self._server.url, self._server.proc
        self.samples: list[tuple[float, float]] = []  # (monotonic time, MiB)
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self._stop.is_set() and len(self.samples) < 50_000:  # 0.2 s x 50,000: bounded
            self.samples.append((time.monotonic(), rss_mib(self.proc.pid)))
            time.sleep(0.2)

    def rss(self) -> float:
        return rss_mib(self.proc.pid)

    def settled_rss(self, seconds: float = 2.0) -> float:
        """The median RSS over `seconds` of (hopefully) idle time."""
        t0 = time.monotonic()
        time.sleep(seconds)
        values = [v for t, v in self.samples if t >= t0]
        return statistics.median(values) if values else self.rss()

    def peak_since(self, t0: float, t1: float | None = None) -> float:
        values = [v for t, v in self.samples if t >= t0 and (t1 is None or t <= t1)]
        return max(values, default=0.0)

    def close(self):
        self._stop.set()
        self._running.__exit__(None, None, None)  # stops the process it started, by its PID
        self.log_path.write_text(self._server.log())

    def tracebacks(self) -> list[str]:
        text = self.log_path.read_text(errors="replace")
        blocks = []
        for m in re.finditer(r"Traceback \(most recent call last\):", text):
            tail = text[m.start() : m.start() + 4000].splitlines()
            # the exception line: the first unindented line after the traceback header
            last = next((line for line in tail[1:] if line and not line.startswith(" ")), "?")
            blocks.append(last[:200])
        return blocks


class Row:
    def __init__(self, scenario: str, did: str, measured: str, target: str, met: str):
        self.scenario, self.did, self.measured, self.target, self.met = scenario, did, measured, target, met


def yes(ok: bool) -> str:
    return "yes" if ok else "NO"


async def open_page(browser, url: str, timeout_ms: int = 180_000):
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(url, timeout=timeout_ms)
    await page.locator(SIDEBAR_PROMPT).wait_for(timeout=timeout_ms)
    await idle(page, timeout_ms)
    return context, page


async def exception_boxes(page) -> int:
    return await page.locator('[data-testid="stException"]').count()


async def switch(page, title: str, timeout_ms: int = 60_000) -> float:
    started = time.perf_counter()
    await page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click(timeout=timeout_ms)
    await page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=timeout_ms)
    await idle(page, timeout_ms)
    return time.perf_counter() - started


GENERATING = re.compile(r"^Generating: \d+ of \d+ tokens")
WAITING = re.compile(r"Waiting for a free generation slot")


async def generation_state(page) -> str:
    shown = page.get_by_text(GENERATING)
    if await shown.count():
        # a page that has just finished may still show "200 of 200" for a redraw: that one is not running
        m = re.search(r"(\d+) of (\d+)", await shown.first.inner_text())
        return "running" if m and int(m.group(1)) < int(m.group(2)) else "finishing"
    if await page.get_by_text(WAITING).count():
        return "waiting"
    if await page.get_by_text(re.compile("Generation could not start")).count():
        return "refused"
    return "idle"


async def press_generate(page, timeout_ms: int = 15_000) -> None:
    await page.get_by_role("button", name="Generate", exact=True).click(timeout=timeout_ms)


# ---- 1. patching a 128-token pair ------------------------------------------------------------------------------


async def patching_128(browser, server: Server) -> list[Row]:
    from gptviz.model.tokenizer import encode

    clean = " a" * 128
    corrupted = " a" * 64 + " b" + " a" * 63
    n_clean, n_corrupt = len(encode(clean)), len(encode(corrupted))
    context, page = await open_page(browser, f"{server.url}/why")
    try:
        await page.get_by_role("tab", name="Patching").click(timeout=30_000)
        await idle(page)
        await page.get_by_label("Clean prompt").fill(clean)
        await page.get_by_label("Clean prompt").press("Control+Enter")
        await idle(page)
        box = page.get_by_label("Corrupted prompt")
        await box.fill(corrupted)
        await asyncio.sleep(1.0)
        baseline = server.settled_rss(2.0)
        t0 = time.monotonic()
        await box.press("Control+Enter")
        await page.get_by_text(re.compile(r"^Logit difference: clean")).first.wait_for(timeout=120_000)
        to_caption = time.monotonic() - t0  # the caption is drawn right after the sweep returns
        await page.locator('[data-testid="stPlotlyChart"]').last.wait_for(timeout=60_000)
        elapsed = time.monotonic() - t0
        await idle(page)
        peak = server.peak_since(t0, time.monotonic() + 0.5)
        await asyncio.sleep(0.5)
        peak = max(peak, server.peak_since(t0))
        boxes = await exception_boxes(page)
    finally:
        await context.close()
    growth = peak - baseline
    did = (
        f'/why, Patching, own pair: {n_clean}-token clean (" a" x128) vs {n_corrupt}-token corrupted '
        f'(" b" at token 64), bundled model'
    )
    return [
        Row(
            "1 patching 128-token pair",
            did,
            f"{to_caption:.2f} s until the sweep's result line shows, {elapsed:.2f} s until the heatmaps show",
            "< 2 s",
            yes(to_caption < 2),
        ),
        Row(
            "1 patching 128-token pair",
            "same sweep: server RSS",
            f"peak {peak:,.0f} MiB, baseline {baseline:,.0f} MiB: +{growth:,.0f} MiB; exception boxes {boxes}",
            "< +300 MB, 0 boxes",
            yes(growth * 1.048576 < 300 and boxes == 0),
        ),
    ]


# ---- 5. patching on gpt2-small: refused past the limit, stopped when its tab closes ------------------------------


async def cpu_idle_after(pid: int, t0: float, limit_s: float = 180.0, below: float = 0.05) -> float:
    """Seconds from t0 until a one-second window in which the process used less than `below` of a core (inf: none
    began within `limit_s`)."""
    while time.monotonic() - t0 < limit_s:
        a = cpu_seconds(pid)
        await asyncio.sleep(1.0)
        if cpu_seconds(pid) - a < below:
            return time.monotonic() - t0 - 1.0
    return float("inf")


def patching_url(base: str, preset: str = "gpt2-small") -> str:
    """The Why this token? page's Patching tab on a preset (random weights, built on the server: no Hub)."""
    return f"{base}/why?" + urllib.parse.urlencode(
        {"source": "preset", "preset": preset, "why_view": "Patching", "prompt": "Hello world"}
    )


async def patching_pair(page, n: int) -> None:
    await page.get_by_label("Clean prompt").fill(" a" * n)
    await page.get_by_label("Clean prompt").press("Control+Enter")
    await idle(page, 300_000)
    box = page.get_by_label("Corrupted prompt")
    await box.fill(" a" * (n // 2) + " b" + " a" * (n - n // 2 - 1))
    await box.press("Control+Enter")


@dataclasses.dataclass
class SweepLeft:
    """A patching sweep whose tab closed while it ran: the page's estimate line, its seconds (None when the page
    refused the pair), the server's CPU (cores) in the `busy_s` before the close, whether the result showed before
    the close, and seconds from the close until the server's CPU fell idle (inf: not within the wait)."""

    estimated: str
    estimate_s: float | None
    busy: float = 0.0
    finished: bool = False
    stopped: float = float("inf")


async def sweep_then_close(
    context, page, pid: int, n: int, run_s: float = 7.0, busy_s: float = 1.0, within_s: float = 180.0
) -> SweepLeft:
    """On a page at patching_url: an n-token pair (" a" x n, " b" at n // 2), started with its Run button, its
    context (the tab) closed `run_s` + `busy_s` seconds in; then the wait for server `pid`'s CPU to fall idle. The
    context is closed in any case."""
    try:
        await patching_pair(page, n)
        estimate = page.get_by_text("Patching: about").or_(page.get_by_text("Patching would take about"))
        await estimate.first.wait_for(timeout=300_000)
        estimated = (await estimate.first.inner_text()).split(" (")[0]
        if "would take" in estimated:  # refused: the rate measured now puts the pair past GPTVIZ_SWEEP_SECONDS
            return SweepLeft(estimated, None)
        estimate_s = float(re.search(r"about ([\d,.]+) s", estimated).group(1).replace(",", ""))
        await page.get_by_role("button", name=re.compile("^Run it")).click(timeout=30_000)
        await asyncio.sleep(run_s)
        before = cpu_seconds(pid)
        await asyncio.sleep(busy_s)
        busy = (cpu_seconds(pid) - before) / busy_s
        finished = await page.get_by_text(re.compile(r"^Logit difference: clean")).count() > 0
    finally:
        await context.close()
    stopped = await cpu_idle_after(pid, time.monotonic(), within_s)
    return SweepLeft(estimated, estimate_s, busy, finished, stopped)


async def patching_leaves(browser, server: Server) -> list[Row]:
    rows = []
    context, page = await open_page(browser, patching_url(server.url), timeout_ms=300_000)  # builds gpt2-small
    try:
        await idle(page, 300_000)
        t0 = time.monotonic()
        await patching_pair(page, 999)
        refusal = page.get_by_text("Patching would take about")
        await refusal.first.wait_for(timeout=300_000)
        said = (await refusal.first.inner_text()).split(":")[0]
        rows.append(
            Row(
                "5 patching gpt2-small",
                '999-token pair (" a" x999, " b" at 499)',
                f"{time.monotonic() - t0:.1f} s until the refusal shows ({said})",
                "refused before it starts",
                yes(await page.locator('[data-testid="stPlotlyChart"]').count() == 0),
            )
        )
    except BaseException:
        await context.close()
        raise
    left = await sweep_then_close(context, page, server.proc.pid, 96, run_s=7.0)  # closes the context 8 s in
    if left.estimate_s is None:  # the rate measured on a loaded machine put even this pair past the limit
        rows.append(
            Row(
                "5 patching gpt2-small",
                "96-token pair",
                left.estimated,
                "runs, then stops when its tab closes",
                "NOT DRIVEN (machine too loaded)",
            )
        )
        return rows
    rows.append(
        Row(
            "5 patching gpt2-small",
            f"96-token pair started with its button ({left.estimated}), tab closed 8 s in",
            f"server CPU {left.busy:.2f} cores just before the close; idle {left.stopped:.1f} s after it",
            "< 5 s",
            yes(left.stopped < 5 and not left.finished),
        )
    )
    return rows


# ---- 2. one visitor holding every slot -------------------------------------------------------------------------


def chromium_pids() -> set[int]:
    """The pids of every Chromium process on the machine."""
    found = set()
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and b"chromium" in open(f"/proc/{entry}/cmdline", "rb").read().split(b"\0")[0]:
                found.add(int(entry))
        except OSError:
            pass
    return found


def renice(pids: set[int], nice: int) -> None:
    """Every thread of these processes to `nice` (a process's nice value is its threads', one by one, on Linux)."""
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                os.setpriority(os.PRIO_PROCESS, int(tid), nice)
        except OSError:
            pass


async def slot_hog(
    browser, server: Server, seconds: float, playwright=None, attackers_nice: int | None = None
) -> list[Row]:
    """`attackers_nice`: the attackers' pages in a browser of their own whose every thread runs at this nice value,
    standing for an attacker whose browser draws on its own machine (here it shares the server's 2 cores)."""
    victim_ctx, victim = await open_page(browser, f"{server.url}/generation?gen_n=20")
    alone = []
    for _ in range(2):  # the victim's page switch with nobody else on the server, for comparison
        alone.append(await switch(victim, "Attention"))
        alone.append(await switch(victim, "Generation"))
    theirs, before = browser, chromium_pids()
    if attackers_nice is not None:
        theirs = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    attackers = [await open_page(theirs, f"{server.url}/generation?gen_n=200") for _ in range(4)]
    attacker_pids = chromium_pids() - before

    def lower_attackers():
        if attackers_nice is not None:
            renice(chromium_pids() - before, attackers_nice)  # renderers may start later: again at each press

    lower_attackers()
    presses, press_errors = 0, 0
    stop = asyncio.Event()

    async def hog(page):
        nonlocal presses, press_errors
        end = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < end and presses < 400:
            try:
                await press_generate(page)
                presses += 1
            except Exception:
                press_errors += 1
            lower_attackers()
            await asyncio.sleep(2.5)

    hogs = [asyncio.create_task(hog(p)) for _, p in attackers]
    try:
        await asyncio.sleep(6)
        states_before = [await generation_state(p) for _, p in attackers]
        t0 = time.monotonic()
        await press_generate(victim)
        saw_waiting, start_wait, outcome = False, None, "no start within 60 s"
        while time.monotonic() - t0 < 60:
            s = await generation_state(victim)
            if s == "waiting":
                saw_waiting = True
            if s == "running" or (s == "idle" and await victim.get_by_text(re.compile(r"then \d+ new ones")).count()):
                start_wait, outcome = time.monotonic() - t0, "started"
                break
            if s == "refused":
                outcome = (
                    "refused: "
                    + (await victim.get_by_text(re.compile("Generation could not start")).first.inner_text())[:160]
                )
                break
            await asyncio.sleep(0.2)
        switches = []
        for _ in range(3):  # bounded: 3 round trips, each step under its own timeout
            switches.append(await switch(victim, "Attention"))
            switches.append(await switch(victim, "Generation"))
        boxes = sum([await exception_boxes(p) for _, p in attackers]) + await exception_boxes(victim)
    finally:
        stop.set()
        await asyncio.gather(*hogs, return_exceptions=True)
        for ctx, _ in attackers:
            await ctx.close()
        await victim_ctx.close()
        if theirs is not browser:
            await theirs.close()
    median = statistics.median(switches) if switches else float("nan")
    where = (
        "in one browser with the victim"
        if attackers_nice is None
        else f"in a browser of their own at nice {attackers_nice} ({len(attacker_pids)} processes)"
    )
    did = (
        f"4 contexts {where} on /generation?gen_n=200 pressing Generate every 2.5 s for up to {seconds:.0f} s "
        f"({presses} presses, {press_errors} failed clicks; attackers' state when the victim pressed: "
        f"{', '.join(states_before)}); victim /generation?gen_n=20"
    )
    start = (
        f"{start_wait:.1f} s ({'queued first' if saw_waiting else 'no queue seen'})"
        if start_wait is not None
        else outcome
    )
    return [
        Row(
            "2 one visitor holds every slot",
            did,
            f"victim's generation started after {start}",
            "< 30 s",
            yes(start_wait is not None and start_wait < 30),
        ),
        Row(
            "2 one visitor holds every slot",
            "victim switches Generation <-> Attention 3 times each, under load",
            f"median {median:.2f} s over {len(switches)} (max {max(switches, default=float('nan')):.2f} s); "
            f"exception boxes {boxes}; the same victim alone before the attack: median "
            f"{statistics.median(alone):.2f} s over {len(alone)}",
            "< 2 s, 0 boxes",
            yes(median < 2 and boxes == 0),
        ),
    ]


# ---- 3. cache clearing -----------------------------------------------------------------------------------------


def clear_cache(port: int, times: int) -> str:
    """Send BackMsg(clear_cache=True) over a fresh session's WebSocket, `times` times, as any client can (the
    browser's menu hides it in viewer mode; the message itself is always accepted). Returns what happened."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from websockets.sync.client import connect

    msg = BackMsg()
    msg.clear_cache = True
    data = msg.SerializeToString()
    sent = 0
    with connect(
        f"ws://127.0.0.1:{port}/_stcore/stream", subprotocols=["streamlit"], open_timeout=10, close_timeout=5
    ) as ws:
        for _ in range(times):
            ws.send(data)
            sent += 1
            time.sleep(0.3)
        # the connection must still be open: the server took the messages (it closes on a bad frame)
        ws.ping().wait(5)
    return f"{sent} sent, connection stayed open"


async def source_options(page, tries: int = 10) -> list[str]:
    """The sidebar's Source options (by its label: the prompt's example picker comes first in the sidebar), read once
    the page has finished running. A click while the page reran opened no list (after scenario 4 the server is
    busy for seconds), which read as no options at all: so it is read again, up to `tries` times."""
    for _ in range(tries):
        await idle(page)
        box = (
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]')
            .filter(has=page.get_by_text("Source", exact=True))
            .first
        )
        await box.click(timeout=20_000)
        options = await page.get_by_role("option").all_inner_texts()
        await page.keyboard.press("Escape")
        if options:
            return [o.strip() for o in options]
        await asyncio.sleep(1)
    return []


async def cache_clearing(browser, server: Server) -> list[Row]:
    rows = []
    cap = int(LIMITS["GPTVIZ_GENERATIONS"])
    n = cap + 2
    # a) the generation cap across clears
    pages = [await open_page(browser, f"{server.url}/generation?gen_n=200") for _ in range(n)]
    try:
        first = await asyncio.to_thread(clear_cache, server.port, 2)
        for _, p in pages[: n // 2]:
            await press_generate(p)
        await asyncio.to_thread(clear_cache, server.port, 2)
        for _, p in pages[n // 2 :]:
            await press_generate(p)
        await asyncio.to_thread(clear_cache, server.port, 1)
        most_running, most_waiting, samples = 0, 0, []
        for _ in range(15):  # 15 samples, about 0.5 s apart
            states = [await generation_state(p) for _, p in pages]
            running, waiting = states.count("running"), states.count("waiting")
            samples.append(f"{running}+{waiting}")
            most_running, most_waiting = max(most_running, running), max(most_waiting, waiting)
            await asyncio.sleep(0.5)
        boxes = sum([await exception_boxes(p) for _, p in pages])
    finally:
        for ctx, _ in pages:
            await ctx.close()
    rows.append(
        Row(
            "3 cache clearing",
            f"clear_cache BackMsg over a raw WebSocket ({first}), twice more between "
            f"{n} sessions' Generate presses (gen_n=200), once after",
            f"most running at once {most_running}, most waiting {most_waiting} (running+waiting per sample: "
            f"{' '.join(samples)}); exception boxes {boxes}",
            f"running <= GPTVIZ_GENERATIONS={cap}",
            yes(most_running <= cap and boxes == 0),
        )
    )
    # b) trained models stay with the session that trained them
    trainer_ctx, trainer = await open_page(browser, f"{server.url}/training")
    other_ctx, other = await open_page(browser, f"{server.url}/")
    try:
        await trainer.get_by_role("button", name="Start training").click(timeout=30_000)
        await trainer.get_by_text(re.compile(r"after \d+ of \d+ steps in")).first.wait_for(timeout=120_000)
        await asyncio.to_thread(clear_cache, server.port, 2)
        await switch(trainer, "Attention")
        mine = await source_options(trainer)
        await other.reload()
        await other.locator(SIDEBAR_PROMPT).wait_for(timeout=60_000)
        await idle(other)
        theirs = await source_options(other)
        late_ctx, late = await open_page(browser, f"{server.url}/")
        try:
            fresh = await source_options(late)
        finally:
            await late_ctx.close()
    finally:
        await trainer_ctx.close()
        await other_ctx.close()
    label = "Trained in this session"
    ok = label in mine and label not in theirs and label not in fresh
    rows.append(
        Row(
            "3 cache clearing",
            f"one session trains (GPTVIZ_TRAINING_SECONDS={LIMITS['GPTVIZ_TRAINING_SECONDS']}"
            "), 2 clears, then the sidebar's Source options of it, another open session and a new one",
            f"trainer sees '{label}': {label in mine}; other session: {label in theirs}; new session: {label in fresh}",
            "trainer only",
            yes(ok),
        )
    )
    return rows


# ---- 4. concurrent large captures ------------------------------------------------------------------------------

LONG_COUNT_OR_ERROR = """() => [...document.querySelectorAll('strong')]
    .some(e => /^\\d{3,} tokens?$/.test(e.innerText.trim()))
    || document.querySelector('[data-testid="stAlertContentError"]') !== null"""


async def token_count(page) -> str:
    """The Attention page's "682 tokens" line, or "no count" where the page shows none (a refusal: see messages)."""
    try:
        return await page.get_by_text(re.compile(r"^\d+ tokens?$")).first.inner_text(timeout=5_000)
    except Exception:
        return "no count"


async def large_captures(browser, server: Server, visitors: int) -> list[Row]:
    from gptviz.model.tokenizer import encode

    url = f"{server.url}/?" + urllib.parse.urlencode(
        {"source": "preset", "preset": "gpt2-small", "prompt": "Hello world"}
    )
    budget = int(LIMITS["GPTVIZ_MEMORY_MB"])
    before = server.settled_rss(2.0)
    loaded = time.monotonic()
    pages = [await open_page(browser, url, timeout_ms=300_000)]  # builds gpt2-small (random weights) once
    load_s = time.monotonic() - loaded
    try:
        pages += [await open_page(browser, url) for _ in range(visitors - 1)]
        await asyncio.sleep(1)
        build_peak = server.peak_since(loaded)
        overhead = server.settled_rss(3.0)
        prompts = []
        for i in range(visitors):
            text = " ".join(WORDS[(i + j) % len(WORDS)] + str(j % 10) for j in range(400))
            prompts.append(f"Visitor {i}: {text}"[:2000])
        tokens = [len(encode(p)) for p in prompts]
        t0 = time.monotonic()

        async def send(page, prompt):
            area = page.locator(SIDEBAR_PROMPT)
            await area.fill(prompt)
            await area.press("Control+Enter")
            # the new prompt's count (hundreds of tokens) or an error: the status widget alone can be gone before
            # a loaded server starts the rerun
            await page.wait_for_function(LONG_COUNT_OR_ERROR, timeout=300_000)
            await idle(page, 180_000)
            return time.monotonic() - t0

        times = await asyncio.gather(*(send(p, prompt) for (_, p), prompt in zip(pages, prompts, strict=True)))
        await asyncio.sleep(3.0)  # the server may still be finishing a run the pages no longer wait for
        window = [(t, v) for t, v in server.samples if t >= t0]
        peak_t, peak = max(window, key=lambda s: s[1]) if window else (t0, 0.0)
        boxes = sum([await exception_boxes(p) for _, p in pages])
        notes = []
        for _, p in pages:
            for kind in ("stAlertContentError", "stAlertContentWarning"):
                for text in await p.locator(f'[data-testid="{kind}"]').all_inner_texts():
                    notes.append(text.strip().splitlines()[0][:120])
        counts = [await token_count(p) for _, p in pages]
    finally:
        for ctx, _ in pages:
            await ctx.close()
    did = (
        f"{visitors} contexts on the Attention page, gpt2-small preset (built in {load_s:.0f} s), each sends a "
        f"2,000-character prompt at once ({', '.join(map(str, tokens))} tokens; pages show {', '.join(counts)})"
    )
    limit = budget + overhead
    return [
        Row(
            "4 concurrent large captures",
            f"first visitor builds gpt2-small (124M parameters, random weights), "
            f"then {visitors - 1} more open the page",
            f"peak {build_peak:,.0f} MiB from an idle "
            f"{before:,.0f} MiB before the build (+{build_peak - before:,.0f}); idle afterwards {overhead:,.0f} MiB",
            f"< GPTVIZ_MEMORY_MB {budget:,} + {before:,.0f} = {budget + before:,.0f} MiB",
            yes(build_peak < budget + before),
        ),
        Row(
            "4 concurrent large captures",
            did,
            f"peak {peak:,.0f} MiB ({peak_t - t0:.1f} s after the prompts were sent); idle with the model loaded "
            f"{overhead:,.0f} MiB (+{peak - overhead:,.0f}); "
            f"all done in {max(times):.1f} s; exception boxes {boxes}"
            + (f"; messages: {'; '.join(sorted(set(notes)))}" if notes else ""),
            f"< GPTVIZ_MEMORY_MB {budget:,} + {overhead:,.0f} = {limit:,.0f} MiB, 0 boxes",
            yes(peak < limit and boxes == 0),
        ),
    ]


# ---- 5-7. the unit page's index builder: fair turns, the disk cap, a torn index.json ------------------------------

INDEX_LIMITS = {"GPTVIZ_INDEX_TOKENS": "20000", "GPTVIZ_INDEX_KEPT": "4", "GPTVIZ_INDEX_BUILDS": "1"}
BUILT = re.compile(r"Top \d+ examples")


async def build_one(page, base: str, seed: int, timeout_ms: int = 120_000) -> tuple[float, bool, str]:
    """Open the unit page for the tiny preset at `seed` (a new model: no index yet), press Build and wait for the
    unit to show: (seconds from the click, whether it waited for a turn, what ended it: "built" or the message)."""
    await page.goto(f"{base}/units?source=preset&preset=tiny&seed={seed}&norm=pre", timeout=timeout_ms)
    button = page.get_by_role("button", name="Build the index")
    await button.wait_for(timeout=timeout_ms)
    await idle(page, timeout_ms)
    errors = page.locator('[data-testid="stAlertContentError"]')
    before = set(await errors.all_inner_texts())  # an unreadable index's message is there before the click
    t0 = time.monotonic()
    await button.click(timeout=timeout_ms)
    waited = False
    deadline = t0 + timeout_ms / 1000
    while time.monotonic() < deadline:
        if await page.get_by_text(BUILT).count():
            return time.monotonic() - t0, waited, "built"
        if await page.get_by_text(re.compile("Waiting for a turn")).count():
            waited = True
        new = [t for t in await errors.all_inner_texts() if t not in before]
        if new:
            return time.monotonic() - t0, waited, new[0][:120]
        await asyncio.sleep(0.1)
    return time.monotonic() - t0, waited, "timed out"


async def index_builder(browser, builds: int = 6) -> list[Row]:
    """A loopback server of its own, GPTVIZ_INDEX_KEPT=4, scans of 20,000 tokens of the tiny preset: one visitor
    builds `builds` new seeds back to back; then a torn index.json is written for a new seed and the visitor opens
    its unit page. Every connection is from 127.0.0.1 (loopback only), so fair turns between two addresses are
    left to tests/app/test_index_turns.py."""
    folder = Path(tempfile.mkdtemp(prefix="gptviz-hostile-indexes-"))
    server = Server({**INDEX_LIMITS, "GPTVIZ_INDEX_DIR": str(folder)}, port=PORT and PORT + 1)
    try:
        OWN_SERVERS["6-7"] = (server.settled_rss(2.0), server)  # its own idle RSS: the budget's fixed overhead
        ctx, page = await open_page(browser, server.url)
        runs = [await build_one(page, server.url, seed) for seed in range(1, builds + 1)]
        kept = sorted(p.name for p in folder.iterdir())
        # a torn index.json, as a server killed mid-write left it before saves were atomic
        import torch  # noqa: F401  (gptviz needs it; imported here so the other scenarios start faster)

        from gptviz import GPT, PRESETS
        from gptviz.index import model_fingerprint

        torn = folder / model_fingerprint(GPT(PRESETS["tiny"].replace(norm="pre"), seed=777))
        torn.mkdir()
        (torn / "index.json").write_text('{"format": "gptviz-neuron-index", "ver')
        await page.goto(f"{server.url}/units?source=preset&preset=tiny&seed=777&norm=pre")
        shown = page.get_by_text(re.compile("could not be read|no neuron index yet")).or_(page.get_by_text(BUILT))
        await shown.first.wait_for(timeout=120_000)
        await idle(page)
        unreadable = await page.get_by_text(re.compile("could not be read")).count()
        offered = await page.get_by_role("button", name="Build the index").count()
        rebuilt = await build_one(page, server.url, 777) if offered else (0.0, False, "no Build button")
        boxes = await exception_boxes(page)
        await ctx.close()
    finally:
        server.close()
    built = sum(how == "built" for _, _, how in runs)
    fingerprints = [k for k in kept if len(k) == 64]
    return [
        Row(
            "6 disk cap",
            f"GPTVIZ_INDEX_KEPT=4 after {built} of {builds} builds back to back",
            f"{len(fingerprints)} index folders kept ({len(kept) - len(fingerprints)} other entries)",
            "<= 4, no temporary left",
            yes(len(fingerprints) <= 4 and len(kept) == len(fingerprints)),
        ),
        Row(
            "7 torn index.json",
            "a torn index.json for a new seed, then the visitor opens its unit page",
            f"'could not be read' shown: {bool(unreadable)}, Build offered: {bool(offered)}; rebuilt: "
            f"{rebuilt[2]} in {rebuilt[0]:.1f} s; exception boxes {boxes}",
            "message + Build, rebuilt, 0 boxes",
            yes(bool(unreadable and offered) and rebuilt[2] == "built" and boxes == 0),
        ),
    ]


# ---- the run ---------------------------------------------------------------------------------------------------

spans: list[tuple[str, float, float]] = []  # (scenario, start, end) in monotonic time
OVERHEAD = 0.0  # the idle warm server's RSS, MiB (set at the start of a run)
PORT: int | None = None  # --port: the main server's; scenario 6's own server takes the next one
OWN_SERVERS: dict[str, tuple[float, Server]] = {}  # a scenario on a server of its own: (its idle RSS, the server)


def budget_rows(server: Server, overhead: float) -> list[str]:
    """Each scenario's peak RSS against GPTVIZ_MEMORY_MB plus the fixed overhead the budget does not see (the idle,
    warm server's RSS before any scenario: Python, torch, Streamlit, the default model), as table lines."""
    budget = int(LIMITS["GPTVIZ_MEMORY_MB"])
    lines = []
    for name, a, b in spans:
        number = name.split()[0]
        idle_rss, own = OWN_SERVERS.get(number, (overhead, server))
        at_start = min((v for t, v in own.samples if t >= a), default=0.0)
        peak = own.peak_since(a, b)
        bound = budget + idle_rss
        lines.append(
            f"| {name} | {'its own server' if own is not server else 'the main server'} | "
            f"{idle_rss:,.0f} | {at_start:,.0f} | {peak:,.0f} | +{peak - idle_rss:,.0f} | "
            f"{budget:,} + {idle_rss:,.0f} = {bound:,.0f} | {yes(peak <= bound)} |"
        )
    return lines


SCENARIOS = {
    1: ("1 patching 128-token pair", 240),
    2: ("2 one visitor holds every slot", 300),
    3: ("3 cache clearing", 360),
    4: ("4 concurrent large captures", 420),
    5: ("5 patching gpt2-small", 600),
    6: ("6-7 the index builder: disk cap, torn file", 420),
}


async def drive(server: Server, only: list[int], hog_seconds: float, attackers_nice: int | None = None) -> list[Row]:
    from playwright.async_api import async_playwright

    rows: list[Row] = []
    shown = 0
    spans.clear()
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for number in only:
                name, limit = SCENARIOS[number]
                run = {
                    1: lambda: patching_128(browser, server),
                    2: lambda: slot_hog(browser, server, hog_seconds, p, attackers_nice),
                    3: lambda: cache_clearing(browser, server),
                    4: lambda: large_captures(browser, server, 3),
                    5: lambda: patching_leaves(browser, server),
                    6: lambda: index_builder(browser),
                }
                started = time.monotonic()
                print(
                    f"[{time.strftime('%H:%M:%S')}] scenario {name} (timeout {limit} s), server RSS "
                    f"{server.rss():,.0f} MiB",
                    flush=True,
                )
                try:
                    rows += await asyncio.wait_for(run[number](), timeout=limit)
                except asyncio.TimeoutError:
                    rows.append(Row(name, "not driven to the end", f"timed out after {limit} s", "-", "NOT DRIVEN"))
                except Exception as err:
                    why = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
                    rows.append(Row(name, "not driven to the end", why, "-", "NOT DRIVEN"))
                spans.append((name, started, time.monotonic()))
                print(f"[{time.strftime('%H:%M:%S')}]   done in {time.monotonic() - started:.0f} s", flush=True)
                # as it goes, so a run stopped before its end (a deadline on a loaded machine) still reports these
                for r in rows[shown:]:
                    print(f"  | {r.scenario} | {r.did} | {r.measured} | {r.target} | {r.met} |", flush=True)
                shown = len(rows)
                print("  " + budget_rows(server, OVERHEAD)[-1], flush=True)
        finally:
            await browser.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, nargs="*", default=sorted(SCENARIOS), choices=sorted(SCENARIOS))
    parser.add_argument("--hog-seconds", type=float, default=60, help="scenario 2's attackers stop after this")
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="the server's loopback port (scenario 6's own server takes the next); by default a free one",
    )
    parser.add_argument(
        "--attackers-nice",
        type=int,
        default=None,
        help="scenario 2: the attackers' pages in a browser of their own at this nice value (19: an "
        "attacker whose browser draws elsewhere; by default they share the victim's browser)",
    )
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"needs Debian's chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    global PORT, OVERHEAD
    PORT = args.port
    started = time.perf_counter()
    server = Server(port=PORT)
    try:
        overhead = server.settled_rss(3.0)
        OVERHEAD = overhead
        print(
            f"server pid {server.proc.pid} on port {server.port}, RSS {server.rss():,.0f} MiB (idle {overhead:,.0f}), "
            f"log {server.log_path}",
            flush=True,
        )
        rows = asyncio.run(drive(server, args.only, args.hog_seconds, args.attackers_nice))
        peak_t, peak_all = max(server.samples, key=lambda s: s[1], default=(0.0, 0.0))
        per = "; ".join(f"{name.split()[0]}: {server.peak_since(a, b):,.0f} MiB" for name, a, b in spans)
        when = next(
            (f"during scenario {name.split()[0]}" for name, a, b in spans if a <= peak_t <= b), "between scenarios"
        )
    finally:
        server.close()
    tracebacks = server.tracebacks()
    load = os.getloadavg()
    print(
        f"\nHostile load, {time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:.0f} s in all, "
        f"{os.cpu_count()} CPU(s), load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
        f"server limits {LIMITS}; server peak RSS over the whole run {peak_all:,.0f} MiB ({when}); "
        f"each scenario's peak: {per}\n"
    )
    print("| scenario | what it did | measured | target | met |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.scenario} | {r.did} | {r.measured} | {r.target} | {r.met} |")
    print(
        "\nEach scenario's peak RSS against the budget (MiB; the bound is GPTVIZ_MEMORY_MB plus the idle warm "
        "server's RSS, the fixed overhead the budget does not count):\n"
    )
    print(
        "| scenario | server | idle (overhead) | at its start | peak | peak - idle | bound | within |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    print("\n".join(budget_rows(server, overhead)))
    tracebacks += [t for _, own in OWN_SERVERS.values() for t in own.tracebacks()]
    print(
        f"\nServer log: {len(tracebacks)} Traceback(s)"
        + ("".join(f"\n  - {t}" for t in tracebacks) if tracebacks else "")
        + f" ({server.log_path})"
    )
    return 0 if all(r.met == "yes" for r in rows) and not tracebacks else 1


if __name__ == "__main__":
    sys.exit(main())
