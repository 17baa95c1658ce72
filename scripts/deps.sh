# Sourced by scripts/setup.sh (and tests/e2e/setup_deps.sh): one check per
# Debian package pfl needs, each asking for what that package itself
# provides, never for a file another package also installs. The reason is
# the bug this replaced: Debian's reference BLAS (libblas-dev) installs a
# cblas.h too, so "a cblas.h exists" said OpenBLAS was there when it was not,
# and a fresh machine failed to build (or would have linked a BLAS many times
# slower).
#
# Every file test is under $PFL_ROOT (default: /) and pkg-config honours
# PKG_CONFIG_LIBDIR, so a test can point both at a fake root and check the
# logic without installing or removing anything.
#
# deps_missing prints the packages to install, one per line.

PFL_ROOT=${PFL_ROOT:-}
# Debian's multiarch triplet (x86_64-linux-gnu): where -dev packages put
# their headers and libraries
deps_triplet() { gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu; }

# OpenBLAS: its own pkg-config module (openblas.pc, which Debian installs
# only with libopenblas-dev) and its own header (openblas_config.h) in the
# include directory that module names. A cblas.h alone proves nothing.
have_openblas() {
    local inc
    inc=$(pkg-config --variable=includedir openblas 2>/dev/null) || return 1
    [ -n "$inc" ] && [ -f "$PFL_ROOT$inc/openblas_config.h" ]
}

have_pkg() { pkg-config --exists "$1" 2>/dev/null; }

# LAPACK's SVD (sgesdd: FedKD's compression): Debian's OpenBLAS exports it
# from libopenblas itself (asked of the library's dynamic symbols, not of a
# header); an OpenBLAS without it needs the reference LAPACK, judged by the
# pkg-config module only liblapack-dev installs (lapack.pc).
have_lapack() {
    local dir
    dir=$(pkg-config --variable=libdir openblas 2>/dev/null)
    if [ -n "$dir" ] && nm -D "$PFL_ROOT$dir/libopenblas.so" 2>/dev/null | grep -q ' T sgesdd_$'; then return 0; fi
    have_pkg lapack
}
have_file() { [ -f "$PFL_ROOT$1" ]; }
have_cmd() { [ -z "$PFL_ROOT" ] && command -v "$1" >/dev/null 2>&1 || [ -x "$PFL_ROOT/usr/bin/$1" ]; }

# Open MPI's mpirun (MPICH installs one too, and cannot start pfl's Open MPI build)
have_openmpi_run() {
    if [ -n "$PFL_ROOT" ]; then [ -x "$PFL_ROOT/usr/bin/mpirun.openmpi" ]; return; fi
    command -v mpirun >/dev/null 2>&1 && mpirun --version 2>/dev/null | grep -q 'Open MPI'
}

# clang's own runtimes live under /usr/lib/llvm-N/lib/clang/VERSION/: the
# libFuzzer runtime (libclang-rt-N-dev) and clang's OpenMP header (libomp-N-dev)
have_llvm_file() { compgen -G "$PFL_ROOT/usr/lib/llvm-*/lib/clang/*/$1" >/dev/null; }

# gnuplot-nox: its own binary (the gnuplot command is an alternative that
# gnuplot-qt or -x11 may provide instead), and on a real root the terminals
# pfl draws with: pngcairo and svg.
have_gnuplot() {
    [ -x "$PFL_ROOT/usr/bin/gnuplot-nox" ] || return 1
    [ -n "$PFL_ROOT" ] && return 0
    local terms
    terms=$(echo 'set terminal' | gnuplot-nox 2>&1) || return 1
    grep -qw pngcairo <<<"$terms" && grep -qw svg <<<"$terms"
}

deps_missing() {
    local t
    t=$(deps_triplet)
    have_cmd cc && have_cmd make || echo build-essential
    have_cmd pkg-config || echo pkg-config
    have_openblas || echo libopenblas-dev
    have_lapack || echo liblapack-dev
    # zlib1g-dev ships zlib.pc and zlib.h
    have_pkg zlib && have_file /usr/include/zlib.h || echo zlib1g-dev
    have_pkg matio || echo libmatio-dev
    # libssl-dev ships libcrypto.pc and openssl/sha.h (SHA-256)
    have_pkg libcrypto && have_file /usr/include/openssl/sha.h || echo libssl-dev
    # libhdf5-dev: the serial build's own hdf5-serial.pc and header (hdf5.pc is
    # an alternative that libhdf5-openmpi-dev installs too)
    have_pkg hdf5-serial && have_file /usr/include/hdf5/serial/hdf5.h || echo libhdf5-dev
    # libjpeg62-turbo-dev ships libjpeg.pc and jpeglib.h (in the triplet dir)
    have_pkg libjpeg && { have_file /usr/include/jpeglib.h || have_file "/usr/include/$t/jpeglib.h"; } || echo libjpeg-dev
    have_file /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz || echo dataset-fashion-mnist
    have_cmd npm || echo npm
    have_cmd xz || echo xz-utils
    # libjansson-dev ships jansson.pc and jansson.h; libyaml-dev yaml-0.1.pc and yaml.h
    have_pkg jansson && have_file /usr/include/jansson.h || echo libjansson-dev
    have_pkg yaml-0.1 && have_file /usr/include/yaml.h || echo libyaml-dev
    have_gnuplot || echo gnuplot-nox
    have_file /usr/bin/xmllint || echo libxml2-utils
    have_pkg ompi-c || echo libopenmpi-dev
    have_openmpi_run || echo openmpi-bin
    # fuzzing (make fuzz): clang, libFuzzer's runtime, and OpenMP for clang
    have_cmd clang || echo clang
    have_llvm_file 'lib/linux/libclang_rt.fuzzer-*.a' || echo libclang-rt-dev
    have_llvm_file include/omp.h || echo libomp-dev
}
