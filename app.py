"""gptviz: the router. Shared sidebar (model, norm placement, device, prompt), then the chosen page."""
import streamlit as st

from gptviz import ui
from gptviz.allocator import keep_freed_memory

# Captures build tens of MB of activations per prompt; keep freed memory for the next one (see allocator.py).
keep_freed_memory()

st.set_page_config(page_title="gptviz: see inside a GPT", page_icon="🔎", layout="wide")

PAGES = {
    "Look inside": [
        st.Page("pages/attention.py", title="Attention", icon="👀", default=True),
        st.Page("pages/generation.py", title="Generation", icon="✍️"),
        st.Page("pages/embeddings.py", title="Embeddings", icon="🧭"),
        st.Page("pages/activations.py", title="Activations", icon="⚡"),
    ],
    "Architecture": [
        st.Page("pages/norms.py", title="Pre-norm vs post-norm", icon="⚖️"),
        st.Page("pages/parameters.py", title="Parameters", icon="🧮"),
        st.Page("pages/explainers.py", title="Explainers", icon="📖"),
    ],
    "Train": [
        st.Page("pages/training.py", title="Train a model", icon="🏋️"),
    ],
}

page = st.navigation(PAGES)
ui.sidebar()
page.run()
