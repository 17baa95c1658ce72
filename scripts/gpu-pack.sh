#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has no network
# and perhaps none of pfl's libraries, into .gpu/ (ignored by git), to be
# carried there with the working tree (the device tool's `carry: [".gpu"]`):
#
#   .gpu/sysroot.tar.xz   OpenBLAS, libjansson and libyaml (headers and shared
#                         libraries, with OpenBLAS's libgfortran and libquadmath)
#                         from this machine, for a build there when its system
#                         lacks them (Debian 12's glibc 2.36: they run on a
#                         newer glibc); kept while newer than the libraries
#   .gpu/prebuilt.tar.xz  pfl and tests/gpu/test_cuda_ops built here with the
#                         CUDA backend (stripped), for a machine that cannot
#                         build; gpu-check.sh runs its test_cuda_ops while
#                         it builds there
#   .gpu/fmnist/*.xz      Fashion-MNIST (data/fmnist), recompressed to fit the
#                         64 MiB the tool carries; kept once made
#   .gpu/commit           the commit packed (gpu-check.sh's table names it)
#
# --bundle DIR: also a folder holding all gpu-check.sh needs, for a tool that
# carries the files of another checkout than this one (the device tool sends
# the checkout its session started in, 33 MB of it tracked files): DIR/src.tar.xz
# (this commit's files less the test fixtures, the fuzzing corpus and docs/,
# but for the CPU runs gpu-check.sh compares with), DIR/.gpu; about 33 MB.
# There: cd DIR && python3 -c "import tarfile; tarfile.open('src.tar.xz').extractall('w')" &&
#        mv .gpu w/ && cd w && bash scripts/gpu-check.sh
#
# CIFAR-10 (176 MB) cannot travel: gpu-check.sh makes CIFAR-10-shaped
# random data there for the timings. Run from the repository root:
#   scripts/gpu-pack.sh [--bundle DIR]   (about 5 minutes on 2 idle cores)
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=
if [ "${1:-}" = --bundle ]; then
    [ -n "${2:-}" ] || { echo "gpu-pack: --bundle needs a folder" >&2; exit 1; }
    BUNDLE=$2
elif [ -n "${1:-}" ]; then
    echo "gpu-pack: unknown argument $1 (expected --bundle DIR)" >&2
    exit 1
fi
PFL_DATA=${PFL_DATA:-./data}
mkdir -p .gpu/fmnist
grep -qx '/.gpu/' .gitignore 2>/dev/null || { echo "gpu-pack: .gitignore must list /.gpu/" >&2; exit 1; }

# Fashion-MNIST, compressed meanwhile (one xz a file: the big ones at once)
pids=()
for f in "$PFL_DATA"/fmnist/*-ubyte.gz; do
    out=.gpu/fmnist/$(basename "$f" .gz).xz
    [ -s "$out" ] && [ "$out" -nt "$f" ] && continue # made before
    (zcat "$f" | xz -9 -T0 --block-size=16MiB >"$out.part" && mv "$out.part" "$out") & # blocks: on all cores
    pids+=($!)
done

# the libraries, found where the dynamic linker finds them
lib() { ldconfig -p | awk -v n="$1" '$1 == n && !found { print $NF; found = 1 }'; } # reads it all: no SIGPIPE
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/sysroot/include" "$stage/sysroot/lib"
for h in cblas.h openblas_config.h; do
    f=$(for d in $(pkg-config --cflags-only-I openblas | sed 's/-I//g') /usr/include; do [ -f "$d/$h" ] && echo "$d/$h" && break; done)
    cp -L "$f" "$stage/sysroot/include/"
done
cp -L /usr/include/jansson.h /usr/include/jansson_config.h /usr/include/yaml.h "$stage/sysroot/include/"
fresh=1 # the packed libraries newer than this machine's
for so in libopenblas.so.0 libjansson.so.4 libyaml-0.so.2 libgfortran.so.5 libquadmath.so.0; do
    path=$(lib "$so")
    [ -n "$path" ] || { echo "gpu-pack: $so not found (scripts/setup.sh installs it)" >&2; exit 1; }
    cp -L "$path" "$stage/sysroot/lib/$so"
    [ .gpu/sysroot.tar.xz -nt "$(readlink -f "$path")" ] || fresh=0
done
# (grep -c reads all of nm's output: grep -q would end the pipe early, and pipefail fail it)
[ "$(nm -D "$stage/sysroot/lib/libopenblas.so.0" | grep -c ' T sgesdd_')" -gt 0 ] ||
    { echo "gpu-pack: this OpenBLAS has no LAPACK (sgesdd_), which gpu-check.sh's build takes from it" >&2; exit 1; }
(cd "$stage/sysroot/lib" && ln -s libopenblas.so.0 libopenblas.so && ln -s libjansson.so.4 libjansson.so &&
    ln -s libyaml-0.so.2 libyaml.so)
if [ $fresh = 0 ]; then
    XZ_OPT=-9 tar -C "$stage" -cJf .gpu/sysroot.tar.xz.part sysroot
    mv .gpu/sysroot.tar.xz.part .gpu/sysroot.tar.xz
fi

# pfl with the CUDA backend, built as gpu-check.sh builds it (no MPI, SVHN or Tiny-ImageNet)
command -v nvcc >/dev/null || { echo "gpu-pack: nvcc not on PATH: the prebuilt pfl needs the CUDA backend" >&2; exit 1; }
nice make -s -j2 BUILD=build-gpu MPI=0 MATIO_LIBS= JPEG_LIBS= build-gpu/pfl build-gpu/tests/test_cuda_ops
mkdir -p "$stage/prebuilt/build-gpu/tests" # stripped: what travels is counted
strip -o "$stage/prebuilt/build-gpu/pfl" build-gpu/pfl
strip -o "$stage/prebuilt/build-gpu/tests/test_cuda_ops" build-gpu/tests/test_cuda_ops
XZ_OPT=-9 tar -C "$stage/prebuilt" -cJf .gpu/prebuilt.tar.xz build-gpu/pfl build-gpu/tests/test_cuda_ops

for p in "${pids[@]}"; do wait "$p" || { echo "gpu-pack: compressing Fashion-MNIST failed" >&2; exit 1; }; done
git rev-parse --short HEAD >.gpu/commit
du -sb .gpu/* .gpu/fmnist/* | sed 's/^/gpu-pack: /'
if [ -z "$BUNDLE" ]; then
    echo "gpu-pack: carry .gpu to the GPU machine with the working tree (64 MiB in all: git ls-files | xargs du -cb | tail -1)"
    exit 0
fi
rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/src"
git archive HEAD | tar -x -C "$BUNDLE/src"
(cd "$BUNDLE/src" && rm -rf tests/fixtures fuzz/corpus &&
    find docs -type f ! -path 'docs/results/fmnist-pat2-r50/fedavg/*' ! -path 'docs/results/fmnist-pat2-r50/fedala/*' \
        ! -path 'docs/results/fmnist-pat2-r50/flayer/*' -delete &&
    XZ_OPT=-9 tar -cJf ../src.tar.xz .)
rm -rf "$BUNDLE/src"
cp -r .gpu "$BUNDLE/.gpu"
echo "gpu-pack: $BUNDLE: $(du -sb "$BUNDLE" | cut -f1) bytes (src.tar.xz and .gpu)"
