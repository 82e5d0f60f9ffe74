"""The browser test of unit links (tests/browser/test_browser_unit_links.py, over support.unit_links.LINKS) clicks
every kind the app draws: each list of unit pills (by its key), and each other place that opens the unit page
(go_to_unit, a table's row pick). Read from the app's code, so a new unit link without its click in the browser test
fails here (issue 62, item 2)."""

from __future__ import annotations

import re

from tests.support import ROOT
from tests.support.unit_links import LINKS

SOURCES = sorted([*ROOT.glob("app_pages/*.py"), *ROOT.glob("gptviz/app/**/*.py")])
# the places that open the unit page other than a pill, by file, and the LINKS kind that clicks each
OTHER_LINKS = {"gptviz/app/views/why_graph.py": "graph node", "gptviz/app/views/unit_search.py": "search row"}


def pill_lists() -> set[str]:
    """The key of every list of unit pills the app draws: unit_pills(..., K.per_item(K.UNIT_PILLS, "<key>", ...))."""
    found = set()
    for path in SOURCES:
        text = path.read_text()
        calls = re.findall(r"(?<!def )\bunit_pills\(", text)
        keys = re.findall(r"K\.per_item\(K\.UNIT_PILLS, \"([^\"]+)\"", text)
        assert len(keys) == len(calls), f"{path}: a unit_pills call without a K.per_item(K.UNIT_PILLS, ...) key"
        found |= set(keys)
    return found


def other_links() -> set[str]:
    """Files that open the unit page by go_to_unit or a table's row pick (unit_nav itself aside)."""
    return {
        str(path.relative_to(ROOT))
        for path in SOURCES
        if path.name != "unit_nav.py" and re.search(r"\b(go_to_unit|open_on_row_pick)\(", path.read_text())
    }


def test_the_browser_test_clicks_every_list_of_unit_pills():
    clicked = [link.kind.split(":", 1)[1] for link in LINKS if link.kind.startswith("pills:")]
    lists = pill_lists()
    assert {"act_neurons", "why_graph", "norms", "gen_contributors"} <= lists  # the search finds them
    # a list keyed per item ("tl", wiring) is clicked through each of its items' keys ("tl_pre-norm")
    missing = {key for key in lists if not any(c == key or c.startswith(key + "_") for c in clicked)}
    assert missing == set(), f"unit pills no browser test clicks: {sorted(missing)}"
    stale = {c for c in clicked if not any(c == key or c.startswith(key + "_") for key in lists)}
    assert stale == set(), f"LINKS clicks pill lists the app no longer draws: {sorted(stale)}"


def test_the_browser_test_clicks_every_other_unit_link():
    assert other_links() == set(OTHER_LINKS)
    assert set(OTHER_LINKS.values()) <= {link.kind for link in LINKS}
