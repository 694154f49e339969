"""Runs a chosen subset of the peers' attention benchmark (FlexAttention, cuDNN, FA2 through
SDPA) so it fits in one GPU call next to tilejit's own benchmark.

  python3 bench/run_peers.py PEERS_DIR "2,16,8192,128;8,16,2048,128" [--mask-scaling]

PEERS_DIR holds flex_attention_peers.py; each shape is B,H,S,D[,Hkv]. JSON lines go to stdout
(and RESULTS_DIR/flex_attention_peers.json), as the full script writes them.
"""
import json, os, sys

sys.path.insert(0, sys.argv[1])
import flex_attention_peers as peers  # noqa: E402

for spec in sys.argv[2].split(";"):
    if spec.strip():
        peers.bench_shape(*[int(x) for x in spec.split(",")])
if "--mask-scaling" in sys.argv:
    peers.mask_build_scaling()
with open(os.path.join(peers.OUT, "flex_attention_peers.json"), "w") as f:
    json.dump(peers.rows, f, indent=1)
