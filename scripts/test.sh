#!/usr/bin/env bash
# The README's second command, and what CI runs: set up, then the optimized
# build's unit tests under every OpenBLAS kernel set the CPU can run and its
# whole suite under the CPU's own (scripts/test-kernels.sh: no test may
# depend on the kernels a machine picks), then the whole suite once more
# under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/) with
# OpenBLAS's fallback kernels, Prescott, which a CPU OpenBLAS does not know
# gets (x86-64; elsewhere the kernels OpenBLAS picks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/test-kernels.sh
if [ "$(uname -m)" = x86_64 ]; then
    OPENBLAS_CORETYPE=Prescott make -s asan-test
else
    make -s asan-test
fi
