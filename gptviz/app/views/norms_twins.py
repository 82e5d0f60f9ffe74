"""The Pre-norm vs post-norm page's bundled twins, drawn: loading them, their heads matched by role, the next token
at any position, their training histories and generation with the same seed ("The twins in depth"). Layout only:
the numbers come from gptviz.app.services.norms."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from ... import GPTConfig
from ... import methods as analysis
from ...figures import norms_training as fig_norms_training
from ...figures import training as fig_train
from ...methods import wiring
from ...model import unit_id, weights
from ...model.config import ConfigError
from ...model.generate import check_sampling
from ...training.evaluate import INDUCTION_BAR
from ...training.snapshots import FORMED_THRESHOLD
from .. import display, model_service, sidebar
from .. import keys as K
from .. import settings as S
from ..services import norms as services
from ..services.norms_pair import CONFOUNDS, GPT2_TOKENS_FOR_GPT1, Pair, bundled_pair, hub_pair, position_in, prompt_ids
from ..unit_nav import unit_pills
from .norms_same import layer_and_head, show_attention_panels

state = st.session_state


def pick_twins(bundled: dict) -> Pair | None:
    """The pre/post pair to compare: the bundled twins, and GPT-2 small beside GPT-1 where both are on this server's
    disk (a picker when there are several); None (after a note) when none."""
    pairs = [bundled_pair(t.stem, t.pre, t.post) for t in wiring.trained_twins(list(bundled))]
    hub = hub_pair()
    pairs += [hub] if hub is not None else []
    if not pairs:
        st.info(
            "The bundled pre-norm and post-norm models are not here yet (they are being trained and will "
            "appear in gptviz/bundled/). Meanwhile, train a pair yourself on the Train page."
        )
        return None
    if len(pairs) == 1:
        return pairs[0]
    sidebar.keep_valid(K.TWINS_STEM, [p.stem for p in pairs], pairs[0].stem)
    stem = S.TWINS_STEM.selectbox(
        st,
        options=[p.stem for p in pairs],
        format_func=lambda stem: next(
            f"{p.names['pre']} / {p.names['post']} (bundled twins)" if p.bundled else stem
            for p in pairs
            if p.stem == stem
        ),
    )
    return next(p for p in pairs if p.stem == stem)


def short_name(pair: Pair, norm: str) -> str:
    """How a figure names one model of the pair: its wiring, and for the Hub pair which model it is."""
    return f"{norm}-norm" if pair.bundled else f"{pair.names[norm]} ({norm}-norm)"


def confounds_note(pair: Pair) -> None:
    """What else differs between GPT-2 small and GPT-1, before any of their differences is read as the wiring's."""
    st.caption(f":material/warning: {CONFOUNDS}")
    if pair.same_tokens:
        st.warning(GPT2_TOKENS_FOR_GPT1)


def recipe_note(bundled: dict, names: dict[str, str]) -> None:
    """Whether the twins were trained alike; if not, how they differ, before any curve is compared."""
    differences = services.recipe_of(bundled, names)
    if not differences:
        st.caption(
            "Two bundled models trained with the same data order and the same initial weights, one pre-norm "
            "and one post-norm; what they were trained on is in the sidebar and in each model card."
        )
    else:  # the sentence above would not be true: say how they differ before any curve is compared
        st.warning(
            "These two bundled models, one pre-norm and one post-norm, were not trained alike, so their "
            "curves and scores compare more than the LayerNorm placement: "
            + "; ".join(differences[:6])
            + ("; ..." if len(differences) > 6 else "")
            + ". Each model card has its full recipe."
        )
        trial = services.other_recipe_trial(bundled, names)
        if trial is not None:
            with st.expander("Why not trained alike? Pre-norm on post-norm's recipe, checked"):
                cleared = next(row for row in trial if row[""] == "bars cleared")
                alike, own = cleared["pre-norm on post-norm's recipe"], cleared["pre-norm (bundled)"]
                st.markdown(
                    f"The smallest change found that lets post-norm train is the one above "
                    f"({'; '.join(differences)}). Given the same change, pre-norm clears {alike} of the "
                    f"check's bars, against {own} on its own recipe."
                )
                st.dataframe(pd.DataFrame(trial), hide_index=True, width="stretch")
                st.caption(
                    "The pre-norm twin retrained on post-norm's whole recipe (the same init, seeds, batches "
                    "and schedule), then checked with `python -m gptviz check` on the held-out plays, beside "
                    "the bundled twins' own checks."
                    + other_way_round(bundled, names)
                    + ' gptviz/bundled/README.md ("Trained alike") has both runs\' logs.'
                )


def other_way_round(bundled: dict, names: dict[str, str]) -> str:
    """The post-norm twin's trial on pre-norm's recipe, from its log, as a sentence ("" without the log)."""
    probe = services.other_recipe_probe(bundled, names)
    if probe is None:
        return ""
    start, best, n = probe
    return (
        f" The other way round, post-norm on pre-norm's recipe: its induction score went from {start:.3f} at the "
        f"start to at best {best:.3f} over {n} logged evaluations of its copy stage (bar {INDUCTION_BAR})."
    )


def training_table(names: dict[str, str], histories: dict[str, dict]) -> dict[str, dict[str, str]]:
    """Each twin's run in one column: steps, final and best losses, the settings that shape the curves."""
    table = {}
    for norm, h in histories.items():
        s = h.get("settings", {})
        vals = services.val_losses(h)
        table[names[norm]] = {
            "steps": str(h["history"][-1]["step"]),
            "final train loss": f"{h['history'][-1]['train_loss']:.3f}",
            "final validation loss": f"{vals[-1]:.3f}" if vals else "–",
            "best validation loss": f"{min(vals):.3f}" if vals else "–",
            "peak learning rate": f"{s['lr']:g}" if "lr" in s else "–",
            "warmup steps": str(s.get("warmup", "–")),
            "batch × block": f"{s.get('batch_size', '?')} × {s.get('block_size') or 'full context'}",
            "repeated-random windows": f"{s.get('copy_fraction', 0):.1%}",
        }
    return table


def loss_curve_notes(runs: dict, histories: dict[str, dict]) -> list[str]:
    """What the loss figure's training curve averages over, when that is not what validation measures."""
    notes = []
    switch = fig_train.full_vocab_switch(runs)
    if switch is not None:
        notes.append(
            f"Before step {switch} (shaded) the training loss was normalised over only the token "
            f"ids the training text uses, a cheaper softmax, so it reads lower than a loss over all "
            f"50,257 ids; validation losses are always over all ids."
        )
    if any(h.get("settings", {}).get("copy_fraction") for h in histories.values()):
        notes.append(
            "The training loss averages over both kinds of window, the plays and the repeated "
            "random sequences (whose first copy no model can predict), so it is not comparable with "
            "the validation loss, which is on held-out plays only."
        )
    return notes


def training_summary(names: dict[str, str], histories: dict[str, dict]) -> None:
    """The table of the two runs, the settings they differ in and which ended lower."""
    st.table(training_table(names, histories))
    differ = wiring.differing_settings({n: h.get("settings", {}) for n, h in histories.items()})
    if differ:
        st.caption(
            "Trained with different "
            + ", ".join(
                f"{key} ({', '.join(f'{n}-norm {v}' for n, v in by_norm.items())})" for key, by_norm in differ.items()
            )
            + "; gptviz/bundled/README.md says why."
        )
    vals = {n: services.val_losses(h) for n, h in histories.items()}
    if all(vals.values()):
        better = min(vals, key=lambda n: vals[n][-1])
        st.caption(
            f"Final validation loss: {better}-norm is lower by "
            f"{abs(vals['pre'][-1] - vals['post'][-1]):.3f} nats/token."
        )


def loss_curves_section(twins: wiring.TrainedTwins, names: dict[str, str], histories: dict[str, dict]) -> None:
    st.subheader("Loss curves")
    if not all(h is not None for h in histories.values()):
        st.info("No readable history.json beside these checkpoints, so no loss curves.")
        return
    smooth = S.TWINS_SMOOTH.slider(st)
    try:
        refs = services.reference_losses(twins.pre)
    except (OSError, ValueError) as err:
        refs = {}
        st.caption(f"Baselines unavailable: {err}")
    runs = {f"{norm}-norm": h["history"] for norm, h in histories.items()}
    c = st.columns([1.6, 1])
    with c[0]:
        display.show_figure(fig_train.loss_curves(runs, smooth, refs), key=K.TWINS_LOSS_FIG)
        notes = loss_curve_notes(runs, histories)
        if notes:
            with st.expander("Reading the training curve"):
                for note in notes:
                    st.caption(note)
    with c[1]:
        training_summary(names, histories)
    with st.expander("Gradient norm and learning rate during training"):
        clip = histories["pre"].get("settings", {}).get("grad_clip")
        display.show_figure(fig_train.training_dynamics(runs, clip), key=K.TWINS_DYN_FIG)


@dataclass
class LoadedTwins:
    """The two trained models as the prompt sections read them."""

    pair: Pair
    cfg: GPTConfig  # the pre-norm model's, with the shorter context of the two
    ids: dict[str, tuple[int, ...]]  # each model's ids for the prompt (its own tokenizer's)
    labels: dict[str, list[str]]
    vocab: dict[str, int]

    @property
    def names(self) -> dict[str, str]:
        return self.pair.names

    @property
    def specs(self) -> dict[str, model_service.ModelSpec]:
        return self.pair.specs


def load_twins(pair: Pair) -> LoadedTwins | None:
    """Both models loaded and the sidebar prompt fitted to each (through its own tokenizer); None (after a message)
    when either fails."""
    try:
        with st.spinner("Loading the twins…" if pair.bundled else "Loading GPT-2 small and GPT-1…"):
            cfgs = {norm: model_service.load_model(spec).config for norm, spec in pair.specs.items()}
    except (weights.CheckpointError, ConfigError, ValueError, OSError, RuntimeError) as err:
        st.error(f"Could not load {' and '.join(pair.names.values())}: {err}")
        return None
    cfg = cfgs["pre"].replace(n_ctx=min(c.n_ctx for c in cfgs.values()))
    if pair.same_tokens:  # one tokenizer's ids for both: those both vocabularies have
        prompt = sidebar.prompt_tokens(cfg.n_ctx, vocab_size=min(c.vocab_size for c in cfgs.values()))
    else:
        prompt = sidebar.prompt_tokens(cfgs["pre"].n_ctx, vocab_size=cfgs["pre"].vocab_size)
    if prompt is None:
        return None
    ids = {norm: prompt.ids for norm in pair.specs}
    if not pair.same_tokens:  # the text GPT-2 kept, through GPT-1's own tokenizer
        post = cfgs["post"]
        ids["post"], total = prompt_ids(
            pair.codecs["post"], pair.codecs["pre"].decode(prompt.ids), post.n_ctx, post.vocab_size
        )
        if not ids["post"]:
            st.info(f"{pair.names['post']}'s tokenizer finds no token in this prompt: type some words.")
            return None
        if total > len(ids["post"]):
            st.warning(
                f"{pair.names['post']} reads the prompt as {total:,} of its tokens; its context is "
                f"{post.n_ctx}, so only the last {post.n_ctx} are used."
            )
    labels = {norm: pair.codecs[norm].labels(ids[norm]) for norm in ids}
    return LoadedTwins(pair, cfg, ids, labels, {norm: c.vocab_size for norm, c in cfgs.items()})


def matches_table(matches: list, scores: dict, length: int, pills: bool = True) -> None:
    """Every pre-norm head beside its post-norm match, with the scores that say what each does."""
    prev_chance, ind_chance = analysis.previous_token_chance(2 * length), analysis.induction_chance(length)

    def pre_post(score: int, m) -> str:  # score 0: previous-token, 1: induction
        return f"{float(scores['pre'][score][m.a]):.2f} / {float(scores['post'][score][m.b]):.2f}"

    rows = [
        {
            "pre-norm head": unit_id.head_id(*m.a),
            "post-norm match": unit_id.head_id(*m.b),
            "pattern similarity": m.similarity,
            f"previous-token, pre / post (chance {prev_chance:.2f})": pre_post(0, m),
            f"induction, pre / post (chance {ind_chance:.2f})": pre_post(1, m),
        }
        for m in matches
    ]
    st.dataframe(
        pd.DataFrame(rows),
        hide_index=True,
        width="stretch",
        column_config={
            "pattern similarity": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")
        },
    )
    st.caption(
        f"Each head's attention on {length} random tokens repeated once, compared by cosine similarity "
        "(1: the same pattern), and paired one to one, most similar first. The scores say what each pair "
        "does; the pairs, not the indices, are what to compare between the twins. A pair with a low "
        "similarity is a head left over when one twin grew more heads of a kind than the other."
    )
    if not pills:  # the unit pages open the bundled twins' heads
        return
    heads = {"pre": [m.a for m in matches], "post": [m.b for m in matches]}  # each twin's side of the pairs
    for column, norm in zip(st.columns(2), heads, strict=True):
        with column:
            unit_pills(
                f"What a {norm}-norm head does over the corpus",
                [unit_id.head_id(*h) for h in heads[norm]],
                K.per_item(K.UNIT_PILLS, "norms", norm),
                norm=norm,
            )


def twins_attention(tw: LoadedTwins) -> dict | None:
    """A head of the pre-norm twin beside its post-norm match. Returns each twin's (logits, cache) on the prompt;
    None after an error."""
    cfg = tw.cfg
    st.subheader("Attention on the prompt, heads matched by role")
    a = st.columns([1, 1, 3])
    layer, head = layer_and_head(a, S.TWINS_LAYER, S.TWINS_HEAD, cfg.n_layers, cfg.n_heads)
    try:
        caps = services.twins_captures(tw.specs, tw.ids, cfg.n_layers)
        matches, scores, _ = services.head_matches(tw.specs, cfg)
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not run the twins on this prompt: {err}")
        return None
    match = next(m for m in matches if m.a == (layer, head))
    pats = {
        "pre": caps["pre"][1].pattern(layer)[head].numpy(),
        "post": caps["post"][1].pattern(match.b[0])[match.b[1]].numpy(),
    }
    where = "the same place" if match.b == (layer, head) else "another place"
    a[2].caption(
        f"Trained separately, the twins grow their heads where training takes them, so the pre-norm twin's "
        f"layer {layer}, head {head} is shown beside the post-norm head that attends most like it: layer "
        f"{match.b[0]}, head {match.b[1]}, {where} (pattern similarity {match.similarity:.2f})."
    )
    pair = tw.pair
    show_attention_panels(
        pats["pre"],
        pats["post"],
        tw.labels["pre"],
        "",
        K.TWINS_ATTN_FIG,
        (
            f"{short_name(pair, 'pre')} {unit_id.head_id(layer, head)}",
            f"{short_name(pair, 'post')} match {unit_id.head_id(*match.b)}",
            "post − pre",
        ),
        post_labels=None if pair.same_tokens else tw.labels["post"],
    )
    with st.expander("Every head and its match"):
        matches_table(matches, scores, services.probe_length(cfg), pills=pair.bundled)
    return caps


def next_token_section(tw: LoadedTwins, caps: dict) -> None:
    ids, labels, pair = tw.ids["pre"], tw.labels["pre"], tw.pair
    st.subheader("Next-token distributions")
    if state.get(K.TWINS_POS_IDS) != ids:  # a new prompt: start at its last token
        state[K.TWINS_POS_IDS] = ids
        state[K.TWINS_POS] = len(ids) - 1
    pos = S.TWINS_POS.select_slider(st, options=list(range(len(ids))), format_func=lambda i: f"{i}: {labels[i]}")
    at = {"pre": pos, "post": position_in(pair, tw.ids, pos)}  # where each read the same text so far
    dists, entropy = {}, {}
    for norm in tw.specs:
        dists[short_name(pair, norm)], entropy[norm] = services.next_token_at(
            caps[norm][0], at[norm], pair.codecs[norm].labels
        )
    display.show_figure(fig_train.next_token_bars(dists, f"position {pos}"), key=K.TWINS_NEXT_FIG)
    truth = f" The prompt's actual next token is {labels[pos + 1]!r}." if pos + 1 < len(ids) else ""
    where = (
        ""
        if pair.same_tokens
        else (
            f" {pair.names['post']} reads its own tokens: the same text so far ends at its token {at['post']}, "
            f"{tw.labels['post'][at['post']]!r}."
        )
    )
    st.caption(
        f"Entropy of the full distribution: pre-norm {entropy['pre']:.2f} nats, post-norm "
        f"{entropy['post']:.2f} nats.{truth}{where}"
    )


def twins_generation(tw: LoadedTwins) -> None:
    ids = tw.ids
    st.subheader("Generation with the same seed")
    g = st.columns(4)
    new_tokens = S.TWINS_GEN_TOKENS.slider(g[0])
    temperature = S.TWINS_GEN_TEMP.slider(g[1])
    top_k = S.TWINS_GEN_TOPK.number_input(g[2])
    seed = int(S.TWINS_GEN_SEED.number_input(g[3]))
    try:
        check_sampling(temperature, int(top_k) or None, None, new_tokens)
        outs = {
            norm: services.generate_cached(spec, ids[norm], new_tokens, float(temperature), int(top_k) or None, seed)
            for norm, spec in tw.specs.items()
        }
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not generate: {err}")
        return
    c = st.columns(2)
    for col, norm in zip(c, tw.specs, strict=True):
        col.markdown(f"**{tw.names[norm]}**")
        col.code(tw.pair.codecs[norm].decode(outs[norm][len(ids[norm]) :]), language=None, wrap_lines=True)
    st.caption(
        "Same seed, same sampling settings: the random numbers drawn are the same, so the texts differ "
        "only through the two models' probabilities"
        + ("" if tw.pair.same_tokens else " (and their vocabularies)")
        + ". The prompt is not repeated above."
    )


def trained_twins_section(bundled: dict, pair: Pair, tw: LoadedTwins | None) -> None:
    """The twins in depth: every head and its match, the next token at any position, the training history and
    generation (the first tab already loaded them: `tw`, None when that failed). The Hub pair has no training
    history to show: what else differs between them is said instead."""
    names = pair.names
    if pair.bundled:
        recipe_note(bundled, names)
    else:
        confounds_note(pair)
    caps = twins_attention(tw) if tw is not None else None
    if caps is not None:
        next_token_section(tw, caps)
    if pair.bundled:
        loss_curves_section(
            wiring.TrainedTwins(pair.stem, names["pre"], names["post"]), names, services.histories(bundled, names)
        )
        whole_history_section(bundled, names)
    else:
        st.info("The Hub's checkpoints carry no training history, so there are no loss curves for these two.")
    if caps is not None:
        twins_generation(tw)


def whole_history_section(bundled: dict, names: dict[str, str]) -> None:
    """Both twins' logged losses over every training stage, the stage boundaries, and where their heads formed."""
    logs = services.train_logs(bundled, names)
    if not all(logs.values()):
        return
    st.subheader("The whole training history")
    formed = {f"{norm}-norm": services.formed_at(bundled[names[norm]]) for norm in logs}
    boundaries = [(s.start, f"stage {s.number}") for s in logs["pre"]]
    st.caption(
        f"Every stage of both runs from their train.log (the curves above are the last stage only). The "
        f"triangles mark the step each twin's head formed: the first snapshot from which its score stays at or "
        f"above {FORMED_THRESHOLD:g}, the rule Heads forming uses. Steps count from stage 1's start."
    )
    display.show_figure(
        fig_norms_training.stage_history(
            {f"{n}-norm": [r for s in stages for r in s.records] for n, stages in logs.items()}, boundaries, formed
        ),
        key=K.TWINS_HISTORY_FIG,
    )
    rows = {
        f"{n} head formed": {
            run: (f"step {step:,}" if step is not None else "not in stage 1's snapshots")
            for run, step in ((r, formed[r][n]) for r in formed)
        }
        for n in services.FORMED_DETECTORS
    }
    st.table(rows)
    with st.expander("What the stages were and how the scores are logged"):
        for norm, stages in logs.items():
            st.markdown(
                f"**{names[norm]}**: "
                + "; ".join(f"stage {s.number} (steps {s.start + 1:,}–{s.end:,}): {s.title}" for s in stages)
            )
        st.caption(
            "A head's forming is read from the snapshots of stage 1 (Heads forming replays them): the best "
            "head's score on the snapshot probes, every 25 steps or closer, so a head formed between the marked "
            "snapshot and the one before it. train.log's prev and ind columns are other probes, logged only at "
            "evaluation steps, and are not used for it."
        )
