"""What a Python call of tilejit.attention costs beyond its kernels, against SDPA (cuDNN) and
FlexAttention on the same tensors (CUDA, bf16).

For each system and each of forward, backward (on a retained graph) and forward + backward:
  queued  median ms between CUDA events around one call while the host runs ahead of the GPU
          (the calls enqueued behind a busy stream): the device time, as a training step sees it;
  synced  the same with the host waiting after every call (what a per-call synchronising
          timer sees: the host's work before the first launch shows up as idle GPU);
  host    microseconds of host time per call, enqueued behind a busy stream (never blocking).
Then the C entry points' share of tilejit's host time, and a cProfile of its calls (the top
entries by own time).

    python3 bench/python_call_cost.py --lib build [--shape B,H,S,D] [--calls 30] [--out DIR]
                                      [--systems tilejit,cuDNN] [--spacer-mb N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402  (the library loader and the peers' imports)


def synced_ms(fn: Callable[[], Any], calls: int) -> float:
    times = []
    for _ in range(calls):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def host_us(fn: Callable[[], Any], calls: int) -> float:
    # Longer than the calls' host time: none of them waits.
    compare.busy_stream(2.0 * calls + 20.0)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def measure(fn: Callable[[], Any], calls: int) -> Dict[str, float]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return {"queued_ms": compare.queued_cuda_ms(fn, calls), "synced_ms": synced_ms(fn, calls),
            "host_us": host_us(fn, calls)}


def three_ways(run: Callable[[], torch.Tensor], inputs, calls: int) -> Dict[str, Dict[str, float]]:
    """Forward, backward on a retained graph, and forward + backward of `run`."""
    out = run()
    grad = torch.randn_like(out)
    return {
        "fwd": measure(run, calls),
        "bwd": measure(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), calls),
        "fwd+bwd": measure(lambda: torch.autograd.grad(run(), inputs, grad), calls),
    }


def c_share(tj, run_step: Callable[[], Any], calls: int) -> Dict[str, float]:
    """Host microseconds per step inside the C entry points, against the whole step's."""
    capi = tj._capi
    plain, spent = capi.call, {}

    def timed(name, *args):
        t0 = time.perf_counter()
        try:
            return plain(name, *args)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - t0
    capi.call = timed
    try:
        total = host_us(run_step, calls)
    finally:
        capi.call = plain
    shares = {name: s / calls * 1e6 for name, s in spent.items()}
    shares["whole step"] = total
    return shares


def profile(run_step: Callable[[], Any], calls: int) -> str:
    compare.busy_stream(2.0 * calls + 20.0)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        run_step()
    prof.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", default="")
    parser.add_argument("--shape", default="2,16,8192,128", help="B,H,S,D (causal)")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--systems", default="tilejit,cuDNN,FlexAttention")
    parser.add_argument("--spacer-mb", type=int, default=0,
                        help="MiB allocated before the tensors (their placement in memory)")
    parser.add_argument("--out", default=os.environ.get("RESULTS_DIR", "."))
    args = parser.parse_args()
    compare.load_tilejit(args.lib)
    tj = compare.tilejit
    if not (torch.cuda.is_available() and tj.gpu_available()):
        print("no CUDA device usable by torch and tilejit: nothing to measure")
        return 0
    b, h, s, d = (int(x) for x in args.shape.split(","))
    spacer = torch.empty(args.spacer_mb << 20, dtype=torch.uint8, device="cuda")  # noqa: F841
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((b, h, s, d), generator=gen).to("cuda", torch.bfloat16)
               .requires_grad_() for _ in range(3))
    program = tj.programs.stdlib("causal")
    block = tj.block_mask(program, b, h, s, s)
    run_tj = lambda: tj.attention(q, k, v, program, block_mask=block)
    systems: Dict[str, Callable[[], torch.Tensor]] = {"tilejit": run_tj}
    if compare.sdpa_kernel is not None:
        def run_cudnn():
            with compare.sdpa_kernel(compare.SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        systems["cuDNN"] = run_cudnn
    if compare.flex_attention is not None:
        from torch._functorch import config as functorch_config
        functorch_config.donated_buffer = False  # the backward runs on a retained graph
        flex = torch.compile(compare.flex_attention, dynamic=False)
        flex_block = compare.create_block_mask(lambda b_, h_, q_, kv_: q_ >= kv_, b, None, s, s,
                                               device="cuda")
        systems["FlexAttention"] = lambda: flex(q, k, v, block_mask=flex_block)

    wanted = args.systems.split(",")
    systems = {name: run for name, run in systems.items() if name in wanted}
    results: Dict[str, Any] = {"shape": [b, h, s, d], "calls": args.calls,
                               "spacer_mb": args.spacer_mb}
    for name, run in systems.items():
        try:
            results[name] = three_ways(run, (q, k, v), args.calls)
        except Exception as error:  # a peer unavailable for this build
            results[name] = {"skipped": compare.first_line(error)}
    grad = torch.randn_like(run_tj())
    step = lambda: torch.autograd.grad(run_tj(), (q, k, v), grad)
    results["tilejit_c_share_us"] = c_share(tj, step, args.calls)
    text = profile(step, args.calls)

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "python_call_cost.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "python_call_cost_profile.txt"), "w") as f:
        f.write(text)
    print("\n".join(text.splitlines()[:45]))
    print("tilejit fwd+bwd step, host us in the C entry points:",
          {k: round(v, 1) for k, v in results["tilejit_c_share_us"].items()})
    print(f"causal {b}x{h}x{s}x{d}: ms queued / synced, host us per call")
    for name in systems:
        row = results[name]
        if "skipped" in row:
            print(f"  {name:14s} skipped: {row['skipped']}")
            continue
        print(f"  {name:14s} " + "  ".join(
            f"{part} {m['queued_ms']:.3f} / {m['synced_ms']:.3f}, {m['host_us']:.0f} us"
            for part, m in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
