# FedALP's personalized accuracy: on one-label clients (each
# digit owned by two of 20 clients) ten groups are ten digits, and a group
# model that predicts its digit scores 100% on its clients' one-digit test
# splits; the default M = 5 groups mix digits, so the metric says something.
# --fedalp-all-tests scores the same models on every client's test split
# (the other reading): the global accuracy before clustering, far less after.
. tests/e2e/lib.sh

common=(--algo fedalp --data mnist --model mlp --partition onelabel:100/20 --clients 20 --rounds 4 --warmup 2
    --epochs 2 --batch 20 --lr 0.05 --eval-every 1 --quiet)
"$PFL" run "${common[@]}" --fedalp-all-tests --out "$TMP/m5" || fail "default M: run failed"
"$PFL" run "${common[@]}" --groups 10 --out "$TMP/m10" || fail "M = 10: run failed"
s="$TMP/m5/summary.json"
[ "$(json_field groups "$s")" = 5 ] && pass "default M is 5" || fail "default M $(json_field groups "$s")"
acc5=$(json_field final_local_acc "$s")
acc10=$(json_field final_local_acc "$TMP/m10/summary.json")
awk -v a="$acc10" 'BEGIN { exit !(a == 1) }' && pass "M = 10: one digit per group, personalized accuracy $acc10" ||
    fail "M = 10: personalized accuracy $acc10, the one-digit groups should make it 1"
awk -v a="$acc5" 'BEGIN { exit !(a > 0.5 && a < 1) }' && pass "M = 5: personalized accuracy $acc5, below 1" ||
    fail "M = 5: personalized accuracy $acc5"
m="$TMP/m5/metrics.jsonl"
for r in 1 2; do
    line=$(grep "\"round\":$r," "$m")
    g=$(echo "$line" | grep -o '"global_acc":[^,]*' | sed 's/.*://')
    a=$(echo "$line" | grep -o '"local_acc_all_tests":[^,}]*' | sed 's/.*://')
    [ -n "$g" ] && [ "$g" = "$a" ] && pass "round $r (warm-up): all-tests accuracy is the global one ($a)" ||
        fail "round $r: all-tests $a, global $g"
done
line=$(grep '"round":4,' "$m")
a=$(echo "$line" | grep -o '"local_acc_all_tests":[^,}]*' | sed 's/.*://')
l=$(echo "$line" | grep -o '"local_acc":[^,]*' | sed 's/.*://')
awk -v a="$a" -v l="$l" 'BEGIN { exit !(a < l) }' &&
    pass "round 4: group models score $a on every client's tests, $l on their own" || fail "round 4: all-tests $a, own $l"
[ "$(json_field final_local_acc_all_tests "$s")" = "$a" ] && pass "summary: final_local_acc_all_tests" ||
    fail "summary: final_local_acc_all_tests $(json_field final_local_acc_all_tests "$s"), want $a"
finish
