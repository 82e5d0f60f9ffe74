"""The Pre-norm vs post-norm page's bundled twins, drawn: loading them, their heads matched by role, the next token
at any position, their training histories and generation with the same seed ("The twins in depth"). Layout only:
the numbers come from gptviz.app.services.norms."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from ... import GPTConfig, methods as analysis
from ...model import unit_id, weights
from ...methods import wiring
from ...model.config import ConfigError
from ...figures import norms as fig_norms
from ...figures import training as fig_train
from ...model.generate import check_sampling
from ...training.evaluate import INDUCTION_BAR
from ...training.snapshots import FORMED_THRESHOLD
from ...model.tokenizer import decode, token_labels
from .. import display, models, sidebar
from .. import keys as K
from .. import settings as S
from ..services import norms as services
from ..unit_nav import unit_pills
from .norms_same import layer_and_head, show_attention_panels

state = st.session_state


def pick_twins(bundled: dict) -> wiring.TrainedTwins | None:
    """The bundled pre/post pair to compare (a picker when there are several); None (after a note) when none."""
    pairs = wiring.trained_twins(list(bundled))
    if not pairs:
        st.info("The bundled pre-norm and post-norm models are not here yet (they are being trained and will "
                "appear in gptviz/models/). Meanwhile, train a pair yourself on the Train page.")
        return None
    if len(pairs) == 1:
        return pairs[0]
    stem = S.TWINS_STEM.selectbox(st, options=[p.stem for p in pairs])
    return next(p for p in pairs if p.stem == stem)


def recipe_note(bundled: dict, names: dict[str, str]) -> None:
    """Whether the twins were trained alike; if not, how they differ, before any curve is compared."""
    differences = services.recipe_of(bundled, names)
    if not differences:
        st.caption("Two bundled models trained with the same data order and the same initial weights, one pre-norm "
                   "and one post-norm; what they were trained on is in the sidebar and in each model card.")
    else:  # the sentence above would not be true: say how they differ before any curve is compared
        st.warning("These two bundled models, one pre-norm and one post-norm, were not trained alike, so their "
                   "curves and scores compare more than the LayerNorm placement: "
                   + "; ".join(differences[:6]) + ("; ..." if len(differences) > 6 else "")
                   + ". Each model card has its full recipe.")
        trial = services.other_recipe_trial(bundled, names)
        if trial is not None:
            with st.expander("Why not trained alike? Pre-norm on post-norm's recipe, checked"):
                cleared = next(row for row in trial if row[""] == "bars cleared")
                alike, own = cleared["pre-norm on post-norm's recipe"], cleared["pre-norm (bundled)"]
                st.markdown(f"The smallest change found that lets post-norm train is the one above "
                            f"({'; '.join(differences)}). Given the same change, pre-norm clears {alike} of the "
                            f"check's bars, against {own} on its own recipe.")
                st.dataframe(pd.DataFrame(trial), hide_index=True, width="stretch")
                st.caption("The pre-norm twin retrained on post-norm's whole recipe (the same init, seeds, batches "
                           "and schedule), then checked with `python -m gptviz check` on the held-out plays, beside "
                           "the bundled twins' own checks." + other_way_round(bundled, names)
                           + " gptviz/models/README.md (\"Trained alike\") has both runs' logs.")


def other_way_round(bundled: dict, names: dict[str, str]) -> str:
    """The post-norm twin's trial on pre-norm's recipe, from its log, as a sentence ("" without the log)."""
    probe = services.other_recipe_probe(bundled, names)
    if probe is None:
        return ""
    start, best, n = probe
    return (f" The other way round, post-norm on pre-norm's recipe: its induction score went from {start:.3f} at the "
            f"start to at best {best:.3f} over {n} logged evaluations of its copy stage (bar {INDUCTION_BAR}).")


def training_table(names: dict[str, str], histories: dict[str, dict]) -> dict[str, dict[str, str]]:
    """Each twin's run in one column: steps, final and best losses, the settings that shape the curves."""
    table = {}
    for norm, h in histories.items():
        s = h.get("settings", {})
        vals = services.val_losses(h)
        table[names[norm]] = {"steps": str(h["history"][-1]["step"]),
                              "final train loss": f"{h['history'][-1]['train_loss']:.3f}",
                              "final validation loss": f"{vals[-1]:.3f}" if vals else "–",
                              "best validation loss": f"{min(vals):.3f}" if vals else "–",
                              "peak learning rate": f"{s['lr']:g}" if "lr" in s else "–",
                              "warmup steps": str(s.get("warmup", "–")),
                              "batch × block": f"{s.get('batch_size', '?')} × "
                                               f"{s.get('block_size') or 'full context'}",
                              "repeated-random windows": f"{s.get('copy_fraction', 0):.1%}"}
    return table


def loss_curve_notes(runs: dict, histories: dict[str, dict]) -> list[str]:
    """What the loss figure's training curve averages over, when that is not what validation measures."""
    notes = []
    switch = fig_train.full_vocab_switch(runs)
    if switch is not None:
        notes.append(f"Before step {switch} (shaded) the training loss was normalised over only the token "
                     f"ids the training text uses, a cheaper softmax, so it reads lower than a loss over all "
                     f"50,257 ids; validation losses are always over all ids.")
    if any(h.get("settings", {}).get("copy_fraction") for h in histories.values()):
        notes.append("The training loss averages over both kinds of window, the plays and the repeated "
                     "random sequences (whose first copy no model can predict), so it is not comparable with "
                     "the validation loss, which is on held-out plays only.")
    return notes


def training_summary(names: dict[str, str], histories: dict[str, dict]) -> None:
    """The table of the two runs, the settings they differ in and which ended lower."""
    st.table(training_table(names, histories))
    differ = wiring.differing_settings({n: h.get("settings", {}) for n, h in histories.items()})
    if differ:
        st.caption("Trained with different " + ", ".join(
            f"{key} ({', '.join(f'{n}-norm {v}' for n, v in by_norm.items())})"
            for key, by_norm in differ.items()) + "; gptviz/models/README.md says why.")
    vals = {n: services.val_losses(h) for n, h in histories.items()}
    if all(vals.values()):
        better = min(vals, key=lambda n: vals[n][-1])
        st.caption(f"Final validation loss: {better}-norm is lower by "
                   f"{abs(vals['pre'][-1] - vals['post'][-1]):.3f} nats/token.")


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
    names: dict[str, str]                   # {"pre": model name, "post": model name}
    specs: dict[str, models.ModelSpec]
    cfg: GPTConfig
    ids: tuple[int, ...]
    labels: list[str]


def load_twins(names: dict[str, str]) -> LoadedTwins | None:
    """Both twins loaded and the sidebar prompt fitted to them; None (after a message) when either fails."""
    specs = services.twin_specs(names)
    try:
        with st.spinner("Loading the twins…"):
            loaded = {norm: models.load_model(spec) for norm, spec in specs.items()}
    except (weights.CheckpointError, ConfigError, ValueError, OSError, RuntimeError) as err:
        st.error(f"Could not load the twins: {err}")
        return None
    cfg = loaded["pre"].config
    prompt = sidebar.prompt_tokens(cfg.n_ctx, vocab_size=cfg.vocab_size)
    if prompt is None:
        return None
    return LoadedTwins(names, specs, cfg, prompt.ids, token_labels(prompt.ids))


def matches_table(matches: list, scores: dict, length: int) -> None:
    """Every pre-norm head beside its post-norm match, with the scores that say what each does."""
    prev_chance, ind_chance = analysis.previous_token_chance(2 * length), analysis.induction_chance(length)
    rows = [{"pre-norm head": unit_id.head_id(*m.a), "post-norm match": unit_id.head_id(*m.b),
             "pattern similarity": m.similarity,
             f"previous-token, pre / post (chance {prev_chance:.2f})":
                 f"{float(scores['pre'][0][m.a]):.2f} / {float(scores['post'][0][m.b]):.2f}",
             f"induction, pre / post (chance {ind_chance:.2f})":
                 f"{float(scores['pre'][1][m.a]):.2f} / {float(scores['post'][1][m.b]):.2f}"} for m in matches]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", column_config={
        "pattern similarity": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.2f")})
    st.caption(f"Each head's attention on {length} random tokens repeated once, compared by cosine similarity "
               "(1: the same pattern), and paired one to one, most similar first. The scores say what each pair "
               "does; the pairs, not the indices, are what to compare between the twins. A pair with a low "
               "similarity is a head left over when one twin grew more heads of a kind than the other.")
    left, right = st.columns(2)
    with left:
        unit_pills("What a pre-norm head does over the corpus", [unit_id.head_id(*m.a) for m in matches],
                   K.per_item(K.UNIT_PILLS, "norms_pre"), norm="pre")
    with right:
        unit_pills("What a post-norm head does over the corpus", [unit_id.head_id(*m.b) for m in matches],
                   K.per_item(K.UNIT_PILLS, "norms_post"), norm="post")


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
    pats = {"pre": caps["pre"][1].pattern(layer)[head].numpy(), "post": caps["post"][1].pattern(match.b[0])[match.b[1]].numpy()}
    where = "the same place" if match.b == (layer, head) else "another place"
    a[2].caption(f"Trained separately, the twins grow their heads where training takes them, so the pre-norm twin's "
                 f"layer {layer}, head {head} is shown beside the post-norm head that attends most like it: layer "
                 f"{match.b[0]}, head {match.b[1]}, {where} (pattern similarity {match.similarity:.2f}).")
    show_attention_panels(pats["pre"], pats["post"], tw.labels, "", K.TWINS_ATTN_FIG,
                          (f"pre-norm {unit_id.head_id(layer, head)}", f"post-norm match {unit_id.head_id(*match.b)}", "post − pre"))
    with st.expander("Every head and its match"):
        matches_table(matches, scores, services.probe_length(cfg))
    return caps


def next_token_section(tw: LoadedTwins, caps: dict) -> None:
    ids, labels = tw.ids, tw.labels
    st.subheader("Next-token distributions")
    if state.get(K.TWINS_POS_IDS) != ids:  # a new prompt: start at its last token
        state[K.TWINS_POS_IDS] = ids
        state[K.TWINS_POS] = len(ids) - 1
    pos = S.TWINS_POS.select_slider(st, options=list(range(len(ids))), format_func=lambda i: f"{i}: {labels[i]}")
    dists, entropy = {}, {}
    for norm in tw.specs:
        dists[f"{norm}-norm"], entropy[norm] = services.next_token_at(caps[norm][0], pos)
    display.show_figure(fig_train.next_token_bars(dists, f"position {pos}"), key=K.TWINS_NEXT_FIG)
    truth = f" The prompt's actual next token is {labels[pos + 1]!r}." if pos + 1 < len(ids) else ""
    st.caption(f"Entropy of the full distribution: pre-norm {entropy['pre']:.2f} nats, post-norm "
               f"{entropy['post']:.2f} nats.{truth}")


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
        outs = {norm: services.generate_cached(spec, ids, new_tokens, float(temperature), int(top_k) or None, seed)
                for norm, spec in tw.specs.items()}
    except (ValueError, RuntimeError) as err:
        st.error(f"Could not generate: {err}")
        return
    c = st.columns(2)
    for col, norm in zip(c, tw.specs):
        col.markdown(f"**{tw.names[norm]}**")
        col.code(decode(outs[norm][len(ids):]), language=None, wrap_lines=True)
    st.caption("Same seed, same sampling settings: the random numbers drawn are the same, so the texts differ "
               "only through the two models' probabilities. The prompt is not repeated above.")


def trained_twins_section(bundled: dict, twins: wiring.TrainedTwins, tw: LoadedTwins | None) -> None:
    """The twins in depth: every head and its match, the next token at any position, the training history and
    generation (the first tab already loaded them: `tw`, None when that failed)."""
    names = {"pre": twins.pre, "post": twins.post}
    recipe_note(bundled, names)
    caps = twins_attention(tw) if tw is not None else None
    if caps is not None:
        next_token_section(tw, caps)
    histories = services.histories(bundled, names)
    loss_curves_section(twins, names, histories)
    whole_history_section(bundled, names)
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
    st.caption(f"Every stage of both runs from their train.log (the curves above are the last stage only). The "
               f"triangles mark the step each twin's head formed: the first snapshot from which its score stays at or "
               f"above {FORMED_THRESHOLD:g}, the rule Heads forming uses. Steps count from stage 1's start.")
    display.show_figure(fig_norms.stage_history(
        {f"{n}-norm": [r for s in stages for r in s.records] for n, stages in logs.items()}, boundaries, formed),
        key=K.TWINS_HISTORY_FIG)
    rows = {f"{n} head formed": {run: (f"step {step:,}" if step is not None else "not in stage 1's snapshots")
                                 for run, step in ((r, formed[r][n]) for r in formed)}
            for n in services.FORMED_DETECTORS}
    st.table(rows)
    with st.expander("What the stages were and how the scores are logged"):
        for norm, stages in logs.items():
            st.markdown(f"**{names[norm]}**: " + "; ".join(f"stage {s.number} (steps {s.start + 1:,}–{s.end:,}): "
                                                           f"{s.title}" for s in stages))
        st.caption("A head's forming is read from the snapshots of stage 1 (Heads forming replays them): the best "
                   "head's score on the snapshot probes, every 25 steps or closer, so a head formed between the marked "
                   "snapshot and the one before it. train.log's prev and ind columns are other probes, logged only at "
                   "evaluation steps, and are not used for it.")
