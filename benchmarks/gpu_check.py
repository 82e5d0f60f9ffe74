"""One prepared GPU check: the library on a CUDA device against the float32 CPU reference, in a few minutes.

    python -m benchmarks gpu                  # on a machine with CUDA (exits 0 with a note when there is none)
    python -m benchmarks gpu -- --device cpu --skip-gpt2   # the same code on the CPU: a dry run (~1 min)

What it checks, for the bundled model (`shakespeare-pre`) and a random GPT-2 small preset, in float32, float16
and bfloat16 on the device:
- gptviz.model.devices: the device and precisions `available_devices` / `available_dtypes` offer, and `place`;
- logits against the float32 CPU model on the same weights: max abs difference (also relative to the reference's
  largest logit) and top-1 agreement (all positions, and the positions whose reference margin between its top
  two logits exceeds the difference, where a disagreement cannot be rounding);
- `capture`: every hook point comes back float32, on the CPU, detached, with the design's shapes; patterns are
  distributions and match the reference's;
- `generate` and `stream(attention=True)` (bundled model): the same greedy tokens as the float32 CPU model, one
  forward pass per token (`benchmarks/forward_passes.py`), float32 CPU probabilities and attention rows; in half
  precision a first difference is accepted only at a near-tie of the reference;
- the neuron index (`gptviz.index.build_index`, as `python -m gptviz index --device cuda --dtype ...` runs it) over
  the start of the complete works: active shares and top-20 examples against the float32 CPU scan;
- training on the device (`gptviz.training.train.Trainer.step`, and the `train_models` loop): three steps on one
  repeated batch with finite losses and gradient norms, losses that follow the CPU's from the same weights (relative
  difference under 1e-2) and fall; two tiny models trained side by side by `train_models` on the device.

Prints a compact table and writes JSON to $OUT/gpu_check.json when OUT is set, and to --out when given (both when
both are). Exit status 0 when every check passed (or there is no GPU), 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

from benchmarks.forward_passes import forward_count
from gptviz import GPT, PRESETS, capture, generate, get_tokenizer, load_pretrained, stream
from gptviz.model.devices import available_devices, available_dtypes, place
from gptviz.training.train import Trainer, TrainSettings, train_models

ROOT = Path(__file__).resolve().parents[1]

PROMPT = (
    "Ham.\nWho's there?\n\nHor.\nFriends to this ground, and liegemen to the Dane.\n\nMar.\n"
    "And what art thou?\n\nHam.\nA piece of him.\n"
)
# Largest logit difference allowed, as a share of the reference's largest |logit| (the bundled model's span
# about +-16; tests/model/test_devices.py allows 0.3 for bfloat16 and 0.05 for float16 there, on the CPU).
LOGIT_TOL = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 2.5e-2}
PATTERN_TOL = {"float32": 1e-4, "float16": 0.01, "bfloat16": 0.03}  # attention weights, absolute
# Share of all positions whose top-1 agrees (a random model's logits are near-ties everywhere, so the test that
# matters is at the decisive positions, which must all agree).
TOP1_MIN = {"float32": 1.0, "float16": 0.9, "bfloat16": 0.8}
# Training: the device's losses over three steps against the CPU's, relative (Adam's first steps follow the
# gradients' signs, so a rounding difference in a near-zero gradient moves a weight by the whole step).
TRAIN_TOL = 1e-2


class Checks:
    def __init__(self):
        self.rows: list[dict] = []

    def run(self, name: str, model: str, dtype: str, fn, *args) -> None:
        """Run one check; it returns (ok, {metric: value}); an exception is a failed check with its message."""
        started = time.perf_counter()
        try:
            ok, metrics = fn(*args)
            error = None
        except Exception as err:  # a check that raises fails, and the others still run
            ok, metrics, error = False, {}, f"{type(err).__name__}: {err}"
            traceback.print_exc()
        row = {
            "check": name,
            "model": model,
            "dtype": dtype,
            "ok": bool(ok),
            "metrics": metrics,
            "seconds": round(time.perf_counter() - started, 3),
        }
        if error:
            row["error"] = error
        self.rows.append(row)
        print(f"  {'ok  ' if ok else 'FAIL'} {name:<9} {model:<16} {dtype:<9} {_brief(metrics, error)}", flush=True)


def _brief(metrics: dict, error: str | None) -> str:
    if error:
        return error[:150]
    parts = []
    for key, value in metrics.items():
        if isinstance(value, float):
            parts.append(f"{key}={value:.3g}")
        elif isinstance(value, (bool, int, str)) or value is None:
            parts.append(f"{key}={value}")
    return " ".join(parts)[:180]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def check_devices(device: str) -> tuple[bool, dict]:
    devices = available_devices()
    dtypes = available_dtypes(device)
    expected = ["float32"]
    if device == "cuda":
        expected = ["float32", "float16"] + (["bfloat16"] if torch.cuda.is_bf16_supported() else [])
    model = place(GPT(PRESETS["tiny"], seed=0), device, dtypes[-1])
    placed = model.wte.weight.device.type == device and str(model.wte.weight.dtype) == f"torch.{dtypes[-1]}"
    refused = False
    try:
        place(GPT(PRESETS["tiny"], seed=0), "tpu")
    except ValueError as err:
        refused = "not available here" in str(err)
    metrics = {
        "available_devices": ",".join(devices),
        "available_dtypes": ",".join(dtypes),
        "place": placed,
        "unknown_device_refused": refused,
    }
    if device == "cuda":
        metrics["gpu"] = torch.cuda.get_device_name(0)
        metrics["bf16_supported"] = torch.cuda.is_bf16_supported()
        metrics["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    return device in devices and dtypes == expected and placed and refused, metrics


def check_logits(ref: GPT, model: GPT, ids: torch.Tensor, dtype: str, device: str) -> tuple[bool, dict]:
    with torch.no_grad():
        expected = ref(ids)[0]
        model(ids.to(device))  # warm-up (kernel selection), then the timed pass
        sync(device)
        started = time.perf_counter()
        got = model(ids.to(device))
        sync(device)
        ms = (time.perf_counter() - started) * 1e3
    out_dtype = str(got.dtype).removeprefix("torch.")
    got = got[0].float().cpu()
    diff = (got - expected).abs()
    scale = expected.abs().max().item()
    top2 = expected.topk(2, dim=-1).values
    decisive = (top2[:, 0] - top2[:, 1]) > 2 * diff.max(dim=-1).values  # rounding cannot swap these positions
    agree = got.argmax(-1) == expected.argmax(-1)
    metrics = {
        "max_abs_diff": diff.max().item(),
        "rel_diff": diff.max().item() / scale,
        "ref_max_logit": scale,
        "top1_agree": agree.float().mean().item(),
        "decisive_positions": int(decisive.sum()),
        "decisive_agree": agree[decisive].float().mean().item() if decisive.any() else 1.0,
        "finite": bool(torch.isfinite(got).all()),
        "forward_ms": ms,
        "out_dtype": out_dtype,
    }
    ok = (
        metrics["finite"]
        and metrics["rel_diff"] <= LOGIT_TOL[dtype]
        and metrics["decisive_agree"] == 1.0
        and metrics["top1_agree"] >= TOP1_MIN[dtype]
    )
    return ok, metrics


def check_capture(ref: GPT, model: GPT, ids: torch.Tensor, dtype: str, device: str) -> tuple[bool, dict]:
    cfg = model.config
    T = ids.shape[1]
    d_head = cfg.d_model // cfg.n_heads
    logits, cache = capture(model, ids.to(device))
    _, ref_cache = capture(ref, ids, lambda n: n.endswith("attn.hook_pattern"))
    wrong_kind = [
        n
        for n, v in cache.items()
        if v.dtype != torch.float32 or v.device.type != "cpu" or v.requires_grad or v.grad_fn is not None
    ]
    expected_shape = {}
    for name in cache:
        if name.endswith(("hook_attn_scores", "hook_pattern")):
            expected_shape[name] = (1, cfg.n_heads, T, T)
        elif name.endswith(("hook_q", "hook_k", "hook_v", "hook_z")):
            expected_shape[name] = (1, T, cfg.n_heads, d_head)
        elif name.endswith(("mlp.hook_pre", "mlp.hook_post")):
            expected_shape[name] = (1, T, cfg.d_ff)
        elif name == "hook_logits":
            expected_shape[name] = (1, T, cfg.vocab_size)
        else:  # embeddings, residual stream, norms' outputs, sub-layer outputs
            expected_shape[name] = (1, T, cfg.d_model)
    wrong_shape = [n for n, v in cache.items() if tuple(v.shape) != expected_shape[n]]
    patterns = [n for n in cache if n.endswith("attn.hook_pattern")]
    row_sums = torch.stack([cache[n].sum(-1) for n in patterns])
    pattern_diff = max((cache[n] - ref_cache[n]).abs().max().item() for n in patterns)
    metrics = {
        "hooks": len(cache),
        "wrong_dtype_device_or_attached": len(wrong_kind),
        "wrong_shape": len(wrong_shape),
        "pattern_row_sum_err": (row_sums - 1).abs().max().item(),
        "pattern_max_diff": pattern_diff,
        "logits_on": logits.device.type,
    }
    if wrong_kind or wrong_shape:
        metrics["examples"] = (wrong_kind + wrong_shape)[:4]
    ok = (
        not wrong_kind
        and not wrong_shape
        and len(patterns) == cfg.n_layers
        and len(cache) == len(model.hook_names)
        and metrics["pattern_row_sum_err"] < 1e-2
        and pattern_diff <= PATTERN_TOL[dtype]
    )
    return ok, metrics


def check_generation(ref: GPT, model: GPT, prompt: list[int], n_new: int, dtype: str, device: str) -> tuple[bool, dict]:
    expected_steps = list(stream(ref, prompt, n_new, temperature=0.0))
    expected = [s.token_id for s in expected_steps]
    before = forward_count()
    sync(device)
    started = time.perf_counter()
    got = generate(model, prompt, n_new, temperature=0.0)[len(prompt) :]
    sync(device)
    seconds = time.perf_counter() - started
    passes = forward_count() - before
    steps = list(stream(model, prompt, n_new, temperature=0.0, attention=True))
    streamed = [s.token_id for s in steps]
    first_diff = next((i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
    margin_there = None
    if first_diff is not None:
        top2 = expected_steps[first_diff].logits.topk(2).values
        margin_there = (top2[0] - top2[1]).item()
    cfg = model.config
    kinds_ok = all(
        s.probs.dtype == torch.float32
        and s.probs.device.type == "cpu"
        and abs(s.probs.sum().item() - 1) < 1e-3
        and s.attention is not None
        and s.attention.dtype == torch.float32
        and s.attention.device.type == "cpu"
        and tuple(s.attention.shape) == (cfg.n_layers, cfg.n_heads, s.position)
        for s in steps
    )
    metrics = {
        "same_as_cpu_fp32": got == expected,
        "first_diff": first_diff,
        "ref_margin_there": margin_there,
        "stream_equals_generate": streamed == got,
        "forward_passes": passes,
        "float32_cpu_outputs": kinds_ok,
        "tok_per_s": n_new / seconds,
        "tokens": got,
    }
    if first_diff is None:
        tokens_ok = True
    else:  # half precision may swap a near-tie of the reference: allowed where the margin is below its rounding
        tokens_ok = dtype != "float32" and margin_there is not None and margin_there < 16 * LOGIT_TOL[dtype]
    return tokens_ok and streamed == got and passes == n_new and kinds_ok, metrics


def check_training(ref: GPT, device: str, tokens: torch.Tensor, batch: int, block: int) -> tuple[bool, dict]:
    """Three Trainer steps on one repeated batch, on the device and on the CPU from the same weights (no dropout,
    so both follow one trajectory); then the train_models loop with two tiny models on the device."""
    cfg = ref.config.replace(dropout=0.0)
    start = {k: v.clone() for k, v in ref.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(tokens) - block - 1, (batch,), generator=gen)
    x = torch.stack([tokens[s : s + block] for s in starts])
    y = torch.stack([tokens[s + 1 : s + block + 1] for s in starts])
    settings = TrainSettings(
        steps=3, batch_size=batch, block_size=block, lr=1e-4, warmup=0, eval_every=1, eval_batches=1
    )
    runs = {}
    for where in dict.fromkeys(["cpu", device]):
        model = GPT(cfg)
        model.load_state_dict(start)
        trainer = Trainer(place(model, where, "float32"), settings)
        sync(where)
        began = time.perf_counter()
        runs[where] = [trainer.step(x.to(where), y) for _ in range(settings.steps)]
        sync(where)
        runs[where + "_s"] = time.perf_counter() - began
    losses, cpu_losses = [log.train_loss for log in runs[device]], [log.train_loss for log in runs["cpu"]]
    worst = max(abs(a - b) / max(1.0, abs(b)) for a, b in zip(losses, cpu_losses, strict=True))
    # the loop: two tiny models trained side by side on the device, with a validation loss every step
    loop_settings = TrainSettings(steps=2, batch_size=2, block_size=32, eval_every=1, eval_batches=1, warmup=0)
    models, results = train_models(
        {"pre": PRESETS["tiny"], "post": PRESETS["tiny"].replace(norm="post")},
        loop_settings,
        tokens[:20_000],
        device=device,
    )
    loop_losses = [h[k] for r in results.values() for h in r.history for k in ("train_loss", "val_loss")]
    metrics = {
        "losses": [round(v, 4) for v in losses],
        "cpu_losses": [round(v, 4) for v in cpu_losses],
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "rel_diff_vs_cpu": worst,
        "grad_norm": runs[device][0].grad_norm,
        "step_s": runs[device + "_s"] / settings.steps,
        "loop_models_on": ",".join(sorted({m.wte.weight.device.type for m in models.values()})),
        "loop_losses_finite": all(v is not None and math.isfinite(v) for v in loop_losses),
    }
    finite = all(math.isfinite(v) for v in [*losses, *(log.grad_norm for log in runs[device])])
    ok = (
        finite
        and worst < TRAIN_TOL
        and losses[-1] < losses[0]
        and metrics["loop_models_on"] == device
        and metrics["loop_losses_finite"]
    )
    return ok, metrics


INDEX_TOKENS = 60_000  # the index check's corpus: the start of the complete works
# Index on the device against the float32 CPU scan of the same windows: neurons whose active share moves by more
# than this many percentage points (half precision moves values near 0 across it), and the share of top-20 examples
# (the same corpus positions) that must agree.
INDEX_SHARE_PP = {"float32": 0.01, "float16": 1.0, "bfloat16": 2.0}
INDEX_TOP_AGREE = {"float32": 0.99, "float16": 0.8, "bfloat16": 0.6}


def check_index(ref: GPT, model: GPT, dtype: str, device: str, reference) -> tuple[bool, dict]:
    """The neuron index scanned on the device (statistics kept in float32 on the CPU) against the CPU's."""
    import numpy as np

    from gptviz import index as ix

    docs, cpu = reference
    started = time.perf_counter()
    got = ix.build_index(model, docs)
    sync(device)
    seconds = time.perf_counter() - started
    n = got.n_neurons
    share_pp = 100 * np.abs(got.arrays["active_share"][:n] - cpu.arrays["active_share"][:n])
    a_loc = got.arrays["top_doc"].astype(np.int64) * 10**7 + got.arrays["top_pos"]
    b_loc = cpu.arrays["top_doc"].astype(np.int64) * 10**7 + cpu.arrays["top_pos"]
    agree = float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a_loc, b_loc, strict=True)]))
    top_diff = float(np.abs(got.arrays["top_values"] - cpu.arrays["top_values"]).max())
    counts_ok = bool((got.arrays["hist_counts"].sum(1) == got.tokens).all())
    metrics = {
        "tokens": got.tokens,
        "tok_per_s": round(got.tokens / seconds),
        "cpu_tok_per_s": cpu.meta["scan"]["tokens_per_s"],
        "share_max_pp": float(share_pp.max()),
        "top20_agree": agree,
        "top_value_max_diff": top_diff,
        "hist_counts_add_up": counts_ok,
    }
    return (counts_ok and share_pp.max() <= INDEX_SHARE_PP[dtype] and agree >= INDEX_TOP_AGREE[dtype]), metrics


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu for a dry run of the same code")
    parser.add_argument("--dtypes", default="float32,float16,bfloat16", help="precisions to run on the device")
    parser.add_argument("--tokens", type=int, default=64, help="prompt length of the random GPT-2 small checks")
    parser.add_argument("--new-tokens", type=int, default=24, help="greedy tokens generated by the bundled model")
    parser.add_argument("--skip-gpt2", action="store_true", help="leave out the random GPT-2 small preset")
    parser.add_argument("--skip-index", action="store_true", help="leave out the neuron index scan")
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    destinations = [Path(os.environ["OUT"]) / "gpu_check.json"] if os.environ.get("OUT") else []
    destinations += [Path(args.out)] if args.out else []

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "No CUDA GPU found (torch.cuda.is_available() is False): nothing to check. "
            "`--device cpu` runs the same checks on the CPU."
        )
        _write(destinations, {"device": "cuda", "gpu_found": False, "rows": []})
        return 0
    device = args.device
    torch.manual_seed(0)
    print(
        f"gptviz GPU check on {device}: torch {torch.__version__}, Python {platform.python_version()}"
        + (f", {torch.cuda.get_device_name(0)}" if device == "cuda" else ""),
        flush=True,
    )
    checks = Checks()
    checks.run("devices", "-", "-", check_devices, device)

    enc = get_tokenizer()
    bundled_ids = torch.tensor([enc.encode(PROMPT)])
    bundled = load_pretrained("shakespeare-pre").eval()
    gpt2 = None if args.skip_gpt2 else GPT(PRESETS["gpt2-small"], seed=0).eval()
    gpt2_ids = torch.randint(
        0, PRESETS["gpt2-small"].vocab_size, (1, args.tokens), generator=torch.Generator().manual_seed(1)
    )
    models = [("shakespeare-pre", bundled, bundled_ids)] + ([("gpt2-small(rand)", gpt2, gpt2_ids)] if gpt2 else [])
    dtypes = [d for d in args.dtypes.split(",") if d]
    index_reference = None
    if not args.skip_index:
        from gptviz import index as ix

        kept, left = [], INDEX_TOKENS
        for d in ix.corpus_documents():
            if left > 0:
                kept.append(ix.Document(d.name, d.ids[:left], d.held_out))
                left -= len(kept[-1].ids)
        index_reference = (kept, ix.build_index(bundled, kept))
    for dtype in dtypes:
        if device == "cuda" and dtype not in available_dtypes("cuda"):
            checks.rows.append(
                {
                    "check": "dtype",
                    "model": "-",
                    "dtype": dtype,
                    "ok": True,
                    "skipped": True,
                    "metrics": {"note": "not offered on this GPU (available_dtypes)"},
                    "seconds": 0,
                }
            )
            print(f"  skip {dtype}: not offered on this GPU")
            continue
        for label, ref, ids in models:
            model = place(copy.deepcopy(ref), device, dtype)
            checks.run("logits", label, dtype, check_logits, ref, model, ids, dtype, device)
            checks.run("capture", label, dtype, check_capture, ref, model, ids[:, :32], dtype, device)
            if label == "shakespeare-pre":
                checks.run(
                    "generate",
                    label,
                    dtype,
                    check_generation,
                    ref,
                    model,
                    bundled_ids[0].tolist(),
                    args.new_tokens,
                    dtype,
                    device,
                )
                if index_reference is not None:
                    checks.run("index", label, dtype, check_index, ref, model, dtype, device, index_reference)
            del model
            if device == "cuda":
                torch.cuda.empty_cache()
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text()[:400_000]
    tokens = torch.tensor(enc.encode(text))
    checks.run("train", "shakespeare-pre", "float32", check_training, bundled, device, tokens, 8, 64)
    if gpt2 is not None:
        checks.run("train", "gpt2-small(rand)", "float32", check_training, gpt2, device, tokens, 4, 128)

    failed = [r for r in checks.rows if not r["ok"]]
    report = {
        "device": device,
        "gpu_found": device == "cuda",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - started, 1),
        "passed": not failed,
        "rows": checks.rows,
    }
    if device == "cuda":
        report["gpu"] = torch.cuda.get_device_name(0)
        report["max_memory_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    print("\n| check | model | dtype | ok | key numbers |\n|---|---|---|---|---|")
    for r in checks.rows:
        print(
            f"| {r['check']} | {r['model']} | {r['dtype']} | {'yes' if r['ok'] else 'NO'} | "
            f"{_brief(r['metrics'], r.get('error'))} |"
        )
    print(
        f"\n{len(checks.rows) - len(failed)}/{len(checks.rows)} checks passed in {report['seconds']} s"
        + (f"; failed: {', '.join(r['check'] + ' ' + r['model'] + ' ' + r['dtype'] for r in failed)}" if failed else "")
    )
    _write(destinations, report)
    return 1 if failed else 0


def _write(destinations: list[Path], report: dict) -> None:
    for path in destinations:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
