#!/usr/bin/env bash
# What FedBABU's fine-tuning costs against LG-FedAvg (issue 28, Done-when 4):
# the CPU time (user + sys) of one 3-round run of each on MNIST `mlp`
# `pat:2`, 10 clients, one thread, evaluated every round, and the ratio to
# LG-FedAvg's. Rows: LG-FedAvg, FedBABU at its defaults, and FedBABU with
# each extra flag set given in FEDBABU_VARIANTS (default: PFLlib's
# `--fine-tune-epochs 10`, the authors' 5, and 0, its training alone), each
# REPEAT times (default 1), keeping the least CPU time. CPU time, not wall
# time, so that other jobs on the machine move the ratio little.
#
# Usage: bench/fedbabu_cost.sh [-- PFL_RUN_FLAGS...]   (flags added to every run)
#        REPEAT=3 FEDBABU_VARIANTS="--fine-tune-epochs 2|--fine-tune-at every" bench/fedbabu_cost.sh
# Writes bench/results/fedbabu_cost/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = -- ] && shift
make -s build/pfl
out=bench/results/fedbabu_cost
rm -rf "$out" && mkdir -p "$out"
flags=(--data mnist --model mlp --partition pat:2 --clients 10 --rounds 3 --threads 1 --quiet "$@")
IFS='|' read -r -a variants <<<"${FEDBABU_VARIANTS:---fine-tune-epochs 10|--fine-tune-epochs 5|--fine-tune-epochs 0}"

cpu_seconds() { # command...: the least user + sys seconds of REPEAT runs
    local best=""
    for ((i = 1; i <= ${REPEAT:-1}; i++)); do
        rm -rf "$out/run"
        local t
        t=$( { TIMEFORMAT='%U %S'; time "$@" --out "$out/run" >"$out/run.log" 2>&1; } 2>&1 ) ||
            { cat "$out/run.log" >&2; exit 1; }
        t=$(awk '{ printf "%.2f", $1 + $2 }' <<<"$t")
        if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }'; then best=$t; fi
    done
    echo "$best"
}

echo "== lgfedavg" >&2
lg=$(cpu_seconds build/pfl run --algo lgfedavg "${flags[@]}")
{
    echo "| run | CPU s (user + sys) | × LG-FedAvg |"
    echo "|---|---:|---:|"
    echo "| \`lgfedavg\` | $lg | 1.00 |"
    for v in "" "${variants[@]}"; do
        echo "== fedbabu $v" >&2
        # shellcheck disable=SC2086 # a variant is a set of flags
        s=$(cpu_seconds build/pfl run --algo fedbabu $v "${flags[@]}")
        label="\`fedbabu${v:+ $v}\`"; [ -n "$v" ] || label="$label (defaults)"
        echo "| $label | $s | $(awk -v a="$s" -v b="$lg" 'BEGIN { printf "%.2f", a / b }') |"
    done
} >"$out/table.md"
rm -rf "$out/run" "$out/run.log"
echo "pfl run ${flags[*]}"
cat "$out/table.md"
