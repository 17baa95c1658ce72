#!/usr/bin/env bash
# The optimized test suite once under each OpenBLAS kernel set this CPU can
# run (OPENBLAS_CORETYPE): Prescott (SSE3, what OpenBLAS falls back to on a
# CPU it does not know), Haswell (AVX2 and FMA) and SkylakeX (AVX-512) where
# the CPU has them. No test may depend on which GEMM kernels a machine picks
# (their rounding differs): this is the check. scripts/test.sh runs it.
#
#   scripts/test-kernels.sh              every kernel set the CPU can run
#   scripts/test-kernels.sh Prescott     those named only
#
# Each run is `make test` (the unit tests, then the e2e scripts) with
# OPENBLAS_CORETYPE set, which pfl and libpfl programs leave as it is.
# Prints a line per kernel set and exits 1 when one failed.
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
for k in "${sets[@]}"; do
    echo "[test-kernels] OPENBLAS_CORETYPE=$k: the optimized suite"
    start=$SECONDS
    if OPENBLAS_CORETYPE=$k make -s test; then
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
