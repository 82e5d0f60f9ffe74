"""Why this token? Direct logit attribution, head ablation, activation patching and saliency on the sidebar's
model and prompt. Every number comes from gptviz.attribution / gptviz.interventions; nothing is drawn that
was not measured on this model."""
import pandas as pd
import streamlit as st
import torch

from gptviz import attribution, flow
from gptviz.figures import attention as fa
from gptviz.figures import flow as figs_flow
from gptviz.figures import why as figs
from gptviz.generate import generate
from gptviz.interventions import ablate_heads, run_with_edits
from gptviz.tokenizer import decode, encode, token_labels
from gptviz.app import display, models, sidebar
from gptviz import tokenizer

state = st.session_state
TOP = 10            # tokens offered as target / rival
MAX_NEW = 40        # continuation length cap
IG_STEPS = 32       # integrated-gradients points (completeness shown beside the result)
PATCH_EXAMPLES = {  # clean prompt, corrupted prompt (same length in tokens): the corrupted one breaks one cue
    "Repeated sequence (induction)": ("A B C D E F G H A B C", "A B C Q E F G H A B C"),
    "Speaker after a question": ("Ham.\nWho is there?\nHor.\nFriend to this ground.\nHam.\nWho is there?\n",
                                 "Ham.\nWho is there?\nHor.\nFriend to this ground.\nMar.\nWho is there?\n"),
}


def pieces(ids) -> list[str]:
    return token_labels(list(ids))


@st.cache_data(max_entries=32, show_spinner=False)
def next_token(spec: models.ModelSpec, ids: tuple[int, ...], edit_heads: tuple[tuple[int, int], ...] = (),
               mode: str = "zero") -> torch.Tensor:
    """Next-token probabilities after `ids`, with the listed (layer, head) pairs ablated."""
    model = models.load_model(spec)
    logits, _ = run_with_edits(model, torch.tensor([ids]), head_edits(spec, ids, edit_heads, mode))
    return torch.softmax(logits[0, -1].float(), -1)


def head_edits(spec: models.ModelSpec, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], mode: str) -> list:
    """One ablation edit per layer; mean ablation's reference is this prompt's own positions."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    reference = None
    if mode == "mean" and heads:
        _, reference = models.capture_cache(spec, ids, tuple(f"blocks.{l}.attn.hook_z" for l in sorted(by_layer)))
    return [ablate_heads(layer, hs, mode, reference=reference) for layer, hs in sorted(by_layer.items())]


@st.cache_data(max_entries=16, show_spinner=False)
def direct_attribution(spec: models.ModelSpec, ids: tuple[int, ...], target: int, other: int):
    return attribution.direct_logit_attribution(models.load_model(spec), torch.tensor([ids]), target, other)


@st.cache_data(max_entries=16, show_spinner=False)
def continuation(spec: models.ModelSpec, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], mode: str,
                 n: int, temperature: float, seed: int) -> list[int]:
    model = models.load_model(spec)
    return generate(model, list(ids), n, temperature=temperature, seed=seed,
                    edits=head_edits(spec, ids, heads, mode))[len(ids):]


@st.cache_data(max_entries=16, show_spinner=False)
def edited_pattern(spec: models.ModelSpec, ids: tuple[int, ...], heads: tuple[tuple[int, int], ...], mode: str,
                   layer: int) -> torch.Tensor:
    name = f"blocks.{layer}.attn.hook_pattern"
    _, cache = run_with_edits(models.load_model(spec), torch.tensor([ids]), head_edits(spec, ids, heads, mode), [name])
    return cache[name][0]


@st.cache_data(max_entries=8, show_spinner=False)
def patching(spec: models.ModelSpec, clean: tuple[int, ...], corrupted: tuple[int, ...], target: int, other: int):
    model = models.load_model(spec)
    return (attribution.residual_patching(model, clean, corrupted, target, other),
            attribution.head_patching(model, clean, corrupted, target, other))


@st.cache_data(max_entries=16, show_spinner=False)
def flow_graph(spec: models.ModelSpec, ids: tuple[int, ...], threshold: float):
    """Through the server's bounded capture cache (a capture over its budget is refused before the model runs)."""
    model = models.load_model(spec)
    _, cache = models.get_capture(spec, ids, flow.hook_names(model.config.n_layers))
    return flow.flow_from_capture(model, cache, threshold)


@st.cache_data(max_entries=16, show_spinner=False)
def saliency(spec: models.ModelSpec, ids: tuple[int, ...], target: int, other: int):
    model = models.load_model(spec)
    return (attribution.integrated_gradients(model, ids, target, other, steps=IG_STEPS),
            attribution.gradient_x_input(model, ids, target, other))


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


st.title("Why this token?")
st.caption("Ask the model why it predicts what it does: which heads and MLPs push the prediction, what happens "
           "when heads are removed, which parts of a clean run restore a corrupted one, and which prompt "
           "tokens the prediction depends on.")

spec, model = sidebar.require_model()
cfg = model.config
prompt = sidebar.require_prompt(cfg.n_ctx, cfg.vocab_size)
ids = prompt.ids
labels = pieces(ids)
layers, heads = range(cfg.n_layers), range(cfg.n_heads)

probs = next_token(spec, ids)
top_probs, top_ids = probs.topk(min(TOP, probs.numel()))
choices = [int(i) for i in top_ids]
names = dict(zip(choices, pieces(choices)))
sidebar.keep_valid("why_target", choices, choices[0])
sidebar.keep_valid("why_other", choices, choices[1])
c1, c2 = st.columns(2)
target = c1.selectbox("Predicted token (target)", choices, key="why_target",
                      format_func=lambda i: f"{names[i]}  ({float(probs[i]):.1%})")
others = [c for c in choices if c != target]
if state.get("why_other") not in others:
    state["why_other"] = others[0]
other = c2.selectbox("Rival", others, key="why_other", format_func=lambda i: f"{names[i]}  ({float(probs[i]):.1%})",
                     help="The metric is logit(target) - logit(rival): what makes the model prefer one to the other.")
st.caption(f"Next token after the prompt's last token, {display.md_text(labels[-1])}. Metric: logit("
           f"{display.md_text(names[target])}) - logit({display.md_text(names[other])}).")

tab_dla, tab_ablate, tab_patch, tab_saliency, tab_flow = st.tabs(
    ["Direct attribution", "Ablate heads", "Patching", "Saliency", "Information flow"], key="why_view",
    on_change="rerun")

with tab_dla:
    if tab_dla.open is not False:  # only the open tab computes
        st.caption("What each head and MLP writes into the final residual stream, read straight through the "
                   "unembedding (the final norm's scale frozen at this run). It measures direct effects only: a head "
                   "whose output other layers read and transform gets no credit here for what they do with it.")
        if cfg.norm != "pre":
            st.info("Direct attribution needs the pre-norm wiring. In post-norm every block's LayerNorm rescales the "
                    "whole residual stream after each addition, so the final stream is not a sum of the heads' and "
                    "MLPs' outputs and no exact split exists. Ablation, patching and saliency below work for both.")
        else:
            dla = direct_attribution(spec, ids, target, other)
            total = float(dla.values.sum())
            m1, m2, m3 = st.columns(3)
            m1.metric("Logit difference (model)", f"{dla.logit_diff:+.3f}")
            m2.metric("Sum of the parts", f"{total:+.3f}", help="Equal to the model's own logit difference "
                      "up to float rounding: the parts are an exact decomposition.")
            m3.metric("Largest part", dla.labels[int(dla.values.abs().argmax())])
            display.show_figure(figs.attribution_bars(dla.labels, dla.values,
                                                 title="Direct attribution: every part of the final residual stream"),
                           key="why_dla_bars")
            grid = display.show_figure(figs.layer_head_grid(dla.head_values, title="Heads' direct attribution (click a head "
                                                       "to open its attention)", colorbar="logit diff"),
                                  key="why_dla_grid", on_select="rerun", selection_mode="points")
            picked = fa.selected_head(grid or {})
            if picked is not None and picked[0] in layers and picked[1] in heads:
                state["att_layer"], state["att_head"], state["att_view"] = picked[0], picked[1], "One head"
                st.switch_page("app_pages/attention.py")
            display.download_csv(pd.DataFrame({"part": dla.labels, "direct_attribution": dla.values.numpy()}),
                            "direct_attribution.csv", key="why_dla_csv")

with tab_ablate:
    if tab_ablate.open is not False:  # only the open tab computes
        st.caption("Remove heads and run again: the next-token probabilities and the continuation with and without "
                   "them, from the same seed. Zero ablation sets a head's output (z) to 0; mean ablation to its mean "
                   "over this prompt's positions. It shows what the model does without the head, which is not only "
                   "what the head did: other parts may compensate.")
        options = [(l, h) for l in layers for h in heads]
        chosen = st.multiselect("Heads to remove", options, key="why_heads", format_func=lambda lh: f"L{lh[0]}H{lh[1]}",
                                placeholder="Choose heads, e.g. the largest bars of the direct attribution")
        a1, a2, a3, a4 = st.columns(4)
        mode = a1.radio("Ablation", ["zero", "mean"], key="why_mode", horizontal=True)
        n_new = a2.number_input("New tokens", 1, MAX_NEW, 20, key="why_n")
        temperature = a3.slider("Temperature", 0.0, 2.0, 0.0, 0.05, key="why_temp", help="0 is greedy.")
        seed = a4.number_input("Seed", 0, 2**31 - 1, 0, key="why_seed")
        heads_key = tuple(sorted(chosen))
        after = next_token(spec, ids, heads_key, mode) if heads_key else probs
        shown = sorted(set(choices[:5]) | set(after.topk(5).indices.tolist()), key=lambda i: -float(probs[i]))
        table = pd.DataFrame({"token": pieces(shown), "before": [float(probs[i]) for i in shown],
                              "after": [float(after[i]) for i in shown]})
        table["change"] = table["after"] - table["before"]
        st.dataframe(table, hide_index=True, column_config={
            c: st.column_config.NumberColumn(format="percent") for c in ("before", "after", "change")})
        plain = continuation(spec, ids, (), mode, int(n_new), float(temperature), int(seed))
        edited = continuation(spec, ids, heads_key, mode, int(n_new), float(temperature), int(seed)) if heads_key else plain
        split = first_difference(plain, edited)
        t1, t2 = st.columns(2)
        t1.markdown("**Without ablation**")
        t1.text(decode(plain))
        t2.markdown(f"**With {len(heads_key)} head(s) removed**")
        t2.text(decode(edited))
        if not heads_key:
            st.caption("Choose heads to compare.")
        elif split is None:
            st.success("The continuation is the same with these heads removed.")
        else:
            st.warning(f"The texts diverge at new token {split + 1}: "
                       f"{display.md_text(pieces(plain[split:split + 1] or [0])[0])} without the ablation, "
                       f"{display.md_text(pieces(edited[split:split + 1] or [0])[0])} with it.")
        if heads_key:
            v1, v2 = st.columns(2)
            show_layer = v1.selectbox("Attention of layer", layers, key="why_att_layer",
                                      index=min(max(l for l, _ in heads_key) + 1, cfg.n_layers - 1))
            show_head = v2.selectbox("head", heads, key="why_att_head")
            before_map = edited_pattern(spec, ids, (), mode, show_layer)[show_head]
            after_map = edited_pattern(spec, ids, heads_key, mode, show_layer)[show_head]
            m1, m2 = st.columns(2)
            with m1:
                display.show_figure(fa.attention_heatmap(before_map.numpy(), labels, title=f"L{show_layer}H{show_head} as trained",
                                                    height=420), key="why_att_before")
            with m2:
                display.show_figure(fa.attention_heatmap(after_map.numpy(), labels, title=f"L{show_layer}H{show_head} with the "
                                                    "ablation", height=420), key="why_att_after")

with tab_patch:
    if tab_patch.open is not False:  # only the open tab computes
        st.caption("Activation patching: run a corrupted prompt, copy in one piece of the clean prompt's run, and see "
                   "how much of the clean prediction comes back (1 = all of it, 0 = none). It locates where the "
                   "information that separates the two prompts flows; it says nothing about inputs both share.")
        example = st.selectbox("Example pair", ["(your own)"] + list(PATCH_EXAMPLES), key="why_example")
        clean_default, corrupted_default = PATCH_EXAMPLES.get(example, (state.get("prompt", ""), state.get("prompt", "")))
        p1, p2 = st.columns(2)
        clean_text = p1.text_area("Clean prompt", clean_default, key=f"why_clean_{example}", height=120,
                                  max_chars=2000)
        corrupted_text = p2.text_area("Corrupted prompt", corrupted_default, key=f"why_corrupt_{example}", height=120,
                                      max_chars=2000)
        clean_ids = tuple(tokenizer.fit_vocabulary(encode(clean_text), cfg.vocab_size)[0][-cfg.n_ctx:])
        corrupt_ids = tuple(tokenizer.fit_vocabulary(encode(corrupted_text), cfg.vocab_size)[0][-cfg.n_ctx:])
        if not clean_ids or not corrupt_ids:
            st.info("Type both prompts.")
        elif len(clean_ids) != len(corrupt_ids):
            st.warning(f"Patching compares the prompts position by position, so they must have the same number of "
                       f"tokens: the clean one has {len(clean_ids)}, the corrupted one {len(corrupt_ids)}.")
        elif clean_ids == corrupt_ids:
            st.info("The prompts are the same: change a word of the corrupted one.")
        else:
            p_clean, p_corrupt = next_token(spec, clean_ids), next_token(spec, corrupt_ids)
            goal = int(p_clean.argmax())
            rival = int(p_corrupt.argmax())
            if rival == goal:
                rival = int(p_clean.topk(2).indices[1])
            st.caption(f"Metric: logit({display.md_text(pieces([goal])[0])}) - logit({display.md_text(pieces([rival])[0])}), "
                       "the clean prompt's top prediction against the corrupted one's.")
            try:
                with st.spinner("Patching every layer and position, and every head..."):
                    resid, by_head = patching(spec, clean_ids, corrupt_ids, goal, rival)
            except ValueError as err:
                st.warning(str(err))
            else:
                st.caption(f"Logit difference: clean {resid.clean:+.3f}, corrupted {resid.corrupted:+.3f}.")
                display.show_figure(figs.patching_heatmap(resid.scores, pieces(corrupt_ids),
                                                     title="Residual stream patched at one layer and position"),
                               key="why_patch_resid")
                display.show_figure(figs.layer_head_grid(by_head.scores, title="One head's output patched (all positions)",
                                                    colorbar="restored", symmetric=True),
                               key="why_patch_heads")

with tab_saliency:
    if tab_saliency.open is not False:  # only the open tab computes
        st.caption(f"Integrated gradients: how much each prompt token's embedding contributes to the metric, "
                   f"integrated along a straight path from an all-zero token embedding ({IG_STEPS} points; position "
                   "embeddings kept). The scores sum to the metric's change along that path. Gradient x input, a "
                   "one-point version, is shown below it. Both are local, linearised measures, not ablations.")
        ig, gxi = saliency(spec, ids, target, other)
        gap = ig.metric - ig.baseline_metric
        st.caption(f"Sum of the scores {float(ig.scores.sum()):+.3f}; metric at the prompt {ig.metric:+.3f}, at the "
                   f"zero baseline {ig.baseline_metric:+.3f} (difference {gap:+.3f}).")
        display.show_figure(figs.token_strip(labels, ig.scores, title="Integrated gradients on the prompt's tokens"),
                       key="why_ig")
        display.show_figure(figs.token_strip(labels, gxi.scores, title="Gradient x input"), key="why_gxi")

with tab_flow:
    if tab_flow.open is not False:  # only the open tab computes
        st.caption("Which earlier tokens and sub-layers the last token's output is built from (Ferrando & Voita, "
                   "2024; the graph of the LLM Transparency Tool). Each residual update is a sum: the stream so far "
                   "(the skip), what attention brings from every earlier token, and the MLP's output. Each part's "
                   "share of its sum is how much closer it is to the sum than nothing is (L1 distance), normalised. "
                   "Parts whose share reaches the threshold are drawn, from the output down. It does not depend on "
                   "the target and rival above.")
        if cfg.norm != "pre":
            st.info("The information-flow graph needs the pre-norm wiring, like direct attribution: in post-norm each "
                    "block's LayerNorm rescales the stream after the addition, so it is not a sum of its parts.")
        else:
            threshold = st.slider("Threshold: smallest share drawn", 0.01, 0.5, 0.04, 0.01, key="why_flow_threshold",
                                  help="Lower shows more of the graph; the routes with the largest shares stay.")
            try:
                with st.spinner("Splitting every residual sum into its parts..."):
                    graph = flow_graph(spec, ids, float(threshold))
            except ValueError as err:  # LimitError: the capture would pass the server's budget
                st.warning(str(err))
                st.stop()
            kinds = {k: [e for e in graph.edges if e.kind == k] for k in ("attention", "mlp", "residual")}
            sources = {e.source for e in kinds["attention"] if e.source != graph.position}
            st.caption(f"{len(graph.edges)} edges at share >= {threshold:.2f}: {len(kinds['attention'])} through "
                       f"attention, {len(kinds['mlp'])} MLP outputs, {len(kinds['residual'])} skips. Earlier tokens "
                       f"the output reads: {len(sources)} of {graph.n_tokens - 1}.")
            display.show_figure(figs_flow.flow_figure(graph, labels, n_heads=cfg.n_heads,
                                                 title="Information flow into the prediction after "
                                                 f"'{fa.plotly_text(labels[graph.position])}'"), key="why_flow_fig")
            rows = sorted(kinds["attention"], key=lambda e: -e.importance)
            table = pd.DataFrame({"layer": [e.layer for e in rows], "from token": [labels[e.source] for e in rows],
                                  "from position": [e.source for e in rows],
                                  "to token": [labels[e.target] for e in rows],
                                  "to position": [e.target for e in rows], "share": [e.importance for e in rows],
                                  "largest head write": [f"L{e.layer}H{e.head}: {e.head_share:.0%} (even: "
                                                         f"{1 / cfg.n_heads:.0%})" for e in rows]})
            st.dataframe(table, hide_index=True, column_config={"share": st.column_config.ProgressColumn(
                format="percent", min_value=0.0, max_value=1.0)})
            display.download_csv(pd.DataFrame([e._asdict() for e in graph.edges]), "information_flow.csv",
                            key="why_flow_csv")
