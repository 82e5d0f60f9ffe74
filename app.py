"""gptviz: the router. Shared sidebar (model, norm placement, device, prompt), then the chosen page."""
import streamlit as st

from gptviz import ui
from gptviz.allocator import keep_freed_memory

# Captures build tens of MB of activations per prompt; keep freed memory for the next one (see allocator.py).
keep_freed_memory()

st.set_page_config(page_title="gptviz: see inside a GPT", page_icon="🔎", layout="wide")

# The page scripts live in app_pages/, not pages/: Streamlit runs a pages/ folder as an old-style multipage
# app until st.navigation has run once, so a bookmarked page opened first would skip this router.
PAGES = {
    "Look inside": [
        st.Page("app_pages/attention.py", title="Attention", icon="👀", default=True),
        st.Page("app_pages/generation.py", title="Generation", icon="✍️"),
        st.Page("app_pages/embeddings.py", title="Embeddings", icon="🧭"),
        st.Page("app_pages/activations.py", title="Activations", icon="⚡"),
        st.Page("app_pages/why.py", title="Why this token?", icon="🔬"),
    ],
    "Architecture": [
        st.Page("app_pages/norms.py", title="Pre-norm vs post-norm", icon="⚖️"),
        st.Page("app_pages/parameters.py", title="Parameters", icon="🧮"),
        st.Page("app_pages/explainers.py", title="Explainers", icon="📖"),
    ],
    "Train": [
        st.Page("app_pages/training.py", title="Train a model", icon="🏋️"),
    ],
}

page = st.navigation(PAGES)
ui.sidebar()
page.run()
