# FedTSDP on MNIST (mlp, 20 clients, 5 rounds, the paper's training
# settings): on IID data the Hopkins statistic stays below h_th = 0.65 on
# average, and any round that crosses it (m~ = 2 of 20 points is a noisy
# sample) groups all clients into one cluster, the paper's "grouping all
# clients into one cluster" of homogeneous data; on pat:2 (5 pairs of labels)
# clustering happens, into a few clusters, not one per client, and the
# shared-layer count shrinks once per clustering. All read from metrics.jsonl
# (clusters, shrink events). Skipped under the sanitizers (training speed);
# the flag errors run everywhere.
. tests/e2e/lib.sh

expect_error "fedtsdp needs join 1" "--join" "$PFL" run --algo fedtsdp --data mnist --join 0.5 --rounds 1 --quiet
expect_error "bad --public" "--public" "$PFL" run --algo fedtsdp --data mnist --public abc --rounds 1 --quiet

if [ "${PFL_SANITIZED:-0}" = 1 ]; then
    echo "skipped the runs under sanitizers (training speed); they run in the optimized suite"
    finish
    exit 0
fi
for p in iid pat:2; do
    "$PFL" run --algo fedtsdp --data mnist --model mlp --partition "$p" --clients 20 --rounds 5 --epochs 2 \
        --batch 50 --lr 0.05 --momentum 0.5 --lr-decay 0.95 --train-fraction 0.8 --quiet \
        --out "$TMP/$p" || fail "$p: run failed"
done
m="$TMP/iid/metrics.jsonl"
hs=$(grep -o '"hopkins":[0-9.e-]*' "$m" | sed 's/.*://' | tr '\n' ' ')
[ "$(grep -c '"hopkins":[0-9]' "$m")" -eq 5 ] && pass "iid: H every round: $hs" || fail "iid: H missing: $hs"
awk -v h="$hs" 'BEGIN { n = split(h, a, " "); for (i = 1; i <= n; i++) s += a[i]; exit !(s / n < 0.65) }' &&
    pass "iid: mean H below 0.65" || fail "iid: mean H above 0.65: $hs"
[ "$(grep -c '"clusters":1,' "$m")" -eq 6 ] && pass "iid: one cluster every round ($(grep -c '"clustered":true' "$m") clusterings)" ||
    fail "iid: split into clusters: $(grep -o '"clusters":[0-9]*' "$m" | tr '\n' ' ')"
m="$TMP/pat:2/metrics.jsonl"
grep -q '"clustered":true' "$m" && pass "pat:2: clustered ($(grep -c '"clustered":true' "$m") rounds)" ||
    fail "pat:2: never clustered: $(grep -o '"hopkins":[^,]*' "$m" | tr '\n' ' ')"
ks=$(grep -o '"clusters":[0-9]*' "$m" | sed 's/.*://' | tr '\n' ' ')
awk -v k="$ks" 'BEGIN { n = split(k, a, " "); for (i = 2; i <= n; i++) if (a[i] < 2 || a[i] > 10) exit 1 }' &&
    pass "pat:2: 2-10 clusters of 20 clients each round: $ks" || fail "pat:2: clusters $ks"
ls_last=$(tail -1 "$m" | grep -o '"shared_layers":[^,]*' | sed 's/.*://')
awk -v l="$ls_last" 'BEGIN { exit !(l < 2) }' && pass "pat:2: L_s shrank to $ls_last" || fail "pat:2: L_s $ls_last"
[ "$(tail -1 "$m" | grep -o '"shrinks":[0-9]*')" = "\"shrinks\":$(grep -c '"shrunk":true' "$m")" ] &&
    pass "pat:2: shrinks counted per round ($(tail -1 "$m" | grep -o '"shrinks":[0-9]*'))" || fail "pat:2: shrink count"
json_field clustering_rounds "$TMP/pat:2/summary.json" >/dev/null || fail "summary without clustering_rounds"
# bytes: down is the cluster's shared prefix as it was when the round began
# (the shared_params the round before reports), up the whole model; 20
# clients, 4 bytes a float, mlp has no running statistics
bytes_ok=$(awk -F'[{:,}]' '{ for (i = 1; i < NF; i++) v[$i] = $(i + 1)
        if (v["\"round\""] > 0 && (v["\"bytes_down\""] != 80 * prev || v["\"bytes_up\""] != 80 * 159010)) bad++
        if (v["\"round\""] > 0 && v["\"bytes_down\""] < v["\"bytes_up\""]) smaller++
        prev = v["\"shared_params\""] }
    END { print (bad == 0 && smaller > 0) ? "yes" : "no" }' "$m")
[ "$bytes_ok" = yes ] && pass "pat:2: bytes down = the shared prefix sent, up = the whole model" ||
    fail "pat:2: bytes: $(grep -o '"bytes_down":[0-9]*,"bytes_up":[0-9]*' "$m" | tr '\n' ' ')"
finish
