#!/usr/bin/env bash
# The README's first command: set up, then show what pfl is for: two
# personalized methods, FedALA and FLAYER, beside FedAvg on Fashion-MNIST
# split pathologically (2 classes per client) over 20 clients, PFLlib's
# setting (cnn, batch 10, lr 0.005, 1 local epoch), and a table of their
# personalized and global accuracies.
#
# ROUNDS=N (default 3) runs longer; each run's metrics.jsonl and summary.json
# are in out/quickstart/<method>/, and a picture of the three methods'
# accuracy curves in out/quickstart/curves.png (and .svg).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
rounds=${ROUNDS:-3}
methods=(fedavg fedala flayer)
for algo in "${methods[@]}"; do
    echo "[quickstart] $algo: $rounds rounds"
    build/pfl run --algo "$algo" --data fmnist --model cnn --partition pat:2 --clients 20 \
        --rounds "$rounds" --out "out/quickstart/$algo" --overwrite # a second quickstart replaces the first
done

field() { grep -o "\"$1\": *[^,}]*" "$2" | head -1 | sed 's/.*: *//'; }
pct() { case $1 in null|'') echo "-" ;; *) awk -v v="$1" 'BEGIN { printf "%.2f", 100 * v }' ;; esac; }
echo
echo "Fashion-MNIST pat:2, 20 clients, cnn, $rounds rounds (accuracy %, sum correct / sum test over clients):"
echo
printf '| %-7s | %-21s | %-15s | %-9s |\n' method "personalized (final)" "global (final)" "s/round"
printf '|%s|%s|%s|%s|\n' --------- ----------------------- ----------------- -----------
for algo in "${methods[@]}"; do
    s=out/quickstart/$algo/summary.json
    printf '| %-7s | %21s | %15s | %9.1f |\n' "$algo" "$(pct "$(field final_local_acc "$s")")" \
        "$(pct "$(field final_global_acc "$s")")" "$(field seconds_per_round "$s")"
done
echo
echo "FedAvg's personalized model is its global one. FedALA and FLAYER keep a model per client,"
echo "built each round from the global model and the client's own: that is personalized FL."
build/pfl plot "${methods[@]/#/out/quickstart/}" --labels FedAvg,FedALA,FLAYER --out out/quickstart/curves \
    --title "Fashion-MNIST pat:2, 20 clients, cnn: accuracy per round (solid: personalized, dashed: global)"
echo
echo "Accuracy per round of the three (personalized solid, global dashed), to open in a browser or viewer:"
echo "  $PWD/out/quickstart/curves.png"
echo "  $PWD/out/quickstart/curves.svg"
echo "drawn by: build/pfl plot out/quickstart/{fedavg,fedala,flayer} --out out/quickstart/curves"
