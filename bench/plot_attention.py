"""Plots attention TFLOP/s against sequence length, per mask: tilejit (bench/attention_gpu_bench)
next to FlexAttention and the SDPA backends (the peers' JSON), forward and backward.

  python3 bench/plot_attention.py TILEJIT.jsonl PEERS.json OUT.png
"""
import json, sys
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peers = json.load(open(sys.argv[2]))
rows = [r for r in ours + peers
        if r.get("D") == 128 and r.get("Hkv", r.get("H")) == r.get("H") and "fwd_tflops" in r]
masks = ["causal", "sliding_window_1024", "document_causal", "prefix_lm", "alibi_causal",
         "softcap_causal"]
style = {"tilejit": "C0", "flex_attention": "C1", "sdpa_cudnn_attention": "C2",
         "sdpa_flash_attention": "C3"}
fig, axes = plt.subplots(2, len(masks), figsize=(4 * len(masks), 7), sharey="row")
for col, mask in enumerate(masks):
    for row, key in enumerate(["fwd_tflops", "bwd_tflops"]):
        ax = axes[row][col]
        series = defaultdict(list)
        for r in rows:
            if r["mask"] == mask:
                series[r["system"]].append((r["S"], r[key]))
        for system, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=style.get(system),
                    label=system)
        ax.set_xscale("log", base=2)
        ax.set_title(f"{mask} ({'fwd' if row == 0 else 'bwd'})", fontsize=9)
        ax.grid(alpha=0.3)
        if col == 0:
            ax.set_ylabel("TFLOP/s (unmasked elements)")
        if row == 1:
            ax.set_xlabel("sequence length (B*S = 16k; 32k: B = 1)")
axes[0][0].legend(fontsize=8)
fig.suptitle("H200, bf16, D = 128, Hq = Hkv = 16 (tilejit: Hopper forward and backward, sm_90a)")
fig.tight_layout()
fig.savefig(sys.argv[3], dpi=80)
