#!/usr/bin/env bash
# The optimized test suite under each OpenBLAS kernel set this CPU can run
# (OPENBLAS_CORETYPE): Prescott (SSE3, what OpenBLAS falls back to on a CPU
# it does not know), Haswell (AVX2 and FMA) and SkylakeX (AVX-512) where the
# CPU has them. No test may depend on which GEMM kernels a machine picks
# (their rounding differs): this is the check. scripts/test.sh runs it.
#
#   scripts/test-kernels.sh              every kernel set the CPU can run
#   scripts/test-kernels.sh Prescott     those named only
#
# The CPU's own set (the last: SkylakeX, else Haswell) gets the whole
# suite (`make test`: the unit tests, then the e2e scripts); every other set
# the unit tests (PFL_TEST_E2E=0), where the comparisons against fixtures
# and hand-worked cases are. The e2e scripts compare pfl with itself on one
# machine; scripts/test.sh runs them all once more under AddressSanitizer
# with the Prescott kernels. So every kernel set meets the unit tests, and
# the CPU's own kernels and the fallback both meet every e2e script, in two
# suites' time (CI's 25 minutes; the whole optimized suite under Prescott
# took 759 s of a 1483 s CI run). PFL_KERNELS_FULL=1: the whole suite under
# every set. Prints a line per kernel set; exits 1 when one failed.
set -uo pipefail
cd "$(dirname "$0")/.."

has_flag() { grep -qw -- "$1" /proc/cpuinfo 2>/dev/null; }

kernels() {
    [ "$(uname -m)" = x86_64 ] || return 0 # OpenBLAS's x86 kernel names only
    echo Prescott
    has_flag avx2 && has_flag fma && echo Haswell
    has_flag avx512f && has_flag avx512bw && has_flag avx512dq && has_flag avx512vl && echo SkylakeX
}

if [ $# -gt 0 ]; then sets=("$@"); else mapfile -t sets < <(kernels); fi
if [ ${#sets[@]} -eq 0 ]; then
    echo "[test-kernels] $(uname -m): no OpenBLAS x86 kernel sets to choose from; the suite with the kernels OpenBLAS picks"
    exec make -s test
fi
failed=()
last=$((${#sets[@]} - 1))
for i in "${!sets[@]}"; do
    k=${sets[$i]}
    e2e=0
    [ "$i" -eq "$last" ] || [ "${PFL_KERNELS_FULL:-0}" = 1 ] && e2e=1
    what="the optimized suite"
    [ "$e2e" = 0 ] && what="the optimized unit tests"
    echo "[test-kernels] OPENBLAS_CORETYPE=$k: $what"
    start=$SECONDS
    if OPENBLAS_CORETYPE=$k PFL_TEST_E2E=$e2e make -s test; then
        echo "[test-kernels] $k: passed ($((SECONDS - start)) s)"
    else
        echo "[test-kernels] $k: FAILED ($((SECONDS - start)) s)"
        failed+=("$k")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "[test-kernels] failed under: ${failed[*]}"
    exit 1
fi
echo "[test-kernels] passed under every kernel set: ${sets[*]}"
