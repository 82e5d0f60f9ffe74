"""Where the parameters live: counted by formula from a config, and checked against the module tree
built on the `meta` device (shapes only, no memory), so GPT-2 XL and larger cost nothing to count."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch

from .config import GPTConfig

if TYPE_CHECKING:  # pandas is imported where a table is made: `import gptviz` alone skips its import time
    import pandas as pd

COMPONENTS = (
    "token embedding",
    "position embedding",
    "attention Q/K/V",
    "attention output",
    "MLP up",
    "MLP down",
    "norms",
    "final norm",
    "LM head",
)
# What a reader means by each part of a GPT: the groups every view shows first (attention includes its output
# projection, norms the final one), the components above being the finer split. COMPONENTS is in group order.
GROUP_ORDER = ("embeddings", "attention", "MLP", "norms", "LM head")
GROUPS = {
    "token embedding": "embeddings",
    "position embedding": "embeddings",
    "attention Q/K/V": "attention",
    "attention output": "attention",
    "MLP up": "MLP",
    "MLP down": "MLP",
    "norms": "norms",
    "final norm": "norms",
    "LM head": "LM head",
}
BYTES_PER = {"fp32": 4, "fp16": 2, "bf16": 2}

_BLOCK = re.compile(r"blocks\.(\d+)\.(.+)")
_IN_BLOCK = {
    "attn.c_attn": "attention Q/K/V",
    "attn.c_proj": "attention output",
    "mlp.c_fc": "MLP up",
    "mlp.c_proj": "MLP down",
    "ln_1": "norms",
    "ln_2": "norms",
}
_TOP = {"wte": "token embedding", "wpe": "position embedding", "ln_f": "final norm", "lm_head": "LM head"}


def component_of(name: str) -> tuple[str, int | None]:
    """('attention Q/K/V', 3) for 'blocks.3.attn.c_attn.weight'; (component, None) outside the blocks."""
    module = name.rsplit(".", 1)[0]
    match = _BLOCK.fullmatch(module)
    if match:
        return _IN_BLOCK[match.group(2)], int(match.group(1))
    return _TOP[module], None


def _tensor_shapes(cfg: GPTConfig) -> list[tuple[str, tuple[int, ...]]]:
    """Every parameter tensor's name and shape, by formula (nn.Linear weights are [out, in])."""
    d, ff, layernorm = cfg.d_model, cfg.d_ff, cfg.norm_type == "layernorm"

    def norm(prefix):
        return [(f"{prefix}.weight", (d,))] + ([(f"{prefix}.bias", (d,))] if layernorm and cfg.bias else [])

    def bias(name, n):  # bias=False: no bias anywhere (the model keeps fixed zeros, not parameters)
        return [(name, (n,))] if cfg.bias else []

    shapes = [("wte.weight", (cfg.vocab_size, d)), ("wpe.weight", (cfg.n_ctx, d))]
    for i in range(cfg.n_layers):
        b = f"blocks.{i}"
        shapes += norm(f"{b}.ln_1")
        shapes += [(f"{b}.attn.c_attn.weight", (3 * d, d))]
        shapes += [(f"{b}.attn.c_attn.bias", (3 * d,))] if cfg.qkv_bias else []
        shapes += [(f"{b}.attn.c_proj.weight", (d, d))] + bias(f"{b}.attn.c_proj.bias", d)
        shapes += norm(f"{b}.ln_2")
        shapes += [(f"{b}.mlp.c_fc.weight", (ff, d))] + bias(f"{b}.mlp.c_fc.bias", ff)
        shapes += [(f"{b}.mlp.c_proj.weight", (d, ff))] + bias(f"{b}.mlp.c_proj.bias", d)
    shapes += (norm("ln_f") if cfg.final_norm else []) + [("lm_head.weight", (cfg.vocab_size, d))]
    return shapes


def _table(rows: list[tuple[str, tuple[int, ...]]], tied: bool) -> pd.DataFrame:
    records = []
    for name, shape in rows:
        component, layer = component_of(name)
        is_tied = tied and name == "lm_head.weight"
        records.append(
            {
                "name": name,
                "component": component,
                "layer": layer,
                "shape": tuple(shape),
                "count": 0 if is_tied else _prod(shape),
                "tied": is_tied,
            }
        )
    import pandas as pd

    df = pd.DataFrame.from_records(records)
    df["layer"] = df["layer"].astype("Int64")
    return df


def _prod(shape) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out


def param_table(config: GPTConfig) -> pd.DataFrame:
    """One row per parameter tensor: name, component, layer (<NA> outside blocks), shape, count, tied.
    A tied LM head is listed with count 0 and tied=True: it is the token-embedding matrix, counted once."""
    return _table(_tensor_shapes(config), config.tie_weights)


def meta_param_table(config: GPTConfig) -> pd.DataFrame:
    """The same table read off a real module tree on the meta device (no weights allocated)."""
    from .model import GPT

    with torch.device("meta"):
        model = GPT(config)
    rows = [(name, tuple(p.shape)) for name, p in model.named_parameters(remove_duplicate=False)]
    return _table(rows, config.tie_weights)


def total_params(config: GPTConfig) -> int:
    return int(param_table(config)["count"].sum())


def param_count(cfg: GPTConfig) -> int:
    """total_params by closed form: constant time whatever the config claims (checked against it in tests),
    so a hostile config.json can be sized before anything is built."""
    d, ff = cfg.d_model, cfg.d_ff
    norm = d * (2 if cfg.norm_type == "layernorm" and cfg.bias else 1)
    biases = (d + ff + d) if cfg.bias else 0  # attention output, MLP up, MLP down
    layer = 2 * norm + 3 * d * d + (3 * d if cfg.qkv_bias else 0) + d * d + ff * d + d * ff + biases
    head = 0 if cfg.tie_weights else cfg.vocab_size * d
    return cfg.vocab_size * d + cfg.n_ctx * d + cfg.n_layers * layer + (norm if cfg.final_norm else 0) + head


def by_component(table: pd.DataFrame) -> pd.DataFrame:
    """Counts per component in COMPONENTS order, with each one's share of the total."""
    counts = table.groupby("component", sort=False)["count"].sum()
    counts = counts.reindex([c for c in COMPONENTS if c in counts.index])
    out = counts.rename("count").reset_index()
    out["share"] = out["count"] / out["count"].sum()
    return out


def by_group(table: pd.DataFrame) -> pd.DataFrame:
    """Counts per group in GROUP_ORDER, every group (a tied head's 0 too), with each one's share of the total and
    its components (in COMPONENTS order) as a tuple of names."""
    counts = table.groupby("component", sort=False)["count"].sum()
    rows = []
    for group in GROUP_ORDER:
        members = tuple(c for c in COMPONENTS if GROUPS[c] == group and c in counts.index)
        rows.append({"group": group, "count": int(sum(int(counts[c]) for c in members)), "components": members})
    import pandas as pd

    out = pd.DataFrame.from_records(rows, columns=["group", "count", "components"])
    total = int(out["count"].sum())
    out.insert(2, "share", out["count"] / total if total else 0.0)
    return out


def by_layer(table: pd.DataFrame, by: str = "component") -> pd.DataFrame:
    """Counts per block (rows) and component (columns), or group with by="group" (attention, MLP, norms)."""
    in_blocks = table[table["layer"].notna()]
    if by == "group":
        in_blocks = in_blocks.assign(group=in_blocks["component"].map(GROUPS))
    elif by != "component":
        raise ValueError(f"by is 'component' or 'group', not {by!r}")
    return in_blocks.pivot_table(index="layer", columns=by, values="count", aggfunc="sum", sort=False)


def memory_bytes(count: int, dtype: str) -> int:
    return count * BYTES_PER[dtype]


def format_table(config: GPTConfig) -> str:
    """The CLI's text: counts by component, per-block total and the grand total."""
    table = param_table(config)
    comp = by_component(table)
    width = max(len(c) for c in comp["component"]) + 2
    lines = [
        f"{config.name}: {config.n_layers} layers, d_model={config.d_model}, {config.n_heads} heads, "
        f"d_ff={config.d_ff}, vocab={config.vocab_size:,}, n_ctx={config.n_ctx:,}, {config.norm}-norm, "
        f"{'tied' if config.tie_weights else 'untied'} head"
        f"{'' if config.bias else ', no biases'}{'' if config.final_norm else ', no final norm'}",
        "",
    ]
    for row in comp.itertuples():
        note = "  (tied to token embedding)" if row.component == "LM head" and config.tie_weights else ""
        lines.append(f"{row.component:<{width}}{row.count:>16,}  {row.share:6.1%}{note}")
    per_block = int(table[table["layer"] == 0]["count"].sum())
    total = int(comp["count"].sum())
    lines += [
        "",
        f"{'per block':<{width}}{per_block:>16,}",
        f"{'total':<{width}}{total:>16,}",
        f"{'fp32 / fp16':<{width}}{memory_bytes(total, 'fp32') / 2**20:>13,.1f} MiB / "
        f"{memory_bytes(total, 'fp16') / 2**20:,.1f} MiB",
    ]
    return "\n".join(lines)
