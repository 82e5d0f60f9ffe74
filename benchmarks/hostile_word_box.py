"""The unit page's one-token boxes under a 10 MB value (issue 43): page time and the process's peak RSS above its
baseline, in a fresh process, through Streamlit's AppTest (the value set in session state, where the widget's
max_chars does not apply; before the boxes had a limit, a websocket message delivered the same).

    python -m benchmarks word-box            # about 30 s

Samples VmRSS every 0.05 s in a thread."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Peak:
    def __init__(self):
        self.peak, self._stop = rss_mib(), threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mib())
            time.sleep(0.05)

    def stop(self) -> float:
        self._stop.set()
        return max(self.peak, rss_mib())


def run_page(name: str, spec, **state):
    """One run of app_pages/<name>.py through AppTest with `spec` loaded and `state` in session state."""
    from streamlit.testing.v1 import AppTest

    from gptviz.app.sidebar import DEFAULT_PROMPT

    at = AppTest.from_file(str(ROOT / "app_pages" / f"{name}.py"), default_timeout=120)
    at.session_state["model_spec"] = spec
    at.session_state["prompt"] = DEFAULT_PROMPT
    for key, value in state.items():
        at.session_state[key] = value
    return at.run()


def main() -> int:
    from gptviz.app import keys as K
    from gptviz.app import model_service

    pre = model_service.ModelSpec(K.SOURCE_BUNDLED, "shakespeare-pre", "pre")
    huge = "x" * 10_000_000
    cases = [
        ("A word", {K.UNIT_TAB: K.UNIT_TABS[1]}, K.UNIT_WORD, {}),
        ("Source token", {}, K.per_item(K.UNIT_SOURCE, "L1H2"), {"unit": "L1H2"}),
    ]
    print("| box | page time | peak RSS above the page's own run | message |\n|---|---|---|---|")
    for name, tab, key, extra in cases:
        run_page("units", spec=pre, **tab, **extra)  # warm: the model, the index, the examples
        base = rss_mib()
        peak = Peak()
        t0 = time.perf_counter()
        at = run_page("units", spec=pre, **tab, **extra, **{key: huge})
        took = time.perf_counter() - t0
        top = peak.stop()
        said = next((w.value for w in at.warning if "long" in w.value or "token" in w.value), "none")
        print(
            f"| {name} (10,000,000 characters) | {took:.2f} s | +{top - base:,.0f} MiB (baseline {base:,.0f}) | "
            f"{said[:90]}{'...' if len(said) > 90 else ''}; exceptions {len(at.exception)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
