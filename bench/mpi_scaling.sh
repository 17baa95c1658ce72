#!/usr/bin/env bash
# How a run scales with MPI processes, and what travels between them per round.
#
# One FedAvg setting (default: mnist, mlp, dir:0.3:5 over C clients, every
# client every round, batch 50, 2 rounds, evaluated only before the first
# and after the last) for C = 20, 100 and 1,000 clients a round, each run
#   - in one process (P = 1),
#   - under `mpirun -np P` for P = 2, 4, 8 and 16 (rank 0 the server, the
#     others the clients; by oversubscription where the machine has fewer
#     cores), 1 thread per process,
# each REPEAT times (default 1), keeping each one's fastest run, and a
# markdown table per C: seconds per round (rank 0's training wall time,
# waiting for the ranks and the exchange included; evaluation excluded), the
# payload bytes per round that the transport counted into the server and
# into the client rank that received most, that figure over one model's
# bytes (the shared layers as float32), and the fingerprint
# (global_model_sha256), which must be the same in every row of a C (the
# script fails otherwise).
#
# Usage: bench/mpi_scaling.sh [-- PFL_RUN_FLAGS...]   (flags override the defaults)
#        PROCS="1 2 4" CLIENTS="20 100" REPEAT=3 bench/mpi_scaling.sh
#        TABLE_ONLY=1 bench/mpi_scaling.sh             (the table of the last runs again)
# Needs pfl built with MPI and mpirun (openmpi-bin).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = -- ] && shift
make -s build/pfl
command -v mpirun >/dev/null || { echo "mpi_scaling: no mpirun (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
ldd build/pfl | grep libmpi >/dev/null || { echo "mpi_scaling: build/pfl was built without MPI" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=bench/results/mpi_scaling
procs=(${PROCS:-1 2 4 8 16})
clients=(${CLIENTS:-20 100 1000})
flags=(--algo fedavg --data mnist --model mlp --partition dir:0.3:5 --join 1 --rounds 2 --batch 50 --eval-every 1000
    --threads 1 --quiet "$@")
mpi=(mpirun --oversubscribe --bind-to none)

# a summary field, empty when absent (in-process runs have no traffic fields)
field() { { grep -o "\"$1\": *[^,}]*" "$out/$2/summary.json" || true; } | head -1 | sed 's/.*: *//; s/"//g'; }

if [ "${TABLE_ONLY:-0}" != 1 ]; then
rm -rf "$out" && mkdir -p "$out"
spr() { field seconds_per_round "$1"; }
run() { # label, command...: keeps the faster of this run and the best so far as $out/label
    local label=$1; shift
    echo "== $label: $*" >&2
    rm -rf "$out/try"
    "$@" --out "$out/try" 2>"$out/$label.log" || { cat "$out/$label.log" >&2; exit 1; }
    echo "   $(spr try) s/round" >&2
    if [ ! -d "$out/$label" ] || awk -v a="$(spr try)" -v b="$(spr "$label")" 'BEGIN { exit !(a < b) }'; then
        rm -rf "$out/$label" && mv "$out/try" "$out/$label"
    fi
}
for ((i = 1; i <= ${REPEAT:-1}; i++)); do
    for c in "${clients[@]}"; do
        for p in "${procs[@]}"; do
            if [ "$p" = 1 ]; then run "c$c-p1" build/pfl run "${flags[@]}" --clients "$c"
            else run "c$c-p$p" "${mpi[@]}" -np "$p" build/pfl run "${flags[@]}" --clients "$c"; fi
        done
    done
done
rm -rf "$out/try"
fi

first="c${clients[0]}-p${procs[0]}"
model=$(( ($(field params "$first") + $(field state "$first")) * 4 ))
{
    echo "pfl run ${flags[*]} --clients C  ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(date -u +%Y-%m-%d))"
    echo
    echo "One model (the shared layers as float32): $model bytes."
    echo
    echo "| clients a round | processes | s/round | bytes into the server per round | bytes into a client rank per round (most) | ÷ one model | fingerprint |"
    echo "|---:|---:|---:|---:|---:|---:|---|"
    for c in "${clients[@]}"; do
        for p in "${procs[@]}"; do
            l="c$c-p$p"
            awk -v c="$c" -v p="$p" -v spr="$(field seconds_per_round "$l")" -v up="$(field bytes_to_server_per_round "$l")" \
                -v most="$(field bytes_to_a_client_rank_per_round "$l")" -v model="$model" \
                -v sha="$(field global_model_sha256 "$l" | cut -c1-12)" \
                'BEGIN { if (up == "") up = 0; if (most == "") most = 0
                         printf "| %d | %d | %.2f | %.0f | %.0f | %.2f | %s |\n", c, p, spr, up, most, most / model, sha }'
        done
    done
} | tee "$out/table.md"
for c in "${clients[@]}"; do
    shas=$(for p in "${procs[@]}"; do field global_model_sha256 "c$c-p$p"; done | sort -u | wc -l)
    [ "$shas" -eq 1 ] || { echo "mpi_scaling: the runs of $c clients disagree on the global model" >&2; exit 1; }
done
