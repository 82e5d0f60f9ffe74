"""The bars a trained model must clear, measured: validation loss against a bigram baseline on the same split,
previous-token and induction heads, and a sample that should read like a play script. Writes the model card."""
from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from .config import PRESETS
from .analysis import bigram_baseline, head_ranking, induction_scores, previous_token_scores
from .generate import generate
from .hooks import capture
from .model import GPT
from .tokenizer import get_tokenizer
from .train import lm_loss, split

SPEAKER_LINE = re.compile(r"^[A-Z][A-Za-z']+(?: [A-Z][A-Za-z']+)*:$", re.M)  # "ROMEO:", "First Citizen:"
SAMPLE_PROMPT = "ROMEO:\n"
MARGIN_NATS = 0.2  # "by a clear margin": at least this far below the bigram baseline


@torch.no_grad()
def validation_loss(model: GPT, val: torch.Tensor, batch: int = 16) -> float:
    """Mean next-token loss over every non-overlapping n_ctx window of the validation tokens."""
    model.eval()
    block = model.config.n_ctx
    n = (len(val) - 1) // block
    x = val[: n * block].view(n, block)
    y = val[1: n * block + 1].view(n, block)
    total = 0.0
    for i in range(0, n, batch):
        total += float(lm_loss(model, x[i:i + batch], y[i:i + batch])) * len(x[i:i + batch])
    return total / n


@torch.no_grad()
def previous_token_on_text(model: GPT, tokens: torch.Tensor, windows: int = 8) -> torch.Tensor:
    """[layers, heads] previous-token scores averaged over evenly spaced windows of real text."""
    block = model.config.n_ctx
    starts = torch.linspace(0, len(tokens) - block - 1, windows).long()
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.config.n_layers)]
    scores = []
    for s in starts:
        _, cache = capture(model, tokens[s:s + block][None], names)
        scores.append(previous_token_scores(cache.patterns()[:, 0]))
    return torch.stack(scores).mean(0)


def check_model(model: GPT, tokens: torch.Tensor, val_fraction: float = 0.1, seed: int = 0,
                sample_tokens: int = 200) -> dict:
    """Every bar of the bundled-model issue, measured on this model."""
    train, val = split(tokens, val_fraction)
    baseline = bigram_baseline(train, val, model.config.vocab_size)
    val_loss = validation_loss(model, val)
    prev = previous_token_on_text(model, val)
    induction = induction_scores(model, seed=seed)
    enc = get_tokenizer()
    ids = generate(model, enc.encode(SAMPLE_PROMPT), sample_tokens, temperature=0.8, top_k=50, seed=seed)
    sample = enc.decode(ids)
    speakers = SPEAKER_LINE.findall(sample)
    best_prev, best_ind = head_ranking(prev, 1)[0], head_ranking(induction, 1)[0]
    return {
        "val_loss": val_loss, "bigram_baseline": baseline["nats"], "bigram_lambda": baseline["lambda"],
        "unigram_baseline": baseline["unigram_nats"], "margin": baseline["nats"] - val_loss,
        "best_previous_token_head": {"layer": best_prev[0], "head": best_prev[1], "score": best_prev[2]},
        "best_induction_head": {"layer": best_ind[0], "head": best_ind[1], "score": best_ind[2]},
        "sample": sample, "sample_speaker_lines": len(speakers), "sample_newlines": sample.count("\n"),
        "passes": {
            "val_loss_below_bigram_by_margin": baseline["nats"] - val_loss >= MARGIN_NATS,
            "previous_token_head_at_least_0.5": best_prev[2] >= 0.5,
            "sample_reads_like_a_play": len(speakers) >= 2 and sample.count("\n") >= 4,
        },
    }


def model_card(name: str, meta: dict, report: dict) -> str:
    """Markdown model card: config, training, measured bars, sample, how to reproduce."""
    cfg, training = meta["config"], meta.get("training", {})
    settings, final = training.get("settings", {}), training.get("final", {})
    passes = "\n".join(f"| {k.replace('_', ' ')} | {'yes' if v else 'NO'} |" for k, v in report["passes"].items())
    bp, bi = report["best_previous_token_head"], report["best_induction_head"]
    parent = training.get("continued_from")
    stages = [parent, training] if parent else [training]
    return f"""# {name}

A {cfg['n_layers']}-layer GPT ({cfg['norm']}-norm, d_model {cfg['d_model']}, {cfg['n_heads']} heads, context {cfg['n_ctx']},
GPT-2 BPE vocabulary of {cfg['vocab_size']:,}, tied head) trained from scratch on Tiny Shakespeare
(`data/tinyshakespeare.txt`, public domain). Weights stored in float16; loaded as float32.

## Training
{settings.get('steps')} steps of AdamW (lr {settings.get('lr')}, warmup {settings.get('warmup')}, cosine to
{settings.get('min_lr_ratio')}x, weight decay {settings.get('weight_decay')}, clip {settings.get('grad_clip')}), batch
{settings.get('batch_size')} x {cfg['n_ctx']} tokens, dropout {cfg['dropout']}, seed {settings.get('seed')}, on the first 90% of the
corpus; the last 10% validates. The first {settings.get('corpus_vocab_steps', 0)} steps normalise the softmax over the ids the
training split uses (about 11,000; the LM head over all 50,257 ids is most of the cost of a model this small), the rest over the
full vocabulary; every validation loss here uses the full vocabulary. Final train loss {final.get('train_loss', float('nan')):.3f}, validation loss (training's
sampled windows) {final.get('val_loss') or float('nan'):.3f}. Curves: `history.csv`, `history.json`.

## Measured by `python -m gptviz check {name}`
| measure | value |
|---|---|
| validation loss, all non-overlapping windows (nats/token) | {report['val_loss']:.3f} |
| interpolated bigram/unigram baseline, same split | {report['bigram_baseline']:.3f} (lambda {report['bigram_lambda']}) |
| unigram baseline | {report['unigram_baseline']:.3f} |
| margin below the bigram baseline | {report['margin']:.3f} |
| best previous-token head (layer.head, score on validation text) | {bp['layer']}.{bp['head']}: {bp['score']:.3f} |
| best induction head (repeated random tokens) | {bi['layer']}.{bi['head']}: {bi['score']:.3f} |
| speaker lines / line breaks in the sample | {report['sample_speaker_lines']} / {report['sample_newlines']} |

| bar | cleared |
|---|---|
{passes}

## Sample (prompt `ROMEO:\\n`, temperature 0.8, top-k 50, seed 0)
```
{report['sample']}
```

## Reproduce
```
{_train_commands(cfg, name, stages)}
python -m gptviz check gptviz/models/{name}
```
"""


def _train_commands(cfg: dict, name: str, stages: list[dict]) -> str:
    """The CLI commands that rebuild a checkpoint: one per training stage (a continued run starts from the last)."""
    lines = []
    preset = PRESETS.get(cfg.get("name", "small-4l"))
    n_ctx = f" --n-ctx {cfg['n_ctx']}" if preset is not None and preset.n_ctx != cfg["n_ctx"] else ""
    for i, stage in enumerate(stages):
        s = stage.get("settings", {})
        out = f"gptviz/models/{name}" if i == len(stages) - 1 else f"/tmp/{name}-stage{i + 1}"
        start = f" \\\n    --init-from /tmp/{name}-stage{i}" if i else ""
        lines.append(f"python -m gptviz train --preset {cfg.get('name', 'small-4l')} --norm {cfg['norm']} "
                     f"--steps {s.get('steps')} --batch-size {s.get('batch_size')} --lr {s.get('lr')} "
                     f"--warmup {s.get('warmup')}{n_ctx} \\\n    --seed {s.get('seed')} --dropout {cfg['dropout']} "
                     f"--corpus-vocab-steps {s.get('corpus_vocab_steps', 0)} --eval-every {s.get('eval_every', 100)}"
                     f"{start} --out {out}")
    return "\n".join(lines)


def check_folder(folder: str | Path, corpus: str | Path | None = None, write: bool = True) -> dict:
    """Measure the checkpoint in `folder` and (re)write its check.json and MODEL_CARD.md."""
    from .train import CORPUS, load_corpus
    from .weights import bundled_models, load_checkpoint
    folder = Path(folder)
    if not folder.is_dir() and str(folder) in bundled_models():
        folder = bundled_models()[str(folder)]
    meta = json.loads((folder / "config.json").read_text())
    model = load_checkpoint(folder)
    val_fraction = meta.get("training", {}).get("settings", {}).get("val_fraction", 0.1)
    report = check_model(model, load_corpus(corpus or CORPUS), val_fraction)
    if write:
        (folder / "check.json").write_text(json.dumps(report, indent=2))
        (folder / "MODEL_CARD.md").write_text(model_card(folder.name, meta, report))
    return report
