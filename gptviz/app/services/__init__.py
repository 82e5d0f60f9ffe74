"""The pages' computations, as services: each reserves its working memory (gptviz.serve.memory) before it runs, keeps
its result in the one process-wide results cache, and returns plain data a page draws.

The results cache is a BoundedCache like the model and capture stores (gptviz.app.model_service): bounded by bytes
(GPTVIZ_RESULTS_CACHE_MB), each entry weighed by what it holds (tensors and arrays by their storage), counted in the
server's memory budget, so the accountant can drop old results to fit a visitor's work. It replaces Streamlit's
st.cache_data, whose bound was a number of entries (the Why page's 16 [heads, T, T] patterns were outside any
budget) and which any client could clear. Values are shared, not copied: callers treat them as read-only.

`@cached` keys a function's result by its module, name and arguments; arguments whose name starts with `_` are not
part of the key (a WorkClock), as with st.cache_data. The undecorated function stays reachable as `__wrapped__`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np
import pandas as pd
import torch

from ...serve import limits, memory
from ...serve.bounded_cache import BoundedCache
from ...serve.limits import LimitError  # noqa: F401 (the pages catch it here)
from ..jobs import process_wide

F = TypeVar("F", bound=Callable[..., Any])


def results_cache() -> BoundedCache:
    """Every page's derived results, shared by every session, bounded by bytes and counted in the memory budget."""
    return process_wide(
        "results_cache",
        lambda: BoundedCache(limits.server_limits().results_bytes, "result", accountant=memory.accountant()),
    )


def nbytes_of(value: Any) -> int:
    """What a result holds: tensors by their distinct storages, arrays and frames by their buffers, containers,
    dataclasses and plain objects by what they hold (each object counted once, so a shared tensor is not doubled)."""
    seen: set[int] = set()
    return _nbytes(value, seen)


def _nbytes(value: Any, seen: set[int]) -> int:
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        key = storage.data_ptr() or id(storage)
        if key in seen:
            return 0
        seen.add(key)
        return storage.nbytes() + sys.getsizeof(value)
    if isinstance(value, np.ndarray):
        while isinstance(value.base, np.ndarray):  # a view keeps its base's whole buffer alive
            value = value.base
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return value.nbytes + sys.getsizeof(np.empty(0))
    if isinstance(value, (pd.DataFrame, pd.Series)):
        return int(np.sum(value.memory_usage(deep=True)))
    size = sys.getsizeof(value)
    if isinstance(value, (str, bytes, bytearray, int, float, bool, complex, type(None))):
        return size
    if isinstance(value, dict):
        return size + sum(_nbytes(k, seen) + _nbytes(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return size + sum(_nbytes(v, seen) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return size + sum(_nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return size + _nbytes(vars(value), seen)
    return size


def _key_part(value: Any) -> Hashable:
    """An argument as part of a cache key: lists and dicts by their contents."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(_key_part(v) for v in value)
    if isinstance(value, dict):
        return "dict", tuple(sorted((k, _key_part(v)) for k, v in value.items()))
    if isinstance(value, torch.Tensor):
        raise TypeError("a tensor is no cache key: pass what it was made from")
    hash(value)
    return value


def cached(fn: F | None = None, *, ttl_s: float | None = None):
    """`@cached`: the function's result kept in the results cache under its arguments. `ttl_s`: a result is
    measured again after that many seconds (a rate measured on the server now)."""
    if fn is None:
        return functools.partial(cached, ttl_s=ttl_s)
    signature = inspect.signature(fn)
    name = (fn.__module__, fn.__qualname__)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key = name + tuple((k, _key_part(v)) for k, v in bound.arguments.items() if not k.startswith("_"))
        if ttl_s is not None:
            key += (int(time.monotonic() // ttl_s),)
        return results_cache().get_or_build(key, lambda: fn(*args, **kwargs), nbytes_of)

    return wrapper
