"""The fused loss's memory per step through torch: torch's peak, what torch holds after the step
and what the library's workspace pool holds, for the Gemma-2 head of bench/compare.py, exact and
with a vocabulary order, each step synchronised, then five steps queued without a
synchronisation, then five forwards alone (as compare.py times them before its steps). It says
where compare.py's extra-memory figure for the ordered path (about one weight gradient above
bench/linear_ce_gpu_bench's, the forty-second session) came from.

    python3 bench/experiments/loss_memory_steps.py BUILD_DIR_OR_LIBRARY
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import compare  # noqa: E402  (load_tilejit, the cases and their data)

GB = 2**30


def main() -> int:
    compare.load_tilejit(sys.argv[1] if len(sys.argv) > 1 else "")
    import tilejit
    if not (torch.cuda.is_available() and tilejit.gpu_available()):
        print("no CUDA device: nothing to measure")
        return 0
    case = compare.LOSS_CASES[0]
    gen = torch.Generator().manual_seed(1)
    e, weights, targets, _ = compare.zipf_problem(case, 8192, "cuda", torch.bfloat16, gen)
    program = compare.loss_program(case)

    def show(tag: str, base: int) -> None:
        torch.cuda.synchronize()
        print(f"{tag:30s} torch peak {(torch.cuda.max_memory_allocated() - base) / GB:5.2f}"
              f"  held {(torch.cuda.memory_allocated() - base) / GB:5.2f}"
              f"  pool {tilejit.workspace_pool_held_bytes() / GB:5.2f} GB", flush=True)

    for label, order in (("exact", None), ("ordered", tilejit.VocabOrder(refresh_every=8))):
        def step():
            loss = tilejit.linear_cross_entropy(e, weights, targets, program,
                                                params={"cap": case.softcap}, vocab_order=order)
            return torch.autograd.grad(loss, [e, *weights])

        torch.cuda.synchronize()
        tilejit.trim_workspace_pool()
        base = torch.cuda.memory_allocated()
        for i in range(10):
            torch.cuda.reset_peak_memory_stats()
            step()
            show(f"{label} step {i}, synchronised", base)
        torch.cuda.reset_peak_memory_stats()
        for _ in range(5):
            step()
        show(f"{label} 5 steps queued", base)
        # compare.py's forward-only calls, under grad mode: each forward keeps what its backward
        # would need (with an order, the early weight gradients) until its stream passes it
        torch.cuda.reset_peak_memory_stats()
        torch.cuda._sleep(int(20e6))  # about 10 ms: the host queues the calls behind it
        for _ in range(5):
            tilejit.linear_cross_entropy(e, weights, targets, program,
                                         params={"cap": case.softcap}, vocab_order=order)
        show(f"{label} 5 forwards queued", base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
