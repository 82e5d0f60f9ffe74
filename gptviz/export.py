"""Data behind the views, as files: CSV tables and the whole capture of a prompt as a NumPy `.npz`.

No Streamlit here: pages hand these bytes to st.download_button.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import torch

from .figures.common import ANNOTATION_MIN_WIDTH
from .model.sizes import ATTENTION_HOOKS
from .model.tokenizer import token_labels


def to_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def capture_arrays(
    ids: Sequence[int], cache: Mapping[str, torch.Tensor], logits: torch.Tensor | None = None, enc=None
) -> dict[str, np.ndarray]:
    """Every captured hook tensor by its hook name, plus `ids` (int64), `tokens` (display labels in the model's
    tokenizer `enc`, default GPT-2's, as unicode strings, so the file loads without pickle) and `logits` when given."""
    arrays = {"ids": np.asarray(list(ids), dtype=np.int64), "tokens": np.asarray(token_labels(ids, enc), dtype=np.str_)}
    if logits is not None:
        arrays["logits"] = to_numpy(logits)
    for name, tensor in cache.items():
        if name in arrays:
            raise ValueError(f"hook name {name!r} clashes with a reserved key")
        arrays[name] = to_numpy(tensor)
    return arrays


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """numpy.savez_compressed into memory."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **{k: to_numpy(v) for k, v in arrays.items()})
    return buffer.getvalue()


def capture_npz(
    ids: Sequence[int], cache: Mapping[str, torch.Tensor], logits: torch.Tensor | None = None, enc=None
) -> bytes:
    """The whole capture for a prompt as `.npz` bytes: `np.load(io.BytesIO(data))["blocks.0.hook_resid_pre"]`."""
    return npz_bytes(capture_arrays(ids, cache, logits, enc))


def load_npz(data: bytes) -> dict[str, np.ndarray]:
    """Read `.npz` bytes back (no pickle)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def figure_html(fig) -> bytes:
    """A Plotly figure as one standalone interactive HTML file: Plotly's JavaScript inlined from the installed
    package (no CDN, so it opens offline), the data as JSON that Plotly escapes (`<` and `/` as \\u escapes, so
    token text cannot close the script); annotations placed for a wide figure hide in a narrow window as in the app."""
    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"displaylogo": False})
    return html.replace("</head>", annotation_width_css(fig, ".plotly-graph-div") + "</head>", 1).encode("utf-8")


def annotation_min_widths(fig) -> list[int]:
    """The width below which each of a figure's annotations hides (figures.common.ANNOTATION_MIN_WIDTH; 0: never)."""
    meta = getattr(getattr(fig, "layout", None), "meta", None)
    return [int(w) for w in meta.get(ANNOTATION_MIN_WIDTH, [])] if isinstance(meta, dict) else []


def annotation_width_css(fig, scope: str) -> str:
    """A <style> that hides each of a figure's annotations where the element `scope` selects (around the figure) is
    drawn narrower than its annotation_min_widths, by a CSS container query; "" when none hides. Numbers and the
    caller's selector only: no figure text is ever part of it."""
    by_width: dict[int, list[int]] = {}
    for i, width in enumerate(annotation_min_widths(fig)):
        if width > 0:
            by_width.setdefault(width, []).append(i)
    if not by_width:
        return ""
    rules = [f"{scope} {{container-type: inline-size;}}"]
    for width, indices in sorted(by_width.items()):
        hidden = ", ".join(f'{scope} g.annotation[data-index="{i}"]' for i in indices)
        rules.append(f"@container (max-width: {width - 0.02:.2f}px) {{{hidden} {{display: none;}}}}")
    return "<style>" + "\n".join(rules) + "</style>"


def figure_file_name(fig, fallback: str = "gptviz-figure") -> str:
    """A file name from the figure's title: letters, digits and dashes only, at most 60 characters."""
    title = fig.layout.title.text or ""
    words = re.findall(r"[A-Za-z0-9]+", re.sub(r"<[^>]*>", " ", title))
    stem = "-".join(words).lower()[:60].strip("-")
    return f"{stem or fallback}.html"


# A spreadsheet reads a cell starting with one of these as a formula (OWASP's CSV injection list)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """Text that a spreadsheet would read as a formula, prefixed with ' (shown as typed); numbers and other
    text unchanged. Token text is anyone's: " =HYPERLINK(...)" is a token sequence like any other."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def csv_bytes(df: pd.DataFrame) -> bytes:
    """The frame as UTF-8 CSV, every text cell and header spreadsheet-safe (numbers keep their sign)."""
    safe = df.rename(columns=lambda c: spreadsheet_safe(str(c)))
    for column in safe.columns[
        [pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype) for dtype in safe.dtypes]
    ]:
        safe[column] = safe[column].map(spreadsheet_safe)
    return safe.to_csv(index=False).encode("utf-8")


def matrix_frame(
    values,
    row_labels: Sequence,
    col_labels: Sequence,
    row_name: str = "row",
    col_name: str = "column",
    value_name: str = "value",
) -> pd.DataFrame:
    """A matrix as a long table (one row per cell), e.g. a heatmap's data for CSV: labels may repeat, so
    the row and column indices are kept next to them."""
    values = to_numpy(values)
    n_rows, n_cols = values.shape
    rows, cols = np.meshgrid(np.arange(n_rows), np.arange(n_cols), indexing="ij")
    return pd.DataFrame(
        {
            f"{row_name}_index": rows.ravel(),
            row_name: np.asarray(list(row_labels), dtype=object)[rows.ravel()],
            f"{col_name}_index": cols.ravel(),
            col_name: np.asarray(list(col_labels), dtype=object)[cols.ravel()],
            value_name: values.ravel(),
        }
    )


def prompt_capture_npz(model, ids: Sequence[int], include_attention: bool = True) -> bytes:
    """Run the model once on `ids`, capturing every hook point (optionally without the [heads, T, T]
    attention scores and patterns, the largest tensors), and return the `.npz` bytes (no batch axis)."""
    from .model.hooks import capture
    from .model.tokenizer import tokenizer_for

    names = None if include_attention else (lambda n: not n.endswith(ATTENTION_HOOKS))
    _, cache = capture(model, torch.tensor([list(ids)]), names)
    return capture_npz(ids, {k: v[0] for k, v in cache.items()}, enc=tokenizer_for(model))
