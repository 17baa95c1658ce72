#!/usr/bin/env bash
# The README's second command, and what CI runs: set up, then the optimized
# build's suite under OpenBLAS's Prescott kernels (its fallback on a CPU it
# does not know) and its unit tests under every other kernel set the CPU can
# run (scripts/test-kernels.sh: no test may depend on the kernels a machine
# picks), then the whole suite once more under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/) with the kernels OpenBLAS picks.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/test-kernels.sh
make -s asan-test
