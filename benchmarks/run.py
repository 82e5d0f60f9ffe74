"""Side-by-side benchmarks: gptviz against Hugging Face transformers on GPT-2 small (random weights, CPU,
float32), both models holding the same weights. Prints its report and writes it to results.md in the run folder
(benchmarks/run_folder.py: the one `python -m benchmarks` names, else a new benchmarks/runs/<UTC time>/; --out FILE
for another place); `python -m benchmarks engine --update-current` copies it to the tracked benchmarks/results.md.

    python -m benchmarks engine                 # the full run (a few minutes on a laptop)
    python -m benchmarks engine -- --repeats 10    # fewer repeats, noisier
    python -m benchmarks engine -- --threads 4     # torch intra-op threads (default 1: the least noisy)

Timing: torch.no_grad, warm-up calls first, then the contenders interleaved (round-robin, rotating the order
each round) so background load hits all of them alike; the median of the repeats is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.run_folder import run_folder
from gptviz import GPT, PRESETS, capture, generate, get_tokenizer, stream
from gptviz.model.hooks import act_name
from gptviz.model.model import row_major_copy
from gptviz.serve.allocator import keep_freed_memory

ROOT = Path(__file__).resolve().parents[1]
# transformers is imported inside the functions below, after this; the children started here inherit it too
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PROMPT = (
    "The history of natural language processing generally started in the 1950s, although work can "
    "be found from earlier periods."
)


# ---------------------------------------------------------------------------------------------- models


def build_ours(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(PRESETS["gpt2-small"]).eval()


def build_hf(model: GPT, attn: str):
    """transformers' GPT2LMHeadModel with our model's weights (the library's converter), `attn` its attention."""
    from gptviz.interop.tlens import to_hf_gpt2

    hf = to_hf_gpt2(model)
    hf.set_attn_implementation(attn)
    hf.generation_config.eos_token_id = None  # random weights: never stop early, always 64 new tokens
    hf.generation_config.pad_token_id = 0
    return hf.eval()


# ---------------------------------------------------------------------------------------------- timing


def _thread_usage() -> tuple[float, float, int]:
    """(user s, system s, minor page faults) of this thread (Linux), else of the process."""
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    ru = resource.getrusage(who)
    return ru.ru_utime, ru.ru_stime, ru.ru_minflt


class Timings:
    """Per contender, per round (one call of each per round): wall and CPU seconds, user and system CPU
    seconds, and minor page faults (fresh memory pages the kernel had to provide)."""

    CLOCKS = ("wall", "cpu", "user", "sys", "faults")

    def __init__(self, names):
        self.data = {clock: {n: [] for n in names} for clock in self.CLOCKS}

    def median(self, name: str, clock: str = "cpu") -> float:
        return statistics.median(self.data[clock][name])

    def ratio(self, a: str, b: str, clock: str = "cpu") -> float:
        """Median over rounds of a/b: both ran back to back, so a load spike hits one round, not one side."""
        xs, ys = self.data[clock][a], self.data[clock][b]
        return statistics.median(x / y for x, y in zip(xs, ys, strict=True))

    def summary(self) -> dict:
        return {clock: {n: statistics.median(v) for n, v in per.items()} for clock, per in self.data.items()}


def interleaved(contenders: dict, repeats: int, warmup: int = 2) -> Timings:
    names = list(contenders)
    t = Timings(names)
    with torch.no_grad():
        for _ in range(warmup):
            for fn in contenders.values():
                fn()
        for r in range(repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate who goes first
                u0, s0, f0 = _thread_usage()
                wall, cpu = time.perf_counter(), time.thread_time()
                contenders[name]()
                t.data["cpu"][name].append(time.thread_time() - cpu)
                t.data["wall"][name].append(time.perf_counter() - wall)
                u1, s1, f1 = _thread_usage()
                t.data["user"][name].append(u1 - u0)
                t.data["sys"][name].append(s1 - s0)
                t.data["faults"][name].append(f1 - f0)
    return t


# ---------------------------------------------------------------------------------------------- benchmarks


def bench_forward(ours, hf_sdpa, hf_eager, repeats: int) -> dict:
    ids = forward_ids()
    assert ids.shape == (1, 64)
    with torch.no_grad():  # same weights, same answers (checked here, not only in the tests)
        logits, cache = capture(ours, ids)
        out = hf_eager(ids, output_attentions=True, output_hidden_states=True)
        logit_diff = float((logits - out.logits).abs().max())
        pattern_diff = max(float((cache.pattern(i) - out.attentions[i]).abs().max()) for i in range(12))
        hidden_diff = max(
            float((cache[act_name("resid_pre", i)] - out.hidden_states[i]).abs().max()) for i in range(12)
        )
    # Two groups, each interleaved on its own: capture against our plain forward, then ours against
    # transformers' (mixing all four lets the transformers models' allocations disturb the first pair).
    capture_times = capture_vs_plain(ours, ids, repeats)
    hf_times = interleaved(
        {
            "ours_plain": lambda: ours(ids),
            "hf_outputs": lambda: hf_eager(ids, output_attentions=True, output_hidden_states=True),
            "hf_plain": lambda: hf_sdpa(ids),
        },
        repeats,
    )
    return {
        "t_capture": capture_times,
        "t": hf_times,
        "n_hooks": len(cache),
        "logit_diff": logit_diff,
        "pattern_diff": pattern_diff,
        "hidden_diff": hidden_diff,
    }


def forward_ids() -> torch.Tensor:
    return torch.tensor([get_tokenizer().encode(PROMPT * 4)[:64]])


def capture_vs_plain(ours, ids, repeats: int) -> Timings:
    return interleaved({"ours_plain": lambda: ours(ids), "ours_capture_all": lambda: capture(ours, ids)}, repeats)


# glibc returns freed heap memory to the kernel past a small threshold, so every capture's fresh ~47 MB comes
# back as newly zeroed pages (page faults, system time). The app keeps freed memory instead
# (gptviz.serve.allocator.keep_freed_memory() in app.py); a child process measures capture under that setting.
def bench_capture_keep_memory(threads: int, repeats: int) -> dict:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.run",
            "--capture-child",
            "--threads",
            str(threads),
            "--repeats",
            str(repeats),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(res.stdout.strip().splitlines()[-1])


def capture_child(repeats: int) -> None:
    if not keep_freed_memory():
        raise SystemExit("keep_freed_memory() did not take effect (not glibc?)")
    t = capture_vs_plain(build_ours(), forward_ids(), repeats)
    print(
        json.dumps(
            {
                "summary": t.summary(),
                "cpu_ratio": t.ratio("ours_capture_all", "ours_plain"),
                "wall_ratio": t.ratio("ours_capture_all", "ours_plain", "wall"),
            }
        )
    )


def bench_generate(ours, hf_sdpa, repeats: int, new: int = 64) -> dict:
    prompt = get_tokenizer().encode(PROMPT)[:16]
    ids = torch.tensor([prompt])
    ours_tokens = generate(ours, prompt, new, temperature=0)[len(prompt) :]
    row_major = row_major_copy(ours)
    assert generate(row_major, prompt, new, temperature=0)[len(prompt) :] == ours_tokens
    with torch.no_grad():
        hf_tokens = hf_sdpa.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new)[
            0, len(prompt) :
        ].tolist()
    times = interleaved(
        {
            "ours_generate": lambda: generate(ours, prompt, new, temperature=0),
            "ours_stream_attention": lambda: list(stream(ours, prompt, new, temperature=0, attention=True)),
            "ours_generate_row_major": lambda: generate(row_major, prompt, new, temperature=0),
            "hf_generate": lambda: hf_sdpa.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new
            ),
        },
        repeats,
        warmup=1,
    )
    return {
        "t": times,
        "new": new,
        "same_tokens": ours_tokens == hf_tokens,
        "agree_prefix": next((i for i, (a, b) in enumerate(zip(ours_tokens, hf_tokens, strict=True)) if a != b), new),
    }


def bench_per_token(ours, runs: int, new: int = 256) -> dict:
    """Seconds per step of stream() for steps 1-64 and 193-256 of one long greedy generation."""
    out = {}
    for attention in (False, True):
        early, late = {"wall": [], "cpu": []}, {"wall": [], "cpu": []}
        for _ in range(runs):
            wall, cpu = [], []
            it = stream(ours, [464], new, temperature=0, attention=attention)
            w, c = time.perf_counter(), time.thread_time()
            for _record in it:
                w2, c2 = time.perf_counter(), time.thread_time()
                wall.append(w2 - w)
                cpu.append(c2 - c)
                w, c = w2, c2
            for clock, steps in (("wall", wall), ("cpu", cpu)):
                early[clock] += steps[:64]
                late[clock] += steps[192:256]
        out["attention" if attention else "plain"] = {
            clock: {"early": statistics.median(early[clock]), "late": statistics.median(late[clock])}
            for clock in ("wall", "cpu")
        }
    return out


MEMORY_CHILD = r"""
import json, resource, sys, torch
torch.set_num_threads(THREADS)
from gptviz import PRESETS, GPT, capture

def status(key):  # kB from /proc/self/status (Linux); None elsewhere
    try:
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        return None

torch.manual_seed(0)
model = GPT(PRESETS["gpt2-small"]).eval()
ids = torch.randint(0, 50257, (1, 512), generator=torch.Generator().manual_seed(0))
try:  # reset the peak (VmHWM) so building the model's transient copies do not hide what follows
    open("/proc/self/clear_refs", "w").write("5")
    method, base = "VmHWM", status("VmRSS")
except OSError:
    method, base = "ru_maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if MODE == "plain":
    with torch.no_grad():
        logits = model(ids)
    extra = {}
else:
    logits, cache = capture(model, ids)
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in cache.values()}
    extra = {"nbytes": cache.nbytes(), "unique_storage": sum(storages.values()), "n": len(cache)}
peak = status("VmHWM") if method == "VmHWM" else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"delta_kib": peak - base, "method": method, **extra}))
"""


def bench_memory(threads: int) -> dict:
    out = {}
    for mode in ("plain", "capture"):
        code = MEMORY_CHILD.replace("THREADS", str(threads)).replace("MODE", repr(mode))
        # from the root, `-c` finds the checkout's gptviz first
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        out[mode] = json.loads(res.stdout.strip().splitlines()[-1])
    c = PRESETS["gpt2-small"]
    T, d, H, L, ff, V = 512, c.d_model, c.n_heads, c.n_layers, c.d_ff, c.vocab_size
    per_layer = 11 * T * d + 2 * H * T * T + 2 * T * ff  # 7 residual-width hooks + q, k, v, z; scores, pattern; MLP
    out["theoretical"] = 4 * (3 * T * d + L * per_layer + T * V)  # embed, pos_embed, ln_f; layers; logits
    return out


# ---------------------------------------------------------------------------------------------- report


def verdict(value: float, target: float, higher_is_better: bool) -> str:
    ok = value >= target if higher_is_better else value <= target
    return "yes" if ok else "**no**"


def report(fwd, gen, per_tok, mem, args, elapsed) -> str:
    f, c, g = fwd["t"], fwd["t_capture"], gen["t"]
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    toks = lambda name, clock: gen["new"] / g.median(name, clock)  # noqa: E731
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    rows = []

    def line(label, measured_cpu, measured_wall, r_cpu, r_wall, target, higher):
        rows.append(
            f"| {label} | {measured_cpu} | {r_cpu:.3f}x | {measured_wall} | {r_wall:.3f}x | "
            f"{'≥' if higher else '≤'} {target}x | {verdict(r_cpu, target, higher)} |"
        )

    def time_line(label, stats, a, b, target):
        """A row of two timed contenders' medians, a against b, where lower is better."""
        cpu = f"{ms(stats.median(a))} vs {ms(stats.median(b))}"
        wall = f"{ms(stats.median(a, 'wall'))} vs {ms(stats.median(b, 'wall'))}"
        line(label, cpu, wall, stats.ratio(a, b), stats.ratio(a, b, "wall"), target, False)

    time_line(
        f"Capture every hook point ({fwd['n_hooks']}) vs our plain forward, 64 tokens",
        c,
        "ours_capture_all",
        "ours_plain",
        1.10,
    )
    keep = fwd["keep_memory"]
    ks = keep["summary"]
    rows.append(
        f"| ↳ same, with `gptviz.serve.allocator.keep_freed_memory()` (glibc keeps freed memory; app.py applies "
        f"it at start-up) | {ms(ks['cpu']['ours_capture_all'])} vs {ms(ks['cpu']['ours_plain'])} | "
        f"{keep['cpu_ratio']:.3f}x | {ms(ks['wall']['ours_capture_all'])} vs {ms(ks['wall']['ours_plain'])} | "
        f"{keep['wall_ratio']:.3f}x | ≤ 1.1x | {verdict(keep['cpu_ratio'], 1.10, False)} |"
    )
    time_line(
        "Our plain forward vs transformers forward with output_attentions + output_hidden_states, 64 tokens",
        f,
        "ours_plain",
        "hf_outputs",
        1.05,
    )
    for name, label, target in (
        ("ours_generate", "our generate()", 1.0),
        ("ours_stream_attention", "our stream(attention=True)", 0.9),
    ):
        line(
            f"Greedy generation of 64 new tokens, tokens/s: {label} vs transformers generate()",
            f"{toks(name, 'cpu'):.1f} vs {toks('hf_generate', 'cpu'):.1f} tok/s",
            f"{toks(name, 'wall'):.1f} vs {toks('hf_generate', 'wall'):.1f} tok/s",
            g.ratio("hf_generate", name),
            g.ratio("hf_generate", name, "wall"),
            target,
            True,
        )
        if name == "ours_generate":
            rm = "ours_generate_row_major"
            rows.append(
                f"| ↳ same weights stored row-major (nn.Linear's default) instead of [in, out]: our "
                f"generate() vs transformers | {toks(rm, 'cpu'):.1f} vs {toks('hf_generate', 'cpu'):.1f} "
                f"tok/s | {g.ratio('hf_generate', rm):.3f}x | {toks(rm, 'wall'):.1f} vs "
                f"{toks('hf_generate', 'wall'):.1f} tok/s | {g.ratio('hf_generate', rm, 'wall'):.3f}x | "
                "(for comparison) | |"
            )
    for mode, label in (("plain", "stream()"), ("attention", "stream(attention=True)")):
        p = per_tok[mode]
        line(
            f"Time per token, tokens 193-256 vs tokens 1-64 of a 256-token {label}",
            f"{ms(p['cpu']['late'])} vs {ms(p['cpu']['early'])}",
            f"{ms(p['wall']['late'])} vs {ms(p['wall']['early'])}",
            p["cpu"]["late"] / p["cpu"]["early"],
            p["wall"]["late"] / p["wall"]["early"],
            1.5,
            False,
        )
    cap, plain = mem["capture"], mem["plain"]
    load = os.getloadavg()
    lines = [
        "# Benchmark results",
        "",
        f"GPT-2 small (124M parameters, random weights), CPU, float32; torch {torch.__version__}, transformers "
        f"{__import__('transformers').__version__}; {torch.get_num_threads()} torch thread(s) on "
        f"{os.cpu_count()} CPU(s) ({platform.machine()}); Python {platform.python_version()}.",
        f"{args.repeats} rounds for forward passes, {args.gen_repeats} for generation, {args.token_runs} "
        f"256-token streams; load average at the end {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}; "
        f"the run took {elapsed:.0f} s.",
        "",
        "CPU = the thread's CPU time (`time.thread_time`, all of torch's work with one thread), the primary "
        "measure because it is least disturbed by other processes; wall = `time.perf_counter`. Each value is "
        "a median; each ratio is the median of per-round ratios (contenders run back to back, order rotated).",
        "",
        "| benchmark | CPU time (or tok/s) | CPU ratio | wall time (or tok/s) | wall ratio | target | met (CPU) |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Where a capture's extra time goes (medians per call, glibc's default policy): user CPU "
        f"{ms(c.median('ours_capture_all', 'user'))} vs {ms(c.median('ours_plain', 'user'))}, system CPU "
        f"{ms(c.median('ours_capture_all', 'sys'))} vs {ms(c.median('ours_plain', 'sys'))}, minor page faults "
        f"{c.median('ours_capture_all', 'faults'):,.0f} vs {c.median('ours_plain', 'faults'):,.0f}; with "
        f"`keep_freed_memory()`: faults {ks['faults']['ours_capture_all']:,.0f} vs "
        f"{ks['faults']['ours_plain']:,.0f}, system CPU "
        f"{ms(ks['sys']['ours_capture_all'])} vs {ms(ks['sys']['ours_plain'])}.",
        "",
        f"Reference: transformers plain forward (SDPA, no extra outputs) {ms(f.median('hf_plain'))} CPU; "
        f"our plain forward / it = {f.ratio('ours_plain', 'hf_plain'):.3f}x.",
        "",
        "Same weights, same answers: max |logit difference| "
        f"{fwd['logit_diff']:.1e}, max |attention weight difference| {fwd['pattern_diff']:.1e}, "
        f"max |residual stream difference| {fwd['hidden_diff']:.1e}; greedy tokens identical to "
        f"transformers': {gen['same_tokens']} (first {gen['agree_prefix']} of {gen['new']} agree).",
        "",
        "## Memory of a full capture, 512 tokens",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| hook points captured | {cap['n']} |",
        f"| `ActivationCache.nbytes()` | {mib(cap['nbytes'])} |",
        f"| sum of the hook tensors' sizes by formula | {mib(mem['theoretical'])} |",
        f"| bytes of the distinct storages behind the cache | {mib(cap['unique_storage'])} |",
        f"| peak RSS increase, full capture (fresh process, after model build; {cap['method']}) | "
        f"{mib(cap['delta_kib'] * 1024)} |",
        f"| peak RSS increase, plain forward (same method) | {mib(plain['delta_kib'] * 1024)} |",
        "",
        "`nbytes()` equals the formula: every hook holds the tensor the forward pass made, nothing else. The "
        "distinct storages are smaller by exactly the 11 residual tensors that are both `blocks.i.hook_resid_post` "
        f"and `blocks.i+1.hook_resid_pre` ({mib(cap['nbytes'] - cap['unique_storage'])}): one tensor, two "
        "names, no copies (q, k and v are views of the one Q/K/V projection). The peak RSS increase of a "
        "capture is about the cache plus the model's transient working memory.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=25, help="rounds of each forward-pass comparison")
    parser.add_argument("--gen-repeats", type=int, default=8, help="repeats of each generation contender")
    parser.add_argument("--token-runs", type=int, default=2, help="256-token streams for the per-token timing")
    parser.add_argument("--out", help="the report's file (default: results.md in the run folder)")
    parser.add_argument("--capture-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.capture_child:
        capture_child(args.repeats)
        return
    started = time.perf_counter()
    ours = build_ours()
    hf_sdpa, hf_eager = build_hf(ours, "sdpa"), build_hf(ours, "eager")
    print("forward ...", flush=True)
    fwd = bench_forward(ours, hf_sdpa, hf_eager, args.repeats)
    fwd["keep_memory"] = bench_capture_keep_memory(args.threads, args.repeats)
    print("generation ...", flush=True)
    gen = bench_generate(ours, hf_sdpa, args.gen_repeats)
    print("per-token latency ...", flush=True)
    per_tok = bench_per_token(ours, args.token_runs)
    print("memory ...", flush=True)
    mem = bench_memory(args.threads)
    text = report(fwd, gen, per_tok, mem, args, time.perf_counter() - started)
    out = Path(args.out) if args.out else run_folder() / "results.md"
    out.write_text(text)
    print(f"report: {out}\n")  # before the report, so its last lines end the output (python -m benchmarks keeps them)
    print(text)


if __name__ == "__main__":
    main()
