"""Command line (`gptviz ...` when installed, `python -m gptviz ...` in a checkout): app, params, train, check,
index, notebook-html, graph, qk."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .model.config import PRESETS, ConfigError, get_preset

# The settings the checkout's .streamlit/config.toml gives `streamlit run app.py`, for `gptviz app` run from any
# folder: no usage statistics from visitors' browsers, and exceptions shown by type only (no server paths).
APP_DEFAULT_FLAGS = {
    "--browser.gatherUsageStats": "false",
    "--client.showErrorDetails": "type",
    "--client.toolbarMode": "viewer",
    "--global.disableWidgetStateDuplicationWarning": "true",
    "--global.minCachedMessageSize": "1000000000000000",  # no message cache: config.toml says why
    "--server.maxMessageSize": "100",
    "--runner.postScriptGC": "false",
    "--runner.magicEnabled": "false",
}


def app_command(flags: list[str]) -> list[str]:
    """The `streamlit run` command line `gptviz app FLAGS` runs; the caller's flags win over the defaults."""
    from .app.router import PAGES_DIR

    given = {flag.split("=", 1)[0] for flag in flags if flag.startswith("--")}
    defaults = [f"{k}={v}" for k, v in APP_DEFAULT_FLAGS.items() if k not in given]
    return [sys.executable, "-m", "streamlit", "run", str(PAGES_DIR / "entry.py"), *defaults, *flags]


def _app(args) -> int:
    command = app_command(args.streamlit_flags)
    if os.name == "posix":  # become the server, so a signal sent to `gptviz app` reaches Streamlit itself
        os.execv(command[0], command)
    import subprocess

    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130


def _params(args) -> int:
    from .model.params import format_table

    print(format_table(get_preset(args.preset)))
    return 0


def config_and_settings(args):
    """The model config and TrainSettings a `train` command line describes."""
    from .training.train import TrainSettings

    cfg = get_preset(args.preset).replace(norm=args.norm, dropout=args.dropout)
    if args.n_ctx is not None:
        cfg = cfg.replace(n_ctx=args.n_ctx)
    settings = TrainSettings(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup=args.warmup,
        weight_decay=args.weight_decay,
        min_lr_ratio=args.min_lr_ratio,
        seed=args.seed,
        eval_every=args.eval_every,
        corpus_vocab_steps=args.corpus_vocab_steps,
        copy_fraction=args.copy_fraction,
        copy_vocab=args.copy_vocab,
        block_size=args.block_size,
        copy_batch_softmax=args.copy_batch_softmax,
        copy_any_share=args.copy_any_share,
    )
    return cfg, settings


def _train(args) -> int:
    import torch

    from .model.weights import save_checkpoint, write_training_vocab
    from .training.corpus import load_training_data
    from .training.evaluate import training_measure
    from .training.train import format_eta, train_models, write_history

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)  # dropout masks; the init and the batches have generators of their own
    cfg, settings = config_and_settings(args)
    start, parent = None, None
    if args.init_from:  # continue training a checkpoint of the same preset and wiring
        import json

        from .model.weights import load_checkpoint

        start_model = load_checkpoint(args.init_from)
        if start_model.config.replace(dropout=cfg.dropout) != cfg:  # dropout may change between stages
            raise ValueError(
                f"{args.init_from} holds a different model ({start_model.config.name}, "
                f"{start_model.config.norm}-norm) than --preset {cfg.name} --norm {cfg.norm}"
            )
        start = {"model": start_model.state_dict()}
        parent = json.loads((Path(args.init_from) / "config.json").read_text()).get("training")
    corpus = load_training_data(args.data, settings.val_fraction, tuple(args.held_out.split(",")))
    print(
        f"{len(corpus.train):,} training and {len(corpus.val):,} held-out tokens from {corpus.source}; "
        f"{cfg.name} {args.norm}-norm on {args.device}",
        flush=True,
    )
    started = time.perf_counter()
    out = Path(args.out)
    recorders = snapshot_recorders(args, cfg, corpus, settings)

    def report(name, log):
        if recorders and log.step % 100 == 0:  # partial snapshots on disk while the run goes
            from .training.snapshots import save_snapshots

            save_snapshots(recorders["model"].snaps, out)
        if log.val_loss is not None or log.step % 20 == 0:
            val = f" val {log.val_loss:.4f}" if log.val_loss is not None else ""
            if log.induction is not None:
                val += f" prev {log.prev_token:.3f} ind {log.induction:.3f} rep {log.repeat_loss:.2f}"
            print(
                f"step {log.step:5d}/{settings.steps} loss {log.train_loss:.4f}{val} lr {log.lr:.2e} "
                f"|g| {log.grad_norm:.2f} eta {format_eta(log.step, settings.steps, time.perf_counter() - started)}",
                flush=True,
            )

    models, results = train_models(
        {"model": cfg},
        settings,
        corpus,
        device=args.device,
        on_step=report,
        start_states=start,
        measure=training_measure,
        init=args.init,
        recorders=recorders,
    )
    result = results["model"]
    save_checkpoint(
        models["model"],
        out,
        dtype=getattr(torch, args.save_dtype),
        extra={
            "training": {
                "data": corpus.source,
                "held_out": list(corpus.val_parts),
                "dropout": cfg.dropout,
                **({"init": args.init} if not args.init_from else {}),
                "settings": result.settings,
                "final": result.final,
                "continued_from": parent,
            }
        },
    )
    write_history(result, out)
    write_training_vocab(out, corpus.train)
    if recorders:
        from .training.snapshots import save_snapshots

        snaps = recorders["model"].snaps
        snaps.extra = {"command": "python -m gptviz " + " ".join(sys.argv[1:]), "settings": result.settings}
        save_snapshots(snaps, out)
        print(f"{len(snaps)} snapshots; recording took {snaps.share_recording():.1%} of the training time")
    print(f"saved {out} (final: {result.final})")
    return 0


def snapshot_recorders(args, cfg, corpus, settings) -> dict | None:
    """{"model": SnapshotRecorder} when --snapshot-every is set: probes of the copy ids the run uses, if any."""
    if not args.snapshot_every:
        return None
    from .training.snapshots import SnapshotRecorder, default_probes, empty_snapshots
    from .training.train import most_frequent_ids

    copy_ids = most_frequent_ids(corpus.train, settings.copy_vocab) if settings.copy_fraction else None
    probes = default_probes(corpus.train, corpus.val, copy_ids)
    snaps = empty_snapshots(cfg, probes, args.snapshot_every, args.snapshot_min_gap, args.snapshot_loss_delta)
    return {"model": SnapshotRecorder(snaps, corpus.val, settings.block_size or cfg.n_ctx)}


def _check(args) -> int:
    from .training.model_card import check_folder

    report, target = check_folder(args.folder, args.data, args.out, args.update_card)
    for key in ("val_loss", "bigram_baseline", "margin", "repeat_loss"):
        print(f"{key:<28}{report[key]:.4f}")
    print(f"{'best previous-token head':<28}{report['best_previous_token_head']}")
    print(f"{'best induction head':<28}{report['best_induction_head']}")
    print(f"{'speaker lines / newlines':<28}{report['sample_speaker_lines']} / {report['sample_newlines']}")
    for bar, ok in report["passes"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {bar}")
    print("\n" + report["sample"])
    print(f"\nwrote check.json and MODEL_CARD.md to {target}")
    return 0 if all(report["passes"].values()) else 1


def _notebook_html(args) -> int:
    from .notebook.html_export import export_html

    if not args.notebook.is_file():
        raise FileNotFoundError(f"no notebook at {args.notebook}")
    print(export_html(args.notebook, args.out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gptviz", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("app", help="start the web app (Streamlit's own flags pass through, e.g. --server.port 8600)")
    a.add_argument("streamlit_flags", nargs="*", help="passed to `streamlit run` as they are")
    a.set_defaults(func=_app)
    p = sub.add_parser("params", help="parameter counts by component")
    p.add_argument("preset", help=f"one of: {', '.join(PRESETS)}")
    p.set_defaults(func=_params)
    t = sub.add_parser("train", help="train a preset on a text corpus")
    from .training.corpus import HELD_OUT_PLAYS, WORKS
    from .training.train import TrainSettings

    d = TrainSettings()

    def setting(flag: str, help: str | None = None) -> None:
        """An option whose default is TrainSettings' field of the same name, of that default's type."""
        default = getattr(d, flag.removeprefix("--").replace("-", "_"))
        t.add_argument(flag, type=type(default), default=default, help=help)

    t.add_argument("--preset", default="small-4l")
    t.add_argument("--norm", choices=("pre", "post"), default="pre")
    t.add_argument(
        "--data",
        default=str(WORKS),
        help="a folder of plays (whole plays held out) or one text file (its last 10%% held out)",
    )
    t.add_argument(
        "--held-out", default=",".join(HELD_OUT_PLAYS), help="comma-separated plays to hold out when --data is a folder"
    )
    setting("--copy-fraction", help="share of each batch made of random training ids followed by their exact repeats")
    t.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="training windows this long (default: the context length); a shorter stage first is a curriculum",
    )
    setting("--copy-vocab", help="draw the repeated sequences from this many most frequent training ids (0 = all)")
    setting(
        "--copy-any-share",
        help="share of the repeated sequences drawn from every training id instead of the --copy-vocab most frequent",
    )
    t.add_argument(
        "--copy-batch-softmax",
        action="store_true",
        help="repeated rows normalise their softmax over the ids the batch's repeated rows contain "
        "(while --corpus-vocab-steps run), not over every copy id",
    )
    setting("--steps")
    setting("--batch-size")
    setting("--lr")
    setting("--warmup")
    setting("--min-lr-ratio", help="the cosine decays to lr times this at the last step (1 = constant after warmup)")
    setting("--weight-decay", help="AdamW's, on matrices only")
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--n-ctx", type=int, default=None, help="context length (default: the preset's)")
    setting("--eval-every")
    setting("--seed")
    setting(
        "--corpus-vocab-steps",
        help="first N steps normalise the softmax over the corpus's ids only (much cheaper); "
        "the rest use the full vocabulary",
    )
    t.add_argument("--device", default="cpu")
    t.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    t.add_argument("--save-dtype", choices=("float32", "float16"), default="float16")
    t.add_argument(
        "--init",
        choices=("gpt2", "xavier"),
        default="gpt2",
        help="the random init (ignored with --init-from): GPT-2's normal(0, 0.02), or Xavier-uniform "
        "matrices, whose larger sublayer outputs are not drowned by post-norm's unit-scale residual",
    )
    t.add_argument("--init-from", default=None, help="continue from this checkpoint folder (same preset and norm)")
    t.add_argument(
        "--snapshot-every",
        type=int,
        default=0,
        help="record every head's detector scores and maps on fixed probes every K steps, denser where "
        "the loss moves fast (gptviz.training.snapshots; written to OUT/snapshots; 0 = none)",
    )
    t.add_argument(
        "--snapshot-loss-delta",
        type=float,
        default=0.15,
        help="also snapshot when the smoothed loss has moved this many nats since the last snapshot",
    )
    t.add_argument("--snapshot-min-gap", type=int, default=5, help="steps between such extra snapshots, at least")
    t.add_argument("--out", required=True)
    t.set_defaults(func=_train)
    c = sub.add_parser(
        "check",
        help="measure a trained checkpoint against the bundled-model bars; "
        "writes check.json and MODEL_CARD.md (see --out, --update-card)",
    )
    c.add_argument("folder", help="checkpoint folder, or a bundled model's name")
    c.add_argument("--data", default=None, help="text to measure on (default: what the checkpoint was trained on)")
    c.add_argument("--out", default=None, help="folder for check.json and MODEL_CARD.md (default: a new temporary one)")
    c.add_argument(
        "--update-card", action="store_true", help="write check.json and MODEL_CARD.md beside the checkpoint instead"
    )
    c.set_defaults(func=_check)
    from .index import cli as index_cli

    _command(
        sub,
        "index",
        "scan a corpus for every neuron's and head's top activations (gptviz.index); "
        "writes index.json and index.npz. `index merge OUT PART...` combines shards; "
        "`index export MODEL --out FOLDER` writes every unit for a dashboard tool",
        index_cli.add_arguments,
        index_cli.run,
    )
    _command(
        sub,
        "index-merge",
        "combine the partial indexes of `index --shard I/N` (also spelled `index merge OUT PART...`)",
        index_cli.add_merge_arguments,
        index_cli.run_merge,
    )
    _command(
        sub,
        "index-export",
        "every unit of an index in Neuronpedia's feature-dashboard shape "
        "(SAEDashboard's batch-N.json files; also spelled `index export ...`)",
        index_cli.add_export_arguments,
        index_cli.run_export,
    )
    n = sub.add_parser(
        "notebook-html",
        help="export a notebook as HTML whose widgets draw offline (gptviz's views, "
        "Plotly figures; needs the notebook extra, pip install '.[notebook]' "
        "from a checkout, and its saved widget state)",
    )
    n.add_argument("notebook", type=Path)
    n.add_argument("out", type=Path, nargs="?", help="the HTML file (default: the notebook's name with .html)")
    n.set_defaults(func=_notebook_html)
    from .methods import graph_export

    _command(
        sub,
        "graph",
        "the attribution graph of one token (issue 58's gptviz-graph/1 JSON): influence "
        "of every head, neuron and embedding, edges, the ablation check",
        graph_export.add_graph_arguments,
        graph_export.run_graph,
    )
    _command(
        sub,
        "qk",
        "one attention score split into query-source x key-source terms (gptviz-qk/1 JSON)",
        graph_export.add_qk_arguments,
        graph_export.run_qk,
    )
    return parser


def _command(sub, name: str, help: str, add_arguments, run) -> None:
    """A subcommand whose options and run live in its own module: `add_arguments(parser)`, then `run(args)`."""
    parser = sub.add_parser(name, help=help)
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["app"] and argv[1:2] not in (["-h"], ["--help"]):  # argparse would take Streamlit's flags
        return _app(argparse.Namespace(streamlit_flags=argv[1:]))
    if argv[:2] in (["index", "merge"], ["index", "export"]):  # `index merge OUT PART...`, `index export MODEL`: a
        argv = [f"index-{argv[1]}", *argv[2:]]  # model named "merge" or "export" is not supported
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ConfigError, ValueError, OSError) as err:  # OSError: a path that cannot be read or written, as it says
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
