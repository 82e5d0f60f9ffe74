"""The whole model at a glance: the sidebar's prompt through every stage of the forward pass, at one position, with
the real values; each box opens the page that shows that stage."""

from __future__ import annotations

import streamlit as st

from gptviz.app import keys as K
from gptviz.app import overview as ov
from gptviz.app import reproduce
from gptviz.app.display import show_figure
from gptviz.app.seen import Seen, read_prompt
from gptviz.app.sidebar import page_prompt_box
from gptviz.figures.overview import overview_figure


def diagram(seen: Seen, reading: ov.Reading, layout: str) -> None:
    key = ov.chart_key(layout)
    fig = overview_figure(reading.overview, reading.names, seen.pos_labels, seen.labels, layout)
    with st.container(key=K.OV_WIDE if layout == "wide" else K.OV_TALL):
        show_figure(
            fig,
            key=key,
            on_select=lambda: ov.stage_clicked(key, reading.overview.position, seen.ids),
            selection_mode="points",
        )


def main() -> None:
    ov.follow_click()
    st.title("The whole model")
    page_prompt_box()
    seen = read_prompt()
    top, _ = st.columns([1, 2])
    position = ov.position_picker(seen.ids, top, seen.enc)
    reading = ov.overview_at(seen, position)
    ov.screen_style()
    for layout in ov.layouts(seen.cfg.n_layers):
        diagram(seen, reading, layout)
    first = reading.overview
    st.caption(
        f"{seen.cfg.norm}-norm: each block runs its boxes in this order. Numbers are ‖·‖, the length of "
        "the vector there (a + box: the stream after that addition). Attention: the head with the strongest "
        f"weight from this token, where it looks, that weight, and chance (ch.) = 1/{first.position + 1}. "
        "Lens: the top next token read off that state, its probability, = or ≠ the model's final choice. "
        f"Output: next-token probabilities; uniform is {first.uniform_prob:.1e}. Click a box to open its page."
    )
    ov.stage_links()
    reproduce.show(reproduce.overview(seen.spec, seen.ids, position, reproduce.prompt_text()))


main()
