"""gptviz: `streamlit run app.py` in a checkout (installed: `gptviz app`). The router is gptviz/app/router.py.

Streamlit imports this file to serve the `st.App` below, whose lifespan warms the server before its first visitor
(gptviz/app/warm_start.py); each visitor's run then executes this file as `__main__`, which runs the router.

The page scripts live in app_pages/, not pages/: Streamlit runs a pages/ folder as an old-style multipage app until
st.navigation has run once, so a bookmarked page opened first would skip the router."""

import streamlit as st

if __name__ == "__main__":
    from gptviz.app.router import main

    main()
else:
    from gptviz.app.warm_start import lifespan

    app = st.App(__file__, lifespan=lifespan)
