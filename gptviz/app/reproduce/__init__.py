"""Copy as Python: each view's numbers as the library calls that reproduce them in a notebook, with the visitor's
model, prompt and settings (issue 45). A snippet imports only the library (never gptviz.app or Streamlit), and its
lines bind `result`, the numbers the view shows (some also print them, as the view lays them out);
tests/app/test_copy_as_python.py runs each page's snippet and compares `result` with what the page drew. A snippet runs
from a checkout as well as from an installed package (gptviz is on no package index).

Every visitor string enters a snippet through repr(), so no prompt can end the string it sits in. core.py builds
snippets and the box that shows them; one module per group of pages writes their snippets.
"""

from .core import MARK, prompt_text, show  # noqa: F401
from .graph_views import attribution_graph, qk  # noqa: F401
from .index_views import unit, units_for_word, units_here  # noqa: F401
from .model_views import explainers, grow, heads_forming, parameters, parameters_of_presets, training  # noqa: F401
from .norms import depth_sweep, paper, same_weights, twins  # noqa: F401
from .prompt_views import activations, attention, embeddings, next_token, overview  # noqa: F401
from .why import ablation, direct_attribution, flow, patching, saliency  # noqa: F401
