"""Parameters: where a GPT's weights live, for the model in use, any preset, or a model you describe.

Everything is counted from a config by formula (no weights are built); each tab is one function below, drawn in
its own fragment: a pick in one tab reruns only that tab.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from gptviz import PRESETS
from gptviz.app import display, reproduce, sidebar
from gptviz.app import keys as K
from gptviz.app import settings as S
from gptviz.app.links import sync_address
from gptviz.figures import params as figs
from gptviz.model.config import ConfigError, GPTConfig
from gptviz.model.params import (
    BYTES_PER,
    COMPONENTS,
    GROUPS,
    by_component,
    by_group,
    by_layer,
    memory_bytes,
    param_table,
    total_params,
)

GPT_FAMILY = ("gpt1", "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl")
MIB = 2**20
MODEL_IN_USE = S.PAR_MODEL_IN_USE
TABS = ("Breakdown", "All presets", "Calculator")
state = st.session_state


def memory_columns(frame: pd.DataFrame) -> pd.DataFrame:
    for dtype in BYTES_PER:
        frame[f"{dtype} MiB"] = [memory_bytes(int(c), dtype) / MIB for c in frame["count"]]
    return frame


TIED_NOTE = "tied: the token-embedding matrix, counted once"


def component_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The finer split: one row per component, its group first."""
    comp = memory_columns(by_component(table))
    comp.insert(0, "group", comp["component"].map(GROUPS))
    tied = set(table.loc[table["tied"], "component"])
    comp["note"] = [TIED_NOTE if c in tied else "" for c in comp["component"]]
    return comp


def group_frame(table: pd.DataFrame) -> pd.DataFrame:
    """What a reader means: one row per group (embeddings, attention with its output projection, MLP, norms with
    the final one, LM head), each with the components it is made of."""
    groups = memory_columns(by_group(table))
    counts = table.groupby("component", sort=False)["count"].sum()
    groups["made of"] = [" + ".join(f"{c} {int(counts[c]):,}" for c in members) for members in groups["components"]]
    tied = set(table.loc[table["tied"], "component"])
    groups["note"] = [TIED_NOTE if tied & set(members) else "" for members in groups["components"]]
    return groups.drop(columns="components")


def count_table(frame: pd.DataFrame) -> None:
    """A group or component table, as a static table: a handful of rows, and a static table is drawn with the rest
    of the page, where the scrolling grid of st.dataframe was repainted last, after the figures (issue 60's preset
    pick). The values stay numbers; only their display is formatted."""
    formats = {"count": "{:,}", "share": "{:.1%}", **{f"{d} MiB": "{:,.2f}" for d in BYTES_PER}}
    st.table(frame.style.format({c: f for c, f in formats.items() if c in frame.columns}), hide_index=True)


def tensor_frame(table: pd.DataFrame) -> pd.DataFrame:
    total = table["count"].sum()
    out = table.assign(
        shape=[" × ".join(str(s) for s in shape) for shape in table["shape"]], share=table["count"] / total
    )
    out = memory_columns(out)
    out["tied"] = ["tied (shares wte.weight)" if t else "" for t in out["tied"]]
    return out[["name", "component", "layer", "shape", "count", "share", *[f"{d} MiB" for d in BYTES_PER], "tied"]]


RELEASED_GPT1_VOCAB = 40478  # openai-gpt's vocab_size


def seed_facts(cfg: GPTConfig, table: pd.DataFrame) -> list[str]:
    """Plain statements computed from the config's own table."""
    facts = []
    if cfg.n_layers:
        block = by_layer(table, by="group").iloc[0]
        attn, mlp = int(block["attention"]), int(block["MLP"])
        facts.append(
            f"In each block the MLP holds {mlp:,} parameters and attention {attn:,}: the MLP has "
            f"{mlp / attn:.2f}× as many (d_ff = {cfg.d_ff:,} = {cfg.d_ff / cfg.d_model:g} × d_model; "
            f"2·d_model·d_ff weights against 4·d_model² for Q, K, V and the output)."
        )
    tied, untied = total_params(cfg.replace(tie_weights=True)), total_params(cfg.replace(tie_weights=False))
    saving = untied - tied
    if cfg.tie_weights:
        facts.append(
            f"The LM head is tied to the token embedding, which saves vocab × d_model = "
            f"{cfg.vocab_size:,} × {cfg.d_model:,} = {saving:,} parameters ({saving / untied:.1%} of the "
            f"untied model's {untied:,})."
        )
    else:
        facts.append(
            f"The LM head is a separate matrix here; tying it to the token embedding would save "
            f"vocab × d_model = {cfg.vocab_size:,} × {cfg.d_model:,} = {saving:,} parameters "
            f"({saving / untied:.1%})."
        )
    if not cfg.bias:
        fewer = total_params(cfg.replace(bias=True, qkv_bias=True)) - total_params(cfg)
        facts.append(
            f"No biases (nanoGPT's bias=False): every linear layer and LayerNorm is weights only, "
            f"{fewer:,} parameters fewer than with them."
        )
    if not cfg.final_norm:
        facts.append("No final LayerNorm (as the released GPT-1): the LM head reads the last block's output.")
    emb = int(table[table["component"].isin(["token embedding", "position embedding"])]["count"].sum())
    total = int(table["count"].sum())
    if cfg.name == "gpt1":
        released = total_params(cfg.replace(vocab_size=RELEASED_GPT1_VOCAB)) - 2 * cfg.d_model
        facts.append(
            f"This preset follows the GPT-1 spec this project counts against: {cfg.vocab_size:,} ids and "
            f"a final LayerNorm (kept so one set of weights runs pre- or post-norm), {total:,} parameters. "
            f"The released GPT-1 has {RELEASED_GPT1_VOCAB:,} ids (40,000 BPE merges plus base characters) "
            f"and no final LayerNorm: {released:,} parameters. Prompts here are tokenised with GPT-2's "
            f"BPE, not GPT-1's; GPT-2 ids past {cfg.vocab_size:,} run as id {cfg.vocab_size - 1:,}."
        )
    facts.append(
        f"Embeddings are {emb / total:.1%} of this model; the {cfg.n_layers} blocks are "
        f"{int(table['count'][table['layer'].notna()].sum()) / total:.1%}."
    )
    return facts


FINER_SPLIT = "Finer split: the components inside each group"


def show_breakdown(cfg: GPTConfig, label: str, key: str) -> None:
    """Totals, facts, figures and tables of one config, by group, the finer split by component one click away;
    its widgets' keys start with `key`."""
    table = param_table(cfg)
    total = int(table["count"].sum())
    title = f"{label}: {total:,} parameters" if label else f"{total:,} parameters"
    # the chart first: on a phone the four metrics alone are a screen's height
    display.show_figure(
        figs.component_shares(by_component(table), title, tied=cfg.tie_weights), key=K.per_item(key, "bar")
    )
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Parameters", f"{total:,}")
    c2.metric("Per block", f"{int(table[table['layer'] == 0]['count'].sum()):,}" if cfg.n_layers else "–")
    c3.metric("fp32", f"{memory_bytes(total, 'fp32') / MIB:,.1f} MiB")
    c4.metric("fp16 / bf16", f"{memory_bytes(total, 'fp16') / MIB:,.1f} MiB")
    for fact in seed_facts(cfg, table):
        st.markdown(f"- {fact}")
    if 1 < cfg.n_layers <= 200:
        display.show_figure(figs.layer_stacked_bar(by_layer(table, by="group")), key=K.per_item(key, "layers"))
        st.caption("Every block is the same size: depth adds parameters linearly.")
    groups = group_frame(table)  # the CSVs below are built when clicked (each pick built three)
    count_table(groups)
    display.download_csv(lambda: groups, f"params_by_group_{cfg.name}.csv", key=K.per_item(key, "group_csv"))
    finer = display.lazy_expander(FINER_SPLIT, K.per_item(key, "finer"))  # drawn when open (issue 60)
    if finer is not None:
        with finer:
            display.show_figure(
                figs.component_shares(by_component(table), title, tied=cfg.tie_weights, split=True),
                key=K.per_item(key, "split_bar"),
            )
            comp = component_frame(table)
            count_table(comp)
            display.download_csv(lambda: comp, f"params_by_component_{cfg.name}.csv", key=K.per_item(key, "comp_csv"))
    every = display.lazy_expander(f"Every parameter tensor ({len(table)})", K.per_item(key, "tensors"))
    if every is not None:
        with every:
            st.caption("The same tensors and counts as the module tree built on PyTorch's `meta` device.")
            tensors = tensor_frame(table)
            st.dataframe(
                tensors,
                hide_index=True,
                column_config={
                    "count": st.column_config.NumberColumn(format="localized"),
                    "share": st.column_config.NumberColumn(format="percent"),
                },
            )
            display.download_csv(lambda: tensors, f"params_{cfg.name}.csv", key=K.per_item(key, "tensors_csv"))
    reproduce.show(reproduce.parameters(f"the Parameters page, {label or cfg.name}", cfg))


def model_tab() -> None:
    which = S.PAR_MODEL.selectbox(st)
    if which == MODEL_IN_USE:
        cfg = sidebar.current_config()
        spec = state.get(K.MODEL_SPEC)
        label = spec.name if spec is not None else ""
    else:
        cfg, label = PRESETS[which], which
    if cfg is not None:
        show_breakdown(cfg, label, key=K.PAR_MODEL)


def presets_tab() -> None:
    chosen = S.PAR_PRESETS.multiselect(st, options=list(PRESETS), default=list(GPT_FAMILY))
    if not chosen:
        st.info("Choose at least one model.")
        return
    counts = {name: figs.group_counts(param_table(PRESETS[name])) for name in chosen}
    display.show_figure(figs.presets_stacked(counts), key=K.PAR_PRESETS_BAR)
    st.caption(
        "Stacked by group: attention includes its output projection, norms the final one (GPT-1 and GPT-2 "
        "tie the head, so its share is 0). As models widen, the blocks (attention + MLP, growing as d_model²) "
        "outgrow the embeddings (growing as d_model)."
    )
    frame = presets_frame(counts, figs.GROUP_ORDER)
    st.dataframe(
        frame,
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="localized") for c in frame.columns[1:]},
    )
    display.download_csv(frame, "params_presets.csv", key=K.PAR_PRESETS_CSV)
    finer = display.lazy_expander(FINER_SPLIT, K.PAR_PRESETS_FINER)
    if finer is not None:
        with finer:
            fine = presets_frame({name: component_counts(PRESETS[name]) for name in chosen}, COMPONENTS)
            st.dataframe(
                fine,
                hide_index=True,
                column_config={c: st.column_config.NumberColumn(format="localized") for c in fine.columns[1:]},
            )
    reproduce.show(reproduce.parameters_of_presets(chosen))


def presets_frame(counts: dict[str, dict[str, int]], columns) -> pd.DataFrame:
    """One row per model: its counts in `columns` (groups or components), then the total."""
    frame = pd.DataFrame.from_dict(counts, orient="index").reindex(columns=list(columns), fill_value=0)
    frame.insert(0, "model", frame.index)
    frame["total"] = frame[list(columns)].sum(axis=1)
    return frame


def component_counts(cfg: GPTConfig) -> dict[str, int]:
    comp = by_component(param_table(cfg))
    return {name: int(count) for name, count in zip(comp["component"], comp["count"], strict=True)}


def described_model() -> GPTConfig:
    """The calculator's inputs as a config (ConfigError when they describe no valid model)."""
    base = PRESETS["gpt2-small"]
    c1, c2, c3, c4 = st.columns(4)
    n_layers = S.CALC_LAYERS.number_input(c1, value=base.n_layers)
    d_model = S.CALC_D_MODEL.number_input(c2, value=base.d_model, step=64)
    n_heads = S.CALC_HEADS.number_input(c3, value=base.n_heads)
    ratio = S.CALC_RATIO.number_input(c4)
    c5, c6, c7 = st.columns([1, 1, 2])
    vocab = S.CALC_VOCAB.number_input(c5, value=base.vocab_size)
    n_ctx = S.CALC_CTX.number_input(c6, value=base.n_ctx)
    norm_type = S.CALC_NORM_TYPE.radio(
        c7, horizontal=True, format_func={"layernorm": "LayerNorm (weight + bias)", "rmsnorm": "RMSNorm (weight)"}.get
    )
    c8, c9 = st.columns(2)
    tie = S.CALC_TIE.checkbox(c8)
    qkv_bias = S.CALC_QKV_BIAS.checkbox(c9)
    d_ff = round(ratio * int(d_model))
    return GPTConfig(
        vocab_size=int(vocab),
        n_ctx=int(n_ctx),
        d_model=int(d_model),
        n_layers=int(n_layers),
        n_heads=int(n_heads),
        d_ff=int(d_ff),
        norm_type=norm_type,
        tie_weights=tie,
        qkv_bias=qkv_bias,
        name="your model",
    )


def calculator_tab() -> None:
    st.caption("Describe a model; its parameters are counted by formula, instantly, with no weights built.")
    try:
        calc = described_model()
    except ConfigError as err:
        st.error(f"That is not a valid model: {err}")
        return
    st.caption(f"d_ff = {calc.d_ff:,}; d_head = {calc.d_head:,}.")
    show_breakdown(calc, "your model", key=K.PAR_CALC)


TAB_DRAWERS = dict(zip(TABS, (model_tab, presets_tab, calculator_tab), strict=True))


def one_tab(name: str) -> None:
    """A tab's fragment: a pick in it reruns this tab alone (issue 60: a preset pick reran all three tabs' figures,
    0.8-1.3 s to the page final), then writes the address, as the router that runs after a full run is not run."""
    TAB_DRAWERS[name]()
    sync_address()


# The page's own layout rule (style only): on a phone a table's cells stay on one line and the table scrolls
# sideways, rather than its long "made of" cells wrapping into a narrow column a screen tall.
PAGE_CSS = (
    "<style>@media (max-width: 640px) {[data-testid='stTable'] [data-testid='stTableStyledTable'] "
    ":is(td, th, td p, th p) {white-space: nowrap;}}</style>"
)


def main() -> None:
    st.html(PAGE_CSS)
    st.title("Parameters")
    st.caption("Where a GPT's weights live, counted from its config by formula (no weights are built).")
    for name, tab in zip(TABS, st.tabs(list(TABS)), strict=True):
        with tab:
            st.fragment(one_tab)(name)


main()
