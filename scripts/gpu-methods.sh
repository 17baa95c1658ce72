#!/usr/bin/env bash
# Runs a list of methods with pfl's CUDA backend on the GPU machine, as
# bench/compare.sh runs them, within a time budget, and hands back one
# archive. For a table that the project's 2 cores would take hours over
# (docs/results.md says which rows came from here, on which card).
#
#   scripts/gpu-methods.sh [--groups G] [--budget S] --methods "ALGO ..." -- PFL_RUN_FLAGS...
#
# The methods are dealt round-robin to G groups (default 1), in the order
# given: put first what matters most. Each group is one bench/compare.sh
# (PFL=the CUDA build) with PFL_RUN_FLAGS plus --device cuda and --threads
# (the cores divided among the groups). Groups run at once, as separate
# processes: on one GPU without MPS they take turns (time slices), and on an
# H200 four groups did about half the work of one (bench/README.md, "On a
# GPU"); more than one pays only when the runs leave the GPU idle. After S seconds (default 400, the
# build included) the groups stop: a run under way ends its round with its
# checkpoint (SIGTERM), and is listed as unfinished. A method the CUDA
# backend refuses (host-side work in its step) fails at once with its one line.
#
# Needs what scripts/gpu-check.sh needs (.gpu/ from scripts/gpu-pack.sh,
# carried with the working tree). OUT (the device tool's folder) gets
# methods.tar.gz: every group's OUT/METHOD/{metrics.jsonl,summary.json}, logs,
# commands and table.md (no checkpoints), and log.txt. Env WORK (default
# /tmp/gpu-methods), JOBS (default: the cores).
set -u
cd "$(dirname "$0")/.."
T0=$SECONDS
say() { echo "[gpu-methods $((SECONDS - T0))s] $*" >&2; }
die() { echo "gpu-methods: $*" >&2; exit 1; }
GROUPS_N=1 BUDGET=400 METHODS=
while [ $# -gt 0 ]; do
    case $1 in
        --groups) GROUPS_N=${2:?}; shift 2 ;;
        --budget) BUDGET=${2:?}; shift 2 ;;
        --methods) METHODS=${2:?}; shift 2 ;;
        --) shift; break ;;
        *) die "unknown argument $1 (see the header of scripts/gpu-methods.sh)" ;;
    esac
done
[[ "$GROUPS_N" =~ ^[1-9][0-9]*$ ]] || die "--groups $GROUPS_N: a positive count"
[[ "$BUDGET" =~ ^[1-9][0-9]*$ ]] || die "--budget $BUDGET: seconds"
[ -n "$METHODS" ] || die "--methods is required"
RESULT=${OUT:-}
WORK=${WORK:-/tmp/gpu-methods}
JOBS=${JOBS:-$(nproc)}
rm -rf "$WORK" && mkdir -p "$WORK"
exec 2> >(tee "$WORK/log.txt" >&2)

. scripts/gpu-env.sh
gpu_libs
gpu_fmnist "$WORK/data"
export PFL_DATA=$WORK/data
[ -d data/cifar10 ] && ln -sfn "$(cd data/cifar10 && pwd)" "$WORK/data/cifar10"
say "building pfl with the CUDA backend"
make -s -j"$JOBS" BUILD=build-gpu MPI=0 MATIO_LIBS= JPEG_LIBS= "${SYSFLAGS[@]}" build-gpu/pfl >"$WORK/build.log" 2>&1 ||
    { tail -20 "$WORK/build.log" >&2; die "the build failed"; }
export PFL=$PWD/build-gpu/pfl

read -r -a all <<<"$METHODS"
threads=$((JOBS / GROUPS_N > 0 ? JOBS / GROUPS_N : 1))
pids=()
for ((g = 0; g < GROUPS_N; g++)); do
    mine=()
    for ((i = g; i < ${#all[@]}; i += GROUPS_N)); do mine+=("${all[$i]}"); done
    [ ${#mine[@]} -gt 0 ] || continue
    say "group $g (--threads $threads): ${mine[*]}"
    bench/compare.sh --out-dir "$WORK/g$g" --methods "${mine[*]}" -- "$@" --device cuda --threads "$threads" \
        >"$WORK/g$g.out" 2>"$WORK/g$g.log" &
    pids+=($!)
done
pack() {
    [ -n "$RESULT" ] || return 0
    (cd "$WORK" && find . \( -name metrics.jsonl -o -name summary.json -o -name '*.log' -o -name '*.cmd' -o -name table.md \
        -o -name '*.out' -o -name log.txt \) -size -4M | tar -czf "$RESULT/methods.tar.gz.part" -T - &&
        mv "$RESULT/methods.tar.gz.part" "$RESULT/methods.tar.gz")
}
# the budget: stop the groups, then their runs (each ends its round with a checkpoint)
while :; do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    if [ $((SECONDS - T0)) -ge "$BUDGET" ]; then
        say "budget reached: stopping the groups"
        for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
        pkill -TERM -f "$PFL run" 2>/dev/null
        sleep 5
        pkill -KILL -f "$PFL run" 2>/dev/null
        break
    fi
    sleep 2
done
wait "${pids[@]}" 2>/dev/null # (not a bare wait: it would wait for the log's tee too)
for ((g = 0; g < GROUPS_N; g++)); do
    for d in "$WORK/g$g"/*/; do
        [ -d "$d" ] || continue
        m=$(basename "$d")
        if [ -f "$d/summary.json" ]; then
            say "$m: done"
        else
            say "$m: unfinished or failed: $(grep -v '^\[pfl\]' "$WORK/g$g/$m.log" 2>/dev/null | head -1 | cut -c1-200)"
        fi
    done
done
pack
say "done in $((SECONDS - T0)) s"
