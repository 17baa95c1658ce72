# A run killed with SIGKILL at a random moment while --checkpoint-every 1
# writes a checkpoint after every round, then continued with pfl resume, ends
# with the same global_model_sha256 and metrics.jsonl (timings aside) as the
# uninterrupted run. Three kills, at random delays after the first checkpoint
# exists; each says whether it caught a checkpoint being written.
. tests/e2e/lib.sh

# FedALA: client models and ALA weights are part of the state; a few MB of
# checkpoint per round, so a kill can land inside a write
common=(--algo fedala --data mnist --model mlp --partition onelabel:200/50 --clients 10 --join 0.5 --rounds 10 --quiet)
[ "${PFL_SANITIZED:-0}" = 1 ] && common=(--algo fedala --data mnist --model dnn --partition onelabel:100/20 --clients 8 --join 0.5 --rounds 8 --quiet)
strip() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }

"$PFL" run "${common[@]}" --out "$TMP/full" || fail "uninterrupted run failed"
sha_full=$(json_field global_model_sha256 "$TMP/full/summary.json")

for trial in 1 2 3; do
    out="$TMP/killed$trial"
    "$PFL" run "${common[@]}" --checkpoint-every 1 --out "$out" &
    pid=$!
    for _ in $(seq 600); do [ -e "$out/checkpoint" ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
    ms=$((RANDOM % 2000))
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    if [ -e "$out/summary.json" ]; then
        pass "trial $trial: the run finished before the kill (nothing to resume)"
        continue
    fi
    at="after round $(grep -o '"round":[0-9]*' "$out/metrics.jsonl" | tail -1 | cut -d: -f2)"
    compgen -G "$out/checkpoint.tmp*" >/dev/null && during="during a checkpoint write" || during="between checkpoint writes"
    "$PFL" resume "$out" --quiet || { fail "trial $trial: resume after a kill $at, $during, failed"; continue; }
    sha=$(json_field global_model_sha256 "$out/summary.json")
    [ "$sha" = "$sha_full" ] && pass "trial $trial: killed $at, $during; resumed fingerprint equal" ||
        fail "trial $trial: killed $at, $during; fingerprint $sha != $sha_full"
    [ "$(strip "$TMP/full/metrics.jsonl")" = "$(strip "$out/metrics.jsonl")" ] && pass "trial $trial: metrics equal" ||
        fail "trial $trial: metrics differ: $(diff <(strip "$TMP/full/metrics.jsonl") <(strip "$out/metrics.jsonl"))"
done

# Killed early: the moment the first checkpoint file appears (the
# flags alone, written before the data loads) and 1 s after the start (often
# while the data still loads); the checkpoint of the flags or of round 0 lets
# pfl resume finish it anyway. A kill before the run wrote anything (a loaded
# machine, a sanitizer build) leaves nothing to resume, and nothing lost.
for when in first 1; do
    out="$TMP/early$when"
    "$PFL" run "${common[@]}" --checkpoint-every 1 --out "$out" &
    pid=$!
    if [ "$when" = first ]; then
        for _ in $(seq 3000); do [ -e "$out/checkpoint" ] && break; sleep 0.01; done
    else
        sleep "$when"
    fi
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    [ -e "$out/summary.json" ] && { pass "killed at $when: the run had finished"; continue; }
    [ -e "$out" ] || { pass "killed at $when: before the run wrote anything (nothing to resume)"; continue; }
    [ -e "$out/checkpoint" ] || { fail "killed at $when: $out exists but holds no checkpoint to resume from"; continue; }
    "$PFL" resume "$out" --quiet || { fail "killed at $when: resume failed"; continue; }
    sha=$(json_field global_model_sha256 "$out/summary.json")
    [ "$sha" = "$sha_full" ] && pass "killed at $when: resumed fingerprint equal" ||
        fail "killed at $when: fingerprint $sha != $sha_full"
    [ "$(strip "$TMP/full/metrics.jsonl")" = "$(strip "$out/metrics.jsonl")" ] && pass "killed at $when: metrics equal" ||
        fail "killed at $when: metrics differ"
done
finish
