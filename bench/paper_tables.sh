#!/usr/bin/env bash
# The papers' tables, one per preset in configs/ (configs/README.md), each at
# the budget its file states (`budget:` rounds, seeds, eval-every: what this
# machine affords; a file whose budget is not set is skipped, saying so).
# For each file: every run of its cells (`pfl preset --runs --budget FILE`
# lists them; cells whose flags are equal share one) with
#   pfl run --config FILE --cell LABEL --budget --out OUT/RUN --checkpoint-every 1
# then `pfl table --config FILE OUT` writes OUT/table.md: pfl's mean ± std
# beside the paper's numbers, the gap, the best in bold.
#
# Resumable: rerunning the script keeps every finished run (OUT/RUN/summary.json)
# whose flags are still the file's, goes on with an interrupted one from its
# checkpoint (`pfl resume OUT/RUN`: the seed that was running resumes, the
# others are kept or run), and reruns a run whose flags changed (the file or its
# budget was edited). Cells pfl cannot run yet (a method or flag the file marks
# pending, a value neither the paper nor the file gives) are listed and appear
# in the table as not run, with the reason.
#
# Usage: bench/paper_tables.sh [CONFIG.yaml...]   (default: configs/*.yaml)
# Env OUT_ROOT (default bench/results): results in $OUT_ROOT/<file name>/;
# PFL (default build/pfl, built first): the pfl to run;
# RUNS="fedavg pfedcfr": only these runs (the folder names `pfl preset FILE`
# lists), the table's other rows say "no run";
# FLAGS="--rounds 2 --seeds 1": flags given on pfl run's command line, so
# they win over the cell's and the budget's (a quick look at a table, or the
# budget of a file that sets none: FLAGS="--rounds 2 --seeds 1 --eval-every 1"; they
# are part of a run's recorded flags, so a later run without them starts that
# run over). E.g. one cell end to end, in a minute:
#   RUNS=fedavg FLAGS="--rounds 2 --seeds 1-2" OUT_ROOT=/tmp/t bench/paper_tables.sh configs/pfedcfr-t2-mnist-dnn.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${PFL:-}" ] || { make -s build/pfl; PFL=build/pfl; }
root=${OUT_ROOT:-bench/results}
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(configs/*.yaml)
for f in "${files[@]}"; do # every file checked before anything runs
    [ -f "$f" ] || { echo "paper_tables.sh: $f: no such file" >&2; exit 2; }
    $PFL preset --check "$f" >/dev/null
done

read -r -a extra <<<"${FLAGS:-}" # on pfl run's command line, so over the file's
failed=0
for f in "${files[@]}"; do
    name=$(basename "$f" .yaml)
    out=$root/$name
    runs=$($PFL preset --runs --budget "$f" -- "${extra[@]}")
    if ! grep -q $'\tready\t' <<<"$runs"; then
        why=$(cut -f3 <<<"$runs" | sed 's/^skip: //' | sort | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //')
        [[ "$why" != *"budget is not set"* ]] || why="$why (FLAGS=\"--rounds N --seeds S --eval-every E\" fills the budget)"
        echo "== $name: skipped: $why" >&2
        continue
    fi
    mkdir -p "$out"
    while IFS=$'\t' read -r run label status flags; do
        dir=$out/$run
        if [ -n "${RUNS:-}" ] && [[ " $RUNS " != *" $run "* ]]; then
            echo "== $name/$run: not in RUNS" >&2
            continue
        fi
        if [ "$status" != ready ]; then
            echo "== $name/$run: not run: ${status#skip: }" >&2
            continue
        fi
        if [ -f "$dir/summary.json" ] && [ "$(cat "$dir.flags" 2>/dev/null)" = "$flags" ]; then
            echo "== $name/$run: kept ($dir/summary.json)" >&2
            continue
        fi
        if [ -f "$dir/checkpoint" ] && [ "$(cat "$dir.flags" 2>/dev/null)" = "$flags" ]; then
            echo "== $name/$run: continuing from $dir/checkpoint" >&2
            cmd=("$PFL" resume "$dir")
        else
            rm -rf "$dir"
            printf '%s\n' "$flags" >"$dir.flags"
            echo "== $name/$run: $flags" >&2
            cmd=("$PFL" run --config "$f" --cell "$label" --budget "${extra[@]}" --out "$dir" --checkpoint-every 1)
        fi
        if ! "${cmd[@]}" 2> >(tee -a "$dir.log" >&2); then
            echo "== $name/$run FAILED, see $dir.log: $(tail -1 "$dir.log")" >&2
            failed=$((failed + 1))
        fi
    done <<<"$runs"
    $PFL table --config "$f" "$out" --out "$out/table.md"
    echo "== $name: wrote $out/table.md" >&2
done
[ $failed = 0 ] || { echo "paper_tables.sh: $failed run(s) failed" >&2; exit 1; }
