"""Issue 59's last check, in a real browser: a newcomer uploads a nanoGPT ckpt.pt (its train.py's layout, made here
with the reference code) in the sidebar and sees its attention map; once that tab is closed, the server removes the
upload's folder (swept when the next visitor uploads). The sidebar with the uploader is photographed at 1400x1000
and on a 390x844 phone (GPTVIZ_TEST_SCREENSHOTS keeps the pictures)."""

from __future__ import annotations

import os
import random
import socket
import sys

import pytest
import torch

from benchmarks.servers import streamlit_server
from tests.reference import nanogpt as nanogpt_ref
from tests.support import ROOT
from tests.support.browser import CHROMIUM, no_exception, wait_for_idle

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"),
]
PORTS = range(8500, 8600)  # the app servers this session may start


def free_port() -> int:
    ports = list(PORTS)
    random.shuffle(ports)
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 8500-8599")


def newcomers_ckpt(path) -> None:
    """What nanoGPT's train.py writes for a small model: model, model_args (the vocabulary padded to 50,304)."""
    torch.manual_seed(0)
    ref = nanogpt_ref.GPT(
        nanogpt_ref.GPTConfig(block_size=64, vocab_size=50304, n_layer=2, n_head=4, n_embd=32, bias=False)
    )
    nanogpt_ref.save_ckpt(ref, path)


def upload_folders(tmp) -> list[str]:
    """The per-session folders under the server's upload root (inside the server's TMPDIR)."""
    return sorted(p.name for root in tmp.glob("gptviz-uploads-*") for p in root.iterdir())


SIDEBAR_IN = """() => { const s = document.querySelector('[data-testid="stSidebar"]');
  return s && s.getBoundingClientRect().left >= -1 && s.getBoundingClientRect().width > 200; }"""


def open_sidebar_if_closed(page) -> None:
    """A phone's sidebar starts closed: open it, and wait until it has slid all the way in."""
    button = page.locator('[data-testid="stExpandSidebarButton"]')
    if button.count() and button.first.is_visible():
        button.first.click()
    page.wait_for_function(SIDEBAR_IN)
    page.wait_for_timeout(300)


def upload(page, path) -> None:
    """Choose the upload source and give the file to the uploader, as a visitor's file dialog would."""
    open_sidebar_if_closed(page)
    source = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').filter(
        has=page.get_by_text("Source", exact=True)
    )
    source.scroll_into_view_if_needed()
    source.click()
    page.get_by_role("option", name="Upload a checkpoint file", exact=True).click()
    wait_for_idle(page)
    page.locator('[data-testid="stSidebar"] input[type="file"]').set_input_files(str(path))
    page.locator('[data-testid="stSidebar"]').get_by_text("Only this tab can load it").wait_for(timeout=120_000)
    wait_for_idle(page)


def shoot_sidebar(page, path) -> None:
    """The sidebar, scrolled to the uploader and what it says of the stored file."""
    # .first: the uploader drawn last run; a stale copy can linger a moment while Streamlit swaps them (a loaded
    # machine)
    page.locator('[data-testid="stSidebar"] [data-testid="stFileUploader"]').first.scroll_into_view_if_needed()
    page.locator('[data-testid="stSidebar"]').get_by_text("Remove the upload").scroll_into_view_if_needed()
    box = page.locator('[data-testid="stSidebar"]').bounding_box()
    page.screenshot(
        path=str(path),
        clip={
            "x": 0,
            "y": 0,
            "width": min(box["width"], page.viewport_size["width"]),
            "height": page.viewport_size["height"],
        },
    )


def test_a_newcomer_uploads_a_nanogpt_checkpoint_and_sees_its_attention(browser, tmp_path, artifacts):
    newcomers_ckpt(tmp_path / "ckpt.pt")
    server_tmp = tmp_path / "server-tmp"
    server_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(server_tmp)}
    with streamlit_server(
        [sys.executable, "-m", "streamlit", "run", "app.py"],
        cwd=ROOT,
        env=env,
        port=free_port(),
        flags=["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
    ) as server:
        first = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = first.new_page()
        page.set_default_timeout(120_000)
        page.goto(server.url)
        page.wait_for_selector('[data-testid="stApp"]')
        page.locator("canvas.gv-heat").first.wait_for()  # the bundled model's map, before the upload
        upload(page, tmp_path / "ckpt.pt")
        sidebar = page.locator('[data-testid="stSidebar"]')
        assert "ckpt.pt: " in sidebar.inner_text() and "d_model 32" in sidebar.inner_text()
        # the attention page now shows the uploaded model: 2 layers, 4 heads (the bundled model has more)
        page.locator(".gv-layer").filter(has_text="layer 1").first.wait_for()
        assert page.locator(".gv-map").first.locator(".gv-layer").count() == 2
        assert page.locator(".gv-map").first.locator(".gv-head").count() == 5  # 4 heads and their mean
        page.locator("canvas.gv-heat").first.wait_for()
        no_exception(page)
        newcomers = upload_folders(server_tmp)
        assert len(newcomers) == 1
        shoot_sidebar(page, artifacts / "upload_sidebar_1400.png")
        page.screenshot(path=str(artifacts / "upload_attention_1400.png"))
        first.close()  # the newcomer closes the tab

        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        page = phone.new_page()
        page.set_default_timeout(120_000)
        page.goto(server.url)
        page.wait_for_selector('[data-testid="stApp"]')
        page.locator("canvas.gv-heat").first.wait_for()  # drawn: the sidebar's button is there to open it
        upload(page, tmp_path / "ckpt.pt")  # another visitor's upload sweeps the closed session's
        now = upload_folders(server_tmp)
        assert len(now) == 1 and now != newcomers
        no_exception(page)
        shoot_sidebar(page, artifacts / "upload_sidebar_390.png")
        page.get_by_test_id("stSidebarCollapseButton").click()  # the phone's page: the uploaded model's map
        page.locator(".gv-map").first.locator(".gv-head").filter(has_text="head 3").wait_for()
        page.wait_for_timeout(500)
        page.screenshot(path=str(artifacts / "upload_attention_390.png"))
        phone.close()
