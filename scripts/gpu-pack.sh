#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs on a GPU machine that has no network
# and perhaps none of pfl's libraries, into .gpu/ (ignored by git), to be
# carried there with the working tree (the device tool's `carry: [".gpu"]`):
#
#   .gpu/sysroot.tar.xz   OpenBLAS, libjansson and libyaml (headers and shared
#                         libraries, with OpenBLAS's libgfortran and libquadmath)
#                         from this machine, for a build there when its system
#                         lacks them (Debian 12's glibc 2.36: they run on a
#                         newer glibc)
#   .gpu/prebuilt.tar.xz  pfl and tests/gpu/test_cuda_ops built here with the
#                         CUDA backend (stripped), for a machine that cannot
#                         build; gpu-check.sh runs its test_cuda_ops while
#                         it builds there
#   .gpu/fmnist/*.xz      Fashion-MNIST (data/fmnist), recompressed to fit the
#                         64 MiB the tool carries
#   .gpu/commit           the commit packed (gpu-check.sh's table names it)
#
# CIFAR-10 (176 MB) cannot travel: gpu-check.sh makes CIFAR-10-shaped
# random data there for the timings. Run from the repository root:
#   scripts/gpu-pack.sh        (about 5 minutes on 2 cores: the prebuilt build)
set -euo pipefail
cd "$(dirname "$0")/.."
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
for so in libopenblas.so.0 libjansson.so.4 libyaml-0.so.2 libgfortran.so.5 libquadmath.so.0; do
    path=$(lib "$so")
    [ -n "$path" ] || { echo "gpu-pack: $so not found (scripts/setup.sh installs it)" >&2; exit 1; }
    cp -L "$path" "$stage/sysroot/lib/$so"
done
(cd "$stage/sysroot/lib" && ln -s libopenblas.so.0 libopenblas.so && ln -s libjansson.so.4 libjansson.so &&
    ln -s libyaml-0.so.2 libyaml.so)
XZ_OPT=-9 tar -C "$stage" -cJf .gpu/sysroot.tar.xz sysroot

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
echo "gpu-pack: carry .gpu to the GPU machine with the working tree (64 MiB in all: git ls-files | xargs du -cb | tail -1)"
