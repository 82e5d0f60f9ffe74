"""The pre-norm vs post-norm page's AppTest settings and readers."""

from __future__ import annotations

import base64

import numpy as np
from streamlit.testing.v1 import AppTest

from gptviz.training import xiong
from tests.support import pagetest

PAGE = "app_pages/norms.py"


def open_page(**state) -> AppTest:
    return pagetest.open_page(PAGE, **state)


def array(value) -> np.ndarray:
    """A figure array from its JSON: a list, or Plotly's typed array {"dtype", "bdata" (base64)}."""
    if isinstance(value, dict) and "bdata" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


def markdown_text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


TINY = dict(norms_preset="tiny", norms_depth=3, norms_width=32, norms_input="random", norms_seed=0, norms_init="gpt2")


TINY_PAPER = xiong.ProbeSetting(width=32, depth=3, n_heads=2, seeds=2, n_batches=1, batch_size=2, block=8)


TINY_PAPER_DEPTHS = (2, 4)
