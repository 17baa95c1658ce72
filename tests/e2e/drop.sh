# --drop-rate: selected clients drop out, the round goes on with the others.
# The same seed gives the same drops and models on 1 and 2 threads, for
# plain, masked (FLAYER) and clustering methods; every metrics line lists who
# dropped, and clients + dropped is the round's selection; the progress line
# counts them; --drop-rate 0 changes nothing; 1 is refused.
. tests/e2e/lib.sh

common=(--data mnist --model dnn --partition onelabel:50/20 --clients 10 --join 0.6 --rounds 4 --drop-rate 0.4)
cases=("fedavg" "flayer" "fedalp --groups 2 --warmup 1" "cfl --join 1 --cfl-eps1 1e9 --cfl-eps2 0 --cfl-warmup 1"
    "fedtsdp --join 1 --tsdp-hth 0")
[ "${PFL_SANITIZED:-0}" = 1 ] && cases=("flayer" "fedtsdp --join 1 --tsdp-hth 0")
strip() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }

i=0
for c in "${cases[@]}"; do
    i=$((i + 1))
    read -r -a args <<<"$c"
    for t in 1 2; do
        "$PFL" run "${common[@]}" --quiet --algo "${args[@]}" --threads $t --out "$TMP/c${i}t$t" || fail "$c --threads $t failed"
    done
    [ "$(json_field global_model_sha256 "$TMP/c${i}t1/summary.json")" = "$(json_field global_model_sha256 "$TMP/c${i}t2/summary.json")" ] &&
        [ "$(strip "$TMP/c${i}t1/metrics.jsonl")" = "$(strip "$TMP/c${i}t2/metrics.jsonl")" ] &&
        pass "$c: threads 1 and 2 agree with drops" || fail "$c: threads 1 and 2 differ with drops"
done

# Every line lists the dropped clients; they and the clients that trained make the selection (6 of 10).
m="$TMP/c1t1/metrics.jsonl"
[ "$(grep -c '"dropped":\[' "$m")" -eq 5 ] && pass "every metrics line has dropped" || fail "dropped missing: $(cat "$m")"
total_dropped=0
while read -r line; do
    round=$(echo "$line" | grep -o '"round":[0-9]*' | cut -d: -f2)
    [ "$round" = 0 ] && continue
    clients=$(echo "$line" | grep -o '"clients":[0-9]*' | cut -d: -f2)
    list=$(echo "$line" | grep -o '"dropped":\[[0-9,]*\]' | sed 's/.*\[//; s/\]//')
    n=$(echo "$list" | tr ',' '\n' | grep -c .)
    total_dropped=$((total_dropped + n))
    [ $((clients + n)) -eq 6 ] || fail "round $round: $clients clients + $n dropped != 6 selected"
    [ "$(echo "$list" | tr ',' '\n' | grep . | sort -un | wc -l)" -eq "$n" ] || fail "round $round: repeated client in $list"
done <"$m"
[ $total_dropped -gt 0 ] && pass "$total_dropped drops logged over 4 rounds" || fail "no client ever dropped at rate 0.4"

# The progress line counts them.
"$PFL" run "${common[@]}" --algo fedavg --rounds 1 2>&1 | grep -q "dropped)" && pass "progress line counts drops" ||
    fail "progress line lacks the dropped count"

# Rate 0 is the run without the flag; rate 1 is refused.
plain=(--algo flayer --data mnist --model dnn --partition onelabel:50/20 --clients 10 --join 0.6 --rounds 2 --quiet)
"$PFL" run "${plain[@]}" --out "$TMP/none" || fail "run without --drop-rate failed"
"$PFL" run "${plain[@]}" --drop-rate 0 --out "$TMP/zero" || fail "run with --drop-rate 0 failed"
[ "$(json_field global_model_sha256 "$TMP/none/summary.json")" = "$(json_field global_model_sha256 "$TMP/zero/summary.json")" ] &&
    [ "$(strip "$TMP/none/metrics.jsonl")" = "$(strip "$TMP/zero/metrics.jsonl")" ] &&
    pass "--drop-rate 0 changes nothing" || fail "--drop-rate 0 changed the run"
grep -q dropped "$TMP/zero/metrics.jsonl" && fail "--drop-rate 0 logs dropped lists" || pass "no dropped field without drops"
expect_error "drop rate 1" "--drop-rate" "$PFL" run "${plain[@]}" --drop-rate 1
finish
