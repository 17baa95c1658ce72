#!/usr/bin/env bash
# Scale (issue 19): peak resident memory, the bytes the client store holds and
# seconds per round of `pfl run` against the number of clients, for FedAvg,
# FedPer, FedALA and Ditto on MNIST's cnn (iid split). Every run is
# --join 0.01 --rounds 2 --eval-every 2: 1% of the clients a round, so the
# training samples of a round are about the same at every size (1% of the
# clients hold 1% of the data) and what grows with the clients is what the
# run keeps and does per client (state, evaluation). From --file-from N
# clients on, Ditto (whole personal models: 2.3 MB a client) keeps its
# clients' state in a file (--client-state).
#
#   bench/scale.sh [--clients "100 1000 10000"] [--methods "fedavg fedper fedala ditto"]
#                  [--file-from 10000] [--out-dir DIR] [-- EXTRA PFL RUN FLAGS]
#
# Writes OUT/table.md (default bench/results/scale) and prints it. Columns:
# peak resident memory of the process (summary.json's peak_rss_bytes,
# getrusage: data, model, workers, uploads, client state in memory), the
# bytes the client stores hold at the end (client_state_bytes), training
# seconds per round (summary.json's seconds_per_round: selection, training,
# aggregation, broadcast), seconds of the two evaluations (rounds 0 and 2:
# every client's personalized and global accuracy), and the run's total.
# Times depend on the load of the machine; run it alone (it nices itself).
set -u
cd "$(dirname "$0")/.." || exit 1
clients="100 1000 10000"
methods="fedavg fedper fedala ditto"
file_from=10000
out=bench/results/scale
extra=()
while [ $# -gt 0 ]; do
    case $1 in
        --clients) clients=$2; shift 2 ;;
        --methods) methods=$2; shift 2 ;;
        --file-from) file_from=$2; shift 2 ;;
        --out-dir) out=$2; shift 2 ;;
        --) shift; extra=("$@"); break ;;
        *) echo "bench/scale.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
make -s build/pfl || exit 1
mkdir -p "$out"
field() { grep -o "\"$1\": *[^,}]*" "$2" | head -1 | sed 's/.*: *//; s/"//g'; }
mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }

rows=()
for n in $clients; do
    for algo in $methods; do
        run="$out/${algo}_$n"
        where=memory
        state=()
        if [ "$algo" = ditto ] && [ "$n" -ge "$file_from" ]; then
            where=file
            mkdir -p "$run.state"
            state=(--client-state "$run.state")
        fi
        echo "[scale] $algo, $n clients, state in $where" >&2
        start=$(date +%s.%N)
        if ! nice -n 10 build/pfl run --algo "$algo" --data mnist --model cnn --partition iid --clients "$n" \
            --join 0.01 --rounds 2 --eval-every 2 --quiet "${state[@]}" "${extra[@]}" --out "$run" --overwrite 2>"$run.err"; then
            rows+=("| $algo | $n | $where | failed: $(tail -1 "$run.err") | | | | |")
            continue
        fi
        end=$(date +%s.%N)
        s="$run/summary.json"
        evals=$(grep -o '"eval_seconds":[^,}]*' "$run/metrics.jsonl" | sed 's/.*://' | awk '{ t += $1 } END { printf "%.1f", t }')
        rows+=("| $algo | $n | $where | $(mb "$(field peak_rss_bytes "$s")") | $(mb "$(field client_state_bytes "$s")") | $(printf %.2f "$(field seconds_per_round "$s")") | $evals | $(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }') |")
    done
done

{
    echo "pfl run --data mnist --model cnn --partition iid --join 0.01 --rounds 2 --eval-every 2 ${extra[*]}"
    echo "($(date -u +%Y-%m-%d), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
    echo
    echo "| method | clients | client state | peak RSS (MB) | client store (MB) | s/round (training) | evaluation s (2) | total s |"
    echo "|---|---:|---|---:|---:|---:|---:|---:|"
    printf '%s\n' "${rows[@]}"
} > "$out/table.md"
cat "$out/table.md"
