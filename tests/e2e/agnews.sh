# AG News end to end: the real test split (7,600 rows) through the CSV
# reader, tokenizer, partition, vocabulary and fasttext.
#  - FedAvg, fasttext:4000:32 on 2 iid clients, 3 rounds of 3 epochs at lr
#    0.5: the global accuracy must end well above chance (0.25; measured
#    0.55) and the train loss must fall (measured 1.385 -> 1.191);
#  - FedALA on 4 clients (dir:0.3): personalized accuracy above chance;
#  - wrong model/data pairings and a malformed file fail with one clear line;
#  - pfl model prints fasttext's table for AG News's 200 token ids.
# Uses $PFL_DATA/agnews/test.csv, else ../shared/data/ag_news/test.csv (linked
# into a data directory of its own); skipped only when neither exists.
. tests/e2e/lib.sh

# pfl model builds fasttext for AG News's token ids by default (no data needed)
out=$("$PFL" model --model fasttext) || fail "pfl model --model fasttext failed"
echo "$out" | grep -q "^model fasttext, input 1x1x200, 4 classes" &&
    echo "$out" | grep -q "^total: 16648708 parameters in 3 layers (5 tensors)" &&
    pass "pfl model fasttext: 1x1x200 token ids, 16648708 parameters" || fail "pfl model fasttext: $out"

data=$PFL_DATA
if [ ! -f "$data/agnews/test.csv" ]; then
    if [ -f ../shared/data/ag_news/test.csv ]; then
        data=$TMP/data
        mkdir -p "$data/agnews"
        ln -s "$(pwd)/../shared/data/ag_news/test.csv" "$data/agnews/test.csv"
    else
        echo "skipped: no AG News test.csv in $PFL_DATA/agnews nor ../shared/data/ag_news"
        finish
        exit 0
    fi
fi

"$PFL" run --algo fedavg --data agnews --data-dir "$data" --model fasttext:4000:32 --partition iid --clients 2 \
    --rounds 3 --epochs 3 --lr 0.5 --threads 2 --quiet --out "$TMP/fedavg" || fail "fedavg run failed"
acc=$(json_field final_global_acc "$TMP/fedavg/summary.json")
first=$(grep '"round":1,' "$TMP/fedavg/metrics.jsonl" | grep -o '"train_loss":[^,]*' | cut -d: -f2)
last=$(grep '"round":3,' "$TMP/fedavg/metrics.jsonl" | grep -o '"train_loss":[^,]*' | cut -d: -f2)
awk -v a="$acc" 'BEGIN { exit !(a >= 0.40) }' && pass "fedavg: final global accuracy $acc >= 0.40 (chance 0.25)" ||
    fail "fedavg: final global accuracy $acc < 0.40"
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < 0.95 * f) }' && pass "fedavg: train loss $first -> $last" ||
    fail "fedavg: train loss did not fall: $first -> $last"

"$PFL" run --algo fedala --data agnews --data-dir "$data" --model fasttext:4000:32 --partition dir:0.3 --clients 4 \
    --rounds 2 --lr 0.5 --threads 2 --quiet --out "$TMP/fedala" || fail "fedala run failed"
acc=$(json_field final_local_acc "$TMP/fedala/summary.json")
awk -v a="$acc" 'BEGIN { exit !(a >= 0.40) }' && pass "fedala: final personalized accuracy $acc >= 0.40" ||
    fail "fedala: final personalized accuracy $acc < 0.40"

expect_error "agnews with an image model" "read by --model fasttext" \
    "$PFL" run --data agnews --data-dir "$data" --model cnn --rounds 1 --quiet
expect_error "agnews with the dnn" "use --model fasttext" \
    "$PFL" run --data agnews --data-dir "$data" --model dnn --rounds 1 --quiet
expect_error "fasttext with a vocabulary of 2" "unknown model 'fasttext:2'" \
    "$PFL" run --data agnews --data-dir "$data" --model fasttext:2 --rounds 1 --quiet
mkdir -p "$TMP/bad/agnews"
printf '"1","a","b"\n"3","never closed,c\n' >"$TMP/bad/agnews/test.csv"
expect_error "malformed CSV" "bad/agnews/test.csv:2: unterminated quoted field" \
    "$PFL" run --data agnews --data-dir "$TMP/bad" --model fasttext --rounds 1 --quiet
finish
