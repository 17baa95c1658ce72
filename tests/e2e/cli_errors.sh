# Bad input gets a one-line error naming the flag or file, and a non-zero
# exit — never a crash, never a half-written output.
. tests/e2e/lib.sh

run() { "$PFL" run --rounds 1 --clients 4 --quiet "$@"; }
expect_error "negative lr" "--lr" run --lr -0.1
expect_error "zero lr" "--lr" run --lr 0
expect_error "join 0" "--join" run --join 0
expect_error "join above 1" "--join" run --join 1.5
expect_error "join not a number" "--join" run --join half
expect_error "a seed past the largest" "must be at most 9007199254740992" run --seed 99999999999999999999999
expect_error "zero clients" "--clients" run --clients 0
expect_error "fractional rounds" "--rounds" run --rounds 2.5
expect_error "missing value" "--batch" run --batch
expect_error "unknown flag" "--frobnicate" run --frobnicate 3
expect_error "stray argument" "banana" run banana
expect_error "unknown algorithm" "--algo" run --algo fedbogus
expect_error "a misspelt algorithm" "did you mean fedavg? pfl run --help lists all" run --algo fedvag
expect_error "unknown model" "--model" run --model resnet9000 --data mnist --partition iid
expect_error "unknown dataset" "--data" run --data imagenet
expect_error "bad partition" "--partition" run --partition dir:abc
expect_error "bad partition K" "--partition" run --partition pat:0
expect_error "unknown command" "frobnicate" "$PFL" frobnicate
expect_error "more clients than samples" "clients" run --data mnist --partition iid --clients 100000
# what FedFomo and APPLE cannot run (FedALA: ALA on every method "except for FedFomo and APPLE (as
# they download multiple client models)"; APPLE is cross-silo), usage errors (exit 2) before anything is made
expect_usage() { # what needle cmd...: exit 2 exactly, and expect_error's one line
    local rc
    "${@:3}" >/dev/null 2>&1; rc=$?
    [ $rc -eq 2 ] || fail "$1: exit $rc, want 2"
    expect_error "$@"
}
expect_usage "fedfomo --ala" "--ala" run --algo fedfomo --ala --out "$TMP/never1"
expect_usage "apple --ala" "--ala" run --algo apple --ala --out "$TMP/never2"
expect_usage "apple --join 0.5" "--join 0.5" run --algo apple --join 0.5 --out "$TMP/never3"
expect_usage "apple --apple-scheduler" "--apple-scheduler" run --algo apple --apple-scheduler linear --out "$TMP/never4"
# the methods' readings and FedBABU's fine-tuning moment: a word they do not know
for algo in apple apfl fedphp perfedavg; do
    expect_usage "$algo --reading" "--reading 'authors'" run --algo "$algo" --reading authors --out "$TMP/never-$algo"
done
expect_usage "fedbabu --fine-tune-at" "--fine-tune-at 'first'" run --algo fedbabu --fine-tune-at first --out "$TMP/never5"
# GPFL's output runs through its valve, so ALA's weights (learned on the backbone's output) are refused
expect_usage "gpfl --ala" "--ala" run --algo gpfl --ala --out "$TMP/never5"
# PFLlib's personalized methods: FedKD's energy must grow, FedBN shares no part of a BatchNorm layer
expect_usage "fedkd --kd-t-end below --kd-t-start" "--kd-t-end" run --algo fedkd --kd-t-end 0.9 --out "$TMP/never6"
# (--bn is resolved after the flags, so these two come when the run is made: exit 1)
expect_error "fedbn --bn stats-local" "--bn stats-local" run --algo fedbn --partition iid --bn stats-local
expect_error "fedbn --bn shared on resnet18" "--bn shared" run --algo fedbn --partition iid --model resnet18 --bn shared
[ ! -e "$TMP/never1" ] && [ ! -e "$TMP/never3" ] && [ ! -e "$TMP/never5" ] && [ ! -e "$TMP/never6" ] &&
    pass "refused runs wrote nothing" || fail "a refused run wrote its --out"
expect_error "missing data dir" "/nonexistent" run --data mnist --data-dir /nonexistent/pfl-data

# Corrupt data files: wrong magic, truncation, labels out of range.
mkdir -p "$TMP/bad/mnist"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    cp "$PFL_DATA/mnist/$f" "$TMP/bad/mnist/$f" 2>/dev/null || gzip -dc "$PFL_DATA/mnist/$f.gz" >"$TMP/bad/mnist/$f"
done
cp "$TMP/bad/mnist/t10k-labels-idx1-ubyte" "$TMP/labels.orig"
head -c 5000 "$TMP/labels.orig" >"$TMP/bad/mnist/t10k-labels-idx1-ubyte"
expect_error "truncated labels" "t10k-labels-idx1-ubyte" run --data mnist --data-dir "$TMP/bad"
{ head -c 100 "$TMP/labels.orig"; printf '\x0c'; tail -c +102 "$TMP/labels.orig"; } >"$TMP/bad/mnist/t10k-labels-idx1-ubyte"
expect_error "label out of range" "t10k-labels-idx1-ubyte" run --data mnist --data-dir "$TMP/bad"
{ printf '\x00\x00\x08\x02'; tail -c +5 "$TMP/labels.orig"; } >"$TMP/bad/mnist/t10k-labels-idx1-ubyte"
expect_error "wrong magic" "t10k-labels-idx1-ubyte" run --data mnist --data-dir "$TMP/bad"
printf 'not gzip at all' | gzip -c | head -c 20 >"$TMP/bad/mnist/t10k-labels-idx1-ubyte"
expect_error "corrupt gzip" "t10k-labels-idx1-ubyte" run --data mnist --data-dir "$TMP/bad"

# An impossible Dirichlet split ends quickly with an explanation.
start=$(date +%s)
expect_error "unsatisfiable dirichlet" "dir:0.01" "$PFL" partition --data mnist --partition dir:0.01 --clients 1000 --quiet
[ $(( $(date +%s) - start )) -le 10 ] || fail "dir:0.01 over 1000 clients took more than 10 s"

# An unwritable --out fails before any training, and leaves nothing behind.
touch "$TMP/file"
expect_error "out is a file" "$TMP/file" run --data mnist --partition iid --out "$TMP/file/sub"
finish
