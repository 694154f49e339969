"""tilejit side by side with its peers, in one process on the same tensors.

Attention (bf16, the cases of ../shared/PERF.md): tilejit vs FlexAttention (torch.compile'd)
vs SDPA with the cuDNN backend (plain causal cases only), forward and backward TFLOP/s counted
on unmasked elements, and each output's error against FlexAttention's. Loss: the fused linear
cross-entropy vs a torch.compile'd materialising reference (fp32 softmax), forward and
forward+backward milliseconds and extra memory. Prints a table with ratios, writes the rows as
JSON and, with matplotlib, a plot. Whatever is unavailable (FlexAttention, cuDNN, a GPU) is
skipped and said so.

    PYTHONPATH=python python3 bench/compare.py [--quick] [--out DIR] [--only causal,document]
    PYTHONPATH=python python3 bench/compare.py --cpu-smoke   # tiny f32 shapes: the plumbing only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tilejit  # noqa: E402

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    flex_attention = create_block_mask = None
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    SDPBackend = sdpa_kernel = None


# ---- timing ---------------------------------------------------------------------------------


def timed_ms(fn: Callable[[], object], device: str, warmup: int = 3, repeats: int = 20) -> float:
    """Median milliseconds of fn() (CUDA events on the GPU, perf_counter on the CPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def fwd_bwd_ms(run: Callable[[], torch.Tensor], inputs, device: str, repeats: int):
    """(forward ms, backward ms): the backward timed on a retained graph."""
    fwd = timed_ms(run, device, repeats=repeats)
    out = run()
    grad = torch.randn_like(out)
    bwd = timed_ms(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), device,
                   repeats=repeats)
    return fwd, bwd


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- attention cases ------------------------------------------------------------------------


@dataclass
class AttentionCase:
    name: str
    batch: int
    seq: int
    heads: int = 16
    heads_kv: int = 16
    dim: int = 128
    program: str = "causal"  # a tilejit standard program
    params: Dict[str, float] = field(default_factory=dict)
    sdpa_causal: bool = False  # cuDNN SDPA runs it (a plain causal mask)


ATTENTION_CASES = [
    AttentionCase("causal S=8k", 2, 8192, program="causal", sdpa_causal=True),
    AttentionCase("causal S=32k", 1, 32768, program="causal", sdpa_causal=True),
    AttentionCase("causal S=2k", 8, 2048, program="causal", sdpa_causal=True),
    AttentionCase("softcap causal", 2, 8192, program="softcap_causal", params={"cap": 30.0}),
    AttentionCase("ALiBi causal", 2, 8192, program="alibi_causal"),
    AttentionCase("document causal", 2, 8192, program="document_causal"),
    AttentionCase("prefix-LM S/4", 2, 8192, program="prefix_lm"),
    AttentionCase("sliding window 1024", 1, 32768, program="sliding_window",
                  params={"window": 1024}),
    AttentionCase("GQA 32/8 causal", 2, 8192, heads=32, heads_kv=8, program="causal",
                  sdpa_causal=True),
    AttentionCase("D=64 causal", 2, 8192, dim=64, program="causal", sdpa_causal=True),
]
QUICK = ("causal S=8k", "softcap causal", "document causal", "GQA 32/8 causal")


def case_buffers(case: AttentionCase, device: str, gen: torch.Generator) -> Dict[str, torch.Tensor]:
    """The captured buffers of a case (document ids, prefix lengths, ALiBi slopes)."""
    if case.program == "document_causal":
        lengths = torch.randint(case.seq // 16, case.seq // 2, (64,), generator=gen)
        ids = torch.repeat_interleave(torch.arange(64), lengths)[:case.seq]
        ids = torch.cat([ids, torch.full((case.seq - len(ids),), 64)])
        return {"doc": ids.to(torch.int32).expand(case.batch, -1).contiguous().to(device)}
    if case.program == "prefix_lm":
        return {"prefix": torch.full((case.batch,), case.seq // 4, dtype=torch.int32,
                                     device=device)}
    if case.program == "alibi_causal":
        slopes = 2.0 ** (-8.0 * torch.arange(1, case.heads + 1) / case.heads)
        return {"slopes": slopes.to(torch.float32).to(device)}
    return {}


def flex_mods(case: AttentionCase, buffers: Dict[str, torch.Tensor]):
    """FlexAttention's (mask_mod, score_mod) for a case."""
    causal = lambda b, h, q, kv: q >= kv
    if case.program == "document_causal":
        doc = buffers["doc"]
        return (lambda b, h, q, kv: (doc[b, q] == doc[b, kv]) & (q >= kv)), None
    if case.program == "prefix_lm":
        prefix = buffers["prefix"]
        return (lambda b, h, q, kv: (kv < prefix[b]) | (q >= kv)), None
    if case.program == "sliding_window":
        window = int(case.params["window"])
        return (lambda b, h, q, kv: (q >= kv) & (q - kv < window)), None
    if case.program == "softcap_causal":
        cap = case.params["cap"]
        return causal, (lambda s, b, h, q, kv: cap * torch.tanh(s / cap))
    if case.program == "alibi_causal":
        slopes = buffers["slopes"]
        return causal, (lambda s, b, h, q, kv: s + slopes[h] * (kv - q))
    return causal, None


def unmasked_pairs(mask_mod, case: AttentionCase, buffers, device: str) -> int:
    """Unmasked (q, kv) pairs over B and Hq (the mask reads no h here), row block by block."""
    total = 0
    kv = torch.arange(case.seq, device=device)
    for b in range(case.batch):
        for q0 in range(0, case.seq, 1024):
            q = torch.arange(q0, min(q0 + 1024, case.seq), device=device)[:, None]
            total += int(mask_mod(torch.tensor(b, device=device), 0, q, kv[None]).sum())
    return total * case.heads


def bench_attention(case: AttentionCase, device: str, dtype: torch.dtype, repeats: int,
                    compiled_flex) -> dict:
    gen = torch.Generator().manual_seed(0)
    shape_q = (case.batch, case.heads, case.seq, case.dim)
    shape_kv = (case.batch, case.heads_kv, case.seq, case.dim)
    q = torch.randn(shape_q, generator=gen).to(device, dtype).requires_grad_()
    k, v = (torch.randn(shape_kv, generator=gen).to(device, dtype).requires_grad_()
            for _ in range(2))
    buffers = case_buffers(case, device, gen)
    program = tilejit.programs.stdlib(case.program)
    mask_mod, score_mod = flex_mods(case, buffers)
    pairs = unmasked_pairs(mask_mod, case, buffers, device)
    flops = 4.0 * case.dim * pairs
    row = {"case": case.name, "B": case.batch, "S": case.seq, "Hq": case.heads,
           "Hkv": case.heads_kv, "D": case.dim}
    tflops = lambda ms, mult=1.0: mult * flops / (ms * 1e-3) / 1e12

    t0 = time.perf_counter()
    block = tilejit.block_mask(program, case.batch, case.heads, case.seq, case.seq,
                               buffers=buffers, params=case.params)
    row["tilejit_mask_ms"] = (time.perf_counter() - t0) * 1e3
    run_tj = lambda: tilejit.attention(q, k, v, program, buffers=buffers, params=case.params,
                                       block_mask=block)
    fwd, bwd = fwd_bwd_ms(run_tj, (q, k, v), device, repeats)
    row["tilejit"] = (tflops(fwd), tflops(bwd, 2.5))
    out_tj = run_tj().detach()

    if compiled_flex is not None:
        t0 = time.perf_counter()
        flex_block = create_block_mask(mask_mod, case.batch if "doc" in buffers or
                                       "prefix" in buffers else None, None, case.seq, case.seq,
                                       device=device)
        row["flex_mask_ms"] = (time.perf_counter() - t0) * 1e3
        gqa = {"enable_gqa": True} if case.heads != case.heads_kv else {}
        flex = lambda q, k, v: compiled_flex(q, k, v, score_mod=score_mod,
                                             block_mask=flex_block, **gqa)
        run_flex = lambda: flex(q, k, v)
        row["tilejit_vs_flex_error"] = rel_error(out_tj, flex(q.detach(), k.detach(),
                                                             v.detach()))
        try:
            fwd, bwd = fwd_bwd_ms(run_flex, (q, k, v), device, repeats)
            row["flex"] = (tflops(fwd), tflops(bwd, 2.5))
        except (NotImplementedError, RuntimeError) as error:  # no backward on the CPU
            row["flex_skipped"] = str(error).splitlines()[0]

    if case.sdpa_causal and sdpa_kernel is not None and device == "cuda":
        try:
            gqa = {"enable_gqa": True} if case.heads != case.heads_kv else {}

            def run_sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
            fwd, bwd = fwd_bwd_ms(run_sdpa, (q, k, v), device, repeats)
            row["cudnn"] = (tflops(fwd), tflops(bwd, 2.5))
        except RuntimeError as error:  # cuDNN backend unavailable for this shape or build
            row["cudnn_skipped"] = str(error).splitlines()[0]
    return row


# ---- loss cases -----------------------------------------------------------------------------


@dataclass
class LossCase:
    name: str
    dim: int
    segments: List[int]  # sizes; a dead gap of `gap` ids between consecutive segments
    gap: int = 0
    softcap: Optional[float] = None
    ignored: float = 0.1


LOSS_CASES = [
    LossCase("Gemma-2 (V 256k, softcap)", 2304, [256000], softcap=30.0),
    LossCase("Llama-3 (V 128k)", 4096, [128256]),
    LossCase("two segments 151,936 + 130 dead + 1,024", 2048, [151936, 1024], gap=130,
             ignored=0.5),
]


def loss_program(case: LossCase) -> tilejit.Program:
    lines, begin = [], 0
    for i, size in enumerate(case.segments):
        lines.append(f"  segment s{i} : [{begin}, {begin + size}) weight W{i}")
        begin += size + case.gap
    if case.softcap:
        lines.insert(0, "  param cap : f32")
        lines.append("  logit = cap * tanh(logit / cap)")
    return tilejit.program("loss bench {\n" + "\n".join(lines) + "\n}\n")


def zipf_problem(case: LossCase, rows: int, device: str, dtype, gen: torch.Generator):
    """Hidden states, weights and targets shaped like a trained head ("zipf" in PERF.md)."""
    live = sum(case.segments)
    prior = -1.1 * torch.log1p(torch.randperm(live, generator=gen).double())
    targets_live = torch.multinomial(torch.softmax(prior, 0), rows, replacement=True,
                                     generator=gen)
    weights = [torch.randn(n, case.dim, generator=gen) / math.sqrt(case.dim)
               for n in case.segments]
    w_all = torch.cat(weights)
    e = torch.randn(rows, case.dim, generator=gen) * (2.0 / math.sqrt(case.dim))
    e += 12.0 * w_all[targets_live] / w_all[targets_live].norm(dim=1, keepdim=True) ** 2
    begins = [sum(case.segments[:i]) + i * case.gap for i in range(len(case.segments))]
    offsets = torch.cat([torch.full((n,), b - sum(case.segments[:i]))
                         for i, (n, b) in enumerate(zip(case.segments, begins))])
    targets = targets_live + offsets[targets_live]
    targets[torch.rand(rows, generator=gen) < case.ignored] = -100
    to = lambda x: x.to(device, dtype).requires_grad_()
    return to(e), [to(w) for w in weights], targets.to(device), targets_live.to(device)


def reference_loss(e, weights, targets_live, kept, softcap):
    logits = torch.cat([e @ w.T for w in weights], 1).float()
    if softcap:
        logits = softcap * torch.tanh(logits / softcap)
    return F.cross_entropy(logits, torch.where(kept, targets_live, -100), ignore_index=-100)


def bench_loss(case: LossCase, rows: int, device: str, dtype, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(1)
    e, weights, targets, targets_live = zipf_problem(case, rows, device, dtype, gen)
    kept = targets != -100
    program = loss_program(case)
    params = {"cap": case.softcap} if case.softcap else None
    row = {"case": case.name, "N": rows, "D": case.dim, "V": sum(case.segments)}

    def measure(run):
        base = torch.cuda.memory_allocated() if device == "cuda" else 0
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        fwd = timed_ms(run, device, repeats=repeats)
        both = timed_ms(lambda: torch.autograd.grad(run(), [e, *weights]), device,
                        repeats=repeats)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**30 if device == "cuda" else 0.0
        return fwd, both, peak

    run_tj = lambda: tilejit.linear_cross_entropy(e, weights, targets, program, params=params)
    row["tilejit"] = measure(run_tj)
    compiled = torch.compile(reference_loss)
    run_ref = lambda: compiled(e, weights, targets_live, kept, case.softcap)
    try:
        row["torch.compile"] = measure(run_ref)
        got, want = float(run_tj().detach()), float(run_ref().detach())
        row["loss_rel_error"] = abs(got - want) / abs(want)
    except Exception as error:  # out of memory on the materialised logits, no compiler, ...
        row["torch.compile_skipped"] = str(error).splitlines()[0]
    return row


# ---- output ---------------------------------------------------------------------------------


def fmt_pair(pair) -> str:
    return f"{pair[0]:6.1f} / {pair[1]:6.1f}" if pair else "      —      "


def print_tables(attention_rows: List[dict], loss_rows: List[dict]) -> None:
    if attention_rows:
        print("\nattention, TFLOP/s fwd / bwd (unmasked elements)")
        print(f"{'case':<22} {'tilejit':>15} {'FlexAttention':>15} {'cuDNN SDPA':>15} "
              f"{'vs flex (fwd)':>13} {'err vs flex':>11}")
        for r in attention_rows:
            ratio = (f"{r['tilejit'][0] / r['flex'][0]:.2f}x" if "flex" in r else "—")
            err = f"{r['tilejit_vs_flex_error']:.1e}" if "tilejit_vs_flex_error" in r else "—"
            print(f"{r['case']:<22} {fmt_pair(r.get('tilejit')):>15} {fmt_pair(r.get('flex')):>15}"
                  f" {fmt_pair(r.get('cudnn')):>15} {ratio:>13} {err:>11}")
    if loss_rows:
        print("\nfused linear cross-entropy: fwd ms / fwd+bwd ms / extra GB")
        for r in loss_rows:
            cells = []
            for key in ("tilejit", "torch.compile"):
                v = r.get(key)
                cells.append(f"{key}: {v[0]:.1f} / {v[1]:.1f} / {v[2]:.2f}" if v else
                             f"{key}: skipped")
            print(f"{r['case']:<42} " + "   ".join(cells))


def plot(attention_rows: List[dict], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    names = [r["case"] for r in attention_rows]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), sharey=True)
    for ax, i, title in ((axes[0], 0, "forward"), (axes[1], 1, "backward")):
        for j, key in enumerate(("tilejit", "flex", "cudnn")):
            values = [r[key][i] if key in r else 0.0 for r in attention_rows]
            ax.bar([x + 0.27 * (j - 1) for x in range(len(names))], values, width=0.27,
                   label=key)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_title(f"attention {title}, TFLOP/s")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="four attention cases, one loss")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--out", default=os.environ.get("RESULTS_DIR", "."))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--loss-rows", type=int, default=8192)
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny f32 shapes on the CPU backend (checks the plumbing)")
    args = parser.parse_args()

    if args.cpu_smoke:
        device, dtype = "cpu", torch.float32
        cases = [AttentionCase(c.name, 1, 256, heads=2, heads_kv=2 if c.heads == c.heads_kv
                               else 1, dim=32, program=c.program,
                               params={k: 37 if k == "window" else v for k, v in c.params.items()})
                 for c in ATTENTION_CASES if not args.quick or c.name in QUICK]
        losses = [LossCase("two segments (smoke)", 32, [500, 40], gap=13, ignored=0.5)]
        args.loss_rows, args.repeats = 64, 3
    elif torch.cuda.is_available() and tilejit.gpu_available():
        device, dtype = "cuda", torch.bfloat16
        cases = [c for c in ATTENTION_CASES if not args.quick or c.name in QUICK]
        losses = LOSS_CASES[2:] if args.quick else LOSS_CASES
    else:
        print("no CUDA device usable by torch and tilejit: nothing to compare (--cpu-smoke "
              "exercises the script on the CPU)")
        return 0
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    keep = lambda name: not wanted or any(w in name for w in wanted)

    compiled_flex = None
    if flex_attention is None:
        print("FlexAttention not available in this torch: skipped")
    elif device == "cuda":
        compiled_flex = torch.compile(flex_attention)
    else:
        compiled_flex = flex_attention  # the smoke run: eager, to exercise the comparison
    print(f"torch {torch.__version__}, tilejit {tilejit.version()}, device {device}")

    attention_rows = []
    for case in cases:
        if keep(case.name):
            attention_rows.append(bench_attention(case, device, dtype, args.repeats,
                                                  compiled_flex))
            print(json.dumps(attention_rows[-1]), flush=True)
    loss_rows = []
    for case in losses:
        if keep(case.name):
            loss_rows.append(bench_loss(case, args.loss_rows, device, dtype, args.repeats))
            print(json.dumps(loss_rows[-1]), flush=True)

    print_tables(attention_rows, loss_rows)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump({"attention": attention_rows, "loss": loss_rows}, f, indent=1)
    if attention_rows and device == "cuda":
        plot(attention_rows, os.path.join(args.out, "compare.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
