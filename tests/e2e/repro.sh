# Reproducing a paper's table. Seeds (--seeds: each seed's numbers
# are the single --seed N run's, the summary's mean and std are theirs, and a
# stopped multi-seed run resumes), the per-client metrics of every registered
# method (client_acc, local_acc_p10, local_acc_min, checked by hand from the
# per-client accuracies) with the bytes per round, rounds to convergence and
# --auto-break (PFLlib's -ab/-tc rule, checked by hand on metrics.jsonl,
# resumed too), presets (configs/*.yaml all check; the order setting ->
# assumed -> cell's assumed -> cell's flags -> command line; nulls, pending
# cells and bad files refused in one line), the table of a preset (paper
# column, gap, bold) and the pictures (PNG signature, SVG parsed by xmllint).
. tests/e2e/lib.sh

tiny=(--data mnist --model mlp --partition onelabel:100/20 --quiet)
num() { grep -o "\"$1\": *[^,}]*" "$2" | head -1 | sed 's/.*: *//'; }            # a number of summary.json
stat_of() { grep -o "\"$1\": {\"mean\": [^,]*, \"std\": [^,]*" "$2" | sed 's/.*"mean": //; s/, "std": / /'; }
same_number() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-9 * (1 + (a < 0 ? -a : a))) }'; }

# ---- 1. seeds: item 1 (with a split 4 clients can cover:
# the default pat:2 cannot give 10 classes to 4 clients)
one=(--algo fedavg --data mnist --model mlp --clients 4 --rounds 2 --partition onelabel:100/20 --quiet)
"$PFL" run "${one[@]}" --seeds 1,2 --out "$TMP/D" || fail "--seeds 1,2 failed"
for s in 1 2; do
    "$PFL" run "${one[@]}" --seed $s --out "$TMP/single$s" || fail "--seed $s failed"
    [ -f "$TMP/D/seed-$s/summary.json" ] || fail "no D/seed-$s/summary.json"
    a=$(json_field global_model_sha256 "$TMP/D/seed-$s/summary.json") b=$(json_field global_model_sha256 "$TMP/single$s/summary.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "seed $s: the same model as --seed $s" || fail "seed $s: $a != $b"
    [ "$(sed -E 's/"(seconds|eval_seconds)":[^,]*//g' "$TMP/D/seed-$s/metrics.jsonl")" = \
        "$(sed -E 's/"(seconds|eval_seconds)":[^,]*//g' "$TMP/single$s/metrics.jsonl")" ] &&
        pass "seed $s: the same metrics.jsonl" || fail "seed $s: metrics.jsonl differs from --seed $s's"
done
f1=$(num final_local_acc "$TMP/single1/summary.json") f2=$(num final_local_acc "$TMP/single2/summary.json")
read -r mean std <<<"$(stat_of final_local_acc "$TMP/D/summary.json")"
want_mean=$(awk -v a="$f1" -v b="$f2" 'BEGIN { printf "%.10g", (a + b) / 2 }')
want_std=$(awk -v a="$f1" -v b="$f2" 'BEGIN { d = (a - b) / 2; printf "%.10g", d < 0 ? -d : d }') # population std of two
same_number "$mean" "$want_mean" && same_number "$std" "$want_std" &&
    pass "summary: final personalized accuracy $mean ± $std = the seed runs' ($f1, $f2)" ||
    fail "summary: $mean ± $std, the seed runs give $want_mean ± $want_std"
grep -q '"seeds": \[1, 2\]' "$TMP/D/summary.json" && grep -q '"algo": "fedavg"' "$TMP/D/summary.json" &&
    pass "summary names its seeds and the configuration" || fail "summary lacks seeds or algo: $(head -5 "$TMP/D/summary.json")"
for k in best_local_acc best_global_acc final_global_acc best_local_round converged_local_round seconds_per_round; do
    [ -n "$(stat_of $k "$TMP/D/summary.json")" ] || fail "summary over seeds has no mean and std of $k"
done
expect_error "--seeds 3-1" "--seeds" "$PFL" run --seeds 3-1 --out "$TMP/x"
expect_error "--seeds 1,1" "seed 1 twice" "$PFL" run --seeds 1,1 --out "$TMP/x"
expect_error "--seeds without --out" "--seeds" "$PFL" run --seeds 1,2

# resuming a multi-seed run goes on with the seed that was interrupted
"$PFL" run "${one[@]}" --rounds 3 --seeds 1-2 --out "$TMP/full" || fail "3-round --seeds run failed"
"$PFL" run "${one[@]}" --rounds 3 --seeds 1-2 --out "$TMP/cut" --checkpoint-every 1 --stop-after 2
[ -f "$TMP/cut/seed-1/checkpoint" ] && [ ! -e "$TMP/cut/seed-2" ] && [ ! -f "$TMP/cut/summary.json" ] &&
    pass "stopped in seed 1: no seed 2, no summary" || fail "the stopped multi-seed run left: $(ls "$TMP/cut")"
"$PFL" resume "$TMP/cut" --quiet || fail "pfl resume of a multi-seed run failed"
for s in 1 2; do
    [ "$(json_field global_model_sha256 "$TMP/cut/seed-$s/summary.json")" = \
        "$(json_field global_model_sha256 "$TMP/full/seed-$s/summary.json")" ] &&
        pass "resumed seed $s: the uninterrupted model" || fail "resumed seed $s differs"
done
[ "$(stat_of final_local_acc "$TMP/cut/summary.json")" = "$(stat_of final_local_acc "$TMP/full/summary.json")" ] &&
    pass "resumed summary over seeds: as uninterrupted" || fail "resumed summary differs"

# ---- 2. every registered method, one round: per-client accuracies and bytes
methods=$("$PFL" run --help | sed -n '/^Methods/,$p' | grep -E '^  [a-z]' | awk '{print $1}')
[ "$(wc -w <<<"$methods")" -ge 14 ] || fail "pfl run --help lists only: $methods"
for a in $methods; do
    d=$TMP/m-$a
    if ! "$PFL" run --algo "$a" "${tiny[@]}" --clients 10 --rounds 1 --out "$d" 2>"$d.err"; then
        fail "$a: one round failed: $(tail -1 "$d.err")"
        continue
    fi
    bad=$(awk -v n=10 '
        { if (!match($0, /"client_acc":\[[^]]*\]/)) { print "no client_acc in round " NR - 1; exit }
          s = substr($0, RSTART + 14, RLENGTH - 15); k = split(s, acc, ",")
          if (k != n) { print "round " NR - 1 ": " k " accuracies for " n " clients"; exit }
          for (i = 1; i <= k; i++) sorted[i] = acc[i] + 0
          for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (sorted[j] < sorted[i]) { t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t }
          sum = 0; for (i = 1; i <= k; i++) sum += acc[i]
          match($0, /"local_acc_mean":[^,]*/); mean = substr($0, RSTART + 17, RLENGTH - 17) + 0
          match($0, /"local_acc_p10":[^,]*/); p10 = substr($0, RSTART + 16, RLENGTH - 16) + 0
          match($0, /"local_acc_min":[^,]*/); mn = substr($0, RSTART + 16, RLENGTH - 16) + 0
          # ceil(10/10) = 1 client: the bottom decile is the worst client
          if ((sum / k - mean) ^ 2 > 1e-16 || (p10 - sorted[1]) ^ 2 > 1e-16 || (mn - sorted[1]) ^ 2 > 1e-16)
              { print "round " NR - 1 ": mean " mean " p10 " p10 " min " mn " but the clients give " sum / k ", " sorted[1]; exit } }' \
        "$d/metrics.jsonl")
    bytes=$(num bytes_up_per_round "$d/summary.json")
    if [ -n "$bad" ]; then fail "$a: $bad"
    elif [ -z "$bytes" ] || [ -z "$(num bytes_down_per_round "$d/summary.json")" ]; then fail "$a: no bytes per round in summary.json"
    else pass "$a: client_acc of 10 clients, p10/min/mean agree with them; $bytes bytes up a round"; fi
done

# the bottom decile of 20 clients is the mean of the 2 worst (by hand on the line)
"$PFL" run --algo fedavg "${tiny[@]}" --clients 20 --rounds 1 --out "$TMP/twenty" || fail "20-client run failed"
line=$(tail -1 "$TMP/twenty/metrics.jsonl")
got=$(grep -o '"local_acc_p10":[^,]*' <<<"$line" | cut -d: -f2)
want=$(grep -o '"client_acc":\[[^]]*' <<<"$line" | cut -d[ -f2 | tr ',' '\n' | sort -g | head -2 | awk '{ s += $1 } END { printf "%.10g", s / 2 }')
same_number "$got" "$want" && pass "20 clients: local_acc_p10 $got = mean of the 2 worst" || fail "20 clients: p10 $got, want $want"

# ---- 3. rounds to convergence and --auto-break
ab=(--algo fedavg "${tiny[@]}" --clients 4 --rounds 12 --lr 0.5 --auto-break --top-cnt 2)
"$PFL" run "${ab[@]}" --out "$TMP/ab" || fail "--auto-break run failed"
# PFLlib's check_done after each evaluation: stop when the first best (round 0 included) lies more than K back
expect_stop=$(awk -v K=2 '{ match($0, /"local_acc":[^,]*/); a = substr($0, RSTART + 12, RLENGTH - 12) + 0; n++
    if (n == 1 || a > best) { best = a; at = n } if (n - (at - 1) > K) { print n - 1; exit } }' "$TMP/ab/metrics.jsonl")
run=$(num rounds_run "$TMP/ab/summary.json")
if [ -n "$expect_stop" ] && [ "$run" = "$expect_stop" ] && grep -q '"stopped_early": true' "$TMP/ab/summary.json"; then
    pass "--auto-break --top-cnt 2: stopped after round $run, as PFLlib's rule on metrics.jsonl says"
else
    fail "--auto-break: rounds_run $run, PFLlib's rule says ${expect_stop:-none} (or stopped_early missing)"
fi
[ "$(wc -l <"$TMP/ab/metrics.jsonl")" = $((run + 1)) ] || fail "--auto-break: metrics lines beyond the stop"
conv=$(num converged_local_round "$TMP/ab/summary.json")
want=$(awk -v best="$(num best_local_acc "$TMP/ab/summary.json")" '{ match($0, /"round":[0-9]*/); r = substr($0, RSTART + 8, RLENGTH - 8) + 0
    match($0, /"local_acc":[^,]*/); a = substr($0, RSTART + 12, RLENGTH - 12) + 0
    if (r > 0 && a >= best - 0.005 - 1e-9) { print r; exit } }' "$TMP/ab/metrics.jsonl")
[ -n "$conv" ] && [ "$conv" = "$want" ] && pass "converged_local_round $conv: the first round within 0.5 points of the best" ||
    fail "converged_local_round $conv, metrics.jsonl gives $want"
"$PFL" run "${ab[@]}" --out "$TMP/ab-cut" --checkpoint-every 1 --stop-after 1
"$PFL" resume "$TMP/ab-cut" --quiet || fail "resuming an --auto-break run failed"
strip() { grep -v -E '"(threads|seconds_per_round|train_samples_per_second|total_seconds|peak_rss_bytes)":' "$1"; }
[ "$(strip "$TMP/ab/summary.json")" = "$(strip "$TMP/ab-cut/summary.json")" ] &&
    pass "--auto-break resumed: the same stop, rounds to convergence and summary" ||
    fail "--auto-break resumed differs: $(diff <(strip "$TMP/ab/summary.json") <(strip "$TMP/ab-cut/summary.json") | head -4)"
expect_error "--top-cnt without --auto-break" "--top-cnt" "$PFL" run --top-cnt 5
grep -q '"stopped_early": false' "$TMP/twenty/summary.json" || fail "a run without --auto-break does not say stopped_early false"

# ---- 4. presets
out=$("$PFL" preset --check configs/*.yaml 2>&1) && pass "every file in configs/ checks ($(grep -c '^ok' <<<"$out") files)" ||
    fail "configs/ do not check: $(grep -v '^ok' <<<"$out" | head -3)"
[ "$(grep -c '^ok' <<<"$out")" = "$(ls configs/*.yaml | wc -l)" ] || fail "not every file in configs/ was checked"
cat >"$TMP/p.yaml" <<'EOF'
# a preset for the tests
paper: Tiny
table: "Table 1"
column: "MNIST, one label"
reported: null
metric: personalized
runs: 5
unit: percent
decimals: 2
budget:
  rounds: 2
  seeds: 2
  eval-every: 1
pending:
  algos: [fancy]
  flags: [fancy-knob]
setting:
  data: mnist
  model: mlp
  partition: onelabel:100/20
  clients: 4
  rounds: 100
  batch: 5
  lr: null
  momentum: null
assumed:
  batch: 7
  lr: 0.01
  momentum: 0.5
cells:
  - algo: fedavg
    label: FedAvg
    metric: global
    assumed: {lr: 0.02, epochs: 2}
    flags: {epochs: 1, rounds: 3}
    paper: {mean: 60.5, std: 1.25}
  - algo: fedper
    label: FedPer
    flags: {head-layers: 1}
    paper: {mean: 99.00}
  - algo: fedper
    label: "FedPer, two"
    flags: {head-layers: 1, lr: 0.02}
    paper: null
  - algo: fancy
    label: Fancy
    flags: {fancy-knob: 3}
    paper: {mean: 99.5, std: 0.1}
EOF
"$PFL" run --config "$TMP/p.yaml" --algo fedavg --momentum 0.25 --quiet --out "$TMP/order" 2>/dev/null || fail "--config run failed"
got=$(for k in batch lr epochs rounds momentum; do printf '%s=%s ' $k "$(num $k "$TMP/order/summary.json")"; done)
[ "$got" = "batch=7 lr=0.02 epochs=1 rounds=3 momentum=0.25 " ] &&
    pass "setting -> assumed -> cell's assumed -> cell's flags -> command line: $got" || fail "composition gave: $got"
sed 's/^  lr: 0.01$//' "$TMP/p.yaml" >"$TMP/nolr.yaml"
sed -i '/assumed: {lr: 0.02, epochs: 2}/d' "$TMP/nolr.yaml"
expect_error "a null setting nothing assumes" "setting.lr is null" "$PFL" run --config "$TMP/nolr.yaml" --algo fedavg
"$PFL" run --config "$TMP/nolr.yaml" --algo fedavg --lr 0.05 --rounds 1 --quiet --out "$TMP/lr" 2>/dev/null &&
    [ "$(num lr "$TMP/lr/summary.json")" = 0.05 ] && pass "... given on the command line, it runs" || fail "--lr did not fill the null"
expect_error "a pending method" "not in pfl yet" "$PFL" run --config "$TMP/p.yaml" --algo fancy
expect_error "two cells of one method" "--cell" "$PFL" run --config "$TMP/p.yaml" --algo fedper
"$PFL" run --config "$TMP/p.yaml" --cell "FedPer, two" --rounds 1 --quiet --out "$TMP/two" 2>/dev/null &&
    [ "$(num lr "$TMP/two/summary.json")" = 0.02 ] && pass "--cell LABEL picks the row" || fail "--cell did not pick 'FedPer, two'"
expect_error "--cell of another method" "runs fedper" "$PFL" run --config "$TMP/p.yaml" --cell FedPer --algo fedavg
expect_error "--cell without --config" "--config" "$PFL" run --cell FedPer
expect_error "no such file" "p-missing.yaml" "$PFL" run --config "$TMP/p-missing.yaml" --algo fedavg
printf 'paper: X\ntable: T\ncolumn: C\nsetting: {}\ncells: []\nrows: 3\n' >"$TMP/badkey.yaml"
expect_error "an unknown key" "'rows' is not a key" "$PFL" run --config "$TMP/badkey.yaml" --algo fedavg
printf 'paper: X\ntable: T\ncolumn: C\nsetting: {data: [mnist\n' >"$TMP/broken.yaml"
expect_error "broken YAML" "broken.yaml:" "$PFL" preset "$TMP/broken.yaml"
sed 's/  algos: \[fancy\]/  algos: [fancy, fedavg]/' "$TMP/p.yaml" >"$TMP/stale.yaml"
expect_error "a stale pending mark" "pending.algos lists fedavg" "$PFL" preset --check "$TMP/stale.yaml"
sed 's/flags: {head-layers: 1}/flags: {head-layers: 1, mu: 0.1}/' "$TMP/p.yaml" >"$TMP/wrongflag.yaml"
expect_error "a flag of another method" "mu" "$PFL" preset --check "$TMP/wrongflag.yaml"
sed 's/  flags: \[fancy-knob\]//' "$TMP/p.yaml" >"$TMP/unmarked.yaml"
sed -i 's/flags: {head-layers: 1}/flags: {head-layers: 1, fancy-knob: 2}/' "$TMP/unmarked.yaml"
expect_error "an unmarked missing flag" "fancy-knob" "$PFL" preset --check "$TMP/unmarked.yaml"

# ---- 5. a preset's table from its runs (bench/paper_tables.sh: the loop, resumable)
PFL="$PFL" OUT_ROOT="$TMP/tables" bench/paper_tables.sh "$TMP/p.yaml" 2>"$TMP/tables.log" || fail "paper_tables.sh failed: $(tail -3 "$TMP/tables.log")"
t=$TMP/tables/p/table.md
if [ -f "$t" ]; then
    row=$(grep '^| FedAvg |' "$t")
    best=$(stat_of best_global_acc "$TMP/tables/p/fedavg/summary.json" | awk '{ printf "%.2f ± %.2f", 100 * $1, 100 * $2 }')
    gap=$(stat_of best_global_acc "$TMP/tables/p/fedavg/summary.json" | awk '{ printf "%+.2f", 100 * $1 - 60.5 }')
    [[ "$row" == *"$best"*"60.50 ± 1.25"*"$gap"* ]] && pass "FedAvg's row: pfl $best, paper 60.50 ± 1.25, gap $gap" ||
        fail "FedAvg's row: $row (want $best, 60.50 ± 1.25, $gap)"
    grep -q '^| Fancy |.*not run: fancy is not in pfl yet' "$t" && pass "a pending row says why it was not run" || fail "no reason on Fancy's row"
    sed 's/flags: {head-layers: 1}$/flags: {head-layers: 1, fancy-knob: 1}/' "$TMP/p.yaml" >"$TMP/knob.yaml"
    "$PFL" table --config "$TMP/knob.yaml" "$TMP/no-runs" | grep -q '^| FedPer |.*not run: --fancy-knob is not in pfl yet' &&
        pass "a row with a pending flag says so" || fail "FedPer with a pending flag: $("$PFL" table --config "$TMP/knob.yaml" "$TMP/no-runs" | grep '^| FedPer |')"
    grep -q '\*\*99.50 ± 0.10\*\*' "$t" && pass "the best paper value in bold" || fail "no bold paper value: $(cat "$t")"
    grep -q '^| FedPer |.*\*\*' "$t" && pass "the best pfl value in bold" || fail "FedPer's row: $(grep '^| FedPer |' "$t")"
    [ "$(grep -c '^| ' "$t")" = 5 ] || fail "table.md: want a header and 4 rows: $(cat "$t")"
else
    fail "paper_tables.sh wrote no $t"
fi
PFL="$PFL" OUT_ROOT="$TMP/tables" bench/paper_tables.sh "$TMP/p.yaml" 2>"$TMP/tables2.log"
[ "$(grep -c ': kept' "$TMP/tables2.log")" = 3 ] && pass "paper_tables.sh again: the 3 runs kept" ||
    fail "paper_tables.sh again: $(grep '==' "$TMP/tables2.log")"
# a file whose budget is not set: skipped as it is, run with FLAGS="--rounds N"
sed 's/^  rounds: 2$/  rounds: null/' "$TMP/p.yaml" >"$TMP/nobudget.yaml"
grep -q '^  rounds: null$' "$TMP/nobudget.yaml" || fail "nobudget.yaml: the budget's rounds were not nulled"
PFL="$PFL" OUT_ROOT="$TMP/tables" bench/paper_tables.sh "$TMP/nobudget.yaml" 2>"$TMP/nobudget.log"
grep -q 'nobudget: skipped: .*budget.rounds is null.*FLAGS="--rounds N --seeds S --eval-every E" fills the budget' "$TMP/nobudget.log" && [ ! -e "$TMP/tables/nobudget" ] &&
    pass "a file whose budget is not set is skipped, saying how to run it" || fail "no budget: $(cat "$TMP/nobudget.log")"
RUNS=fedper FLAGS="--rounds 1 --seeds 1" PFL="$PFL" OUT_ROOT="$TMP/tables" bench/paper_tables.sh "$TMP/nobudget.yaml" \
    2>"$TMP/nobudget2.log" || fail "FLAGS=--rounds 1 on a file without a budget failed: $(tail -3 "$TMP/nobudget2.log")"
[ "$(num rounds "$TMP/tables/nobudget/fedper/summary.json")" = 1 ] &&
    grep -q '^| FedPer | personalized | \*\*[0-9.]*\*\* |.* 1 × 1 |$' "$TMP/tables/nobudget/table.md" &&
    pass "... FLAGS=\"--rounds 1\" runs it: 1 round, a FedPer row in its table" ||
    fail "FLAGS=--rounds 1: $(cat "$TMP/tables/nobudget/table.md" 2>&1 | head -5)"
grep -q -- '--rounds 1 --seeds 1$' "$TMP/tables/nobudget/fedper.flags" && ! grep -q -- '--rounds=' "$TMP/tables/nobudget/fedper.flags" &&
    pass "the run's recorded flags end with FLAGS, which replace the file's" || fail "recorded flags: $(cat "$TMP/tables/nobudget/fedper.flags")"
"$PFL" table "$TMP/tables/p/fedavg" "$TMP/tables/p/fedper" --labels A,B >"$TMP/runs.md" &&
    grep -q '^| A |' "$TMP/runs.md" && grep -q '^| B |' "$TMP/runs.md" && pass "pfl table RUN_DIR...: a row per run" ||
    fail "pfl table of runs: $(cat "$TMP/runs.md")"
expect_error "pfl table of a folder that is no run" "summary.json" "$PFL" table "$TMP/nothing"

# ---- 6. pictures: PNG signature, SVG well-formed (xmllint)
png_ok() { [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }
"$PFL" plot "$TMP/tables/p/fedavg" "$TMP/tables/p/fedper" "$TMP/twenty" --out "$TMP/pics/curves.png" --title "a test" ||
    fail "pfl plot failed"
png_ok "$TMP/pics/curves.png" && pass "curves.png: a PNG" || fail "curves.png is not a PNG"
xmllint --noout "$TMP/pics/curves.svg" && grep -q '<svg' "$TMP/pics/curves.svg" && pass "curves.svg: well-formed SVG" ||
    fail "curves.svg does not parse"
[ -z "$(ls -A "$TMP/pics" | grep -v -x -e curves.png -e curves.svg)" ] || fail "pfl plot left: $(ls -A "$TMP/pics")"
"$PFL" partition --data mnist --partition pat:2 --clients 20 --quiet --plot "$TMP/pics/part" || fail "pfl partition --plot failed"
png_ok "$TMP/pics/part.png" && xmllint --noout "$TMP/pics/part.svg" && pass "partition picture: PNG and SVG" ||
    fail "partition picture not written or malformed"
expect_error "pfl plot of no run" "nothing" "$PFL" plot "$TMP/nothing" --out "$TMP/pics/x"
err=$(PATH=$TMP/no-such-dir "$PFL" plot "$TMP/twenty" --out "$TMP/pics/none" 2>&1 >/dev/null)
rc=$?
[ $rc = 1 ] && [ "$(printf '%s\n' "$err" | grep -c .)" = 1 ] && [[ "$err" == *"gnuplot not found"* ]] &&
    pass "without gnuplot: $err" || fail "without gnuplot: exit $rc, '$err'"
[ ! -e "$TMP/pics/none.png" ] && [ ! -e "$TMP/pics/none.svg" ] && [ -z "$(ls -A "$TMP/pics" | grep pfl-plot)" ] ||
    fail "without gnuplot something was left: $(ls -A "$TMP/pics")"
finish
