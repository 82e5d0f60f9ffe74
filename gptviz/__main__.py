"""Command line: `python -m gptviz params PRESET` and `python -m gptviz train ...`."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .config import PRESETS, ConfigError, get_preset


def _params(args) -> int:
    from .params import format_table
    print(format_table(get_preset(args.preset)))
    return 0


def config_and_settings(args):
    """The model config and TrainSettings a `train` command line describes."""
    from .train import TrainSettings
    cfg = get_preset(args.preset).replace(norm=args.norm, dropout=args.dropout)
    if args.n_ctx is not None:
        cfg = cfg.replace(n_ctx=args.n_ctx)
    settings = TrainSettings(steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup=args.warmup,
                             seed=args.seed, eval_every=args.eval_every,
                             corpus_vocab_steps=args.corpus_vocab_steps)
    return cfg, settings


def _train(args) -> int:
    import torch

    from .train import format_eta, load_corpus, train_models, write_history
    from .weights import save_checkpoint

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # dropout masks; the init and the batches have generators of their own
    cfg, settings = config_and_settings(args)
    start, parent = None, None
    if args.init_from:  # continue training a checkpoint of the same preset and wiring
        import json

        from .weights import load_checkpoint
        start_model = load_checkpoint(args.init_from)
        if start_model.config != cfg:
            raise ValueError(f"{args.init_from} holds a different model ({start_model.config.name}, "
                             f"{start_model.config.norm}-norm) than --preset {cfg.name} --norm {cfg.norm}")
        start = {"model": start_model.state_dict()}
        parent = json.loads((Path(args.init_from) / "config.json").read_text()).get("training")
    tokens = load_corpus(args.data)
    print(f"{len(tokens):,} tokens from {args.data}; {cfg.name} {args.norm}-norm on {args.device}", flush=True)
    started = time.perf_counter()

    def report(name, log):
        if log.val_loss is not None or log.step % 20 == 0:
            val = f" val {log.val_loss:.4f}" if log.val_loss is not None else ""
            print(f"step {log.step:5d}/{settings.steps} loss {log.train_loss:.4f}{val} lr {log.lr:.2e} "
                  f"|g| {log.grad_norm:.2f} eta {format_eta(log.step, settings.steps, time.perf_counter() - started)}",
                  flush=True)

    models, results = train_models({"model": cfg}, settings, tokens, device=args.device, on_step=report,
                                   start_states=start)
    out = Path(args.out)
    result = results["model"]
    save_checkpoint(models["model"], out, dtype=getattr(torch, args.save_dtype),
                    extra={"training": {"data": Path(args.data).name, "settings": result.settings,
                                        "final": result.final, "continued_from": parent}})
    write_history(result, out)
    print(f"saved {out} (final: {result.final})")
    return 0


def _check(args) -> int:
    from .evaluate import check_folder
    report = check_folder(args.folder, args.data)
    for key in ("val_loss", "bigram_baseline", "margin"):
        print(f"{key:<28}{report[key]:.4f}")
    print(f"{'best previous-token head':<28}{report['best_previous_token_head']}")
    print(f"{'best induction head':<28}{report['best_induction_head']}")
    print(f"{'speaker lines / newlines':<28}{report['sample_speaker_lines']} / {report['sample_newlines']}")
    for bar, ok in report["passes"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {bar}")
    print("\n" + report["sample"])
    return 0 if all(report["passes"].values()) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gptviz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("params", help="parameter counts by component")
    p.add_argument("preset", help=f"one of: {', '.join(PRESETS)}")
    p.set_defaults(func=_params)
    t = sub.add_parser("train", help="train a preset on a text corpus")
    from .train import CORPUS, TrainSettings
    d = TrainSettings()
    t.add_argument("--preset", default="small-4l")
    t.add_argument("--norm", choices=("pre", "post"), default="pre")
    t.add_argument("--data", default=str(CORPUS))
    t.add_argument("--steps", type=int, default=d.steps)
    t.add_argument("--batch-size", type=int, default=d.batch_size)
    t.add_argument("--lr", type=float, default=d.lr)
    t.add_argument("--warmup", type=int, default=d.warmup)
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--n-ctx", type=int, default=None, help="context length (default: the preset's)")
    t.add_argument("--eval-every", type=int, default=d.eval_every)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--corpus-vocab-steps", type=int, default=d.corpus_vocab_steps,
                   help="first N steps normalise the softmax over the corpus's ids only (much cheaper); "
                        "the rest use the full vocabulary")
    t.add_argument("--device", default="cpu")
    t.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    t.add_argument("--save-dtype", choices=("float32", "float16"), default="float16")
    t.add_argument("--init-from", default=None, help="continue from this checkpoint folder (same preset and norm)")
    t.add_argument("--out", required=True)
    t.set_defaults(func=_train)
    c = sub.add_parser("check", help="measure a trained checkpoint against the bundled-model bars; "
                                     "writes check.json and MODEL_CARD.md beside it")
    c.add_argument("folder", help="checkpoint folder, or a bundled model's name")
    c.add_argument("--data", default=None, help="corpus (default: the bundled Tiny Shakespeare)")
    c.set_defaults(func=_check)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
