"""A real Streamlit server on 127.0.0.1 for the benchmarks and the tests that need one (the browser tests, the
installed `gptviz app`): a free port, the server's start, and a wait for its health check that fails at once when
the process exits; a process's CPU time; and the browser waits both share.

The server's output goes to a temporary file, not a pipe: a server that runs through a whole test module never
blocks on a full pipe, and its log is there to read when it fails or after it stops."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

HOST = "127.0.0.1"


PORTS_ENV = "GPTVIZ_TEST_PORTS"  # "8800-8899": the range a session on a shared machine may use; else any free port


def free_port() -> int:
    """A port nothing listens on: the first free one in GPTVIZ_TEST_PORTS's range ("LOW-HIGH") when set, else one the
    system picks."""
    span = os.environ.get(PORTS_ENV, "").strip()
    if not span:
        with socket.socket() as s:
            s.bind((HOST, 0))
            return s.getsockname()[1]
    low, _, high = span.partition("-")
    for port in range(int(low), int(high or low) + 1):
        with socket.socket() as s:
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS_ENV}={span}")


@dataclasses.dataclass
class Server:
    url: str
    port: int
    proc: subprocess.Popen
    log_file: IO[bytes]
    final_log: str | None = None

    def log(self) -> str:
        """What the server printed so far (all of it once it has stopped)."""
        if self.final_log is not None:
            return self.final_log
        self.log_file.seek(0)
        return self.log_file.read().decode(errors="replace")


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far (/proc/PID/stat; Linux): on a loaded machine, steadier than the
    wall clock, and what says whether a server is working."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Terminate a child process; kill it if it has not ended within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


def jupyterlab(folder: Path, port: int, root: Path, timeout: float = 180.0) -> subprocess.Popen:
    """`jupyter lab` on `port` over `folder`, its kernels importing gptviz from the checkout `root`, once it answers
    (within `timeout` seconds; else RuntimeError with the end of folder/lab.log). Stop it with stop_process."""
    env = {**os.environ, "PYTHONPATH": str(root), "JUPYTER_CONFIG_DIR": str(folder / ".jupyter")}
    with open(folder / "lab.log", "wb") as log:  # the child keeps its own handle
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                f"--port={port}",
                f"--ServerApp.ip={HOST}",
                "--allow-root",
                "--IdentityProvider.token=",
                "--ServerApp.password=",
                "--ServerApp.disable_check_xsrf=True",
                f"--ServerApp.root_dir={folder}",
                "--LabApp.expose_app_in_browser=True",
                "--LabApp.news_url=None",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            ],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/api/status", timeout=2):
                return proc
        except OSError as err:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop_process(proc)
                raise RuntimeError((folder / "lab.log").read_text(errors="replace")[-3000:]) from err
            time.sleep(0.5)


def wait_until_healthy(server: Server, timeout: float = 90.0) -> None:
    """Until the server answers its health check with "ok"; raises, with the server's log, if the process exits
    first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/_stcore/health", timeout=2) as reply:
                if reply.status == 200 and reply.read().decode().strip() == "ok":
                    return
        except OSError:
            pass
        if server.proc.poll() is not None:
            raise RuntimeError(
                f"the server exited with code {server.proc.returncode} before it answered:\n{server.log()[-3000:]}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the server did not answer its health check in {timeout:.0f} s:\n{server.log()[-3000:]}"
            )
        time.sleep(0.3)


@contextlib.contextmanager
def streamlit_server(
    command: Sequence[str],
    *,
    cwd: str | os.PathLike,
    env: dict[str, str] | None = None,
    flags: Sequence[str] = (),
    timeout: float = 90.0,
    port: int | None = None,
) -> Iterator[Server]:
    """Runs `command` (`python -m streamlit run app.py`, `gptviz app`, ...) with Streamlit's headless, port and
    address flags and `flags`; yields the Server once it is healthy, and stops it on exit. `port`: a fixed one (a
    session given its own port range on a shared machine), else a free one."""
    port = port or free_port()
    args = [*command, "--server.headless", "true", "--server.port", str(port), "--server.address", HOST, *flags]
    with tempfile.TemporaryFile() as log_file:
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
        server = Server(f"http://{HOST}:{port}", port, proc, log_file)
        try:
            wait_until_healthy(server, timeout)
            yield server
        finally:
            stop_process(proc)
            server.final_log = server.log()  # still readable once the temporary file is gone


# The unit page drawn: its examples' rows (a component's, in a shadow root that only Playwright's locators see) and
# both Plotly figures (each has its own main-svg layers).
PLOTS_DRAWN = "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.querySelector('.main-svg')).length >= 2"


def unit_page_drawn(page) -> None:
    """Until a Playwright `page` showing the unit page has drawn its examples' rows and both figures."""
    page.locator(".gv-rows .gv-row").first.wait_for()
    page.wait_for_function(PLOTS_DRAWN)
