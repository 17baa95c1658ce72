#!/usr/bin/env bash
# Runs every unit test binary, then every end-to-end script, and prints one
# closing line "N passed, N failed" counting test programs (", N skipped"
# when some were). A test that exits 77 (automake's convention) was skipped:
# what it needs is missing (e.g. MPI); its last line says why.
# PFL_TEST_E2E=0 runs the unit tests only (scripts/test-kernels.sh, for the
# kernel sets after the first).
set -u
BUILD=${BUILD:-build}
PFL=${PFL:-$BUILD/pfl}
export PFL BUILD
# known dataset files are hashed once and the verdict cached (src/data/known.c):
# the suite keeps its cache in the build folder, not in ~/.cache
export PFL_CACHE_DIR=${PFL_CACHE_DIR:-$BUILD/tests/cache}
# the unit tests call BLAS from one thread: OpenBLAS's own threads, spinning
# for cores the rest of the machine holds, made test_layers take 60-160 s
# instead of 5 on a busy 2-core machine (pfl run sets its own: one per worker)
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
passed=0 failed=0 skipped=0 failed_names=()
run() {
    local name=$1; shift
    local start=$SECONDS
    "$@" >"$BUILD/tests/$name.log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "ok   $name ($((SECONDS - start))s)"
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); echo "skip $name: $(tail -n 1 "$BUILD/tests/$name.log")"
    else
        failed=$((failed + 1)); failed_names+=("$name"); echo "FAIL $name ($((SECONDS - start))s)"
        tail -n 30 "$BUILD/tests/$name.log" | sed 's/^/     | /'
    fi
}
mkdir -p "$BUILD/tests"
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case $t in *.log) continue ;; esac
    run "$(basename "$t")" "$t"
done
for t in tests/e2e/*.sh; do
    [ "${PFL_TEST_E2E:-1}" = 0 ] && break
    [ -f "$t" ] || continue
    [ "$(basename "$t")" = lib.sh ] && continue # sourced by the others
    run "e2e_$(basename "$t" .sh)" bash "$t"
done
echo "${passed} passed, ${failed} failed$([ "$skipped" -gt 0 ] && echo ", $skipped skipped")"
[ "$failed" -eq 0 ]
