"""tilejit against cuDNN (SDPA's cuDNN backend) under sustained load, with the GPU's SM clock,
power draw and throttle reasons sampled beside each phase.

compare.py times short bursts (a few milliseconds of work after an idle moment), where the GPU
runs at or near its boost clock. A training step keeps the GPU busy for seconds, and a GPU at its
power limit then lowers its clock: a kernel's time is set by the energy its work takes as much as
by its cycles. This script runs each system alone for `--seconds` at a time (launches queued, no
gaps), forward only and forward + backward, in `--rounds` interleaved rounds, while nvidia-smi
samples every 20 ms, and prints per phase: ms per call, TFLOP/s (causal: B·H·S(S+1)/2 unmasked
pairs, 4·D FLOP each forward, 3.5x that forward + backward), the mean SM clock and power, and the
throttle reasons seen (nvidia-smi's clocks_throttle_reasons.active bits; 0x4 is the software
power cap).

    python3 bench/sustained_compare.py --lib build-gpu [--out DIR] [--seconds 2] [--rounds 2]
                                       [--cases "2,8192,128;2,8192,64;8,2048,128"]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402  (load_tilejit: this checkout's package over the chosen library)

HEADS = 16
SMI_FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"


def parse_cases(text: str):
    cases = []
    for item in text.split(";"):
        b, s, d = (int(x) for x in item.split(","))
        cases.append((b, s, d))
    return cases


def read_samples(path: Path, started: float):
    """(epoch s, MHz, W, °C, throttle bits) per nvidia-smi line. Its timestamps are local time:
    shifted by the whole quarter-hours between the first one and when sampling started."""
    samples = []
    for line in path.read_text().splitlines():
        fields = [x.strip() for x in line.split(",")]
        try:
            stamp = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((stamp, float(fields[1]), float(fields[2]), float(fields[3]), fields[4]))
        except (ValueError, IndexError):
            continue  # a header or a cut-off last line
    if not samples:
        return samples
    shift = round((samples[0][0] - started) / 900) * 900
    return [(s[0] - shift,) + s[1:] for s in samples]


def run_phase(step, seconds: float):
    """ms per call over `seconds` of calls queued 10 at a time (a sync after each 10)."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    calls, t0 = 0, time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            step()
        calls += 10
        torch.cuda.synchronize()
    t1 = time.time()
    return t0, t1, (t1 - t0) / calls * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", default="", help="libtilejit_c or a CMake build directory")
    parser.add_argument("--out", default=".")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cases", default="2,8192,128;2,8192,64;8,2048,128",
                        help="causal cases B,S,D;... (H = 16, bf16)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("sustained_compare.py needs a CUDA GPU")
    compare.load_tilejit(args.lib)
    tilejit = compare.tilejit
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    started = time.time()
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits",
                            "-lms", "20"], stdout=open(out / "sustained_smi.csv", "w"))
    phases = []
    try:
        program = tilejit.programs.stdlib("causal")
        for batch, seq, dim in parse_cases(args.cases):
            q, k, v = (torch.randn(batch, HEADS, seq, dim, device="cuda", dtype=torch.bfloat16)
                       .requires_grad_() for _ in range(3))
            grad = torch.randn_like(q)
            block = tilejit.block_mask(program, batch, HEADS, seq, seq)

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            systems = {"tilejit": lambda: tilejit.attention(q, k, v, program, block_mask=block),
                       "cudnn": cudnn}
            flops = 4.0 * dim * batch * HEADS * seq * (seq + 1) / 2
            for rnd in range(args.rounds):
                for name, call in systems.items():
                    for mode in ("fwd", "fwd+bwd"):
                        def step(call=call, mode=mode):
                            if mode == "fwd":
                                with torch.no_grad():
                                    call()
                            else:
                                call().backward(grad)
                        t0, t1, ms = run_phase(step, args.seconds)
                        mult = 1.0 if mode == "fwd" else 3.5
                        phases.append({"B": batch, "S": seq, "D": dim, "system": name,
                                       "mode": mode, "round": rnd, "t0": t0, "t1": t1, "ms": ms,
                                       "tflops": mult * flops / (ms * 1e-3) / 1e12})
                        time.sleep(0.3)
    finally:
        smi.terminate()
        smi.wait()
    samples = read_samples(out / "sustained_smi.csv", started)
    print(f"{'B':>2} {'S':>6} {'D':>4} {'system':8} {'mode':8} rnd {'ms':>7} {'TFLOP/s':>7} "
          f"{'MHz':>5} {'W':>4} {'°C':>3} throttle")
    for ph in phases:
        inside = [s for s in samples if ph["t0"] + 0.2 <= s[0] <= ph["t1"]]  # past the ramp
        if inside:
            ph["mhz"] = sum(s[1] for s in inside) / len(inside)
            ph["watts"] = sum(s[2] for s in inside) / len(inside)
            ph["max_temp"] = max(s[3] for s in inside)
            ph["throttle"] = sorted({s[4] for s in inside})
        print(f"{ph['B']:>2} {ph['S']:>6} {ph['D']:>4} {ph['system']:8} {ph['mode']:8} "
              f"{ph['round']:>3} {ph['ms']:7.3f} {ph['tflops']:7.1f} {ph.get('mhz', 0):5.0f} "
              f"{ph.get('watts', 0):4.0f} {ph.get('max_temp', 0):3.0f} {ph.get('throttle', '?')}")
    (out / "sustained.json").write_text(json.dumps(phases, indent=1))


if __name__ == "__main__":
    main()
