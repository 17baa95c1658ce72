#!/usr/bin/env bash
# How training throughput scales with MPI processes on this machine, and what
# travels between them per round.
#
# One FedAvg setting (default: mnist, cnn, 20 clients pat:2, join 0.5, batch
# 10, 2 rounds, evaluated only before the first and after the last round) run
#   - in one process with 1 thread and with 2 threads (the same total threads
#     as the MPI runs: this machine has 2 cores, so 2x is the ceiling),
#   - under `mpirun -np 2`: rank 0 the server, rank 1 every client, 2 threads,
#   - under `mpirun -np 3`: rank 0 the server, ranks 1 and 2 half the clients
#     each, 1 thread each,
# each REPEAT times (default 3), the four in turn, keeping each one's fastest
# run (other work on the machine only slows runs down), and a markdown table
# of seconds per round and train samples/s (training
# wall time of rank 0, which includes waiting for the uploads; evaluation
# excluded), the fingerprint of each run (they must all be equal), and the
# payload bytes per round that the transport counted: to the server (every
# upload) and to the client ranks (every upload a rank did not make itself:
# the server step is replicated), also divided by the clients of a round.
#
# Usage: bench/mpi_scaling.sh [-- PFL_RUN_FLAGS...]   (flags override the defaults)
#        TABLE_ONLY=1 bench/mpi_scaling.sh             (the table of the last runs again)
# Needs pfl built with MPI and mpirun (openmpi-bin). Run it on an idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = -- ] && shift
make -s build/pfl
command -v mpirun >/dev/null || { echo "mpi_scaling: no mpirun (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
ldd build/pfl | grep -q libmpi || { echo "mpi_scaling: build/pfl was built without MPI" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=bench/results/mpi_scaling
flags=(--algo fedavg --data mnist --model cnn --partition pat:2 --clients 20 --join 0.5 --rounds 2 --batch 10
    --eval-every 1000 --quiet "$@")
# ranks keep several threads only when Open MPI does not pin each to one core
mpi=(mpirun --oversubscribe --bind-to none)

# TABLE_ONLY=1: only tabulate the runs of a previous call
if [ "${TABLE_ONLY:-0}" != 1 ]; then
rm -rf "$out" && mkdir -p "$out"
rate() { grep -o '"train_samples_per_second": [0-9.]*' "$1/summary.json" | sed 's/.*: //'; }
run() { # label, command...: keeps the faster of this run and the best so far as $out/label
    local label=$1; shift
    echo "== $label: $*" >&2
    rm -rf "$out/try"
    "$@" --out "$out/try" 2>"$out/$label.log" || { cat "$out/$label.log" >&2; exit 1; }
    echo "   $(rate "$out/try") samples/s" >&2
    if [ ! -d "$out/$label" ] || awk -v a="$(rate "$out/try")" -v b="$(rate "$out/$label")" 'BEGIN { exit !(a > b) }'; then
        rm -rf "$out/$label" && mv "$out/try" "$out/$label"
    fi
}
for ((i = 1; i <= ${REPEAT:-3}; i++)); do
    run inproc-t1 build/pfl run "${flags[@]}" --threads 1
    run inproc-t2 build/pfl run "${flags[@]}" --threads 2
    run np2-t2 "${mpi[@]}" -np 2 build/pfl run "${flags[@]}" --threads 2
    run np3-t1 "${mpi[@]}" -np 3 build/pfl run "${flags[@]}" --threads 1
done
rm -rf "$out/try"
fi

# a summary field, empty when absent (in-process runs have no traffic fields)
field() { { grep -o "\"$1\": *[^,}]*" "$out/$2/summary.json" || true; } | head -1 | sed 's/.*: *//; s/"//g'; }
clients=$(field clients inproc-t1) join=$(field join inproc-t1)
per_round=$(awk -v c="$clients" -v j="$join" 'BEGIN { n = int(c * j + 0.5); print n < 1 ? 1 : n }')
base=$(field train_samples_per_second inproc-t1)
{
    echo "pfl run ${flags[*]}  ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(date -u +%Y-%m-%d))"
    echo
    echo "| run | processes | threads per rank | s/round | samples/s | vs 1 thread | bytes to server per round (per client) | bytes to client ranks per round (per client) | fingerprint |"
    echo "|---|---|---|---|---|---|---|---|---|"
    for label in inproc-t1 inproc-t2 np2-t2 np3-t1; do
        p=$(field processes "$label") t=$(field threads "$label")
        sps=$(field train_samples_per_second "$label") spr=$(field seconds_per_round "$label")
        up=$(field bytes_to_server_per_round "$label") down=$(field bytes_to_client_ranks_per_round "$label")
        awk -v l="$label" -v p="$p" -v t="$t" -v sps="$sps" -v spr="$spr" -v b="$base" -v up="${up:-0}" \
            -v down="${down:-0}" -v n="$per_round" -v sha="$(field global_model_sha256 "$label" | cut -c1-12)" \
            'BEGIN { printf "| %s | %d | %d | %.2f | %.0f | %.2fx | %.0f (%.0f) | %.0f (%.0f) | %s |\n",
                     l, p, t, spr, sps, sps / b, up, up / n, down, down / n, sha }'
    done
} | tee "$out/table.md"
shas=$(for l in inproc-t1 inproc-t2 np2-t2 np3-t1; do field global_model_sha256 "$l"; done | sort -u | wc -l)
[ "$shas" -eq 1 ] || { echo "mpi_scaling: the runs disagree on the global model" >&2; exit 1; }
