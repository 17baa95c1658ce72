# Sourced by scripts/gpu-check.sh and scripts/gpu-methods.sh on the GPU
# machine (no network; perhaps none of pfl's libraries): defines
#   gpu_libs          sets SYSFLAGS (make's flags for .gpu/sysroot.tar.xz's
#                     OpenBLAS, libjansson and libyaml when the system lacks
#                     them), LD_LIBRARY_PATH, CUBLAS_DIR and CUDNN_DIR
#   gpu_fmnist DIR    Fashion-MNIST into DIR/fmnist (.gpu/fmnist's xz, else data/fmnist)
#   untar, unxz_to    (.xz through Python's lzma: the machine may lack the xz tool)
# The caller defines say MESSAGE. Run from the repository root.
untar() { python3 -c 'import sys, tarfile; t = tarfile.open(sys.argv[1]); t.extractall(sys.argv[2], **({"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}))' "$1" "$2"; }
unxz_to() { python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
gpu_libs() {
    SYSFLAGS=()
    if ! pkg-config --exists openblas jansson yaml-0.1 2>/dev/null; then
        if [ -f .gpu/sysroot.tar.xz ]; then
            untar .gpu/sysroot.tar.xz /tmp/pfl-sysroot
            local S=/tmp/pfl-sysroot/sysroot
            # (Debian's OpenBLAS carries LAPACK: no -llapack)
            SYSFLAGS=(BLAS_CFLAGS=-I$S/include "BLAS_LIBS=-L$S/lib -lopenblas" LAPACK_LIBS= "JANSSON_LIBS=-L$S/lib -ljansson"
                "YAML_LIBS=-L$S/lib -lyaml" PARSE_CFLAGS=-I$S/include)
            export LD_LIBRARY_PATH=$S/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
            say "libraries: OpenBLAS, libjansson, libyaml from .gpu/sysroot.tar.xz"
        else
            say "OpenBLAS, libjansson or libyaml missing and no .gpu/sysroot.tar.xz (run scripts/gpu-pack.sh where they are)"
        fi
    fi
    # cuBLAS (opened at run time) and cuDNN: the toolkit's, else PyTorch's wheels'
    pydirs=$(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
    local v
    for v in 13 12; do
        CUBLAS_DIR=$(find_lib "libcublas.so.$v")
        [ -n "$CUBLAS_DIR" ] && break
    done
    [ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH=$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    CUDNN_DIR=$(find_lib libcudnn.so.9)
}
find_lib() { # NAME: the first folder holding it
    local d p f
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    for p in $pydirs; do
        f=$(find "$p/nvidia" -name "$1" 2>/dev/null | head -1)
        [ -n "$f" ] && { dirname "$f"; return; }
    done
}
gpu_fmnist() { # DIR
    mkdir -p "$1/fmnist"
    local f
    if [ -d .gpu/fmnist ] && ls .gpu/fmnist/*.xz >/dev/null 2>&1; then
        for f in .gpu/fmnist/*.xz; do unxz_to "$f" "$1/fmnist/$(basename "$f" .xz)"; done
    elif [ -d data/fmnist ]; then
        cp -L data/fmnist/* "$1/fmnist/"
    else
        say "no Fashion-MNIST (data/fmnist or .gpu/fmnist)"
        return 1
    fi
}
