"""Several visitors at once: a bounded load test of the app in real browsers, on this machine only.

Starts `streamlit run app.py` on a free loopback port with the memory limits below, then drives N browser sessions
(one Chromium, one context each, so each is its own Streamlit session) for a fixed time. Each session loops over
mixed use: a prompt of its own (a marker only it types), a page switch to Generation and back, a short live
generation; session 0 also starts one training run. Before that, one session alone measures the page switch.

Reported: actions done, exception boxes seen (must be 0), cross-talk (a page showing another session's prompt or
token count; must be 0), the server's peak resident memory against the configured budget, and the median page
switch under load beside the single-session figure from the same run.

    python -m benchmarks load                       # 8 sessions, 120 s
    python -m benchmarks load -- --sessions 4 --seconds 60

Needs Debian's chromium at /usr/bin/chromium (never a downloaded browser) and Playwright's Python package. Every
request goes to 127.0.0.1; the loops stop at the deadline or after --max-actions per session, whichever is first.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from benchmarks.servers import free_port  # GPTVIZ_TEST_PORTS: a range of its own on a shared machine

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# The limits the server runs under (gptviz/serve/limits.py): small enough that a 2-core, 24 GiB machine is safe.
LIMITS = {
    "GPTVIZ_MEMORY_MB": "2048",
    "GPTVIZ_CAPTURE_CACHE_MB": "512",
    "GPTVIZ_MODEL_CACHE_MB": "1024",
    "GPTVIZ_TRAINING_JOBS": "1",
    "GPTVIZ_TRAINING_SECONDS": "60",
}
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Server:
    """The app on a loopback port, with its resident memory sampled every half second."""

    def __init__(self, extra_env: dict[str, str] | None = None, root: Path = ROOT):
        """`root`: the checkout whose app.py runs (another one: a before/after comparison), on its own gptviz."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **LIMITS, **(extra_env or {})}
        if Path(root).resolve() != ROOT:
            env["PYTHONPATH"] = str(root)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "streamlit",
                "run",
                "app.py",
                "--server.headless",
                "true",
                "--server.address",
                "127.0.0.1",
                "--server.port",
                str(self.port),
                "--server.fileWatcherType",
                "none",
            ],
            cwd=root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        self.peak = 0.0
        self._stop = threading.Event()
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.3)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib(self.proc.pid))
            time.sleep(0.5)

    def close(self):
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def idle(page, timeout_ms: int = 120_000) -> None:
    """Until the script run ends (Streamlit's status widget goes away)."""
    await page.wait_for_timeout(250)
    await page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=timeout_ms)


class Visitor:
    def __init__(self, index: int, url: str):
        self.index, self.url = index, url
        self.actions, self.exceptions, self.crosstalk, self.switches, self.errors = 0, 0, 0, [], []
        self.prompt = ""

    async def check(self, page) -> None:
        boxes = await page.locator('[data-testid="stException"]').count()
        self.exceptions += boxes
        area = page.locator('[data-testid="stSidebar"] textarea')
        if self.prompt and await area.count():
            shown = await area.input_value()
            if shown != self.prompt:
                self.crosstalk += 1
                self.errors.append(f"cross-talk: the prompt box shows {shown[:60]!r}")

    async def set_prompt(self, page, round_: int) -> None:
        from gptviz.model.tokenizer import encode

        words = " ".join(WORDS[(self.index + round_ + i) % len(WORDS)] for i in range(6))
        self.prompt = f"Visitor {self.index} round {round_}: {words}"
        area = page.locator('[data-testid="stSidebar"] textarea')
        await area.fill(self.prompt)
        await area.press("Control+Enter")
        await idle(page)
        n = len(encode(self.prompt))
        # the Attention page states the prompt's token count: another session's prompt would show another count
        count = page.get_by_text(re.compile(r"^\d+ tokens?$")).first
        settle = time.monotonic() + 30  # a rerun under load may still be drawing the last prompt's page
        while True:
            shown = await count.inner_text()
            if int(shown.split()[0]) == n:
                break
            if time.monotonic() > settle:  # still another count: the page shows a prompt this session did not type
                self.crosstalk += 1
                self.errors.append(f"cross-talk: {shown!r} shown for a prompt of {n} tokens")
                break
            await page.wait_for_timeout(500)

    async def switch(self, page, title: str) -> float:
        started = time.perf_counter()
        await page.locator('[data-testid="stSidebarNav"] a').filter(has_text=title).first.click()
        await page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=120_000)
        await idle(page)
        return time.perf_counter() - started

    async def generate(self, page) -> None:
        tokens = page.get_by_label("New tokens")
        await tokens.fill("8")
        await tokens.press("Enter")
        await idle(page)
        await page.get_by_role("button", name="Generate").click()
        await page.get_by_text(re.compile(r"then 8 new ones")).first.wait_for(timeout=180_000)
        await idle(page)

    async def train(self, page) -> None:
        await self.switch(page, "Train a model")
        await page.get_by_role("button", name="Start training").click()
        await idle(page)

    async def run(self, browser, deadline: float, max_actions: int, with_training: bool) -> None:
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        page = await context.new_page()
        try:
            await page.goto(self.url)
            await page.locator('[data-testid="stSidebar"] textarea').wait_for(timeout=180_000)
            await idle(page)
            if with_training:
                await self.train(page)
                await self.check(page)
                await self.switch(page, "Attention")
            round_ = 0
            while time.monotonic() < deadline and self.actions < max_actions:
                await self.set_prompt(page, round_)
                await self.check(page)
                self.switches.append(await self.switch(page, "Generation"))
                await self.check(page)
                if time.monotonic() < deadline:
                    await self.generate(page)
                    await self.check(page)
                self.switches.append(await self.switch(page, "Attention"))
                await self.check(page)
                self.actions += 4
                round_ += 1
        except Exception as err:  # a timeout is a finding, reported, not a crash of the load test
            self.errors.append(f"{type(err).__name__}: {str(err).splitlines()[0][:160]}")
        finally:
            await context.close()


async def drive(url: str, sessions: int, seconds: float, max_actions: int) -> tuple[list[Visitor], list[float]]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        alone = Visitor(-1, url)  # one session by itself: the page-switch baseline
        await alone.run(browser, time.monotonic() + 60, 8, with_training=False)
        visitors = [Visitor(i, url) for i in range(sessions)]
        deadline = time.monotonic() + seconds
        await asyncio.gather(*(v.run(browser, deadline, max_actions, with_training=v.index == 0) for v in visitors))
        await browser.close()
    return visitors, alone.switches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--max-actions", type=int, default=200, help="per session, a bound besides the time")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"needs Debian's chromium at {CHROMIUM}", file=sys.stderr)
        return 2
    server = Server()
    started = time.perf_counter()
    try:
        visitors, single = asyncio.run(drive(server.url, args.sessions, args.seconds, args.max_actions))
    finally:
        server.close()
    switches = [s for v in visitors for s in v.switches]
    budget = int(LIMITS["GPTVIZ_MEMORY_MB"])
    rows = [
        ("sessions at once", f"{args.sessions} (plus one alone first, for the baseline)"),
        (
            "mixed use",
            f"{args.seconds:.0f} s; actions done: {sum(v.actions for v in visitors)} "
            f"({', '.join(str(v.actions) for v in visitors)})",
        ),
        ("exception boxes seen", str(sum(v.exceptions for v in visitors))),
        ("cross-talk (another session's prompt or token count shown)", str(sum(v.crosstalk for v in visitors))),
        (
            "server peak resident memory",
            f"{server.peak:,.0f} MiB (GPTVIZ_MEMORY_MB={budget:,}: {'under' if server.peak < budget else 'OVER'} it)",
        ),
        (
            "median page switch, all sessions at once",
            f"{statistics.median(switches):.2f} s over {len(switches)}" if switches else "none completed",
        ),
        (
            "median page switch, one session alone (same run)",
            f"{statistics.median(single):.2f} s over {len(single)}" if single else "none completed",
        ),
        (
            "sessions that hit an error or a timeout",
            "; ".join(f"{v.index}: {e}" for v in visitors for e in v.errors) or "none",
        ),
    ]
    print(f"\nLoad test, {time.perf_counter() - started:.0f} s in all, {os.cpu_count()} CPU(s); limits {LIMITS}\n")
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    ok = (
        not sum(v.exceptions + v.crosstalk for v in visitors)
        and server.peak < budget
        and not any(v.errors for v in visitors)
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
