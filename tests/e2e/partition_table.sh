# pfl partition prints one row per client with train/test sizes and class
# counts; pat:2 gives every client at most 2 classes; --save writes JSON
# whose index lists cover the dataset exactly once. On CIFAR-10:
# shards:2 over 20 clients gives every client 2 shards of 1,500 samples and
# at most 2 classes; FedALP's per-client Dirichlet (dirc) builds 100 clients
# at alpha 0.001, 0.01 and 0.1 with Fraboni's tier sizes and prints each
# client's class mix; cfr (Ditto's generator) deals every train-file sample.
. tests/e2e/lib.sh

"$PFL" partition --data mnist --partition pat:2 --clients 20 --save "$TMP/p.json" >"$TMP/table" ||
    fail "pfl partition failed"
[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ ' "$TMP/table")" -eq 20 ] && pass "20 client rows" ||
    fail "want 20 rows: $(cat "$TMP/table")"
awk '$1 ~ /^[0-9]+$/ && NF >= 5 && $5 > 2 { bad = 1 } END { exit bad }' "$TMP/table" && pass "at most 2 classes each" ||
    fail "a client has more than 2 classes"
grep -q "70000 of the 70000 samples used" "$TMP/table" && pass "every sample assigned" || fail "$(grep total "$TMP/table")"
# every index 0..69999 appears exactly once across train and test lists
tr -c '0-9\n' '\n' <"$TMP/p.json" | sed -n '/^[0-9][0-9]*$/p' >"$TMP/nums"
count=$(sort -n "$TMP/nums" | uniq | wc -l)
# the header carries "clients": 20 and "seed": 1, which also appear as indices
[ "$count" -eq 70000 ] && pass "saved lists cover 70000 distinct samples" || fail "saved lists cover $count"

if [ ! -d "$PFL_DATA/cifar10" ]; then
    echo "skipped the CIFAR-10 partitions: no CIFAR-10 under $PFL_DATA"
    finish
    exit 0
fi

# client rows: client train test total classes class:count...
rows() { awk '$1 ~ /^[0-9]+$/ && NF >= 5' "$1"; }

"$PFL" partition --data cifar10 --partition shards:2 --clients 20 >"$TMP/shards" 2>/dev/null || fail "shards:2 failed"
grep -q "40 shards of 1500 samples" "$TMP/shards" && pass "shards:2 says 40 shards of 1500" ||
    fail "shards:2 description: $(head -1 "$TMP/shards")"
# 20 clients x 3000 samples, at most 2 classes, each class a multiple of 1500
bad=$(rows "$TMP/shards" | awk '{ b = ($4 != 3000 || $5 > 2); for (i = 6; i <= NF; i++) { split($i, kv, ":"); if (kv[2] % 1500) b = 1 } n += b } END { print n + 0 }')
[ "$(rows "$TMP/shards" | wc -l)" -eq 20 ] && [ "$bad" -eq 0 ] && pass "shards:2: 20 clients of 2 x 1500, at most 2 classes" ||
    fail "shards:2: $bad bad rows: $(cat "$TMP/shards")"

for a in 0.001 0.01 0.1; do
    "$PFL" partition --data cifar10 --partition "dirc:$a" --clients 100 >"$TMP/dirc" 2>"$TMP/err" ||
        { fail "dirc:$a 100 clients: $(cat "$TMP/err")"; continue; }
    # Fraboni's tiers: 100/20 for clients 0-9, 250/50 for 10-39, 500/100 for 40-69, 750/150 for 70-89, 1000/200 for 90-99
    bad=$(rows "$TMP/dirc" | awk '{ t = ($1 < 10 ? 100 : $1 < 40 ? 250 : $1 < 70 ? 500 : $1 < 90 ? 750 : 1000)
        if ($2 != t || $3 != t / 5 || NF < 6) n++ } END { print n + 0 }')
    [ "$(rows "$TMP/dirc" | wc -l)" -eq 100 ] && [ "$bad" -eq 0 ] && grep -q "^total: 48500 train, 9700 test" "$TMP/dirc" &&
        pass "dirc:$a: 100 clients in Fraboni's sizes, each with its class mix" || fail "dirc:$a: $bad bad rows"
done

"$PFL" partition --data cifar10 --partition cfr --clients 20 >"$TMP/cfr" 2>/dev/null || fail "cfr failed"
train=$(sed -n 's/^total: \([0-9]*\) train.*/\1/p' "$TMP/cfr")
[ "${train:-0}" -gt 50000 ] && [ "$train" -le 50100 ] && pass "cfr: $train train samples dealt (50000 + up to 1 per label)" ||
    fail "cfr: ${train:-none} train samples"
finish
