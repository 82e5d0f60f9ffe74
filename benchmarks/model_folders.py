"""Model folders opened one after another on a real server (issue 57, item 8): does its memory stay within its budget?

Writes `--folders` gptviz checkpoints of about `--mib` MiB each (distinct seeds, gptviz's own save_checkpoint) into a
temporary folder, starts `streamlit run app.py` on a free loopback port with that folder in GPTVIZ_MODEL_DIRS and
the memory settings given, and opens each folder as a visitor following a link does (`?source=pretrained&model=...`):
a fresh session over a raw WebSocket (no browser), its first run awaited, then the connection closed. Prints the
server's resident memory (VmRSS from /proc) after each, then again after `--settle` seconds. Before the fix the
server grew by about one model per folder and never came down (2,690-2,725 MiB after twenty 100 MiB folders against
an idle 467 MiB and a 1,024 MiB budget): each closed session kept its last page's model, and a session Streamlit
drops is a reference cycle that only Python's full collection frees.

    python -m benchmarks.model_folders                         # 20 folders of 100 MiB, a 1,024 MiB budget
    python -m benchmarks.model_folders --folders 8 --mib 50
    python -m benchmarks.model_folders --env GPTVIZ_MODEL_CACHE_MB=512 --env GPTVIZ_CAPTURE_CACHE_MB=256

The folders are removed at the end; the server is stopped by its PID.

Measured 2026-12-06 (2 shared cores, load average 8-12), 20 folders of 99 MiB, GPTVIZ_MEMORY_MB=1024, idle server
467-468 MiB: before, with GPTVIZ_MODEL_CACHE_MB=768 and GPTVIZ_CAPTURE_CACHE_MB=256 set (it did not start without),
632 780 929 1,088 1,192 1,319 1,414 1,385 1,512 1,632 1,705 1,812 1,913 1,993 2,089 2,213 2,343 2,442 2,526 2,615 MiB
and 2,615 five seconds later; after, with the budget alone (256/768 derived), 632 781 913 1,062 1,221 1,317 1,426
1,285 1,277 1,289 1,307 1,289 1,291 1,300 1,318 1,362 1,329 1,330 1,339 1,229 MiB (seven models of 99 MiB stored,
the captures beside them), never past idle + budget (1,491), none refused.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
from benchmarks.load_test import rss_mib  # noqa: E402
from benchmarks.servers import streamlit_server  # noqa: E402


def write_folders(root: Path, count: int, mib: float) -> float:
    """`count` checkpoints of about `mib` MiB (GPT-2's vocabulary, 6 layers, the width that gives the size); the
    size of one, in MiB."""
    import torch

    from gptviz import GPT
    from gptviz.model.params import total_params
    from gptviz.model.weights import save_checkpoint

    torch.set_num_threads(1)
    width = 8
    while total_params(_config(width + 8)) * 4 <= mib * 2**20:
        width += 8
    config = _config(width)
    for i in range(count):
        save_checkpoint(GPT(config, seed=i), root / f"model-{i:02d}")
    return total_params(config) * 4 / 2**20


def _config(width: int):
    from gptviz import GPTConfig

    return GPTConfig(vocab_size=50257, n_ctx=256, d_model=width, n_layers=6, n_heads=8)


def visit(port: int, query: str, timeout: float = 180.0) -> list[str]:
    """One visitor's first run of the app with this link's query string, in a fresh session; the alerts and
    exceptions it showed (their text)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from websockets.sync.client import connect

    msg = BackMsg()
    msg.rerun_script.query_string = query
    shown = []
    with connect(
        f"ws://127.0.0.1:{port}/_stcore/stream",
        subprotocols=["streamlit"],
        open_timeout=10,
        close_timeout=5,
        max_size=None,
    ) as ws:
        ws.send(msg.SerializeToString())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            forward = ForwardMsg()
            forward.ParseFromString(ws.recv(timeout=max(1.0, deadline - time.monotonic())))
            kind = forward.WhichOneof("type")
            if kind == "delta" and forward.delta.new_element.WhichOneof("type") in ("alert", "exception"):
                element = forward.delta.new_element
                shown.append(element.alert.body if element.HasField("alert") else element.exception.type)
            if kind == "script_finished":
                return shown
    raise TimeoutError(f"the run did not finish within {timeout:.0f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folders", type=int, default=20)
    parser.add_argument("--mib", type=float, default=100.0, help="each checkpoint's size (default 100)")
    parser.add_argument("--memory-mb", type=int, default=1024, help="GPTVIZ_MEMORY_MB (default 1024)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="another setting for the server (repeatable)"
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds to wait before the last reading")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gptviz-folders-") as tmp:
        root = Path(tmp)
        size = write_folders(root, args.folders, args.mib)
        env = {
            **os.environ,
            "GPTVIZ_MODEL_DIRS": str(root),
            "GPTVIZ_MEMORY_MB": str(args.memory_mb),
            **dict(item.split("=", 1) for item in args.env),
        }
        settings = " ".join(
            f"{k}={v}" for k, v in sorted(env.items()) if k.startswith("GPTVIZ_") and k != "GPTVIZ_MODEL_DIRS"
        )
        print(f"{args.folders} folders of {size:.0f} MiB; {settings}", flush=True)
        with streamlit_server([sys.executable, "-m", "streamlit", "run", "app.py"], cwd=ROOT, env=env) as server:
            pid = server.proc.pid
            time.sleep(2)
            idle = rss_mib(pid)
            print(f"idle server: {idle:,.0f} MiB", flush=True)
            readings, refused = [], 0
            for i in range(args.folders):
                query = urllib.parse.urlencode({"source": "pretrained", "model": str(root / f"model-{i:02d}")})
                started = time.perf_counter()
                shown = visit(server.port, query)
                refused += any("Could not load" in text for text in shown)
                readings.append(rss_mib(pid))
                note = f"  ({shown[0][:100]})" if shown else ""
                print(
                    f"folder {i + 1:2d}: {readings[-1]:,.0f} MiB  {time.perf_counter() - started:5.1f} s{note}",
                    flush=True,
                )
            time.sleep(args.settle)
            last = rss_mib(pid)
    print(f"after {args.settle:.0f} s more: {last:,.0f} MiB")
    print(
        f"{args.folders} folders of {size:.0f} MiB, GPTVIZ_MEMORY_MB={args.memory_mb}: idle {idle:,.0f} MiB, highest "
        f"{max(readings):,.0f}, last {last:,.0f} (idle + budget {idle + args.memory_mb:,.0f}); "
        f"{refused} refused"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
