# Files that are not what they claim, through the pfl command:
# one line on stderr naming the file and the problem, nothing from a library
# (the MAT v7.3 file on which libhdf5 overflows a heap buffer is refused
# before libmatio opens it); and known dataset files recognized by md5: the
# official ones said so, the project's rebuilt CIFAR-10 named once, a file
# that differs from its official copy warned about even with --quiet.
. tests/e2e/lib.sh
export PFL_CACHE_DIR=${PFL_CACHE_DIR:-$TMP/cache} # the suite's cache (run-tests.sh) when there is one

mkdir -p "$TMP/sv/svhn"
for f in train_32x32.mat test_32x32.mat; do cp fuzz/repro/svhn/v73-hdf5-heap-overflow.mat "$TMP/sv/svhn/$f"; done
expect_error "svhn MAT v7.3" "train_32x32.mat: MAT-file version 7.3 (HDF5)" \
    "$PFL" run --data svhn --data-dir "$TMP/sv" --rounds 1 --clients 2 --quiet

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
finish
