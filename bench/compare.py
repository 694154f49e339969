"""tilejit side by side with its peers, in one process on the same tensors.

Attention (bf16, the cases of ../shared/PERF.md): tilejit vs FlexAttention (torch.compile'd)
vs SDPA with the cuDNN backend (plain causal cases only), forward and backward TFLOP/s counted
on unmasked elements, and each output's error against FlexAttention's. Loss: the fused linear
cross-entropy vs a torch.compile'd materialising reference (fp32 softmax), forward and
forward+backward milliseconds and extra memory. Prints a table with ratios, writes the rows as
JSON and, with matplotlib, a plot. Whatever is unavailable (FlexAttention, cuDNN, a GPU) is
skipped and said so; a case that fails is recorded with its error and the run goes on. The JSON
is rewritten after every case, so a run cut short keeps what it measured.

    python3 bench/compare.py --lib build [--quick] [--out DIR] [--only causal,document]
    python3 bench/compare.py --lib build --cpu-smoke   # tiny f32 shapes: the plumbing only

--lib takes libtilejit_c itself or a CMake build directory (its capi/libtilejit_c.so); without
it, $TILEJIT_LIBRARY, else the package's own search (tilejit._library). The tilejit package is
this checkout's python/.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

PYTHON_DIR = Path(__file__).resolve().parent.parent / "python"
tilejit: Any = None  # imported by load_tilejit(), once the library is chosen

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:
    flex_attention = create_block_mask = None
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    SDPBackend = sdpa_kernel = None


def load_tilejit(lib: str) -> None:
    """Imports this checkout's tilejit over the libtilejit_c that `lib` names (a library file or
    a build directory; empty: $TILEJIT_LIBRARY or the package's own search)."""
    global tilejit
    if lib:
        path = Path(lib)
        if path.is_dir():
            path = path / "capi" / ("libtilejit_c.dylib" if sys.platform == "darwin"
                                    else "libtilejit_c.so")
        if not path.is_file():
            raise SystemExit(f"--lib {lib}: no libtilejit_c at {path} (build the CMake target "
                             f"tilejit_c there)")
        os.environ["TILEJIT_LIBRARY"] = str(path.resolve())
    sys.path.insert(0, str(PYTHON_DIR))
    import tilejit as module
    tilejit = module


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def first_call_s(fn: Callable[[], object], device: str) -> float:
    """Seconds of the first call (compilation included), to the end of its device work."""
    t0 = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


# ---- timing ---------------------------------------------------------------------------------


def timed_ms(fn: Callable[[], object], device: str, warmup: int = 3, repeats: int = 20) -> float:
    """Median milliseconds of fn(). On the GPU: CUDA events around each call, the calls enqueued
    behind a busy stream so the host runs ahead of the device (as in a training step, and as
    the peers' own script times them): device time, not the host's work before each launch
    (bench/python_call_cost.py measures that). perf_counter on the CPU."""
    for _ in range(warmup):
        fn()
    if device != "cuda":
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    torch.cuda.synchronize()
    return queued_cuda_ms(fn, repeats)


def busy_stream(ms: float) -> None:
    """Keeps the current CUDA stream busy for about `ms`, so the host's next calls queue behind
    it."""
    torch.cuda._sleep(int(ms * 2.0e6))  # ~2 GHz: cycles per millisecond


def queued_cuda_ms(fn: Callable[[], object], repeats: int) -> float:
    """Median milliseconds between CUDA events around each of `repeats` calls of fn(), all
    enqueued behind a busy stream (so none waits for the host)."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    busy_stream(20.0)  # the host queues every call behind it
    for start, stop in events:
        start.record()
        fn()
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


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


def bench_flex(case: AttentionCase, q, k, v, out_tj, mask_mod, score_mod, buffers, device: str,
               repeats: int, compiled_flex, row: dict, tflops) -> None:
    """FlexAttention's columns of `row`: its block mask's build time (warm), its first call
    (torch.compile included), TFLOP/s and tilejit's error against it."""
    make_mask = lambda: create_block_mask(
        mask_mod, case.batch if "doc" in buffers or "prefix" in buffers else None, None,
        case.seq, case.seq, device=device)
    make_mask()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    block = make_mask()
    if device == "cuda":
        torch.cuda.synchronize()
    row["flex_mask_ms"] = (time.perf_counter() - t0) * 1e3
    gqa = {"enable_gqa": True} if case.heads != case.heads_kv else {}
    flex = lambda q, k, v: compiled_flex(q, k, v, score_mod=score_mod, block_mask=block, **gqa)
    row["tilejit_vs_flex_error"] = rel_error(out_tj, flex(q.detach(), k.detach(), v.detach()))
    row["flex_first_call_s"] = first_call_s(lambda: flex(q, k, v), device)  # the training graph
    fwd, bwd = fwd_bwd_ms(lambda: flex(q, k, v), (q, k, v), device, repeats)
    row["flex"] = (tflops(fwd), tflops(bwd, 2.5))


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

    make_mask = lambda: tilejit.block_mask(program, case.batch, case.heads, case.seq, case.seq,
                                           buffers=buffers, params=case.params)
    row["tilejit_mask_first_s"] = first_call_s(make_mask, device)  # the analysis compiled
    t0 = time.perf_counter()
    block = make_mask()  # waits for its stream: the mask comes back to host memory
    row["tilejit_mask_ms"] = (time.perf_counter() - t0) * 1e3
    run_tj = lambda: tilejit.attention(q, k, v, program, buffers=buffers, params=case.params,
                                       block_mask=block)
    row["tilejit_first_call_s"] = first_call_s(run_tj, device)
    fwd, bwd = fwd_bwd_ms(run_tj, (q, k, v), device, repeats)
    row["tilejit"] = (tflops(fwd), tflops(bwd, 2.5))
    out_tj = run_tj().detach()

    if compiled_flex is not None:
        try:
            bench_flex(case, q, k, v, out_tj, mask_mod, score_mod, buffers, device, repeats,
                       compiled_flex, row, tflops)
        except Exception as error:  # no backward on the CPU, a compile failure, ...
            row["flex_skipped"] = first_line(error)

    if case.sdpa_causal and sdpa_kernel is not None and device == "cuda":
        try:
            gqa = {"enable_gqa": True} if case.heads != case.heads_kv else {}

            def run_sdpa():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
            fwd, bwd = fwd_bwd_ms(run_sdpa, (q, k, v), device, repeats)
            row["cudnn"] = (tflops(fwd), tflops(bwd, 2.5))
            row["tilejit_vs_cudnn_error"] = rel_error(out_tj, run_sdpa().detach())
        except RuntimeError as error:  # cuDNN backend unavailable for this shape or build
            row["cudnn_skipped"] = first_line(error)
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
    """Hidden states, weights and targets shaped like a trained head ("zipf" in PERF.md, drawn as
    the peers' script and bench/ce_bench_data.h draw it): a Zipf(1.1) unigram log-prior over a
    shuffled live vocabulary in the weights' last column (the hidden states' last column is 1),
    targets drawn from that prior, context noise of logit std 2, the target logit lifted by 12."""
    live, dim = sum(case.segments), case.dim
    prior = -1.1 * torch.log(torch.randperm(live, generator=gen).double() + 1)
    targets_live = torch.multinomial(torch.softmax(prior, 0), rows, replacement=True,
                                     generator=gen)
    c = torch.randn(live, dim - 1, generator=gen)
    e = torch.randn(rows, dim - 1, generator=gen) * (2.0 / math.sqrt(dim - 1))
    ct = c[targets_live]
    e += 12.0 * ct / (ct * ct).sum(-1, keepdim=True)
    c = torch.cat([c, prior.float()[:, None]], 1)
    e = torch.cat([e, torch.ones(rows, 1)], 1)
    weights = list(torch.split(c, case.segments))
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

    def measure(run, library_pool=False):
        # Extra memory for forward + backward (PERF.md's measure), over the timed training steps
        # only: the forward-only calls before them run under grad mode, where every forward keeps
        # what its backward would need (with an order, tilejit's early weight gradients) until
        # its stream passes it. It is torch's peak over what was allocated before the steps,
        # plus, for tilejit, what its workspace pool holds after them (its scratch is not
        # torch's; emptied first, the pool keeps all it maps by default, so that is its peak).
        # The two peaks are added: where they do not coincide this over-counts tilejit, never
        # under-counts.
        fwd = timed_ms(run, device, repeats=repeats)
        step = lambda: torch.autograd.grad(run(), [e, *weights])
        if device != "cuda":
            return fwd, timed_ms(step, device, repeats=repeats), 0.0
        gc.collect()
        torch.cuda.synchronize()
        if library_pool:
            # frees the states dropped while their stream was busy, then (their scratch back in
            # stream order) hands the pool's memory back
            tilejit.trim_workspace_pool()
            torch.cuda.synchronize()
            tilejit.trim_workspace_pool()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        both = timed_ms(step, device, repeats=repeats)
        torch.cuda.synchronize()
        pool = tilejit.workspace_pool_held_bytes() if library_pool else 0
        return fwd, both, (torch.cuda.max_memory_allocated() - base + pool) / 2**30

    run_tj = lambda: tilejit.linear_cross_entropy(e, weights, targets, program, params=params)
    row["tilejit_first_call_s"] = first_call_s(run_tj, device)
    row["tilejit"] = measure(run_tj, library_pool=True)
    if device == "cuda":  # an order kept across steps: the filtered backward skips most tiles
        order = tilejit.VocabOrder(refresh_every=8)
        row["tilejit ordered"] = measure(lambda: tilejit.linear_cross_entropy(
            e, weights, targets, program, params=params, vocab_order=order), library_pool=True)
        row["tilejit ordered stats"] = order.stats()
    compiled = torch.compile(reference_loss)
    run_ref = lambda: compiled(e, weights, targets_live, kept, case.softcap)
    try:
        row["torch.compile_first_call_s"] = first_call_s(run_ref, device)
        row["torch.compile"] = measure(run_ref)
        got, want = float(run_tj().detach()), float(run_ref().detach())
        row["loss_rel_error"] = abs(got - want) / abs(want)
    except Exception as error:  # out of memory on the materialised logits, no compiler, ...
        row["torch.compile_skipped"] = first_line(error)
    return row


# ---- output ---------------------------------------------------------------------------------


def fmt_pair(pair) -> str:
    return f"{pair[0]:6.1f} / {pair[1]:6.1f}" if pair else "      —      "


def ratio(row: dict, key: str, i: int, inverse: bool = False, mine_key: str = "tilejit") -> str:
    """tilejit's figure over the peer's (TFLOP/s: > 1 is faster), or the peer's over tilejit's
    (milliseconds, inverse), as "1.23x"; "—" when either is missing."""
    mine, theirs = row.get(mine_key), row.get(key)
    if not mine or not theirs or not mine[i] or not theirs[i]:
        return "—"
    return f"{(theirs[i] / mine[i] if inverse else mine[i] / theirs[i]):.2f}x"


def print_tables(attention_rows: List[dict], loss_rows: List[dict]) -> None:
    if attention_rows:
        print("\nattention, TFLOP/s fwd / bwd (unmasked elements); ratios: tilejit / peer")
        print(f"{'case':<22} {'tilejit':>15} {'FlexAttention':>15} {'cuDNN SDPA':>15} "
              f"{'vs flex':>13} {'vs cuDNN':>13} {'err vs flex':>11}")
        for r in attention_rows:
            vs_flex = f"{ratio(r, 'flex', 0)} / {ratio(r, 'flex', 1)}"
            vs_cudnn = f"{ratio(r, 'cudnn', 0)} / {ratio(r, 'cudnn', 1)}"
            err = f"{r['tilejit_vs_flex_error']:.1e}" if "tilejit_vs_flex_error" in r else "—"
            print(f"{r['case']:<22} {fmt_pair(r.get('tilejit')):>15} {fmt_pair(r.get('flex')):>15}"
                  f" {fmt_pair(r.get('cudnn')):>15} {vs_flex:>13} {vs_cudnn:>13} {err:>11}")
            for key in ("error", "flex_skipped", "cudnn_skipped"):
                if key in r:
                    print(f"    {key}: {r[key]}")
    if loss_rows:
        print("\nfused linear cross-entropy: fwd ms / fwd+bwd ms / extra GB; speed-up: "
              "torch.compile time / tilejit time")
        for r in loss_rows:
            cells = []
            for key in ("tilejit", "tilejit ordered", "torch.compile"):
                v = r.get(key)
                cells.append(f"{key}: {v[0]:.1f} / {v[1]:.1f} / {v[2]:.2f}" if v else
                             f"{key}: skipped")
            cells.append(f"speed-up {ratio(r, 'torch.compile', 0, True)} / "
                         f"{ratio(r, 'torch.compile', 1, True)}, ordered "
                         f"{ratio(r, 'torch.compile', 1, True, 'tilejit ordered')}")
            print(f"{r['case']:<42} " + "   ".join(cells))
            for key in ("error", "torch.compile_skipped"):
                if key in r:
                    print(f"    {key}: {r[key]}")


def plot(attention_rows: List[dict], loss_rows: List[dict], path: str) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    panels = []  # (rows, index in the row's pairs, title, systems)
    if attention_rows:
        systems = ("tilejit", "flex", "cudnn")
        panels += [(attention_rows, 0, "attention forward, TFLOP/s", systems),
                   (attention_rows, 1, "attention backward, TFLOP/s", systems)]
    if loss_rows:
        systems = ("tilejit", "torch.compile")
        panels += [(loss_rows, 0, "linear CE forward, ms", systems),
                   (loss_rows, 1, "linear CE fwd+bwd, ms", systems)]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.5), squeeze=False)
    for ax, (rows, i, title, keys) in zip(axes[0], panels):
        names = [r["case"] for r in rows]
        width = 0.8 / len(keys)
        for j, key in enumerate(keys):
            values = [r[key][i] if r.get(key) else 0.0 for r in rows]
            ax.bar([x + width * (j - (len(keys) - 1) / 2) for x in range(len(names))], values,
                   width=width, label=key)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=45, ha="right")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


def write_results(out: str, attention_rows: List[dict], loss_rows: List[dict],
                  context: dict) -> None:
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "compare.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"context": context, "attention": attention_rows, "loss": loss_rows}, f,
                  indent=1)
    os.replace(path + ".tmp", path)


def run_case(fn: Callable[[], dict], name: str, rows: List[dict], save: Callable[[], None],
             device: str) -> None:
    """One case's row; a case that fails is recorded with its error and the run goes on."""
    try:
        row = fn()
    except Exception as error:
        traceback.print_exc()
        row = {"case": name, "error": first_line(error)}
    rows.append(row)
    print(json.dumps(row), flush=True)
    save()
    if device == "cuda":
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="",
                        help="libtilejit_c, or a CMake build directory holding "
                             "capi/libtilejit_c.so (default: $TILEJIT_LIBRARY, else the "
                             "package's search)")
    parser.add_argument("--quick", action="store_true", help="four attention cases, one loss")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--out", default=os.environ.get("RESULTS_DIR", "."))
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--loss-rows", type=int, default=8192)
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="tiny f32 shapes on the CPU backend (checks the plumbing)")
    args = parser.parse_args()
    load_tilejit(args.lib)

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
        # The backward is timed on a retained graph (fwd_bwd_ms), which compiled backwards with
        # donated buffers refuse.
        # (imported by name: a bare `import torch....` here would make `torch` local to main)
        from torch._functorch import config as functorch_config
        functorch_config.donated_buffer = False
        # Every case's mask and score mods compile flex_attention again; past Dynamo's recompile
        # limit (8) it would fall back to the eager, materialising FlexAttention (1-100 TFLOP/s
        # and out of memory at 32k), and later cases would time that instead.
        from torch._dynamo import config as dynamo_config
        for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                      "accumulated_cache_size_limit"):
            if hasattr(dynamo_config, limit):
                setattr(dynamo_config, limit, max(getattr(dynamo_config, limit), 256))
        compiled_flex = torch.compile(flex_attention)
    else:
        compiled_flex = flex_attention  # the smoke run: eager, to exercise the comparison
    context = {"torch": torch.__version__, "tilejit": tilejit.version(),
               "library": str(tilejit.library_path()), "device": device,
               "gpu": torch.cuda.get_device_name() if device == "cuda" else None,
               "repeats": args.repeats, "quick": args.quick}
    print(" ".join(f"{k} {v}" for k, v in context.items()), flush=True)

    attention_rows: List[dict] = []
    loss_rows: List[dict] = []
    save = lambda: write_results(args.out, attention_rows, loss_rows, context)
    for case in cases:
        if keep(case.name):
            run_case(lambda: bench_attention(case, device, dtype, args.repeats, compiled_flex),
                     case.name, attention_rows, save, device)
    for case in losses:
        if keep(case.name):
            run_case(lambda: bench_loss(case, args.loss_rows, device, dtype, args.repeats),
                     case.name, loss_rows, save, device)

    print_tables(attention_rows, loss_rows)
    save()
    print(f"results: {os.path.join(args.out, 'compare.json')}")
    if device == "cuda" and (attention_rows or loss_rows):
        plot(attention_rows, loss_rows, os.path.join(args.out, "compare.png"))
    failed = [r["case"] for r in attention_rows + loss_rows if "error" in r]
    if failed:
        print(f"{len(failed)} case(s) failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
