#!/usr/bin/env bash
# The README's second command, and what CI runs: set up, then run the whole
# test suite on the optimized build once under each OpenBLAS kernel set the
# CPU can run (scripts/test-kernels.sh: Prescott, Haswell, SkylakeX where
# there is AVX-512; no test may depend on the kernels a machine picks), then
# once under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
# with the kernels OpenBLAS picks itself.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/test-kernels.sh
make -s asan-test
