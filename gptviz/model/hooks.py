"""Hook points and per-call activation capture.

A HookPoint is an identity module placed inline in the forward pass; its name comes from the module tree
(`blocks.3.attn.hook_pattern`). Capture state is held in a context variable, not on the model: a Streamlit
server shares one cached model across every browser session and thread, and each thread (each call) sees
only its own capture.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import torch
import torch.nn.modules.module as _torch_module
from torch import nn

NamesFilter = None | str | Iterable[str] | Callable[[str], bool]

# torch's process-wide module hooks; while any is registered, HookPoints take nn.Module's full call path.
_GLOBAL_HOOKS = tuple(
    getattr(_torch_module, name)
    for name in (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
    if hasattr(_torch_module, name)
)


# act_name's short names -> the hook's path inside block i (TransformerLens's get_act_name, for this model's names),
# in the order the forward pass reaches them
_BLOCK_HOOKS = {
    "resid_pre": "hook_resid_pre",
    "ln1": "ln_1.hook_normalized",
    "q": "attn.hook_q",
    "k": "attn.hook_k",
    "v": "attn.hook_v",
    "attn_scores": "attn.hook_attn_scores",
    "pattern": "attn.hook_pattern",
    "z": "attn.hook_z",
    "attn_out": "hook_attn_out",
    "resid_mid": "hook_resid_mid",
    "ln2": "ln_2.hook_normalized",
    "pre": "mlp.hook_pre",
    "post": "mlp.hook_post",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
}
_MODEL_HOOKS = {
    "embed": "hook_embed",
    "pos_embed": "hook_pos_embed",
    "ln_final": "ln_f.hook_normalized",
    "logits": "hook_logits",
}


def act_name(kind: str, layer: int | None = None) -> str:
    """A hook point's full name from a short one: act_name("pattern", 3) is "blocks.3.attn.hook_pattern",
    act_name("embed") is "hook_embed". ValueError for an unknown kind or a missing or negative layer."""
    if kind in _MODEL_HOOKS:
        if layer is not None:
            raise ValueError(f"{kind!r} is not a per-layer hook point")
        return _MODEL_HOOKS[kind]
    if kind not in _BLOCK_HOOKS:
        raise ValueError(f"unknown hook kind {kind!r}; one of {', '.join([*_BLOCK_HOOKS, *_MODEL_HOOKS])}")
    if layer is None or layer < 0:
        raise ValueError(f"{kind!r} needs a layer of 0 or more, got {layer!r}")
    return f"blocks.{layer}.{_BLOCK_HOOKS[kind]}"


def all_hook_names(n_layers: int) -> list[str]:
    """Every hook point of a GPT with `n_layers` blocks, in forward order: its hook_names, without building one."""
    embed, pos_embed, ln_final, logits = _MODEL_HOOKS.values()
    blocks = [f"blocks.{i}.{path}" for i in range(n_layers) for path in _BLOCK_HOOKS.values()]
    return [embed, pos_embed, *blocks, ln_final, logits]


def storage_nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors`: a view or a tied weight shares its storage and counts once
    (resid_post of one block is resid_pre of the next)."""
    seen, total = set(), 0
    for t in tensors:
        storage = t.untyped_storage()
        if storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            total += storage.nbytes()
    return total


def model_nbytes(model) -> int:
    """Bytes of a model's distinct parameter and buffer storages (a tied head counts once)."""
    return storage_nbytes(list(model.parameters()) + list(model.buffers()))


class HookPoint(nn.Module):
    """Identity; records its input when the running capture asks for this name."""

    name: str = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        session = _ACTIVE.get()
        if session is not None:
            for edit in session.edits.get(self.name, ()):
                x = edit(x, session.offset)
            if self.name in session.wanted:
                session.record(self.name, x)
        return x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # A model has ~15 HookPoints per layer, called on every forward pass (every generated token):
        # skip nn.Module's dispatch (it costs several times what forward itself does) unless a torch hook needs it
        # (`python -m benchmarks engine` times a capture of every hook point against a plain forward).
        if (
            self._forward_hooks
            or self._forward_pre_hooks
            or self._backward_hooks
            or self._backward_pre_hooks
            or any(_GLOBAL_HOOKS)
        ):
            return super().__call__(x)
        return self.forward(x)


# An edit function takes a hook's value and the absolute position of its first token along the sequence axis
# (0 for a whole prompt; the cache length when generation runs one new token) and returns the new value.
EditFn = Callable[[torch.Tensor, int], torch.Tensor]


@dataclass
class _CaptureSession:
    wanted: frozenset[str]
    edits: Mapping[str, tuple[EditFn, ...]] = field(default_factory=dict)
    store: dict[str, torch.Tensor] = field(default_factory=dict)
    offset: int = 0  # absolute position of the running forward pass's first token
    # When every layer's attention weights are wanted, they are written into one [layers, ...] block as they come,
    # so ActivationCache.patterns() returns it without a copy and the capture never holds the weights twice.
    _pattern_layer: dict[str, int] = field(default_factory=dict)
    _pattern_block: torch.Tensor | None = None

    def __post_init__(self):
        n = sum(1 for name in self.wanted if name.endswith(".attn.hook_pattern"))
        names = {act_name("pattern", i): i for i in range(n)}
        if n and set(names) <= self.wanted:
            self._pattern_layer = names

    def record(self, name: str, x: torch.Tensor) -> None:
        # float32 on the CPU, detached; a no-copy view when the model already runs float32 on the CPU.
        x = x.detach().to(device="cpu", dtype=torch.float32)
        layer = self._pattern_layer.get(name)
        if layer is not None:
            block = self._pattern_block
            if layer == 0 and (block is None or block.shape[1:] != x.shape):  # a new pass: a new block
                block = self._pattern_block = torch.empty((len(self._pattern_layer), *x.shape))
            if block is not None and block.shape[1:] == x.shape:
                block[layer].copy_(x)
                x = block[layer]
        self.store[name] = x


def _process_wide_capture_var() -> contextvars.ContextVar:
    """One context variable per process, even when this module is reloaded: Streamlit reloads edited modules
    while its cached models keep HookPoints from the old code, and both must see the same capture."""
    holder = sys.modules.setdefault("_gptviz_capture_state", types.ModuleType("_gptviz_capture_state"))
    if not hasattr(holder, "active"):
        holder.active = contextvars.ContextVar("gptviz_capture", default=None)
    return holder.active


_ACTIVE: contextvars.ContextVar[_CaptureSession | None] = _process_wide_capture_var()


def name_hook_points(model: nn.Module) -> list[str]:
    """Give every HookPoint its module-tree name; returns the names in forward order."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = name
            names.append(name)
    return names


def resolve_names(names: NamesFilter, available: Iterable[str]) -> frozenset[str]:
    """Normalise a names filter (None = all, a name, a list, or a predicate) once, to a set of names."""
    available = list(available)
    if names is None:
        return frozenset(available)
    if isinstance(names, str):
        names = [names]
    if callable(names):
        return frozenset(n for n in available if names(n))
    wanted = list(names)
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise KeyError(
            f"unknown hook point(s): {', '.join(unknown[:5])}; "
            f"e.g. {', '.join(available[:3])} ... ({len(available)} in all)"
        )
    return frozenset(wanted)


def current_wants(name: str) -> bool:
    """Whether the call running now records or edits `name` (used to pick the explicit attention path)."""
    session = _ACTIVE.get()
    return session is not None and (name in session.wanted or name in session.edits)


def note_offset(past: int) -> None:
    """Tell the running call's edits where the forward pass starting now begins (KV-cache generation)."""
    session = _ACTIVE.get()
    if session is not None:
        session.offset = past


@contextlib.contextmanager
def capturing(
    wanted: frozenset[str], edits: Mapping[str, tuple[EditFn, ...]] | None = None
) -> Iterator[dict[str, torch.Tensor]]:
    """Within this block, on this thread only, record the `wanted` hooks and apply `edits` (hook name -> edit
    functions, applied in order)."""
    session = _CaptureSession(wanted, edits or {})
    token = _ACTIVE.set(session)
    try:
        yield session.store
    finally:
        _ACTIVE.reset(token)


class ActivationCache(Mapping[str, torch.Tensor]):
    """Captured activations by hook name, with the views pages need (no copies of the whole cache)."""

    def __init__(self, store: dict[str, torch.Tensor], n_layers: int):
        self._store = store
        self.n_layers = n_layers
        self._whole: dict | None = None  # a prompt(i)'s batched capture: kept alive while this view of it is

    def __getitem__(self, name: str) -> torch.Tensor:
        try:
            return self._store[name]
        except KeyError:
            raise KeyError(f"{name!r} was not captured; captured: {len(self._store)} names") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._store)

    def __len__(self) -> int:
        return len(self._store)

    def prompt(self, i: int = 0) -> ActivationCache:
        """Prompt `i` of a batched capture: every tensor's row `i` ([T, ...]), as views of this cache's tensors (no
        copy; patterns() of it is still one block when this cache's is). The one-prompt functions (head_steps,
        forward_overview, flow_from_capture, the norms) read such a cache, and a page takes it where it reads one
        prompt."""
        one = ActivationCache({name: t[i] for name, t in self._store.items()}, self.n_layers)
        one._whole = self._store  # the capture store counts the capture's dict (its witness) while a page holds this
        return one

    def pattern(self, layer: int) -> torch.Tensor:
        """Attention weights of one layer, [batch, heads, query, key] ([heads, query, key] in a prompt(i))."""
        return self[act_name("pattern", layer)]

    def patterns(self) -> torch.Tensor:
        """All layers' attention weights stacked, [layers, batch, heads, query, key] ([layers, heads, query, key] in a
        prompt(i)). When they are already one block (stack_patterns) this is that block, no copy: treat it as
        read-only."""
        layers = [self.pattern(i) for i in range(self.n_layers)]
        block = one_block(layers)
        return block if block is not None else torch.stack(layers)

    def resid_stream(self) -> torch.Tensor:
        """The residual stream entering each block and leaving the last, [layers + 1, batch, T, d_model] ([layers + 1,
        T, d_model] in a prompt(i))."""
        states = [self[act_name("resid_pre", i)] for i in range(self.n_layers)]
        states.append(self[act_name("resid_post", self.n_layers - 1)])
        return torch.stack(states)

    def stack(self, suffix: str) -> torch.Tensor:
        """One per-layer hook across all layers, e.g. stack("hook_mlp_out") -> [layers, ...]."""
        return torch.stack([self[f"blocks.{i}.{suffix}"] for i in range(self.n_layers)])

    def nbytes(self) -> int:
        return sum(t.element_size() * t.nelement() for t in self._store.values())


def stack_patterns(store: dict[str, torch.Tensor], n_layers: int) -> None:
    """Move every layer's captured attention weights in `store` into one [layers, ...] block, in place: each entry
    becomes a view of it, and ActivationCache.patterns() then returns the block itself instead of a copy (a page
    drawing 682 tokens of gpt2-small's patterns held a second 270 MB). Layer by layer, so the move holds one
    layer's copy at most beside the capture. Does nothing unless every layer's pattern is there, alike."""
    names = [act_name("pattern", i) for i in range(n_layers)]
    if not names or any(n not in store for n in names):
        return
    first = store[names[0]]
    if any(store[n].shape != first.shape or store[n].dtype != first.dtype for n in names):
        return
    if one_block([store[n] for n in names]) is not None:  # capture wrote them into one block already
        return
    block = torch.empty((n_layers, *first.shape), dtype=first.dtype, device=first.device)
    for i, name in enumerate(names):
        block[i].copy_(store[name])
        store[name] = block[i]  # the layer's own tensor goes once nothing else holds it


def one_block(layers: list[torch.Tensor]) -> torch.Tensor | None:
    """The [layers, ...] view that `layers` already are, when they lie one after another in one storage with the
    same shape and strides (a block's slices: block[i] or block[i, 0]); None otherwise."""
    if not layers:
        return None
    first = layers[0]
    storage, step = first.untyped_storage().data_ptr(), first.numel()
    if not first.is_contiguous() or any(
        p.untyped_storage().data_ptr() != storage
        or p.shape != first.shape
        or p.stride() != first.stride()
        or p.dtype != first.dtype
        or p.storage_offset() != first.storage_offset() + i * step
        for i, p in enumerate(layers)
    ):
        return None
    return first.as_strided((len(layers), *first.shape), (step, *first.stride()), first.storage_offset())


def capture(model: nn.Module, ids, names: NamesFilter = None, edits=None) -> tuple[torch.Tensor, ActivationCache]:
    """Run `model` on `ids` once and return (logits, cache of the requested hook points).

    `names`: None (every hook point), one name, a list of names, or a predicate on names. Captured
    tensors are detached float32 on the CPU. Without `edits` the logits equal a plain forward pass; with
    them (see gptviz.methods.interventions) the run is edited and the cache records the edited values."""
    wanted = resolve_names(names, model.hook_names)
    with capturing(wanted, edits_by_hook(edits, model.hook_names)) as store, torch.no_grad():
        logits = model(ids)
    return logits, ActivationCache(store, model.config.n_layers)


def edits_by_hook(edits, available: Iterable[str]) -> dict[str, tuple[EditFn, ...]]:
    """Group edits (objects with .hook and .fn, e.g. gptviz.methods.interventions.Edit) by hook name, in order;
    an unknown hook name raises KeyError before anything runs."""
    if not edits:
        return {}
    if hasattr(edits, "hook"):
        edits = [edits]
    grouped: dict[str, list[EditFn]] = {}
    for edit in edits:
        grouped.setdefault(edit.hook, []).append(edit.fn)
    resolve_names(list(grouped), available)
    return {name: tuple(fns) for name, fns in grouped.items()}


def direct_attribution_names(n_layers: int) -> list[str]:
    """What direct_logit_attribution captures: the embeddings, every head's z, every MLP's output, the final stream."""
    names = ["hook_embed", "hook_pos_embed", act_name("resid_post", n_layers - 1)]
    return names + [act_name("z", i) for i in range(n_layers)] + [act_name("mlp_out", i) for i in range(n_layers)]


def unit_hook_names(config) -> list[str]:
    """What a neuron index reads every unit from: each MLP's activation (its neurons) and each layer's z (its heads)."""
    layers = range(config.n_layers)
    return [act_name("post", layer) for layer in layers] + [act_name("z", layer) for layer in layers]
