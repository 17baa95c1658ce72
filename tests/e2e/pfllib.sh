# PFLlib's formats through the pfl command: a small PFLlib folder built of
# numpy-made client files (tests/fixtures/pfllib/: deflated and stored,
# images and AG News's text rows) trains under pfl run with its own clients;
# pfl partition --export pfllib writes a split that pfl run trains on again;
# pfl export --results-h5 writes PFLlib's results file; and what does not fit
# (another scheme, another client count, a bad --export) is refused in one
# line.
. tests/e2e/lib.sh
F=tests/fixtures/pfllib

folder() { # folder DIR CONFIG TRAIN0 TEST0 [TRAIN1 TEST1]
    local dir=$1 config=$2
    shift 2
    mkdir -p "$dir/train" "$dir/test"
    printf '%s' "$config" >"$dir/config.json"
    local i=0
    while [ $# -ge 2 ]; do
        cp "$F/$1" "$dir/train/$i.npz" && cp "$F/$2" "$dir/test/$i.npz"
        i=$((i + 1))
        shift 2
    done
}

folder "$TMP/img" '{"num_clients": 2, "num_classes": 3, "partition": "pat"}' \
    img-deflated.npz img-stored.npz img-protocol4.npz img-deflated.npz
if "$PFL" run --data "pfllib:$TMP/img" --model dnn --clients 2 --rounds 3 --batch 2 --lr 0.05 --quiet \
    --out "$TMP/img-run"; then
    [ "$(wc -l <"$TMP/img-run/metrics.jsonl")" -eq 4 ] && pass "images: 3 rounds trained on the folder's 2 clients" ||
        fail "images: $(cat "$TMP/img-run/metrics.jsonl")"
    [ "$(json_field partition "$TMP/img-run/summary.json")" = pfllib ] && pass "images: partition pfllib" ||
        fail "images: partition $(json_field partition "$TMP/img-run/summary.json")"
else
    fail "images: pfl run on the folder failed"
fi
# without --clients: the folder's own (num_clients, 2), not the default 20; given, the same global model
"$PFL" run --data "pfllib:$TMP/img" --model dnn --rounds 3 --batch 2 --lr 0.05 --quiet --out "$TMP/img-own" &&
    [ "$(json_field clients "$TMP/img-own/summary.json")" = 2 ] &&
    [ "$(json_field global_model_sha256 "$TMP/img-own/summary.json")" = "$(json_field global_model_sha256 "$TMP/img-run/summary.json")" ] &&
    pass "images: without --clients the folder's 2 clients, the same run as --clients 2" ||
    fail "images: without --clients: $(json_field clients "$TMP/img-own/summary.json") clients"
# ... and resumed (its checkpoint stores every flag, --clients and --train-fraction among them): the same run
"$PFL" run --data "pfllib:$TMP/img" --model dnn --rounds 3 --batch 2 --lr 0.05 --quiet --checkpoint-every 1 --stop-after 1 \
    --out "$TMP/img-own-resumed" && "$PFL" resume "$TMP/img-own-resumed" --quiet &&
    [ "$(json_field global_model_sha256 "$TMP/img-own-resumed/summary.json")" = "$(json_field global_model_sha256 "$TMP/img-own/summary.json")" ] &&
    pass "images: without --clients, resumed: the same run" || fail "images: without --clients, the resume differs or failed"
expect_error "images: --train-fraction on a folder split already" "--train-fraction: the clients of a PFLlib folder" \
    "$PFL" run --data "pfllib:$TMP/img" --model dnn --train-fraction 0.5 --rounds 1 --quiet
expect_error "images: --clients 3 against the folder's 2" "--clients 3: the PFLlib folder holds 2 clients" \
    "$PFL" run --data "pfllib:$TMP/img" --model dnn --clients 3 --rounds 1 --quiet
out=$("$PFL" run --data "pfllib:$TMP/img" --model dnn --clients 2 --rounds 1 --batch 2 2>&1 >/dev/null)
case $out in *"[pfl] loaded img from $TMP/img: 19 samples, 1x3x3, 3 classes"*"a PFLlib folder: 2 clients, 3 classes, partition pat (config.json)"*)
    pass "images: what was loaded is said" ;; *) fail "images: progress lines: $out" ;; esac

folder "$TMP/text" '{"num_clients": 1, "num_classes": 4}' text.npz text.npz
"$PFL" run --data "pfllib:$TMP/text" --model fasttext:27:8 --clients 1 --rounds 2 --batch 2 --quiet \
    --out "$TMP/text-run" && [ "$(wc -l <"$TMP/text-run/metrics.jsonl")" -eq 3 ] &&
    pass "text: fasttext trained on AG News's rows" || fail "text: pfl run on the folder failed"
expect_error "text ids beyond the model's vocabulary" "token id 26 is outside a vocabulary of 20 ids" \
    "$PFL" run --data "pfllib:$TMP/text" --model fasttext:20:8 --clients 1 --rounds 1 --quiet

expect_error "another scheme on a folder" "--partition dir:0.3: the data is a PFLlib folder" \
    "$PFL" run --data "pfllib:$TMP/img" --model dnn --clients 2 --partition dir:0.3 --rounds 1 --quiet
expect_error "another client count" "--clients 5: the PFLlib folder holds 2 clients" \
    "$PFL" run --data "pfllib:$TMP/img" --model dnn --clients 5 --rounds 1 --quiet
expect_error "pfllib without a folder" "--partition pfllib: takes the clients of a PFLlib folder" \
    "$PFL" partition --data mnist --partition pfllib --clients 2
expect_error "no folder" "cannot open" "$PFL" run --data "pfllib:$TMP/none" --model dnn --rounds 1 --quiet

# pfl's split out, PFLlib's folder in: the same clients, trained on
mkdir -p "$TMP/csv/agnews" && head -400 "$PFL_DATA/agnews/test.csv" >"$TMP/csv/agnews/test.csv" 2>/dev/null
if [ -s "$TMP/csv/agnews/test.csv" ]; then
    "$PFL" partition --data agnews --data-dir "$TMP/csv" --partition shards:2 --clients 4 --quiet \
        --export pfllib "$TMP/ag" || fail "agnews export failed"
    "$PFL" run --data "pfllib:$TMP/ag" --model fasttext --clients 4 --rounds 1 --quiet --out "$TMP/ag-run" &&
        pass "agnews shards:2 exported and trained on" || fail "run on the exported agnews split failed"
    grep -q '"partition":"shards:2"' "$TMP/ag/config.json" && grep -q '"num_clients":4' "$TMP/ag/config.json" &&
        pass "config.json names the scheme" || fail "config.json: $(cat "$TMP/ag/config.json")"
    expect_error "export over a folder" "exists and is not an empty folder" \
        "$PFL" partition --data agnews --data-dir "$TMP/csv" --clients 4 --quiet --export pfllib "$TMP/ag"
    [ ! -e "$TMP/ag.tmp"* ] 2>/dev/null && pass "nothing left beside it" || fail "a temporary folder was left"
else
    echo "skipped: agnews export (no $PFL_DATA/agnews/test.csv)"
fi
# config.json says what the split was and nothing made up: a folder's own split re-exported keeps its
# partition, alpha, non_iid and balance; a split pfl makes names its scheme, and alpha only for dir
folder "$TMP/own" '{"num_clients": 2, "num_classes": 3, "partition": "dir", "alpha": 0.5, "non_iid": true, "balance": false}' \
    img-deflated.npz img-stored.npz img-protocol4.npz img-deflated.npz
if "$PFL" partition --data "pfllib:$TMP/own" --quiet --export pfllib "$TMP/own-again"; then
    c="$TMP/own-again/config.json"
    [ "$(json_field partition "$c")" = dir ] && [ "$(json_field alpha "$c")" = 0.5 ] &&
        [ "$(json_field non_iid "$c")" = true ] && [ "$(json_field balance "$c")" = false ] &&
        pass "re-export: the folder's partition dir, alpha 0.5, non_iid, balance as its config.json had them" ||
        fail "re-export's config.json: $(head -c 300 "$c")"
else
    fail "re-export of a PFLlib folder failed"
fi
folder "$TMP/iid" '{"num_clients": 2, "num_classes": 3, "partition": null}' \
    img-deflated.npz img-stored.npz img-protocol4.npz img-deflated.npz
"$PFL" partition --data "pfllib:$TMP/iid" --quiet --export pfllib "$TMP/iid-again" &&
    grep -q '"partition": *null' "$TMP/iid-again/config.json" && ! grep -q '"alpha"' "$TMP/iid-again/config.json" &&
    pass "re-export: partition null (PFLlib's iid) kept, no alpha made up" ||
    fail "re-export of an iid folder: $(head -c 300 "$TMP/iid-again/config.json")"
"$PFL" partition --data mnist --partition pat:2 --clients 5 --quiet --export pfllib "$TMP/pat2" &&
    grep -q '"partition": *"pat:2"' "$TMP/pat2/config.json" && ! grep -q '"alpha"' "$TMP/pat2/config.json" &&
    pass "export pat:2: its scheme, no alpha" || fail "export pat:2: $(head -c 300 "$TMP/pat2/config.json")"
"$PFL" partition --data mnist --partition dir:0.3 --clients 2 --quiet --export pfllib "$TMP/dir03" &&
    [ "$(json_field alpha "$TMP/dir03/config.json")" = 0.3 ] && pass "export dir:0.3: alpha 0.3" ||
    fail "export dir:0.3: $(head -c 300 "$TMP/dir03/config.json")"

expect_error "--export another format" "--export npz: the one format is pfllib" \
    "$PFL" partition --data mnist --clients 2 --export npz "$TMP/x"
expect_error "--export without its folder" "the folder to write is missing" \
    "$PFL" partition --data mnist --clients 2 --export pfllib
expect_error "a stray operand" "$TMP/y: unexpected argument" \
    "$PFL" partition --data mnist --clients 2 --export pfllib "$TMP/x" "$TMP/y"

# PFLlib's results file
if "$PFL" export "$TMP/img-run" --results-h5 "$TMP/img.h5" 2>"$TMP/h5.err"; then
    [ -s "$TMP/img.h5" ] && head -c 8 "$TMP/img.h5" | grep -q HDF && pass "pfl export wrote an HDF5 file" ||
        fail "no HDF5 file"
    # an unfinished run (its checkpoint, no summary.json): refused, not a short curve passed off as a whole run
    "$PFL" run --data "pfllib:$TMP/img" --model dnn --rounds 3 --batch 2 --quiet --checkpoint-every 1 --stop-after 1 \
        --out "$TMP/img-half" || fail "the run to stop after round 1"
    expect_error "export of an unfinished run" "the run is not finished (no summary.json" \
        "$PFL" export "$TMP/img-half" --results-h5 "$TMP/half.h5"
    [ ! -e "$TMP/half.h5" ] && pass "... and no file written" || fail "an unfinished run exported to $TMP/half.h5"
elif grep -q "built without libhdf5" "$TMP/h5.err"; then
    echo "skipped: pfl export --results-h5 (built without libhdf5)"
else
    fail "pfl export: $(cat "$TMP/h5.err")"
fi
expect_error "export without a format" "--results-h5 FILE: missing" "$PFL" export "$TMP/img-run"
expect_error "export of no run" "not a run folder" "$PFL" export "$TMP/none" --results-h5 "$TMP/none.h5"
finish
