"""What a checkpoint may ask for before anything of it is allocated: its sizes are data from outside.

The library checks every config and weights header against these caps (checkpoint.check_load_limits, the format
readers, the Hub download's byte budget). An operator sets the two that vary, GPTVIZ_MAX_LOAD_PARAMS and
GPTVIZ_MAX_LOAD_CTX; they are read here, once, because loading is the library's job whether a server or a notebook
asks for it (gptviz.serve.limits lists them beside the server's own limits and checks them at start-up)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

MAX_LOAD_LAYERS = 256  # modules are built one per layer, even on the meta device
MAX_CONFIG_BYTES = 1 << 20
ENV = {"max_params": "GPTVIZ_MAX_LOAD_PARAMS", "max_ctx": "GPTVIZ_MAX_LOAD_CTX"}


@dataclass(frozen=True)
class LoadLimits:
    max_params: int = 2_000_000_000  # GPT-2 XL has 1,557,611,200
    max_ctx: int = 8192

    def __post_init__(self):
        for name, variable in ENV.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"{variable}: the load limit {name} must be a whole number of at least 1, got {value!r}"
                )

    @property
    def download_bytes(self) -> int:
        """The most bytes a Hub download may bring: the largest checkpoint loaded in float32, and a megabyte for its
        config."""
        return self.max_params * 4 + (1 << 20)

    @classmethod
    def from_env(cls, environ=None) -> LoadLimits:
        """The caps the variables set (the defaults for those unset); a malformed value is a ValueError naming it."""
        environ = os.environ if environ is None else environ
        values = {}
        for name, variable in ENV.items():
            raw = (environ.get(variable) or "").strip().replace("_", "").replace(",", "")
            if not raw:
                continue
            try:
                values[name] = int(raw)
            except ValueError:
                raise ValueError(f"{variable} must be a whole number, got {environ.get(variable)!r}") from None
        return cls(**values)


@functools.lru_cache(maxsize=1)
def load_limits() -> LoadLimits:
    """The process's load caps, read from the environment once."""
    return LoadLimits.from_env()
