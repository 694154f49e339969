"""Plots the fused linear cross-entropy per shape: forward+backward ms and extra device memory of
tilejit (bench/linear_ce_gpu_bench: its best mode and the exact one) next to the peers' eager
PyTorch and torch.compile (torch_ce_peers.json), for one data kind; prints a markdown table with
the ratios against torch.compile.

  python3 bench/plot_ce.py CE_BENCH.jsonl TORCH_CE_PEERS.json OUT.png [--data zipf]

The peers' file may be missing (only tilejit is drawn). Memory: the peers count everything above
their inputs, gradients included (bf16); tilejit's bar is the same measure (its gradient outputs
included: dE in f32, dC in f32 or, with the bench's --weight-grad bf16, in bf16), the hatched
part being those outputs.
"""
import argparse, json, os, sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

SYSTEMS = [("tilejit best", "C0"), ("tilejit exact", "C9"), ("torch eager", "C3"),
           ("torch.compile", "C1")]


def load(ours_path, peers_path):
    ours = [json.loads(l) for l in open(ours_path) if l.strip().startswith("{")]
    peers = []
    if peers_path and os.path.exists(peers_path):
        peers = json.load(open(peers_path))
    else:
        print(f"plot_ce: no peers' file {peers_path!r}, drawing tilejit only", file=sys.stderr)
    return ours, peers


def by_shape(ours, peers, data):
    """shape -> {system label: row}, in the order shapes first appear; plus shape -> error."""
    table, errors = {}, {}
    for r in ours:
        if r.get("system") != "tilejit" or r.get("data") != data:
            continue
        cell = table.setdefault(r["shape"], {})
        if "error" in r:
            errors.setdefault(r["shape"], r["error"])
            continue
        if r.get("mode") == "exact":
            cell["tilejit exact"] = r
        best = cell.get("tilejit best")
        if best is None or r["fwd_bwd_ms"] < best["fwd_bwd_ms"]:
            cell["tilejit best"] = r
    names = {"torch_eager": "torch eager", "torch_compile": "torch.compile"}
    for r in peers:
        if r.get("data") != data or r.get("system") not in names or "error" in r:
            continue
        table.setdefault(r["shape"], {})[names[r["system"]]] = r
    return table, errors


def ratio(num, den):
    return f"{num / den:.2f}x" if num and den else ""


def markdown(table, errors, data):
    lines = [f"fused linear CE, data {data}: fwd+bwd ms (extra GB); "
             "speed-up = torch.compile ms / tilejit ms",
             "",
             "| shape | tilejit best (mode, tiles kept) | tilejit exact | torch eager | "
             "torch.compile | best vs compile | exact vs compile |",
             "|---|---|---|---|---|---|---|"]
    for shape, cell in table.items():
        def cellf(label):
            r = cell.get(label)
            return f"{r['fwd_bwd_ms']:.1f} ({r['fwd_bwd_mem_mb'] / 1024:.1f} GB)" if r else ""
        best = cell.get("tilejit best")
        best_s = ""
        if best:
            kept = best.get("surviving_fraction")
            kept_s = f", {kept:.0%}" if kept is not None else ""
            best_s = f"{cellf('tilejit best')} [{best['mode']}{kept_s}]"
        elif shape in errors:
            best_s = "error: " + errors[shape][:60]
        comp = cell.get("torch.compile", {}).get("fwd_bwd_ms")
        lines.append(f"| {shape} | {best_s} | {cellf('tilejit exact')} | {cellf('torch eager')} | "
                     f"{cellf('torch.compile')} | "
                     f"{ratio(comp, best['fwd_bwd_ms'] if best else None)} | "
                     f"{ratio(comp, cell.get('tilejit exact', {}).get('fwd_bwd_ms'))} |")
    return "\n".join(lines)


def plot(table, errors, data, out):
    shapes = list(table)
    width = 0.8 / len(SYSTEMS)
    fig, (ax_ms, ax_gb) = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(shapes)), 9))
    for k, (label, color) in enumerate(SYSTEMS):
        xs = [i + (k - (len(SYSTEMS) - 1) / 2) * width for i in range(len(shapes))]
        for x, shape in zip(xs, shapes):
            r = table[shape].get(label)
            if r is None:
                if label == "tilejit best" and shape in errors:
                    ax_ms.text(x, 0, " error", rotation=90, va="bottom", ha="center", fontsize=7)
                continue
            ax_ms.bar(x, r["fwd_bwd_ms"], width, color=color)
            if label == "tilejit best":
                kept = r.get("surviving_fraction")
                note = r["mode"] + (f" {kept:.0%}" if kept is not None else "")
                ax_ms.text(x, r["fwd_bwd_ms"], note, rotation=90, va="bottom", ha="center",
                           fontsize=7)
            gb = r["fwd_bwd_mem_mb"] / 1024
            outputs = r.get("grad_outputs_mb", 0) / 1024
            ax_gb.bar(x, gb - outputs, width, color=color)
            if outputs:
                ax_gb.bar(x, outputs, width, bottom=gb - outputs, color=color, alpha=0.45,
                          hatch="//", edgecolor="white")
    for ax, title in [(ax_ms, "forward + backward (ms)"),
                      (ax_gb, "extra device memory, fwd+bwd "
                               "(GB; hatched: tilejit's gradient outputs)")]:
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    # legend entries even for a system with no bar
    ax_ms.legend(handles=[Patch(color=c, label=l) for l, c in SYSTEMS], fontsize=8)
    fig.suptitle(f"fused linear cross-entropy, bf16, data {data}\n"
                 "(tilejit best: fastest of exact / filtered / state order)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ours")
    ap.add_argument("peers")
    ap.add_argument("out")
    ap.add_argument("--data", default="zipf", help="data kind to draw (zipf, flat, peaked)")
    a = ap.parse_args()
    ours, peers = load(a.ours, a.peers)
    table, errors = by_shape(ours, peers, a.data)
    if not table:
        sys.exit(f"plot_ce: no rows for data {a.data!r} in {a.ours}")
    plot(table, errors, a.data, a.out)
    print(markdown(table, errors, a.data))


if __name__ == "__main__":
    main()
