"""Where things are drawn on a page in Chromium: text boxes, axis ticks, overlaps."""

from __future__ import annotations

import math

# Boxes of the SVG text matching `selector` inside each drawn Plotly figure, with the figure's own box.
BOXES_JS = """(selector) => [...document.querySelectorAll('.js-plotly-plot')].map((plot) => ({
  plot: plot.getBoundingClientRect().toJSON(),
  boxes: [...plot.querySelectorAll(selector)].filter((el) => el.textContent.trim())
           .map((el) => ({text: el.textContent, ...el.getBoundingClientRect().toJSON()}))}))"""


# Tick labels of one axis with their anchor (the tick's x) and angle: labels drawn at an angle are parallel, so two
# are apart when their anchors' distance across the slant holds a line of text (their boxes overlap regardless).
TICKS_JS = """(selector) => [...document.querySelectorAll('.js-plotly-plot')].map((plot) =>
  [...plot.querySelectorAll(selector)].filter((el) => el.textContent.trim() && el.getBoundingClientRect().width)
  .map((el) => {  // drawn ones: a figure in a tab not shown has no size
    const box = el.getBoundingClientRect();
    const turn = /rotate\\((-?[0-9.]+)/.exec(el.getAttribute('transform') || '');
    // an angled label ends at its tick (text-anchor end): its anchor is the box's right edge
    return {text: el.textContent, x: turn ? box.right : box.left + box.width / 2, right: box.right, left: box.left,
            top: box.top,
            angle: turn ? Number(turn[1]) : 0, size: parseFloat(getComputedStyle(el).fontSize)};
  }))"""


def crowded_ticks(ticks):
    """Neighbouring x tick labels closer than their text: across the slant for angled labels, else side by side."""
    ticks = sorted(ticks, key=lambda t: t["x"])
    out = []
    for a, b in zip(ticks, ticks[1:], strict=False):
        if a["angle"]:
            apart = (b["x"] - a["x"]) * abs(math.sin(math.radians(a["angle"]))) >= 0.9 * a["size"]
        else:
            apart = a["right"] <= b["left"] + 1
        if not apart:
            out.append((a["text"], b["text"]))
    return out


def overlapping(boxes, slack: float = 1.0):
    return [
        (a["text"], b["text"])
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a["left"] + slack < b["right"]
        and b["left"] + slack < a["right"]
        and a["top"] + slack < b["bottom"]
        and b["top"] + slack < a["bottom"]
    ]


TEXT_SELECTOR = ".annotation-text, .gtitle, .g-xtitle text, .g-ytitle text, .legendtext, .ytick text"


def inside(box, width: int, height: int) -> bool:
    return (
        box is not None
        and box["width"] > 0
        and box["height"] > 0
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width + 0.5
        and box["y"] + box["height"] <= height + 0.5
    )
