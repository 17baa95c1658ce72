#!/usr/bin/env bash
# How the time to read a preset grows with its size: `pfl preset --check` on
# hostile files of 256 KiB and of 1 MiB (the most a preset may be) of each
# shape below, the best of three runs each, and the ratio of the two times.
# Linear time gives about 4; the quadratic reading this replaced gave about
# 16 (nesting: 100,000 '[' took 24 s, README "Robustness").
#
#   bench/preset_scaling.sh [PFL]        (default build/pfl)
#
# Shapes: '[' nested as deep as the file goes (refused at 17 levels), one
# mapping of many keys, a long list of small mappings, a long seeds list, a
# long plain scalar, many comments.
set -euo pipefail
cd "$(dirname "$0")/.."
PFL=${1:-build/pfl}
[ -x "$PFL" ] || make -s build/pfl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

make_file() { # shape bytes path
    python3 - "$1" "$2" "$3" <<'PY'
import sys
shape, size, path = sys.argv[1], int(sys.argv[2]) - 200, sys.argv[3]
head = "paper: P\ntable: T\ncolumn: C\ncells: [{algo: fedavg, label: FedAvg}]\n"
if shape == "nesting":
    body = "derived: " + "[" * size
elif shape == "keys":
    lines, n, total = [], 0, 0
    while total < size:
        lines.append("  k%d: 1\n" % n); total += len(lines[-1]); n += 1
    body = "setting:\n" + "".join(lines)
elif shape == "list":
    body = "derived:\n" + "  - {what: w, printed: p, computed: c}\n" * (size // 38)
elif shape == "seeds":
    body = "budget:\n  seeds: [" + ",".join(["1"] * (size // 2)) + "]\n"
elif shape == "scalar":
    body = "derived: [" + "a" * size + "]\n"
else:  # comments
    body = "# a comment line of about forty bytes ...\n" * (size // 42)
open(path, "w").write(head + body)
PY
}

best_of_3() { # path -> seconds
    local best=
    for _ in 1 2 3; do
        local start end t
        start=$(date +%s.%N)
        "$PFL" preset --check "$1" >/dev/null 2>&1 || true
        end=$(date +%s.%N)
        t=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.4f", b - a }')
        best=$(awk -v a="${best:-$t}" -v b="$t" 'BEGIN { print (b < a ? b : a) }')
    done
    echo "$best"
}

echo "| shape | 256 KiB (s) | 1 MiB (s) | ratio (linear: 4) |"
echo "|---|---|---|---|"
for shape in nesting keys list seeds scalar comments; do
    make_file "$shape" 262144 "$tmp/small.yaml"
    make_file "$shape" 1048576 "$tmp/large.yaml"
    a=$(best_of_3 "$tmp/small.yaml") b=$(best_of_3 "$tmp/large.yaml")
    echo "| $shape | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f", b / (a > 0 ? a : 1e-9) }') |"
done
