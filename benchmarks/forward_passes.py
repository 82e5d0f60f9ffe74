"""Forward passes every GPT in this process has run, counted from outside the library: a pass of GPT.final_hidden
(forward, capture, each generation step, training's loss; a batch counts once) is counted when it embeds its tokens
(GPT.token_embedding, which only final_hidden calls, after the input's checks: a refused input is not counted, and a
pass an edit ends early, as the index's scan does, still is), and GPT.forward_from (the rest of a pass from a block,
as patching runs it) when it returns. Both are wrapped once, process-wide, the first time the count is read. Tests
and benchmarks read it around an action to see whether it ran the model; the library itself keeps no counter."""

from __future__ import annotations

import functools
import threading

from gptviz.model.model import GPT

PASSES = ("token_embedding", "forward_from")  # each called once a pass, after its checks
_lock = threading.Lock()
_passes = 0
_installed = False


def _counted(method):
    @functools.wraps(method)
    def counted(self, *args, **kwargs):
        global _passes
        out = method(self, *args, **kwargs)
        with _lock:
            _passes += 1
        return out

    return counted


def install() -> None:
    """Start counting (idempotent)."""
    global _installed
    with _lock:
        if not _installed:
            for name in PASSES:
                setattr(GPT, name, _counted(getattr(GPT, name)))
            _installed = True


def forward_count() -> int:
    """Forward passes every GPT in this process has run since counting started (read it before and after)."""
    install()
    with _lock:
        return _passes
