# FedFomo, APPLE and PartialFed through the command:
#  - the message bytes of methods that download M client models (FedALA's
#    Table 3, "(1+M)*Sigma"): APPLE every client's core every round; FedFomo
#    none in round 1 (the server holds no upload yet, as PFLlib's
#    min(M, len(uploaded_ids))), then M = every client's, or --fomo-m;
#  - --ala on PartialFed (FedALA's Table 4) changes the run, and is kept in
#    the client store (its weights);
#  - the refusals are in cli_errors.sh, the resumes in checkpoint.sh, the
#    steps worked by hand in tests/test_multimodel.c.
. tests/e2e/lib.sh

common=(--data mnist --model mlp --partition onelabel:100/20 --clients 8 --rounds 2 --quiet)
model=$((159010 * 4)) # the mlp's floats, in bytes
metric() { # file round field
    sed -n "$(($2 + 1))p" "$1" | grep -o "\"$3\":[0-9]*" | cut -d: -f2
}
"$PFL" run --algo apple "${common[@]}" --out "$TMP/apple" || fail "apple run failed"
for r in 1 2; do
    [ "$(metric "$TMP/apple/metrics.jsonl" $r bytes_down)" = $((8 * 8 * model)) ] &&
        [ "$(metric "$TMP/apple/metrics.jsonl" $r bytes_up)" = $((8 * model)) ] &&
        pass "apple round $r: 8 clients x 8 cores down, one up each" ||
        fail "apple round $r: $(sed -n "$((r + 1))p" "$TMP/apple/metrics.jsonl" | grep -o '"bytes_[a-z]*":[0-9]*' | tr '\n' ' ')"
done
"$PFL" run --algo fedfomo "${common[@]}" --out "$TMP/fomo" || fail "fedfomo run failed"
"$PFL" run --algo fedfomo --fomo-m 3 "${common[@]}" --out "$TMP/fomo3" || fail "fedfomo --fomo-m 3 run failed"
[ "$(metric "$TMP/fomo/metrics.jsonl" 1 bytes_down)" = 0 ] && pass "fedfomo round 1: nothing to download yet" ||
    fail "fedfomo round 1 bytes_down $(metric "$TMP/fomo/metrics.jsonl" 1 bytes_down)"
[ "$(metric "$TMP/fomo/metrics.jsonl" 2 bytes_down)" = $((8 * 8 * model)) ] &&
    [ "$(metric "$TMP/fomo3/metrics.jsonl" 2 bytes_down)" = $((8 * 3 * model)) ] &&
    [ "$(metric "$TMP/fomo/metrics.jsonl" 2 bytes_up)" = $((8 * model)) ] &&
    pass "fedfomo round 2: M = 8 (and --fomo-m 3) models down per client, one up" ||
    fail "fedfomo round 2 bytes_down $(metric "$TMP/fomo/metrics.jsonl" 2 bytes_down), --fomo-m 3 $(metric "$TMP/fomo3/metrics.jsonl" 2 bytes_down)"

# ALA on PartialFed: a different run (the module mixes what the client receives), with ALA's weights stored
pf=(--algo partialfed --data mnist --model mlp --partition onelabel:100/20 --clients 6 --rounds 3 --quiet)
"$PFL" run "${pf[@]}" --out "$TMP/pf" || fail "partialfed run failed"
"$PFL" run "${pf[@]}" --ala --out "$TMP/pf-ala" || fail "partialfed --ala run failed"
a=$(json_field personal_models_sha256 "$TMP/pf/summary.json")
b=$(json_field personal_models_sha256 "$TMP/pf-ala/summary.json")
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && pass "partialfed --ala changes the personalized models" ||
    fail "partialfed --ala: personal fingerprint $b, without $a"
grep -q '"ala": true' "$TMP/pf-ala/summary.json" && pass "the summary says ala" || fail "summary lacks ala: true"
s1=$(json_field client_state_bytes "$TMP/pf/summary.json")
s2=$(json_field client_state_bytes "$TMP/pf-ala/summary.json")
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] && pass "the client store holds ALA's weights too ($s2 > $s1 bytes)" ||
    fail "client_state_bytes with --ala $s2, without $s1"
finish
