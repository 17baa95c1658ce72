# Files that are not what they claim, through the pfl command:
# one line on stderr naming the file and the problem, nothing from a library
# (the MAT v7.3 file on which libhdf5 overflows a heap buffer is refused
# before libmatio opens it); and known dataset files recognized by md5: the
# official ones said so, the project's rebuilt CIFAR-10 named once, a file
# that differs from its official copy warned about even with --quiet; and
# hostile PFLlib client files (truncated, a 2 GiB size in a small zip, a
# complex dtype, a pickle calling os.system, labels outside num_classes,
# files that disagree with config.json or with each other); and FIFOs where
# a file is read (a PFLlib folder's client file or config.json, an MNIST
# file under --data-dir, a run's summary.json for pfl table): refused at
# once, never waited on (each try bounded by timeout).
. tests/e2e/lib.sh
export PFL_CACHE_DIR=${PFL_CACHE_DIR:-$TMP/cache} # the suite's cache (run-tests.sh) when there is one

mkdir -p "$TMP/sv/svhn"
for f in train_32x32.mat test_32x32.mat; do cp fuzz/repro/svhn/v73-hdf5-heap-overflow.mat "$TMP/sv/svhn/$f"; done
expect_error "svhn MAT v7.3" "train_32x32.mat: MAT-file version 7.3 (HDF5)" \
    "$PFL" run --data svhn --data-dir "$TMP/sv" --rounds 1 --clients 2 --quiet

# PFLlib folders: each hostile client file refused in one line naming it and the field
pfllib_folder() { # DIR CONFIG TRAIN0-FILE: a one-client folder, its test file a good one
    mkdir -p "$1/train" "$1/test"
    printf '%s' "$2" >"$1/config.json"
    cp "$3" "$1/train/0.npz"
    cp tests/fixtures/pfllib/img-deflated.npz "$1/test/0.npz"
}
pfllib_run() { "$PFL" run --data "pfllib:$1" --model dnn --clients 1 --rounds 1 --quiet; }
good=tests/fixtures/pfllib/img-deflated.npz one='{"num_clients": 1, "num_classes": 3}'
head -c 300 "$good" >"$TMP/cut.npz"
pfllib_folder "$TMP/p-cut" "$one" "$TMP/cut.npz"
expect_error "pfllib: a truncated zip" "p-cut/train/0.npz: zip: no end-of-central-directory record" pfllib_run "$TMP/p-cut"
size=$(stat -c %s "$good")
cd_at=$(od -An -tu4 -j $((size - 6)) -N4 "$good" | tr -d ' ') # the end record's directory offset
cp "$good" "$TMP/big.npz" && printf '\000\000\000\200' | dd of="$TMP/big.npz" bs=1 seek=$((cd_at + 24)) conv=notrunc 2>/dev/null
pfllib_folder "$TMP/p-big" "$one" "$TMP/big.npz"
expect_error "pfllib: a 2 GiB member declared in a $size-byte file" \
    "p-big/train/0.npz: zip: data.npy declares 2147483648 bytes, more than its" pfllib_run "$TMP/p-big"
pfllib_folder "$TMP/p-dtype" "$one" tests/fixtures/pfllib/hostile-complex.npz
expect_error "pfllib: a complex dtype" "p-dtype/train/0.npz: x: dtype 'c8' refused" pfllib_run "$TMP/p-dtype"
pfllib_folder "$TMP/p-global" "$one" tests/fixtures/pfllib/hostile-global.npz
expect_error "pfllib: a pickle that would run a command" "p-global/train/0.npz: pickle: global posix.system refused" \
    pfllib_run "$TMP/p-global"
pfllib_folder "$TMP/p-labels" '{"num_clients": 1, "num_classes": 2}' "$good"
expect_error "pfllib: labels outside num_classes" \
    "p-labels/train/0.npz: y: label 2 at sample 2 is outside num_classes 2 (config.json)" pfllib_run "$TMP/p-labels"
pfllib_folder "$TMP/p-stats" '{"num_clients": 1, "num_classes": 3, "Size of samples for labels in clients": [[[0, 4], [1, 4], [2, 5]]]}' "$good"
expect_error "pfllib: files that disagree with config.json" \
    "p-stats/test/0.npz: y: client 0 holds 4 samples of label 2 in its train and test files, config.json's statistics say 5" \
    pfllib_run "$TMP/p-stats"
pfllib_folder "$TMP/p-shape" '{"num_clients": 1, "num_classes": 4}' tests/fixtures/pfllib/text.npz
# the odd file may be the first one: both named
expect_error "pfllib: a file of another shape" \
    "p-shape/test/0.npz: x: images of 1x3x3 (channels x height x width), where $TMP/p-shape/train/0.npz (the first file read) holds text rows of 8 tokens" \
    pfllib_run "$TMP/p-shape"

partition() { "$PFL" partition --partition iid --clients 2 "$@" 2>&1 >/dev/null; }
if [ -d "$PFL_DATA/mnist" ]; then
    out=$(partition --data mnist)
    case $out in *"[pfl] mnist: the official files (md5 verified)"*) pass "mnist: official files" ;;
                 *) fail "mnist not recognized: $out" ;; esac
    # one label changed, still a valid one: the file loads, and differs
    mkdir -p "$TMP/bad/mnist"
    for f in "$PFL_DATA"/mnist/*; do cp "$f" "$TMP/bad/mnist/"; done
    lab=$(ls "$TMP/bad/mnist/" | grep t10k-labels)
    case $lab in
    *.gz) gzip -dc "$TMP/bad/mnist/$lab" >"$TMP/labels" && rm "$TMP/bad/mnist/$lab" ;;
    *) mv "$TMP/bad/mnist/$lab" "$TMP/labels" ;;
    esac
    b=$(od -An -tu1 -j100 -N1 "$TMP/labels" | tr -d ' ')
    { head -c 100 "$TMP/labels"; printf "\\x0$(((b + 1) % 10))"; tail -c +102 "$TMP/labels"; } >"$TMP/bad/mnist/t10k-labels-idx1-ubyte"
    cmp -s "$TMP/labels" "$TMP/bad/mnist/t10k-labels-idx1-ubyte" && fail "the label was not changed"
    out=$(partition --data mnist --data-dir "$TMP/bad" --quiet)
    case $out in *"[pfl] warning: mnist: t10k-labels-idx1-ubyte differs from the official file (md5 "*", the official one 27ae3e4e09519cfbb04c329615203637)"*)
        pass "changed label: warned with --quiet" ;;
                 *) fail "changed label not warned about: $out" ;; esac
else
    echo "skipped: mnist checks (no $PFL_DATA/mnist)"
fi
if [ -d "$PFL_DATA/cifar10" ]; then
    out=$(partition --data cifar10)
    n=$(printf '%s\n' "$out" | grep -c "the project's rebuilt CIFAR-10, not the official files")
    if [ "$n" -eq 1 ] && ! printf '%s\n' "$out" | grep -q warning; then pass "cifar10: rebuilt copy named once"
    else fail "cifar10: $out"; fi
    out=$(partition --data cifar10 --quiet)
    [ -z "$out" ] && pass "cifar10 --quiet: nothing said" || fail "cifar10 --quiet said: $out"
else
    echo "skipped: cifar10 checks (no $PFL_DATA/cifar10)"
fi

# ---- a 3 GB sparse file as a client file: refused from its tail (no zip end record), in little memory and time
mkdir -p "$TMP/p-sparse/train" "$TMP/p-sparse/test"
printf '%s' "$one" >"$TMP/p-sparse/config.json" && cp "$good" "$TMP/p-sparse/test/0.npz"
truncate -s 3G "$TMP/p-sparse/train/0.npz"
if [ "${PFL_SANITIZED:-0}" = 1 ]; then
    # AddressSanitizer reserves terabytes of shadow address space at start,
    # so no address-space cap can hold it: the refusal and its time only.
    expect_error "a 3 GB sparse client file (sanitized: no address-space cap)" "p-sparse/train/0.npz: zip: no end-of-central-directory" \
        timeout 20 "$PFL" run --data "pfllib:$TMP/p-sparse" --model dnn --clients 1 --rounds 1 --quiet
else
    expect_error "a 3 GB sparse client file, under a 1 GB address-space cap" "p-sparse/train/0.npz: zip: no end-of-central-directory" \
        bash -c 'ulimit -v 1000000; exec timeout 20 "$@"' - "$PFL" run --data "pfllib:$TMP/p-sparse" --model dnn --clients 1 --rounds 1 --quiet
fi

# ---- FIFOs where files are read: refused at once, not waited on (a hang ends in timeout's exit 124)
fifo_refused() { # WHAT NEEDLE COMMAND...: at most 20 s, one line naming the file, exit 1 or 2
    local what=$1 needle=$2
    shift 2
    expect_error "$what" "$needle" timeout 20 "$@"
}
pfllib_folder "$TMP/p-fifo" "$one" "$good"
rm "$TMP/p-fifo/train/0.npz" && mkfifo "$TMP/p-fifo/train/0.npz"
fifo_refused "a FIFO as a PFLlib client file" "p-fifo/train/0.npz" "$PFL" run --data "pfllib:$TMP/p-fifo" --model dnn --clients 1 --rounds 1 --quiet
pfllib_folder "$TMP/p-fifo2" "$one" "$good"
rm "$TMP/p-fifo2/config.json" && mkfifo "$TMP/p-fifo2/config.json"
fifo_refused "a FIFO as a PFLlib config.json" "config.json: cannot read: a named pipe (FIFO)" "$PFL" run --data "pfllib:$TMP/p-fifo2" --model dnn --clients 1 --rounds 1 --quiet
if [ -f "$PFL_DATA/mnist/train-images-idx3-ubyte" ] || [ -f "$PFL_DATA/mnist/train-images-idx3-ubyte.gz" ]; then
    mkdir -p "$TMP/mf/mnist"
    for f in "$PFL_DATA"/mnist/*; do ln -s "$(realpath "$f")" "$TMP/mf/mnist/$(basename "$f")"; done
    for f in "$TMP"/mf/mnist/train-labels*; do rm "$f" && mkfifo "$f"; done
    fifo_refused "a FIFO as an MNIST file" "train-labels" \
        "$PFL" run --data mnist --data-dir "$TMP/mf" --model dnn --partition iid --clients 2 --rounds 1 --quiet
else
    echo "skipped: the MNIST FIFO check (no $PFL_DATA/mnist)"
fi
mkdir -p "$TMP/tf" && mkfifo "$TMP/tf/summary.json"
fifo_refused "a FIFO as a run's summary.json for pfl table" "summary.json: cannot read: a named pipe (FIFO)" "$PFL" table "$TMP/tf"
finish
