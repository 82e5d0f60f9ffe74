"""gptviz: `streamlit run app.py` in a checkout (installed: `gptviz app`). The router is gptviz/app/router.py.

The page scripts live in app_pages/, not pages/: Streamlit runs a pages/ folder as an old-style multipage app until
st.navigation has run once, so a bookmarked page opened first would skip the router."""
from gptviz.app.router import main

main()
