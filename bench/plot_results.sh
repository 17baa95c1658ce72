#!/usr/bin/env bash
# Draws the accuracy curves of the tables in docs/results.md from their run
# folders (docs/results/NAME/METHOD/metrics.jsonl, or METHOD/seed-N/metrics.jsonl
# for a run of several seeds: drawn as the mean with a ±1 std band): one picture per table,
# docs/results/NAME/curves.png (embedded in docs/results.md) and curves.svg
# (not committed: .gitignore), personalized accuracy solid, global dashed.
#
# Usage: bench/plot_results.sh [NAME...]   (default: every table listed below)
# Env PFL (default build/pfl, built first).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PFL:-}" ] || { make -s build/pfl; PFL=build/pfl; }

# NAME|title (rounds and seeds as the table's heading says)
tables='
pfedcfr-t2-mnist-dnn|pFedCFR Table II, MNIST dnn, 100 rounds, 3 seeds
pfedcfr-t2-fmnist-dnn|pFedCFR Table II, Fashion-MNIST dnn, 100 rounds, 3 seeds
pfedcfr-t2-cifar10-cnn|pFedCFR Table II, CIFAR-10 cnn, 100 rounds, 3 seeds
pfedcfr-mnist|pFedCFR Table II, MNIST dnn, 100 rounds, seed 1
pfedcfr-fmnist|pFedCFR Table II, Fashion-MNIST dnn, 100 rounds, seed 1
pfedcfr-cifar10|pFedCFR Table II, CIFAR-10 cnn, 100 rounds, seed 1
fmnist-pat2-r50|Fashion-MNIST pat:2, 20 clients, cnn, 50 rounds, seed 1
fmnist-pat2-r20|Fashion-MNIST pat:2, 20 clients, cnn, 20 rounds, seed 1
fmnist-pat2-r20-issue28|Fashion-MNIST pat:2, 20 clients, cnn, 20 rounds, seed 1 (the six rows issue 28 changed, at the new defaults)
fmnist-pat2-r20-protos|Fashion-MNIST pat:2, 20 clients, cnn, 20 rounds, seed 1 (the methods that exchange prototypes)
cifar10-dir01|CIFAR-10 dir:0.1, 20 clients, cnn, 20 rounds, seed 1
cifar10-dir01-r2|CIFAR-10 dir:0.1, 20 clients, cnn, 20 rounds, seed 1 (after issue 14; FedCP, GPFL)
flayer-t2-cifar10-cnn|FLAYER Table 2, CIFAR-10 dir:0.1, 20 clients, cnn, 20 rounds, seed 1 (preset)
fedala-t2-mnist-pat-r2|FedALA Table 2, MNIST pat:2, 20 clients, cnn, 2 rounds, seed 1
fedala-t2-mnist-pat-r2s3|FedALA Table 2, MNIST pat:2, 20 clients, cnn, 2 rounds, 3 seeds
fedala-t2-cifar10-pat-r2|FedALA Table 2, CIFAR-10 pat:2, 20 clients, cnn, 2 rounds, seed 1
fedtsdp-t3-cifar10-cnn|FedTSDP Table 3 setting, CIFAR-10 IID, tsdp-cnn, 3 rounds, seed 1
fedtsdp-t4-cifar10-dir0.2-cnn|FedTSDP Table 4 setting, CIFAR-10 dir:0.2, tsdp-cnn, 3 rounds, seed 1
fedtsdp-t4-cifar10-dir0.5-cnn|FedTSDP Table 4 setting, CIFAR-10 dir:0.5, tsdp-cnn, 3 rounds, seed 1
tsdp-t5-shards2|FedTSDP Table 5 setting, CIFAR-10 shards:2, tsdp-cnn, 3 rounds, seed 1
fedalp-t2-mnist-mlp|FedALP Table 2, one-label MNIST, mlp, 100 clients, M = 5, 20 rounds, 3 seeds
fedalp-t2-fmnist-mlp|FedALP Table 2, one-label Fashion-MNIST, mlp, 100 clients, M = 5, 20 rounds, 3 seeds
fedalp-mnist|FedALP, one-label MNIST, mlp, 100 clients, M = 10, 20 rounds, seed 1
fedalp-fmnist|FedALP, one-label Fashion-MNIST, mlp, 100 clients, M = 10, 20 rounds, seed 1
tsdp-cifar10-pat2-r10|FedTSDP setting, CIFAR-10 pat:2, tsdp-cnn, 10 rounds, seed 1
tsdp-cifar10-dir0.2-r10|FedTSDP setting, CIFAR-10 dir:0.2, tsdp-cnn, 10 rounds, seed 1
tsdp-cifar10-dir0.5-r10|FedTSDP setting, CIFAR-10 dir:0.5, tsdp-cnn, 10 rounds, seed 1
'
wanted=" $* "
status=0
while IFS='|' read -r name title; do
    [ -n "$name" ] || continue
    [ $# -eq 0 ] || [[ "$wanted" == *" $name "* ]] || continue
    dir=docs/results/$name
    runs=()
    for m in "$dir"/*/; do
        if [ -f "$m/metrics.jsonl" ] || [ -f "$m/seed-1/metrics.jsonl" ]; then runs+=("${m%/}"); fi
    done
    if [ ${#runs[@]} -eq 0 ]; then
        echo "plot_results.sh: $dir: no run folders with metrics.jsonl" >&2
        status=1
        continue
    fi
    labels=$(for r in "${runs[@]}"; do basename "$r"; done | paste -sd,)
    "$PFL" plot "${runs[@]}" --labels "$labels" --title "$title" --out "$dir/curves"
    echo "$dir/curves.png"
done <<<"$tables"
exit $status
