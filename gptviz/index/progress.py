"""A text progress line for long scans: a bar, tokens done, the rate and the time left."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def text_progress(label: str, stream=None, every: float = 1.0) -> Callable[[int, int], None]:
    """A progress callback printing "label: done/total tokens (pct) elapsed" to stderr at most every `every` s."""
    stream = sys.stderr if stream is None else stream
    started = time.perf_counter()
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.perf_counter() - started
        if now - last[0] >= every or done >= total:
            last[0] = now
            rate = done / now if now > 0 else 0
            end = "\n" if done >= total else ""
            left = f", {_duration((total - done) / rate)} left" if 0 < rate and done < total else ""
            stream.write(
                f"\r{label}: {_bar(done / total)} {done:,}/{total:,} tokens ({100 * done / total:.0f}%) "
                f"{_duration(now)}, {rate:,.0f} tok/s{left}{end}"
            )
            stream.flush()

    return report


def _bar(fraction: float, width: int = 24) -> str:
    filled = int(round(width * min(max(fraction, 0.0), 1.0)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds} s"
