"""Every kind of unit link the app draws, as the browser test clicks them."""

from __future__ import annotations

import urllib.parse
from typing import NamedTuple

GRAPH_PROMPT = "JULIET:\nGood morrow, sweet Romeo, good morrow to thee.\nROMEO:\nGood morrow, sweet"


class Link(NamedTuple):
    page: str  # the page's path and query: the view that shows the link
    tab: str | None  # a tab to open first
    kind: str  # "pills:<key suffix>" (gptviz.app.unit_nav.unit_pills), "graph node" or "search row"
    norm: str | None = None  # the wiring the unit page must open in (a twin's head)
    expander: str | None = None  # an expander to open (after the tab)
    press: str | None = None  # a button to press first (Generate)


def _why(**params) -> str:
    return "/why?" + urllib.parse.urlencode({"prompt": GRAPH_PROMPT, **params})


LINKS = [
    Link("/activations", "MLP neurons", "pills:act_neurons"),
    Link("/activations", "Head detectors", "pills:act_heads"),
    Link("/attention", None, "pills:att_detectors"),
    Link("/timeline", None, "pills:tl_pre-norm", "pre"),
    Link("/timeline", None, "pills:tl_post-norm", "post"),
    Link("/norms", "The twins in depth", "pills:norms_pre", "pre", "Every head and its match"),
    Link("/norms", "The twins in depth", "pills:norms_post", "post", "Every head and its match"),
    Link(_why(why_view="Ablate heads", why_heads="1.0,2.1"), None, "pills:why_ablated"),
    Link(_why(why_view="Attribution graph"), None, "pills:why_graph"),
    Link(_why(why_view="Attribution graph"), None, "graph node"),
    Link("/units?unit=L1H0", "Search by token", "search row"),
    Link(
        "/generation?" + urllib.parse.urlencode({"gen_n": 6, "gen_pace": "as fast as it writes"}),
        None,
        "pills:gen_contributors",
        press="Generate",
    ),
]
