"""The app's router: page config, the shared sidebar (model, norm placement, device, prompt), then the chosen page.

`streamlit run app.py` in a checkout and `gptviz app` in an installed package both run `main()`. Page files are
given by absolute path, so the router works wherever the entry script lives."""

from __future__ import annotations

from .pages import PAGE_LIST, PAGES_DIR  # noqa: F401 (PAGES_DIR: callers read it here)


def main() -> None:
    import streamlit as st

    from ..serve.allocator import keep_freed_memory
    from . import keys as K
    from .display import close_sidebar_after_navigation, responsive_style, warm_plotly
    from .links import apply_link, sync_address
    from .live import stop_generation
    from .sidebar import sidebar
    from .unit_nav import follow_pending

    # Captures build tens of MB of activations per prompt; keep freed memory for the next one (see allocator.py).
    keep_freed_memory()
    st.set_page_config(page_title="gptviz: see inside a GPT", page_icon="🔎", layout="wide")
    responsive_style()
    pages: dict[str, list] = {}
    for i, (section, stem, title, icon) in enumerate(PAGE_LIST):
        # the default page is served at "/" but reserves a path it does not serve: give it one nobody types
        pages.setdefault(section, []).append(
            st.Page(
                PAGES_DIR / f"{stem}.py", title=title, icon=icon, default=i == 0, url_path="home" if i == 0 else None
            )
        )
    home = pages[PAGE_LIST[0][0]][0]
    # its own name, typed or bookmarked ("/attention"), showed Streamlit's "Page not found" dialog: a hidden page
    # there sends the visitor home with the link's settings
    pages[PAGE_LIST[0][0]].append(
        st.Page(
            lambda: st.switch_page(home, query_params=st.query_params.to_dict()),
            title=PAGE_LIST[0][2],
            url_path=PAGE_LIST[0][1],
            visibility="hidden",
        )
    )
    page = st.navigation(pages)
    follow_pending()  # a unit id picked on the last run: open the unit page in this session
    stem_of = {title: stem for _, stem, title, _ in PAGE_LIST}
    stop_generation(unless_page=stem_of.get(page.title))  # leaving a page stops the generation it runs
    state = st.session_state
    if K.LINK_READ not in state:  # a session's first run: the link's settings, before any widget is drawn
        state[K.LINK_READ] = True
        for notice in apply_link(state, st.query_params.to_dict()):
            st.toast(notice, icon="🔗")
    state[K.FIGURE_SEQ] = 0  # figures without a key get download buttons numbered from 0 in every run
    sidebar()
    close_sidebar_after_navigation()
    try:
        page.run()
        warm_plotly()  # a session's first run: the browser loads Plotly before the first figure asks for it
    finally:  # also after st.stop(): the address bar follows the view, so copying it shares it
        sync_address()
