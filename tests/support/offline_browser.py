"""A Chromium page that can read local files only: every other request is aborted and recorded (what a notebook's
HTML export or a saved view would fetch from the network, offline)."""

from __future__ import annotations

import contextlib
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


@contextlib.contextmanager
def offline_page(width: int, height: int):
    """Yields (page, blocked URLs, page errors); the browser closes on exit."""
    from playwright.sync_api import sync_playwright

    blocked: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        page = chromium.new_page(viewport={"width": width, "height": height})

        def route(r):
            if r.request.url.startswith("file:"):
                r.continue_()
            else:
                blocked.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            yield page, blocked, errors
        finally:
            chromium.close()
