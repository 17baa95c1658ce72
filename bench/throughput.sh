#!/usr/bin/env bash
# Training throughput of pfl against PyTorch on the same model, batch size and
# data, measured one after the other in one run on this machine, and the
# ratio. PyTorch gets its best of 1 and 2 threads (bench/torch_throughput.py:
# a tight loop over preloaded tensors, no DataLoader). pfl is measured as a
# real federated run (`pfl run`, fedavg, IID split, 4 clients per round
# trained in parallel on the workers), reading train_samples_per_second from
# summary.json, which counts training wall time only: shuffling, batch
# gathering, SGD and aggregation included; evaluation excluded.
#
# Also reports achieved GFLOP/s (training FLOPs per sample x samples/s) and
# compares it with this machine's single-core SGEMM rate (OpenBLAS 1024^3),
# the practical peak.
#
# Usage: bench/throughput.sh [DATA] [MODEL] [BATCH]   (defaults: mnist cnn 10)
# MODEL is any model both sides have: cnn, dnn, mlp, resnet18, resnet18-cifar,
# alexnet. SAMPLES=N gives pfl only the dataset's first N samples (the rest
# held out with --public), for models too slow to train on a whole dataset
# in a benchmark: SAMPLES=4000 bench/throughput.sh cifar10 resnet18.
# REPEATS=N (default 3) measures both sides N times, alternating, and keeps
# each side's best: on a shared machine either side's rate moves by +-10%
# from one measurement to the next, and the best of each is the fairest
# comparison the noise allows (each side gets the same number of tries).
# Run it on an otherwise idle machine: both sides use both cores.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:-mnist} model=${2:-cnn} batch=${3:-10}
seconds=${SECONDS_PER_RUN:-15}
repeats=${REPEATS:-3}
samples=${SAMPLES:-0}
holdout=()
if [ "$samples" -gt 0 ]; then
    total=70000; [ "$data" = cifar10 ] && total=60000
    holdout=(--public $((total - samples)))
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
make -s build/pfl

pfl_rate() { # threads -> samples/s
    build/pfl run --algo fedavg --data "$data" --model "$model" --partition iid --clients 20 --join 0.2 \
        --rounds "$2" --batch "$batch" --eval-every 100000 --threads "$1" "${holdout[@]}" --quiet \
        --out "$out/pfl$1" --overwrite >&2
    grep -o '"train_samples_per_second": [0-9.]*' "$out/pfl$1/summary.json" | cut -d' ' -f2
}
best() { /usr/bin/python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:]))' "$@"; }
rounds=3; [ "$data" = cifar10 ] && rounds=2
pfl1=0 pfl2=0 pairs=""
for r in $(seq "$repeats"); do
    echo "== PyTorch ($data, $model, batch $batch), measurement $r of $repeats" >&2
    /usr/bin/python3 bench/torch_throughput.py --data "$data" --model "$model" --batch "$batch" \
        --threads 1,2 --seconds "$seconds" | tee -a "$out/torch.jsonl" >&2
    echo "== pfl, measurement $r of $repeats" >&2
    a=$(pfl_rate 1 2) b=$(pfl_rate 2 "$rounds")
    echo "pfl: 1 thread $a samples/s, 2 threads $b samples/s" >&2
    pfl1=$(best "$pfl1" "$a") pfl2=$(best "$pfl2" "$b") pairs="$pairs $b"
done
echo "pfl, best of $repeats: 1 thread $pfl1 samples/s, 2 threads $pfl2 samples/s" >&2

/usr/bin/python3 - "$out" "$pfl1" "$pfl2" "$data" "$model" "$batch" "$pairs" <<'PY'
import ctypes, ctypes.util, json, statistics, sys, time
import torch
out, pfl1, pfl2, data, model, batch = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:7]
pfl2_each = [float(x) for x in sys.argv[7].split()]
rows = [json.loads(l) for l in open(f"{out}/torch.jsonl")]
# measurement k's best PyTorch rate (rows come two thread counts per measurement, in order)
torch_each = []
for r in rows:
    if "threads" not in r:
        continue
    if r["threads"] == 1:
        torch_each.append(r["samples_per_second"])
    else:
        torch_each[-1] = max(torch_each[-1], r["samples_per_second"])
per_thread = {}  # the best measurement of each thread count
for r in rows:
    if "threads" in r and r["samples_per_second"] > per_thread.get(r["threads"], {"samples_per_second": -1})["samples_per_second"]:
        per_thread[r["threads"]] = r
per_thread = [per_thread[t] for t in sorted(per_thread)]
best = max(per_thread, key=lambda r: r["samples_per_second"])
flops = per_thread[0]["flops_per_sample_train"]
# single-core SGEMM rate, the practical peak (OpenBLAS through torch, 1 thread)
torch.set_num_threads(1)
for name in ("openblas", "openblas64"):
    try:
        lib = ctypes.CDLL(ctypes.util.find_library(name) or f"lib{name}.so.0")
        lib.openblas_set_num_threads(1)
        break
    except (OSError, AttributeError):
        pass
a = torch.randn(1024, 1024); b = torch.randn(1024, 1024)
torch.mm(a, b); t = time.perf_counter(); n = 20
for _ in range(n): torch.mm(a, b)
peak = 2 * 1024 ** 3 * n / (time.perf_counter() - t) / 1e9
ratio = pfl2 / best["samples_per_second"]
print(f"| {data} {model} batch {batch} | samples/s | GFLOP/s | % of 1-core SGEMM x threads |")
print("|---|---:|---:|---:|")
for r in per_thread:
    g = r["samples_per_second"] * flops / 1e9
    print(f"| PyTorch {r['torch_version']}, {r['threads']} thread(s) | {r['samples_per_second']:.0f} | {g:.1f} | {100 * g / (peak * r['threads']):.0f}% |")
for th, v in ((1, pfl1), (2, pfl2)):
    g = v * flops / 1e9
    print(f"| pfl, {th} thread(s) | {v:.0f} | {g:.1f} | {100 * g / (peak * th):.0f}% |")
print()
print(f"training FLOPs per sample: {flops / 1e6:.2f} M (3 x 2 x forward multiply-adds); single-core SGEMM: {peak:.1f} GFLOP/s")
paired = [p / t for p, t in zip(pfl2_each, torch_each)]
print(f"each measurement, pfl (2 threads) / PyTorch (its best thread count): "
      + ", ".join(f"{x:.2f}x" for x in paired) + f" (median {statistics.median(paired):.2f}x)")
print(f"pfl (2 threads) / best PyTorch ({best['threads']} thread(s)), best of {len(paired)} each: {ratio:.2f}x")
PY
