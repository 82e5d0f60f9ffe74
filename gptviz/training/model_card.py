"""A bundled model's card (MODEL_CARD.md): data, training stages, the measured bars (evaluate.check_model) beside
their baselines, a sample and the commands that rebuild it; check_folder measures a checkpoint and writes it."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..model.config import PRESETS
from .corpus import HELD_OUT_PLAYS, WORKS, load_training_data
from .evaluate import COPY_EXPECTED, INDUCTION_BAR, INDUCTION_SEEDS, MARGIN_NATS, SAMPLE_PROMPT, check_model, corpus_of
from .train import TrainSettings
from .training_record import stage_init, training_stages


def _copy_part(settings: dict) -> str:
    copy = settings.get("copy_fraction", 0.0)
    if not copy:
        return "text only"
    ids = (
        f"the {settings['copy_vocab']:,} most frequent training ids"
        if settings.get("copy_vocab")
        else "any training id"
    )
    share = settings.get("copy_any_share", 0.0)
    if share and settings.get("copy_vocab"):
        ids = f"{ids} ({share:.0%} of them of any training id instead)"
    if copy >= 1:
        return f"only repeated random sequences (of {ids}), no text"
    n = round(copy * settings.get("batch_size", 1))
    return f"{n} of every {settings.get('batch_size')} windows ({copy:.1%}) repeated random sequences of {ids}"


def _data_sentence(training: dict, report: dict) -> str:
    data = report["data"]
    stages = training_stages(training)
    if data["held_out"]:
        works = data["source"] == WORKS.name
        what = "the complete works of Shakespeare" if works else "the texts"
        text = (
            f"{what} (`data/{data['source']}/`{', public domain' if works else ''}) "
            f"less {len(data['held_out'])} whole plays held out for validation ({', '.join(data['held_out'])}): "
            f"{data['train_tokens']:,} training and {data['held_out_tokens']:,} held-out tokens, "
            f"{data['train_vocab']:,} distinct training ids"
        )
    else:
        text = (
            f"`data/{data['source']}` (its last 10% held out): {data['train_tokens']:,} training and "
            f"{data['held_out_tokens']:,} held-out tokens"
        )
    if any(st.get("settings", {}).get("copy_fraction") for st in stages):
        parts = [_copy_part(st.get("settings", {})) for st in stages]
        where = parts[0] if len(parts) == 1 else "; ".join(f"stage {i + 1}: {p}" for i, p in enumerate(parts))
        text += (
            ". **Not text alone:** some training windows are a random sequence of ids (8 to half a window "
            "long) followed by its exact repeats, which only copying predicts: the usual way a small model is "
            f"made to grow induction heads quickly ({where}). The rest are windows of the plays"
        )
    return text


def _stage_line(i: int, settings: dict, n_ctx: int) -> str:
    cheap = settings.get("corpus_vocab_steps", 0)
    return (
        f"{'Stage ' + str(i + 1) + ': ' if i >= 0 else ''}{settings.get('steps')} steps of AdamW (lr "
        f"{settings.get('lr')}, warmup {settings.get('warmup')}, cosine to {settings.get('min_lr_ratio')}x, weight "
        f"decay {settings.get('weight_decay')}, clip {settings.get('grad_clip')}), batch {settings.get('batch_size')} "
        f"x {settings.get('block_size') or n_ctx} tokens, seed {settings.get('seed')}; {_copy_part(settings)}; "
        + (
            f"the first {cheap} steps normalise the softmax over the ids the training text uses, the rest over the "
            "full vocabulary."
            if cheap < settings.get("steps", 0)
            else "every step normalises the softmax over the ids the training text uses."
        )
    )


def _head_history(history: list[dict], batch: int, block: int, cheap_steps: int, n_stages: int = 1) -> str:
    rows = [h for h in history if h.get("induction") is not None]
    if not rows:
        return ""
    which = f" of the last stage (stage {n_stages}; steps and tokens counted from its start)" if n_stages > 1 else ""
    caveat = (
        f" The held-out loss there is over the full vocabulary on training's sampled windows; until step "
        f"{cheap_steps} ids outside the training text were never pushed down, so it reads high until the "
        "full-vocabulary steps at the end."
        if cheap_steps
        else ""
    )
    lines = [
        "| step | tokens seen | held-out loss | previous-token | induction | loss on repeated half |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {h['step']} | {h['step'] * batch * block / 1e6:.2f}M | {h['val_loss']:.3f} | {h['prev_token']:.3f} "
        f"| {h['induction']:.3f} | {h['repeat_loss']:.2f} |"
        for h in rows
    ]
    return (
        f"\n\nBest heads during training{which} (4 held-out windows, one repeated sequence; `history.csv`).{caveat}\n\n"
        + "\n".join(lines)
    )


def _dropouts(stages: list[dict], final: float) -> str:
    """The dropout each stage trained with ("0.1", or "0.0, then 0.1" when a stage changed it)."""
    values = [stage.get("dropout", final) for stage in stages] or [final]
    return str(values[0]) if len(set(values)) == 1 else ", then ".join(str(v) for v in values)


def _measures_table(report: dict) -> str:
    """The card's table of what `python -m gptviz check` measured, each beside its baseline or chance level."""
    bp, bi = report["best_previous_token_head"], report["best_induction_head"]
    rows = [
        "| measure | value | baseline or chance |",
        "|---|---|---|",
        "| held-out loss, every non-overlapping window of the held-out text (nats/token) "
        f"| {report['val_loss']:.3f} | bigram/unigram model fitted on the training text: "
        f"{report['bigram_baseline']:.3f} (lambda {report['bigram_lambda']}); "
        f"unigram {report['unigram_baseline']:.3f} |",
        f"| margin below the bigram baseline | {report['margin']:.3f} | bar: {MARGIN_NATS} |",
        "| best previous-token head (layer.head; mean weight on the previous token, held-out text) "
        f"| {bp['layer']}.{bp['head']}: {bp['score']:.3f} | uniform attention: {bp['chance']:.3f} |",
        f"| best induction head ({report['induction_length']} random training ids repeated once, {INDUCTION_SEEDS} "
        f"draws; the bar) | {bi['layer']}.{bi['head']}: {bi['score']:.3f} | uniform attention: {bi['chance']:.3f} |",
        f"| loss on the repeated half (nats/token) | {report['repeat_loss']:.2f} "
        f"| uniform guessing: {report['uniform_loss']:.2f} |{_frequent_rows(report)}",
        f"| greedy continuation of `{report['copy_prompt']}` (as a JSON string) "
        f"| `{json.dumps(report['copy_continuation'])}` | a copying model: `{json.dumps(COPY_EXPECTED)}` |",
        "| speaker lines / line breaks in the sample "
        f"| {report['sample_speaker_lines']} / {report['sample_newlines']} | |",
    ]
    return "\n".join(rows)


def _frequent_rows(report: dict) -> str:
    """The card's rows for the induction test on the most frequent training ids, when the report has them."""
    freq = report.get("frequent_ids_induction")
    if not freq:
        return ""
    b = freq["best_induction_head"]
    return (
        f"\n| best induction head, the same test on the {freq['ids']:,} most frequent training ids only | "
        f"{b['layer']}.{b['head']}: {b['score']:.3f} | uniform attention: {b['chance']:.3f} |"
        f"\n| loss on the repeated half, those ids | {freq['repeat_loss']:.2f} | uniform guessing: "
        f"{report['uniform_loss']:.2f} |"
    )


def _copy_verdict(training: dict, report: dict) -> str:
    """One sentence, from the numbers, on whether the repeated windows did what they were mixed in for."""
    if not any(st.get("settings", {}).get("copy_fraction") for st in training_stages(training)):
        return ""
    grown = report["best_induction_head"]["score"] >= INDUCTION_BAR
    freq = report.get("frequent_ids_induction")
    grown_frequent = freq is not None and freq["best_induction_head"]["score"] >= INDUCTION_BAR
    if grown:
        return "\nThe repeated-sequence windows grew an induction head in this run.\n"
    if grown_frequent:
        return (
            f"\nThe repeated-sequence windows grew an induction head, but one that copies only the tokens it "
            f"practised on: on the {freq['ids']:,} most frequent training ids it scores "
            f"{freq['best_induction_head']['score']:.3f} (loss {freq['repeat_loss']:.2f} on the repeated half), "
            f"on random ids from all {report['data']['train_vocab']:,} training ids "
            f"{report['best_induction_head']['score']:.3f} (loss {report['repeat_loss']:.2f}), short of the bar. "
            "Rarer ids have embeddings too little trained for its matching to tell them apart.\n"
        )
    return (
        "\nThe repeated-sequence windows did not grow an induction head in this run: its best score is at "
        "the chance level's scale (`gptviz/bundled/README.md` has the probes).\n"
    )


def formation_card_section(folder: Path) -> str:
    """The card's account of the training snapshots beside a checkpoint (gptviz.training.snapshots), or "" without
    any."""
    from .formation import formation_section
    from .snapshots import FOLDER, load_snapshots

    if not (Path(folder) / FOLDER / "snapshots.json").is_file():
        return ""
    snaps = load_snapshots(folder)
    return (
        "## How the heads formed (stage 1 replayed, `snapshots/`)\n"
        "A rerun of stage 1's command with `--snapshot-every 25` recorded every head on fixed probes; the app's "
        "Heads forming page plays it.\n\n" + formation_section(snaps, snaps.extra.get("reproduction")) + "\n\n"
    )


def card_sections(folder: Path) -> str:
    """The card's sections read from files beside the checkpoint: how the heads formed, and why its twin was not
    trained alike (recipe_trials.card_section)."""
    from .recipe_trials import card_section

    return formation_card_section(folder) + card_section(folder)


def model_card(name: str, meta: dict, report: dict, formation: str = "") -> str:
    """Markdown model card: data, training, the measured bars beside their baselines and chance levels,
    a sample, the copy test and how to reproduce."""
    cfg, training = meta["config"], meta.get("training", {})
    settings, final = training.get("settings", {}), training.get("final", {})
    history = meta.get("history", [])
    passes = "\n".join(f"| {k.replace('_', ' ')} | {'yes' if v else 'NO'} |" for k, v in report["passes"].items())
    stages = training_stages(training)
    init = stage_init(stages[0]) if stages else "gpt2"
    recipe_notes = (
        "\nPost-norm's warmup in the first stage is longer than its pre-norm twin's: with the short warmup "
        "post-norm stalls at the unigram loss (`gptviz/bundled/README.md`)."
        if cfg["norm"] == "post" and init == "gpt2"
        else ""
    )
    if init == "xavier":
        recipe_notes += (
            "\nThe first stage starts from Xavier-uniform matrices (`--init xavier`), not GPT-2's normal(0, "
            "0.02): post-norm adds each sublayer's output to a residual its norms hold at unit scale, and at "
            "GPT-2's init those outputs are a few percent of it; from that init the copy-only stage grew no "
            "induction head in 1,500 steps, from Xavier's it grew one within 500 (`gptviz/bundled/README.md`)."
        )
    sep = " " if len(stages) == 1 else "\n\n"
    if len(stages) == 1:
        training_text = _stage_line(-1, settings, cfg["n_ctx"])
    else:
        training_text = f"{len(stages)} stages, each continuing from the last:\n\n" + "\n".join(
            f"- {_stage_line(i, st.get('settings', {}), cfg['n_ctx'])}" for i, st in enumerate(stages)
        )
    architecture = (
        f"A {cfg['n_layers']}-layer GPT ({cfg['norm']}-norm, d_model {cfg['d_model']}, {cfg['n_heads']} heads, "
        f"context {cfg['n_ctx']},"
    )
    dropout = _dropouts(stages, cfg["dropout"])
    head_history = _head_history(
        history,
        settings.get("batch_size", 0),
        settings.get("block_size") or cfg["n_ctx"],
        settings.get("corpus_vocab_steps", 0),
        len(stages),
    )
    return f"""# {name}

{architecture}
GPT-2 BPE vocabulary of {cfg["vocab_size"]:,}, tied head) trained from scratch on {_data_sentence(training, report)}.
Weights stored in float16; loaded as float32.

## Training
{training_text}{sep}Dropout {dropout}. The cheaper softmax over the training text's ids is there because the LM
head over all {cfg["vocab_size"]:,} ids is most of the cost of a model this small; every loss below uses the full
vocabulary.{recipe_notes}
Final train loss {final.get("train_loss", float("nan")):.3f}.{head_history}

## Measured by `python -m gptviz check {name}`
{_measures_table(report)}

| bar | cleared |
|---|---|
{passes}
{_copy_verdict(training, report)}
{formation}## Sample (prompt `{SAMPLE_PROMPT.strip()}` and a line break, temperature 0.8, top-k 50, seed 0)
```
{report["sample"]}
```

## Reproduce
```
{_train_commands(cfg, name, stages)}
python -m gptviz check gptviz/bundled/{name} --update-card
```
"""


def _train_commands(cfg: dict, name: str, stages: list[dict]) -> str:
    """The CLI commands that rebuild a checkpoint: one per training stage (a continued run starts from the last)."""
    lines = []
    preset = PRESETS.get(cfg.get("name", "small-4l"))
    n_ctx = f" --n-ctx {cfg['n_ctx']}" if preset is not None and preset.n_ctx != cfg["n_ctx"] else ""
    for i, stage in enumerate(stages):
        s = stage.get("settings", {})
        out = f"gptviz/bundled/{name}" if i == len(stages) - 1 else f"/tmp/{name}-stage{i + 1}"
        start = f" \\\n    --init-from /tmp/{name}-stage{i}" if i else ""
        if not i and stage_init(stage) != "gpt2":
            start = f" --init {stage['init']}"
        data = stage.get("data")
        data = f" --data data/{data}" if data and data != WORKS.name else ""
        copy = f" --copy-fraction {s['copy_fraction']}" if s.get("copy_fraction") else ""
        copy += f" --copy-vocab {s['copy_vocab']}" if copy and s.get("copy_vocab") else ""
        copy += " --copy-batch-softmax" if copy and s.get("copy_batch_softmax") else ""
        copy += f" --copy-any-share {s['copy_any_share']}" if copy and s.get("copy_any_share") else ""
        copy += f" --block-size {s['block_size']}" if s.get("block_size") else ""
        default = TrainSettings()
        copy += (
            f" --min-lr-ratio {s['min_lr_ratio']}"
            if s.get("min_lr_ratio", default.min_lr_ratio) != default.min_lr_ratio
            else ""
        )
        default_decay = default.weight_decay
        copy += f" --weight-decay {s['weight_decay']}" if s.get("weight_decay", default_decay) != default_decay else ""
        lines.append(
            f"python -m gptviz train --preset {cfg.get('name', 'small-4l')} --norm {cfg['norm']} "
            f"--steps {s.get('steps')} --batch-size {s.get('batch_size')} --lr {s.get('lr')} "
            f"--warmup {s.get('warmup')}{n_ctx}{data} \\\n    --seed {s.get('seed')} "
            f"--dropout {stage.get('dropout', cfg['dropout'])} "
            f"--corpus-vocab-steps {s.get('corpus_vocab_steps', 0)} --eval-every {s.get('eval_every', 100)}"
            f"{copy}{start} --out {out}"
        )
    return "\n".join(lines)


def check_folder(
    folder: str | Path, data: str | Path | None = None, out: str | Path | None = None, update_card: bool = False
) -> tuple[dict, Path]:
    """Measure the checkpoint in `folder`; write check.json and MODEL_CARD.md into `out` (default: a new
    temporary folder), or beside the checkpoint when `update_card`. Returns the report and where it went."""
    from ..model.weights import bundled_models, load_checkpoint

    folder = Path(folder)
    if not folder.is_dir() and str(folder) in bundled_models():
        folder = bundled_models()[str(folder)]
    meta = json.loads((folder / "config.json").read_text())
    history = folder / "history.json"
    if history.is_file():
        meta["history"] = json.loads(history.read_text()).get("history", [])
    model = load_checkpoint(folder)
    training = meta.get("training", {})
    corpus = (
        corpus_of(meta)
        if data is None
        else load_training_data(
            data,
            training.get("settings", {}).get("val_fraction", 0.1),
            tuple(training.get("held_out") or HELD_OUT_PLAYS),
        )
    )
    report = check_model(model, corpus)
    target = folder if update_card else Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="gptviz-check-"))
    target.mkdir(parents=True, exist_ok=True)
    (target / "check.json").write_text(json.dumps(report, indent=2))
    (target / "MODEL_CARD.md").write_text(model_card(folder.name, meta, report, card_sections(folder)))
    return report, target
