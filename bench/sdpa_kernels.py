#!/usr/bin/env python3
"""Which kernels PyTorch's SDPA backends launch for causal attention, and how long each takes.

    python3 bench/sdpa_kernels.py [--shapes "B,H,S,D;..."] [--backends cudnn,flash] [--iters 10]

For each shape and backend: a forward and a backward (bf16, causal) under torch.profiler, then
one line per kernel: name, grid, block, registers per thread, shared memory per block, launches
per iteration and the mean device time. The grids show how a peer splits short sequences into
CTAs; bench/NOTES.md compares them with our launches (bench/launch_gaps.py --kernels).
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def probe(B, H, S, D, backend, iters):
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    do = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)

    def step():
        with sdpa_kernel(BACKENDS[backend]):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(do)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        key = ev.name
        kernels.setdefault(key, []).append(ev.device_time)
    # grid / block / registers / shared memory are in the trace's kernel events
    path = f"/tmp/sdpa_trace_{backend}_{S}.json"
    prof.export_chrome_trace(path)
    launch = {}
    for e in json.load(open(path)).get("traceEvents", []):
        if e.get("cat") == "kernel":
            a = e.get("args", {})
            launch[e["name"]] = (a.get("grid"), a.get("block"), a.get("registers per thread"),
                                 a.get("shared memory"))
    for name, ts in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        grid, block, regs, smem = launch.get(name, (None,) * 4)
        row = {"backend": backend, "B": B, "H": H, "S": S, "D": D, "kernel": name[:120],
               "grid": grid, "block": block, "registers": regs, "smem": smem,
               "per_iter": len(ts) / iters, "mean_us": sum(ts) / len(ts)}
        print(json.dumps(row), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="8,16,2048,128;2,16,8192,128")
    ap.add_argument("--backends", default="cudnn,flash")
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    for shape in a.shapes.split(";"):
        B, H, S, D = map(int, shape.split(","))
        for backend in a.backends.split(","):
            try:
                probe(B, H, S, D, backend, a.iters)
            except RuntimeError as err:  # a backend that does not take the shape
                print(json.dumps({"backend": backend, "S": S, "error": str(err)[:200]}))


if __name__ == "__main__":
    main()
