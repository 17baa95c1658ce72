# The setup installs what pfl needs, judged by what each package
# itself provides, and the built pfl really uses OpenBLAS.
#
# 1. scripts/deps.sh against fake roots (PFL_ROOT and PKG_CONFIG_LIBDIR point
#    into $TMP; nothing is installed or removed): a root with Debian's
#    reference BLAS only (its cblas.h, blas.pc) must still ask for
#    libopenblas-dev; one with OpenBLAS's openblas.pc and openblas_config.h
#    must not. The old check, "a cblas.h exists", fails the first case.
# 1b. the same for libyaml-dev, libjansson-dev, gnuplot-nox, libxml2-utils
#    and libhdf5-dev: a header, a look-alike command or an alternative's .pc
#    alone is not the package.
# 2. build/pfl links libopenblas, and pfl run's first line names OpenBLAS.
. tests/e2e/lib.sh

triplet=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)

# A fake root: $1/usr/include/$triplet/cblas.h and blas.pc as libblas-dev installs them.
make_reference_blas_root() {
    mkdir -p "$1/usr/include/$triplet" "$1/usr/lib/$triplet/pkgconfig"
    echo '/* reference CBLAS */' >"$1/usr/include/$triplet/cblas.h"
    cat >"$1/usr/lib/$triplet/pkgconfig/blas.pc" <<PC
prefix=/usr
libdir=/usr/lib/$triplet
Name: BLAS
Description: reference BLAS
Version: 3.11.0
Libs: -L\${libdir} -lblas
PC
}

# ... plus OpenBLAS as libopenblas-pthread-dev installs it.
add_openblas() {
    local inc=/usr/include/$triplet/openblas-pthread
    mkdir -p "$1$inc"
    echo '#define OPENBLAS_VERSION " OpenBLAS 0.3.21 "' >"$1$inc/openblas_config.h"
    cat >"$1/usr/lib/$triplet/pkgconfig/openblas.pc" <<PC
libdir=/usr/lib/$triplet/openblas-pthread
includedir=$inc
Name: OpenBLAS
Description: OpenBLAS
Version: 0.3.21
Libs: -L\${libdir} -lopenblas
Cflags: -I\${includedir}
PC
}

missing_in() { # root: the packages scripts/deps.sh would install there
    (PFL_ROOT=$1 PKG_CONFIG_LIBDIR=$1/usr/lib/$triplet/pkgconfig PKG_CONFIG_PATH= \
        bash -c '. scripts/deps.sh; deps_missing')
}
old_check_says_present() { test -f "$1/usr/include/$triplet/cblas.h"; } # the check this replaced

ref="$TMP/reference-only"
make_reference_blas_root "$ref"
if missing_in "$ref" | grep -qx libopenblas-dev; then
    pass "reference cblas.h without OpenBLAS: setup installs libopenblas-dev"
else
    fail "reference cblas.h without OpenBLAS: setup would not install libopenblas-dev ($(missing_in "$ref" | tr '\n' ' '))"
fi
old_check_says_present "$ref" && pass "(the old check, a cblas.h exists, would have wrongly said OpenBLAS is there)" ||
    fail "the fake root does not reproduce the old bug"

both="$TMP/with-openblas"
make_reference_blas_root "$both"
add_openblas "$both"
if missing_in "$both" | grep -qx libopenblas-dev; then
    fail "OpenBLAS present (openblas.pc, openblas_config.h): setup still asks for libopenblas-dev"
else
    pass "OpenBLAS present: not asked for again"
fi

# openblas.pc without OpenBLAS's header (a broken or foreign install) is not OpenBLAS
half="$TMP/pc-only"
make_reference_blas_root "$half"
add_openblas "$half"
rm "$half/usr/include/$triplet/openblas-pthread/openblas_config.h"
missing_in "$half" | grep -qx libopenblas-dev && pass "openblas.pc without openblas_config.h: asks for libopenblas-dev" ||
    fail "openblas.pc without its header passes for OpenBLAS"

# LAPACK (FedKD's SVD): an OpenBLAS whose libopenblas.so exports sgesdd_
# (Debian's) needs nothing more; one without it asks for liblapack-dev,
# unless the reference LAPACK's lapack.pc is there
lapack="$TMP/lapack"
make_reference_blas_root "$lapack"
add_openblas "$lapack"
mkdir -p "$lapack/usr/lib/$triplet/openblas-pthread"
if command -v nm >/dev/null && echo 'void sgesdd_(void) {}' | gcc -shared -fPIC -x c -o "$lapack/usr/lib/$triplet/openblas-pthread/libopenblas.so" - 2>/dev/null; then
    missing_in "$lapack" | grep -qx liblapack-dev && fail "OpenBLAS with sgesdd_: setup still asks for liblapack-dev" ||
        pass "OpenBLAS exporting sgesdd_: no liblapack-dev"
    echo 'void sgemm_(void) {}' | gcc -shared -fPIC -x c -o "$lapack/usr/lib/$triplet/openblas-pthread/libopenblas.so" -
    missing_in "$lapack" | grep -qx liblapack-dev && pass "OpenBLAS without LAPACK: asks for liblapack-dev" ||
        fail "OpenBLAS without sgesdd_ passes for LAPACK"
    printf 'Name: LAPACK\nDescription: reference LAPACK\nVersion: 3.11.0\nLibs: -llapack\n' \
        >"$lapack/usr/lib/$triplet/pkgconfig/lapack.pc"
    missing_in "$lapack" | grep -qx liblapack-dev && fail "lapack.pc present: still asks for liblapack-dev" ||
        pass "the reference LAPACK's lapack.pc: not asked for"
else
    echo "no gcc or nm: the LAPACK checks are left out"
fi

# Fuzzing: clang alone is not enough; libFuzzer's runtime and clang's omp.h
# are judged by the files libclang-rt-dev and libomp-dev install.
fz="$TMP/clang-only"
make_reference_blas_root "$fz"
mkdir -p "$fz/usr/bin" && printf '#!/bin/sh\n' >"$fz/usr/bin/clang" && chmod +x "$fz/usr/bin/clang"
m=$(missing_in "$fz" | tr '\n' ' ')
if [[ " $m" == *" libclang-rt-dev "* && " $m" == *" libomp-dev "* ]]; then
    pass "clang alone: asks for libclang-rt-dev and libomp-dev"
else fail "clang alone: missing says '$m'"; fi
case " $m" in *" clang "*) fail "clang present but asked for" ;; *) pass "clang present: not asked for" ;; esac
res="$fz/usr/lib/llvm-14/lib/clang/14.0.6"
mkdir -p "$res/lib/linux" "$res/include"
touch "$res/lib/linux/libclang_rt.fuzzer-x86_64.a" "$res/include/omp.h"
m=$(missing_in "$fz" | tr '\n' ' ')
case " $m" in *" libclang-rt-dev "* | *" libomp-dev "*) fail "fuzzer runtime and omp.h present, still asks: $m" ;;
              *) pass "fuzzer runtime and omp.h present: not asked for" ;; esac

# The parsers and the plotter, each by what its own package
# installs: libyaml-dev's yaml-0.1.pc and yaml.h, libjansson-dev's
# jansson.pc and jansson.h, gnuplot-nox's gnuplot-nox binary (/usr/bin/gnuplot
# is an alternative gnuplot-qt or gnuplot-x11 install too), libxml2-utils'
# xmllint.
add_pc() { # root name: a .pc file as the -dev package installs it
    printf 'prefix=/usr\nName: %s\nDescription: fake\nVersion: 1\nLibs: -l%s\n' "$2" "$2" \
        >"$1/usr/lib/$triplet/pkgconfig/$2.pc"
}
asks() { missing_in "$1" | grep -qx "$2"; }
libs="$TMP/libs"
make_reference_blas_root "$libs"
mkdir -p "$libs/usr/include" "$libs/usr/bin"
for p in libyaml-dev libjansson-dev gnuplot-nox libxml2-utils libhdf5-dev libssl-dev; do
    asks "$libs" $p && pass "a root without it: asks for $p" || fail "a root without $p does not ask for it"
done
touch "$libs/usr/include/yaml.h" "$libs/usr/include/jansson.h"
asks "$libs" libyaml-dev && asks "$libs" libjansson-dev && pass "yaml.h and jansson.h without their .pc files: still asked for" ||
    fail "a header alone passes for libyaml-dev or libjansson-dev"
add_pc "$libs" yaml-0.1
add_pc "$libs" jansson
! asks "$libs" libyaml-dev && ! asks "$libs" libjansson-dev && pass "with their .pc files and headers: not asked for again" ||
    fail "libyaml-dev or libjansson-dev asked for although present: $(missing_in "$libs" | tr '\n' ' ')"
# libssl-dev (SHA-256): its libcrypto.pc and openssl/sha.h, neither alone
mkdir -p "$libs/usr/include/openssl" && touch "$libs/usr/include/openssl/sha.h"
asks "$libs" libssl-dev && pass "openssl/sha.h without libcrypto.pc: asks for libssl-dev" ||
    fail "openssl/sha.h alone passes for libssl-dev"
add_pc "$libs" libcrypto
! asks "$libs" libssl-dev && pass "libcrypto.pc and openssl/sha.h: not asked for again" ||
    fail "libssl-dev asked for although present"
# libhdf5-dev: hdf5.pc alone is an alternative libhdf5-openmpi-dev installs too
add_pc "$libs" hdf5
asks "$libs" libhdf5-dev && pass "hdf5.pc alone (an alternative): asks for libhdf5-dev" ||
    fail "hdf5.pc alone passes for libhdf5-dev"
add_pc "$libs" hdf5-serial
mkdir -p "$libs/usr/include/hdf5/serial"
asks "$libs" libhdf5-dev && pass "hdf5-serial.pc without its header: still asked for" ||
    fail "hdf5-serial.pc alone passes for libhdf5-dev"
touch "$libs/usr/include/hdf5/serial/hdf5.h"
! asks "$libs" libhdf5-dev && pass "hdf5-serial.pc and hdf5.h: not asked for again" ||
    fail "libhdf5-dev asked for although present"
printf '#!/bin/sh\n' >"$libs/usr/bin/gnuplot" && chmod +x "$libs/usr/bin/gnuplot"
asks "$libs" gnuplot-nox && pass "/usr/bin/gnuplot alone (another package's alternative): asks for gnuplot-nox" ||
    fail "/usr/bin/gnuplot alone passes for gnuplot-nox"
cp "$libs/usr/bin/gnuplot" "$libs/usr/bin/gnuplot-nox" && cp "$libs/usr/bin/gnuplot" "$libs/usr/bin/xmllint"
! asks "$libs" gnuplot-nox && ! asks "$libs" libxml2-utils && pass "gnuplot-nox and xmllint present: not asked for" ||
    fail "gnuplot-nox or libxml2-utils asked for although present"

# On this machine, after setup, nothing is missing.
left=$(bash -c '. scripts/deps.sh; deps_missing' | tr '\n' ' ')
[ -z "$left" ] && pass "this machine has every package" || fail "after setup, still missing: $left"

# The built binary
if ldd "$PFL" | grep -q 'libopenblas'; then pass "$PFL links $(ldd "$PFL" | grep -o 'libopenblas[^ ]*' | head -1)"
else fail "$PFL does not link libopenblas: $(ldd "$PFL" | grep -i blas)"; fi
first=$("$PFL" run --algo fedavg --data mnist --model mlp --partition iid --clients 2 --rounds 0 2>&1 | head -1)
case $first in
    *"BLAS: OpenBLAS"*) pass "first line: $first" ;;
    *) fail "pfl run's first line does not name OpenBLAS: $first" ;;
esac
finish
