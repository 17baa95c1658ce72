# --out writes metrics.jsonl (one object per evaluated round, round 0 first)
# and summary.json with every field the docs promise; Local reports no global
# accuracy (null) and personalized accuracy above chance; the client store's
# bytes are what each method keeps per client.
. tests/e2e/lib.sh

"$PFL" run --algo local --data mnist --model mlp --partition pat:2 --clients 10 --rounds 3 --eval-every 2 \
    --quiet --out "$TMP/local" || fail "local run failed"
m="$TMP/local/metrics.jsonl" s="$TMP/local/summary.json"
[ "$(wc -l <"$m")" -eq 3 ] && pass "rounds 0, 2 and 3 evaluated" || fail "want 3 metric lines: $(cat "$m")"
for key in round local_acc local_acc_mean local_acc_std global_acc train_loss seconds; do
    grep -q "\"$key\":" "$m" && pass "metrics has $key" || fail "metrics lacks $key"
done
grep -q '"round":0,' "$m" && grep -q '"round":2,' "$m" && grep -q '"round":3,' "$m" || fail "wrong rounds: $(cat "$m")"
for key in algo data model partition clients rounds seed threads params best_local_acc final_local_acc \
    best_global_acc final_global_acc seconds_per_round train_samples_per_second global_model_sha256; do
    grep -q "\"$key\":" "$s" && pass "summary has $key" || fail "summary lacks $key"
done
[ "$(json_field final_global_acc "$s")" = null ] && pass "local has no global accuracy" || fail "local global acc not null"
acc=$(json_field final_local_acc "$s")
awk -v a="$acc" 'BEGIN { exit !(a > 0.9) }' && pass "local on pat:2 personalizes ($acc)" ||
    fail "local personalized accuracy $acc not above 0.9"
[ "$(json_field params "$s")" = 159010 ] && pass "mlp has 159010 parameters" || fail "mlp params $(json_field params "$s")"
[ "$(json_field bytes_down_per_round "$s")" = 0 ] && [ "$(json_field bytes_up_per_round "$s")" = 0 ] &&
    pass "local sends nothing" || fail "local message bytes $(json_field bytes_down_per_round "$s")"

# Message bytes as each method defines them: FedAvg sends and receives the
# whole mlp (159010 floats) with each of the 8 clients; FedPer keeps its
# head (fc: 2010) at home; FLAYER's mask uploads a fraction of the
# parameters plus one bit each.
common=(--data mnist --model mlp --partition onelabel:100/20 --clients 8 --rounds 2 --quiet)
"$PFL" run --algo fedavg "${common[@]}" --out "$TMP/bytes-fedavg" || fail "fedavg run failed"
"$PFL" run --algo fedper "${common[@]}" --out "$TMP/bytes-fedper" || fail "fedper run failed"
"$PFL" run --algo flayer "${common[@]}" --out "$TMP/bytes-flayer" || fail "flayer run failed"
want=$((159010 * 4 * 8))
[ "$(json_field bytes_down_per_round "$TMP/bytes-fedavg/summary.json")" = $want ] &&
    [ "$(json_field bytes_up_per_round "$TMP/bytes-fedavg/summary.json")" = $want ] &&
    pass "fedavg: $want bytes each way per round" || fail "fedavg bytes: $(grep bytes "$TMP/bytes-fedavg/summary.json")"
want=$(((159010 - 2010) * 4 * 8))
[ "$(json_field bytes_up_per_round "$TMP/bytes-fedper/summary.json")" = $want ] &&
    pass "fedper: the base only, $want bytes up per round" || fail "fedper bytes: $(grep bytes "$TMP/bytes-fedper/summary.json")"
up=$(json_field bytes_up_per_round "$TMP/bytes-flayer/summary.json")
awk -v u="$up" -v lo=$((159010 * 8 / 8)) -v hi=$((159010 * 4 * 8)) 'BEGIN { exit !(u > lo && u < hi) }' &&
    pass "flayer: masked uploads, $up bytes up per round" || fail "flayer bytes up $up not between mask bits and whole"
# FedAvg-C, FedProx-C, Per-FedAvg and FedPHP exchange
# FedAvg's messages (FedALA Table 3: "2*Σ"), the whole model each way; of
# them only FedPHP keeps anything, its inherited private model (the whole
# mlp, 8 clients).
for algo in fedavg-c fedprox-c perfedavg fedphp; do
    "$PFL" run --algo $algo "${common[@]}" --out "$TMP/bytes-$algo" || fail "$algo run failed"
    want=$((159010 * 4 * 8))
    [ "$(json_field bytes_down_per_round "$TMP/bytes-$algo/summary.json")" = $want ] &&
        [ "$(json_field bytes_up_per_round "$TMP/bytes-$algo/summary.json")" = $want ] &&
        pass "$algo: $want bytes each way per round" || fail "$algo bytes: $(grep bytes "$TMP/bytes-$algo/summary.json")"
    [ $algo = fedphp ] || want=0
    got=$(json_field client_state_bytes "$TMP/bytes-$algo/summary.json")
    [ "$got" = "$want" ] && pass "$algo: the client store holds $want bytes" ||
        fail "$algo: client_state_bytes $got, want $want"
done
# GPFL adds its valve (CoV: two Linear(200, 200) + LayerNorm(200),
# 81200 floats) and category embeddings (GCE: 10 x 200) to what travels, the
# extractor (fc1: 157000); the head (fc: 2010) and the two conditions (2 x
# 200) stay with each client, and summary.json counts all of them.
"$PFL" run --algo gpfl "${common[@]}" --out "$TMP/bytes-gpfl" || fail "gpfl run failed"
s_gpfl="$TMP/bytes-gpfl/summary.json" want=$(((157000 + 81200 + 2000) * 4 * 8))
[ "$(json_field bytes_down_per_round "$s_gpfl")" = $want ] && [ "$(json_field bytes_up_per_round "$s_gpfl")" = $want ] &&
    pass "gpfl: extractor, CoV and GCE, $want bytes each way per round" || fail "gpfl bytes: $(grep bytes "$s_gpfl")"
[ "$(json_field params "$s_gpfl")" = $((159010 + 83200 + 400)) ] && [ "$(json_field extra_params_shared "$s_gpfl")" = 83200 ] &&
    [ "$(json_field extra_params_per_client "$s_gpfl")" = 400 ] && pass "gpfl: 83200 shared and 400 per-client parameters added" ||
    fail "gpfl params: $(grep params "$s_gpfl")"
[ "$(json_field client_state_bytes "$s_gpfl")" = $(((2010 + 400) * 4 * 8)) ] && pass "gpfl: the client store holds heads and conditions" ||
    fail "gpfl: client_state_bytes $(json_field client_state_bytes "$s_gpfl")"
grep -q '"bytes_down":' "$TMP/bytes-fedavg/metrics.jsonl" && grep -q '"bytes_up":' "$TMP/bytes-fedavg/metrics.jsonl" &&
    pass "metrics has bytes_down and bytes_up" || fail "metrics lacks message bytes"
# Memory: the peak resident memory, and what the client store
# holds: Local, every client's whole mlp (10 clients trained); FedPer, every
# client's head (fc: 2010 floats, 8 clients); FedAvg nothing.
peak=$(json_field peak_rss_bytes "$s")
awk -v p="$peak" 'BEGIN { exit !(p > 10000000 && p < 10000000000) }' && pass "summary has peak_rss_bytes ($peak)" ||
    fail "peak_rss_bytes '$peak' not a plausible size"
# the BLAS and its kernels, as the first log line says (fingerprints differ across kernels)
blas=$(grep -o '"blas": "[^"]*"' "$s" | sed 's/^"blas": "//; s/"$//')
[ -n "$blas" ] && "$PFL" run --algo fedavg --data mnist --model mlp --partition iid --clients 2 --rounds 0 2>&1 >/dev/null |
    grep -qF "BLAS: $blas," && pass "summary names the BLAS: $blas" || fail "summary's blas '$blas' is not the log's"
for c in "local $((159010 * 4 * 10))" "bytes-fedper $((2010 * 4 * 8))" "bytes-fedavg 0"; do
    read -r run want <<<"$c"
    got=$(json_field client_state_bytes "$TMP/$run/summary.json")
    [ "$got" = "$want" ] && pass "$run: the client store holds $want bytes" || fail "$run: client_state_bytes $got, want $want"
done
ls "$TMP/local" | grep -q tmp && fail "temporary files left in --out" || pass "no temporary files left"
finish
