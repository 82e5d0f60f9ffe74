"""Copy as Python: each view's numbers as the library calls that reproduce them in a notebook, with the visitor's
model, prompt and settings (issue 45). A snippet imports only the library (never gptviz.app or Streamlit), and its
lines bind `result`, the numbers the view shows (some also print them, as the view lays them out);
tests/test_copy_as_python.py runs each page's snippet and compares `result` with what the page drew. A snippet runs
from a checkout as well as from an installed package (gptviz is on no package index).

Every visitor string enters a snippet through repr(), so no prompt can end the string it sits in. core.py builds
snippets and the box that shows them; one module per group of pages writes their snippets.
"""
from .core import MARK, prompt_text, show  # noqa: F401
from .prompt_views import attention, next_token, overview, activations, embeddings  # noqa: F401
from .why import direct_attribution, ablation, patching, saliency, flow  # noqa: F401
from .norms import twins, same_weights, depth_sweep, paper  # noqa: F401
from .index_views import unit, units_here, units_for_word  # noqa: F401
from .model_views import parameters, parameters_of_presets, training, heads_forming, grow, explainers  # noqa: F401
from .graph_views import attribution_graph, qk  # noqa: F401
