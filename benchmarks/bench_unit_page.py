"""The unit page's load time in the browser (issue 35; target: under 1 s with the index built), and its screenshots.

A fresh `streamlit run app.py` on a free port, Debian's chromium (/usr/bin/chromium). For each unit: open
/units?unit=<id> in a new tab and time navigation to the page showing the unit's summary line and all three figures
(examples, histogram, direct effect) with the script run finished. The first open of the server pays the one-off
costs (reading the corpus, the model's fingerprint); the first open of each unit computes its examples (one
batched pass); the later opens are what a visitor clicking a unit id sees. Prints every time and the median of the
warm ones.

    python -m benchmarks unit-page                       # 3 neurons and 2 heads of shakespeare-pre
    python -m benchmarks unit-page -- --shots /tmp/unit-shots   # also 1400x1000 and 390x844 screenshots
    python -m benchmarks unit-page -- --in-session-only         # only the clicks in one tab (the app's own links)

The app's own unit ids (pills and table rows) open the page in the same tab and session (gptviz.app.unit_nav);
the first measurement is that: a click on a neuron's pill on the Activations page to its page drawn. The new-tab
opens after it are what a copied link costs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from benchmarks.servers import streamlit_server, unit_page_drawn

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking"]
# L2N26 fires on punctuation; L1N100 on titles (' Duke', ' King'); L0N475 on ' love'; L0H0 is the model card's
# previous-token head (0.984), L1H2 its induction head (0.903)
UNITS = ("L2N26", "L1N100", "L0N475", "L0H0", "L1H2")


def open_unit(browser, url: str, unit: str, size: tuple[int, int]):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.set_default_timeout(180_000)
    started = time.perf_counter()
    page.goto(f"{url}/units?unit={unit}")
    page.locator('[data-testid="stMarkdown"]').filter(has_text=re.compile(f"^{unit}:")).wait_for()
    unit_page_drawn(page)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached")
    return page, time.perf_counter() - started


def click_pill(page, unit: str) -> float:
    """On the Activations page's MLP tab, click `unit`'s pill; seconds until the unit page shows it, drawn."""
    page.get_by_role("tab", name="MLP neurons").click()
    pill = page.locator('[data-testid="stButtonGroup"] button').filter(has_text=re.compile(f"^{unit}$")).first
    pill.wait_for()
    started = time.perf_counter()
    pill.click()
    page.locator('[data-testid="stMarkdown"]').filter(has_text=re.compile(f"^{unit}:")).wait_for()
    unit_page_drawn(page)
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached")
    return time.perf_counter() - started


def in_session(browser, url: str, repeats: int) -> list[float]:
    """Clicks in one tab, as a visitor browses: Activations -> a neuron's pill -> its page, and back (the page's
    own navigation), for each neuron listed at the prompt's last token; the first click of each unit computes its
    examples, the later ones are warm."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.set_default_timeout(180_000)
    page.goto(f"{url}/activations")
    page.get_by_role("tab", name="MLP neurons").click()
    pills = page.locator('[data-testid="stButtonGroup"] button').filter(has_text=re.compile(r"^L\d+N\d+$"))
    pills.first.wait_for()
    units = pills.all_inner_texts()[:3]
    warm = []
    for unit in units:
        times = []
        for _ in range(1 + repeats):
            page.get_by_role("link", name="Activations").click()
            page.get_by_role("tab", name="MLP neurons").wait_for()
            page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached")
            times.append(click_pill(page, unit))
        warm += times[1:]
        print(
            f"{unit} (in this tab, from the Activations page's pill): first click {times[0]:.2f} s; "
            f"warm clicks {', '.join(f'{t:.2f}' for t in times[1:])} s"
        )
    page.close()
    return warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shots", type=Path, help="folder for the screenshots (none by default)")
    parser.add_argument("--repeats", type=int, default=3, help="warm opens per unit")
    parser.add_argument("--in-session-only", action="store_true", help="only the clicks in one tab")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    flags = ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    with (
        streamlit_server([sys.executable, "-m", "streamlit", "run", "app.py"], cwd=ROOT, flags=flags) as server,
        sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        clicks = in_session(browser, server.url, args.repeats)
        print(
            f"click in the same tab, median of {len(clicks)} warm clicks: {statistics.median(clicks):.2f} s "
            "(target < 1 s)"
        )
        if args.in_session_only:
            browser.close()
            return
        warm = []
        for unit in UNITS:
            page, first = open_unit(browser, server.url, unit, (1400, 1000))
            page.close()
            times = []
            for _ in range(args.repeats):
                page, seconds = open_unit(browser, server.url, unit, (1400, 1000))
                times.append(seconds)
                page.close()
            warm += times
            print(f"{unit}: first open {first:.2f} s; warm opens {', '.join(f'{t:.2f}' for t in times)} s")
            if args.shots:
                args.shots.mkdir(parents=True, exist_ok=True)
                for w, h in ((1400, 1000), (390, 844)):
                    page, _ = open_unit(browser, server.url, unit, (w, h))
                    page.wait_for_timeout(500)
                    page.screenshot(path=str(args.shots / f"unit_{unit}_{w}x{h}.png"), full_page=True)
                    page.close()
        print(f"warm open, median of {len(warm)}: {statistics.median(warm):.2f} s (target < 1 s)")
        browser.close()


if __name__ == "__main__":
    main()
