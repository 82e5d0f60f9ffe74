"""The frozen model behind an attribution graph (issue 58): the model on one prompt with every attention pattern,
every norm's scale and every MLP neuron's ratio act(pre)/pre fixed at their values on that prompt. It is then linear
in every component's output and equals the real model on the prompt, so a node's influence on the metric is its
output dotted with the metric's gradient there, and the influences add up exactly.

The residual stream is read as a schedule of steps: places where nodes write into it (the embeddings, a layer's heads
and attention bias, its neurons and MLP bias, and in post-norm blocks the betas of the norms that write the stream),
places where a sub-layer or the metric reads it, and, in post-norm blocks, the norms the whole stream passes through.
A node's "direct path" to a reader is the stream between them: identity in pre-norm (the reader's own norm applied on
reading), the frozen norms in between in post-norm. Pulling a reader's input gradient back along that path (the norms'
transposes, no node in between) gives, at every write point, the gradient an edge into that reader is measured with.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..model.model import activate

EMBED = ("embed", None)  # the write point of the token + position embeddings


class Step(NamedTuple):
    op: str  # "write" (nodes add into the stream), "read" (a sub-layer or the metric), "norm" (post-norm)
    what: str  # "embed", "attn", "mlp", "ln_1", "ln_2", "metric"
    layer: int | None

    @property
    def point(self) -> tuple[str, int | None]:
        return self.what, self.layer


def has_betas(config) -> bool:
    """LayerNorm adds a beta; RMSNorm has none."""
    return config.norm_type == "layernorm"


def schedule(config) -> list[Step]:
    """The residual stream's steps in forward order (see the module's docstring)."""
    steps = [Step("write", "embed", None)]
    for layer in range(config.n_layers):
        for sub, norm in (("attn", "ln_1"), ("mlp", "ln_2")):
            steps += [Step("read", sub, layer), Step("write", sub, layer)]
            if config.norm == "post":  # GPT-1: the whole stream is normalised after each addition
                steps.append(Step("norm", norm, layer))
                if has_betas(config):
                    steps.append(Step("write", norm, layer))
    return steps + [Step("read", "metric", None)]


class FrozenNorm:
    """A norm with its scale (LayerNorm's 1/sqrt(var + eps), RMSNorm's 1/rms) frozen per position: a linear map
    (LayerNorm's mean subtraction included) plus beta."""

    def __init__(self, module, x: torch.Tensor, layernorm: bool):
        x = x.detach()
        if not hasattr(module, "eps"):  # no final norm (final_norm=False, GPT-1): the stream passes unchanged
            self.scale, self.layernorm, self.gamma, self.beta = torch.ones(x.shape[:-1]), False, None, None
            return
        eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps
        if layernorm:
            self.scale = torch.rsqrt(x.var(-1, unbiased=False) + eps)  # [T]
        else:
            self.scale = torch.rsqrt(x.pow(2).mean(-1) + eps)
        self.layernorm = layernorm
        self.gamma = _param(module.weight)
        self.beta = _param(getattr(module, "bias", None))

    def _scale(self, positions) -> torch.Tensor:
        return (self.scale if positions is None else self.scale[positions])[..., None]

    def linear(self, x: torch.Tensor, positions=None) -> torch.Tensor:
        """The frozen map without beta, on [..., T, d] (or [..., len(positions), d])."""
        if self.layernorm:
            x = x - x.mean(-1, keepdim=True)
        x = x * self._scale(positions)
        return x * self.gamma if self.gamma is not None else x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return y + self.beta if self.beta is not None else y

    def transpose(self, v: torch.Tensor, positions=None) -> torch.Tensor:
        """The transpose of `linear`: a gradient with respect to the output -> with respect to the input."""
        if self.gamma is not None:
            v = v * self.gamma
        v = v * self._scale(positions)
        return v - v.mean(-1, keepdim=True) if self.layernorm else v


def _param(p) -> torch.Tensor | None:
    return None if p is None else p.detach().float()


class LayerWeights:
    """One block's matrices as float32, shaped by head: Wq, Wk, Wv [heads, d_head, d_model] (q = x @ Wq[h].T), their
    biases [heads, d_head] or None, Wo [heads, d_head, d_model] (a head's output is z @ Wo[h]), bo; the MLP's Wfc
    [d_ff, d_model], bfc, Wout [d_model, d_ff] (a neuron's output row is Wout[:, n]), bout."""

    def __init__(self, block, config):
        H, dh, d = config.n_heads, config.d_head, config.d_model
        attn, mlp = block.attn, block.mlp
        self.Wq, self.Wk, self.Wv = _param(attn.c_attn.weight).view(3, H, dh, d).unbind(0)
        bias = _param(attn.c_attn.bias)
        self.bq, self.bk, self.bv = (None,) * 3 if bias is None else bias.view(3, H, dh).unbind(0)
        self.Wo = _param(attn.c_proj.weight).view(d, H, dh).permute(1, 2, 0)
        self.bo = _param(attn.c_proj.bias)
        self.Wfc, self.bfc = _param(mlp.c_fc.weight), _param(mlp.c_fc.bias)
        self.Wout, self.bout = _param(mlp.c_proj.weight), _param(mlp.c_proj.bias)


def check_target(config, target: int, other: int | None) -> None:
    for name, token in (("target", target), ("other", other)):
        if token is None and name == "other":
            continue
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < config.vocab_size:
            raise ValueError(f"the {name} token {token!r} is outside the vocabulary [0, {config.vocab_size})")


class FrozenModel:
    """The model on `ids` (one prompt, no BOS added) with patterns, norm scales and neuron ratios frozen.

    Holds what the graph reads: the embeddings `emb` [T, d], each layer's heads' `z` [T, heads, d_head], `pattern`
    [heads, T, T], neurons' `act` (= ratio * pre) and `ratio` [T, d_ff], the attention's input `attn_in` [T, d], the
    frozen `norms` by (name, layer) ("ln_1", "ln_2", ("ln_f", None)), and `written` [T, d] by write point (what the
    nodes there add into the stream, together). With a `target`: the metric (logit(target) - logit(other) at the last
    position, or logit(target) alone), its direction `u` [d], and `grads` by write point: the metric's gradient in
    the frozen model with respect to the stream there [T, d], from one backward pass."""

    def __init__(self, model, ids, target: int | None = None, other: int | None = None):
        cfg = model.config
        self.config, self.steps = cfg, schedule(cfg)
        ids = model.check_ids(torch.as_tensor(ids))
        if ids.shape[0] != 1:
            raise ValueError(f"the attribution graph reads one prompt: got a batch of {ids.shape[0]}")
        self.ids = ids[0].to(model.device)
        self.T = int(self.ids.numel())
        if target is not None:
            check_target(cfg, target, other)
        self.target, self.other = target, other
        self.layers = [LayerWeights(b, cfg) for b in model.blocks]
        self.write_points = [s.point for s in self.steps if s.op == "write"]
        self.norms: dict = {}
        self.z, self.pattern, self.act, self.ratio, self.attn_in = [], [], [], [], []
        self.written: dict = {}
        with torch.set_grad_enabled(target is not None):
            self._forward(model)

    # ---- the forward pass, recording and freezing -----------------------------------------------------------

    def _forward(self, model) -> None:
        cfg, T, d = self.config, self.T, self.config.d_model
        dev = model.device
        # rows first, then float32: a half-precision model's whole vocabulary is never copied
        self.emb = (model.wte.weight[self.ids].detach().float() + _param(model.wpe.weight[:T])).detach()
        tracking = torch.is_grad_enabled()
        probes = {p: torch.zeros(T, d, device=dev, requires_grad=tracking) for p in self.write_points}
        self.written[EMBED] = self.emb
        x = self.emb + probes[EMBED]
        for layer, block in enumerate(model.blocks):
            if cfg.norm == "pre":  # x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
                x = x + self._write(
                    ("attn", layer), self._attention(layer, self._freeze(block.ln_1, x, "ln_1", layer)(x)), probes
                )
                x = x + self._write(
                    ("mlp", layer), self._mlp(layer, self._freeze(block.ln_2, x, "ln_2", layer)(x)), probes
                )
            else:  # x = ln_1(x + attn(x)); x = ln_2(x + mlp(x))
                x = self._post_norm(
                    block.ln_1,
                    "ln_1",
                    layer,
                    x + self._write(("attn", layer), self._attention(layer, x), probes),
                    probes,
                )
                x = self._post_norm(
                    block.ln_2, "ln_2", layer, x + self._write(("mlp", layer), self._mlp(layer, x), probes), probes
                )
        final = self._freeze(model.ln_f, x, "ln_f", None)(x)[T - 1]
        if not tracking:
            return
        weight = model.lm_head.weight.detach()
        self.u = weight[self.target].float() - (weight[self.other].float() if self.other is not None else 0)
        metric = final @ self.u
        grads = torch.autograd.grad(metric, list(probes.values()))
        self.metric = float(metric.detach())
        self.grads = dict(zip(probes, (g.detach() for g in grads), strict=True))

    def _write(self, point, value: torch.Tensor, probes) -> torch.Tensor:
        self.written[point] = value.detach()
        return value + probes[point]

    def _freeze(self, module, x: torch.Tensor, name: str, layer: int | None) -> FrozenNorm:
        norm = self.norms[(name, layer)] = FrozenNorm(module, x, has_betas(self.config))
        return norm

    def _post_norm(self, module, name: str, layer: int, y: torch.Tensor, probes) -> torch.Tensor:
        norm = self._freeze(module, y, name, layer)
        x = norm.linear(y)
        if norm.beta is None:
            return x
        self.written[(name, layer)] = norm.beta.expand(self.T, -1)
        return x + norm.beta + probes[(name, layer)]

    def _attention(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The heads' outputs plus the out-projection bias, [T, d], at the frozen pattern."""
        w, T = self.layers[layer], self.T
        self.attn_in.append(x.detach())
        with torch.no_grad():  # the pattern is a constant of the frozen model
            q, k = _project(x.detach(), w.Wq, w.bq), _project(x.detach(), w.Wk, w.bk)  # [H, T, dh]
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.config.d_head)
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            pattern = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)  # [H, T, T]
        self.pattern.append(pattern)
        z = (pattern @ _project(x, w.Wv, w.bv)).transpose(0, 1)  # [T, H, dh]
        self.z.append(z.detach())
        return torch.einsum("thk,hkd->td", z, w.Wo) + w.bo

    def _mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        w = self.layers[layer]
        pre = x @ w.Wfc.T + w.bfc  # [T, d_ff]
        with torch.no_grad():  # each neuron passes its input on in proportion: act = ratio * pre
            real = activate(pre.detach(), self.config.activation)
            ratio = torch.where(pre != 0, real / torch.where(pre != 0, pre, 1.0), 0.0)
        act = ratio * pre
        self.ratio.append(ratio)
        self.act.append(act.detach())
        return act @ w.Wout.T + w.bout

    # ---- pulling gradients back along the direct path ---------------------------------------------------------

    def pull_back(self, rows: int, inject, on_write) -> None:
        """Walk the schedule backwards carrying V [rows, T, d]: at each read step `inject(step, V)` adds the rows'
        targets' input gradients (in place); at each post-norm stream norm V goes through its transpose; at each
        write point `on_write(point, V)` reads V, the gradient of the rows' targets' influences with respect to the
        stream there along the direct path (no node in between)."""
        V = torch.zeros(rows, self.T, self.config.d_model, device=self.emb.device)
        for step in reversed(self.steps):
            if step.op == "read":
                inject(step, V)
            elif step.op == "norm":
                V = self.norms[step.point].transpose(V)
            else:
                on_write(step.point, V)

    def direct_grads(self) -> dict:
        """The metric's gradient at every write point along the direct path only (through the final norm and, in
        post-norm, every later block norm, at their frozen scales): what a node's direct effect is measured with."""
        found = {}

        def inject(step, V):
            if step.what == "metric":
                V[0, self.T - 1] += self.norms[("ln_f", None)].transpose(self.u, self.T - 1)

        self.pull_back(1, inject, lambda point, V: found.__setitem__(point, V[0].clone()))
        return found

    def reader_norm(self, step: Step) -> FrozenNorm | None:
        """The norm a reader applies to the stream as it reads: its own in pre-norm, none in post-norm; the metric
        always reads through the final norm."""
        if step.what == "metric":
            return self.norms[("ln_f", None)]
        if self.config.norm == "pre":
            return self.norms[("ln_1" if step.what == "attn" else "ln_2", step.layer)]
        return None


def _project(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """x [T, d] through per-head W [H, dh, d] (+ b [H, dh]) -> [H, T, dh]."""
    y = torch.einsum("td,hkd->htk", x, W)
    return y + b[:, None] if b is not None else y
