"""Copy as Python for the views of a model or a run: Parameters, Train, Heads forming and the Explainers."""

from __future__ import annotations

from .core import MARK, config_line, script


def parameters(view: str, cfg) -> str:
    """The Parameters page's breakdown of one configuration: the counts by group and their shares (by component:
    the finer split)."""
    return (
        f"{MARK}{view}, reproduced\nfrom gptviz import GPTConfig, PRESETS, param_table\n"
        "from gptviz.model.params import by_component, by_group\n"
        f"{config_line(cfg)}\ntable = param_table(config)\n"
        "result = by_group(table)   # count and share by group: embeddings, attention, MLP, norms, LM head\n"
        "print(result[['group', 'count', 'share']].to_string(index=False))\n"
        "print(by_component(table)[['component', 'count', 'share']].to_string(index=False))   # the finer split\n"
    )


def parameters_of_presets(names: list[str]) -> str:
    """The Parameters page's presets side by side: each one's counts by group."""
    return (
        f"{MARK}the Parameters page's presets, reproduced\nfrom gptviz import PRESETS, param_table\n"
        "from gptviz.figures.params import group_counts\n"
        f"result = {{name: group_counts(param_table(PRESETS[name])) for name in {list(names)!r}}}\n"
    )


def heads_forming(detector: str, step: int, twins: dict[str, str]) -> str:
    """Heads forming: each twin's `detector` scores for every head at the snapshot the step slider shows, its
    training loss there, and the step its head of that kind formed."""
    return script(
        "Heads forming",
        "import numpy as np",
        "from gptviz.model.weights import bundled_models",
        "from gptviz.training.snapshots import formed_step, load_snapshots",
        f"detector, step = {detector!r}, {step}",
        "result = {}",
        f"for wiring, name in {twins!r}.items():",
        "    snaps = load_snapshots(bundled_models()[name])",
        "    i = max(0, int(np.searchsorted(snaps.steps, step, side='right')) - 1)   # the last snapshot at or before",
        "    scores = snaps.score_array()[i, snaps.detector_index(detector)]          # [layers, heads]",
        "    result[wiring] = {'snapshot step': snaps.steps[i], 'scores': scores, 'loss': snaps.train_loss[i],",
        "                      'formed (step, layer, head)': formed_step(snaps, detector)}",
    )


def training(configs: dict, settings, init: str) -> str:
    """Train a model: the same run in a script, on the same batches (the losses match step for step)."""
    lines = ",\n".join(f"    {name!r}: {cfg!r}" for name, cfg in configs.items())
    return script(
        "the Train page's run",
        "from gptviz import GPTConfig",
        "from gptviz.training.train import TrainSettings, load_corpus, train_models",
        f"configs = {{\n{lines},\n}}",
        f"settings = {settings!r}",
        f"models, results = train_models(configs, settings, load_corpus(), init={init!r})",
        "result = {name: [step['train_loss'] for step in r.history] for name, r in results.items()}",
    )


def explainers(lo: float, hi: float, mask_n: int) -> str:
    """The Explainers: the model's own activation functions and their derivatives on the range, and its causal mask."""
    return script(
        "the Explainers",
        "import torch",
        "from gptviz.methods import activation_curves, causal_mask",
        f"x = torch.linspace({lo!r}, {hi!r}, 801, dtype=torch.float64)",
        "result = {",
        "    'activations': activation_curves(x),     # {name: (f(x), f'(x))}, by the model's own activate()",
        f"    'causal mask': causal_mask({mask_n}),          # True where a query may look at a key",
        "}",
    )


def grow(wirings: tuple[str, ...], seed: int, growth: dict) -> str:
    """Heads forming, grow one yourself: the same run in a script (it takes as long here as on the server), its
    snapshots' induction scores and the step the head formed."""
    args = ", ".join(f"{k}={v!r}" for k, v in growth.items())
    return script(
        "Heads forming, grow one yourself",
        "from gptviz.serve.training_jobs import Job, induction_growth_spec",
        "from gptviz.training.snapshots import formed_step",
        f"job = Job('grow', induction_growth_spec({tuple(wirings)!r}, seed={seed}, {args}))",
        "job.run()                                              # trains in this process, snapshots as it goes",
        "result = {f'{name}-norm': (snaps, formed_step(snaps, 'induction')) for name, snaps in job.snapshots.items()}",
    )
