#!/usr/bin/env bash
# FedAvg in pfl against a PyTorch implementation of PFLlib's FedAvg procedure
# (bench/torch_fedavg.py), on the very same client split: pfl writes the
# partition, the PyTorch script reads it. Prints a markdown table of the
# personalized accuracy (= global model on every client's test split, the
# FedAvg convention) and train loss at selected rounds.
#
# Usage: bench/fedavg_vs_torch.sh [DATA] [PARTITION] [ROUNDS]
#        (defaults: fmnist pat:2 30; 20 clients, cnn, batch 10, lr 0.005)
# Env:   PARALLEL=1 runs both at once with one thread each (2 cores);
#        otherwise one after the other with THREADS threads (default 2).
#        OUT=DIR keeps the runs (default bench/results/fedavg_vs_torch-DATA-PARTITION).
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-fmnist} partition=${2:-pat:2} rounds=${3:-30}
out=${OUT:-bench/results/fedavg_vs_torch-$data-${partition/:/}}
threads=${THREADS:-2}
mkdir -p "$out"
make -s build/pfl
build/pfl partition --data "$data" --partition "$partition" --clients 20 --seed 1 --quiet --save "$out/partition.json"

run_pfl() {
    build/pfl run --algo fedavg --data "$data" --model cnn --partition "$partition" --clients 20 --rounds "$rounds" \
        --batch 10 --lr 0.005 --seed 1 --threads "$1" --out "$out/pfl" --overwrite 2>"$out/pfl.log"
}
run_torch() {
    /usr/bin/python3 bench/torch_fedavg.py --partition-file "$out/partition.json" --data "$data" --model cnn \
        --rounds "$rounds" --batch 10 --lr 0.005 --seed 1 --threads "$1" --out "$out/torch.jsonl" 2>"$out/torch.log"
}
if [ "${PARALLEL:-0}" = 1 ]; then
    run_pfl 1 & p=$!
    run_torch 1 & t=$!
    wait $p; wait $t
else
    run_pfl "$threads"
    run_torch "$threads"
fi

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(path):
    return {r["round"]: r for r in map(json.loads, open(path))}
pfl, torch = load(f"{out}/pfl/metrics.jsonl"), load(f"{out}/torch.jsonl")
pick = sorted({0, 1, 2, 5} | set(range(10, rounds + 1, 5)) | {rounds})
fmt = lambda v: "-" if v is None else f"{100 * v:.2f}"
lines = ["| round | pfl acc (%) | PyTorch acc (%) | diff (points) | pfl train loss (a) | PyTorch train loss (b) |",
         "|---:|---:|---:|---:|---:|---:|"]
for r in pick:
    if r not in pfl or r not in torch: continue
    a, b = pfl[r]["local_acc"], torch[r]["local_acc"]
    la, lb = pfl[r].get("train_loss"), torch[r].get("train_loss")
    lf = lambda v: "-" if v is None else f"{v:.4f}"
    lines.append(f"| {r} | {fmt(a)} | {fmt(b)} | {100 * (a - b):+.2f} | {lf(la)} | {lf(lb)} |")
common = [r for r in pfl if r in torch and r > 0]
gap = max(abs(pfl[r]["local_acc"] - torch[r]["local_acc"]) for r in common)
mean_gap = sum(pfl[r]["local_acc"] - torch[r]["local_acc"] for r in common) / len(common)
lines.append("")
lines.append(f"Rounds 1-{rounds}: largest |difference| {100 * gap:.2f} points, mean difference {100 * mean_gap:+.2f} points.")
lines.append("(a) mean loss of the round's local training batches; (b) PFLlib's train_metrics: the global model "
             "on every client's training split. They measure different things.")
text = "\n".join(lines)
open(f"{out}/table.md", "w").write(text + "\n")
print(text)
PY
