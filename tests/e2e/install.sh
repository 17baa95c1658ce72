# libpfl for other programs (README "Using pfl as a library"): `make install`
# into a temporary prefix gives pfl.h, libpfl.a, libpfl.so and pfl.pc; the
# examples build against them with pkg-config alone (the shared library, and
# the static one with pkg-config --static) and run two rounds: the custom
# method's --server-lr 0 keeps the initial model (the global model's SHA-256
# is that of `pfl run --algo local`, whose global model never trains), the
# custom model has the layers its file says. libpfl defines no global name
# outside pfl_, libpfl.so exports only names pfl.h declares, and pfl.h
# compiles alone (C99, C11, C++).
. tests/e2e/lib.sh
BUILD=${BUILD:-build}
CC=${CC:-cc}
prefix=$TMP/prefix
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# a make of its own: not the suite's jobserver
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s install BUILD="$BUILD" SANITIZE="${PFL_SANITIZED:-0}" \
    PREFIX="$prefix" >"$TMP/install.log" 2>&1 || { cat "$TMP/install.log"; fail "make install"; finish; }
for f in bin/pfl include/pfl.h lib/libpfl.a lib/libpfl.so lib/pkgconfig/pfl.pc; do
    [ -e "$prefix/$f" ] || fail "make install did not install $f"
done
[ "$(pkg-config --modversion pfl)" = "$(sed -n 's/.*define PFL_VERSION "\(.*\)"/\1/p' src/util/version.h)" ] &&
    pass "pkg-config finds pfl $(pkg-config --modversion pfl)" || fail "pkg-config --modversion pfl"

# the names libpfl defines (besides those the compiler makes of pfl_ names:
# OpenMP's named critical sections, ASan's ODR indicators)
outside=$(nm -g --defined-only "$prefix/lib/libpfl.a" |
    awk 'NF == 3 && $3 !~ /^pfl_/ && $3 !~ /^\.gomp_critical_user_pfl_/ && $3 !~ /^__odr_asan\.pfl_/ { print $3 }')
[ -z "$outside" ] && pass "libpfl.a defines only pfl_ names" || fail "libpfl.a defines names outside pfl_: $outside"
exported=$(nm -D --defined-only "$prefix/lib/libpfl.so" | awk '{ print $3 }' | sort -u)
undeclared=$(comm -23 <(echo "$exported") <(grep -ow 'pfl_[A-Za-z0-9_]*' "$prefix/include/pfl.h" | sort -u))
[ -n "$exported" ] && [ -z "$undeclared" ] && pass "libpfl.so exports $(echo "$exported" | wc -l) names, all in pfl.h" ||
    fail "libpfl.so exports names pfl.h does not declare: $undeclared"
for name in pfl_run pfl_algo_register pfl_model_register pfl_default_aggregate; do
    grep -qx "$name" <<<"$exported" || fail "libpfl.so does not export $name"
done

# pfl.h alone, as C99 and C11 (pedantic) and, where there is a C++ compiler, C++
printf '#include <pfl.h>\nint main(void) { return pfl_algo_count() > 0 ? 0 : 1; }\n' >"$TMP/header.c"
for std in c99 c11; do
    # shellcheck disable=SC2046
    "$CC" -std=$std -Wall -Wextra -Werror -pedantic -fsyntax-only $(pkg-config --cflags pfl) "$TMP/header.c" &&
        pass "pfl.h compiles alone as $std" || fail "pfl.h does not compile alone as $std"
done
if command -v c++ >/dev/null; then
    # shellcheck disable=SC2046
    c++ -x c++ -Wall -Wextra -Werror -fsyntax-only $(pkg-config --cflags pfl) "$TMP/header.c" &&
        pass "pfl.h compiles as C++" || fail "pfl.h does not compile as C++"
fi

build() { # build NAME SHARED|STATIC [LIBS...]
    local libs name=$1 kind=$2
    shift 2
    if [ "$kind" = shared ]; then libs=$(pkg-config --libs pfl); else libs=$(pkg-config --static --libs pfl | sed 's/-lpfl\b/-l:libpfl.a/'); fi
    # shellcheck disable=SC2046,SC2086
    "$CC" -std=c11 -Wall -Wextra -Werror -o "$TMP/$name-$kind" "examples/$name.c" $(pkg-config --cflags pfl) $libs "$@" ||
        fail "examples/$name.c does not build against the installed pfl ($kind)"
}
build custom_method shared
build custom_method static
build custom_model shared
build custom_loss shared -lm
ldd "$TMP/custom_method-shared" | grep -q "$prefix/lib/libpfl.so" && pass "custom_method links libpfl.so" ||
    fail "custom_method-shared does not load $prefix/lib/libpfl.so"
ldd "$TMP/custom_method-static" | grep -q libpfl && fail "custom_method-static loads libpfl.so" ||
    pass "custom_method-static holds libpfl.a"

tiny=(--data mnist --partition onelabel:100/20 --clients 4 --rounds 2 --threads 1 --quiet)
rounds() { grep -o '"round":[0-9]*' "$1/metrics.jsonl" | cut -d: -f2 | tr '\n' ' '; }

"$PFL" run --algo local --model mlp "${tiny[@]}" --out "$TMP/local" || fail "pfl run --algo local"
initial=$(json_field global_model_sha256 "$TMP/local/summary.json")
for kind in shared static; do
    "$TMP/custom_method-$kind" --model mlp "${tiny[@]}" --server-lr 0 --out "$TMP/slr0-$kind" ||
        fail "custom_method ($kind) --server-lr 0"
    [ "$(json_field algo "$TMP/slr0-$kind/summary.json")" = fedavg-slr ] &&
        [ "$(json_field server_lr "$TMP/slr0-$kind/summary.json")" = 0 ] &&
        [ "$(rounds "$TMP/slr0-$kind")" = "0 1 2 " ] && pass "custom_method ($kind): fedavg-slr, server_lr 0, rounds 0-2" ||
        fail "custom_method ($kind): summary or metrics: $(rounds "$TMP/slr0-$kind")"
    [ -n "$initial" ] && [ "$(json_field global_model_sha256 "$TMP/slr0-$kind/summary.json")" = "$initial" ] &&
        pass "custom_method ($kind) --server-lr 0 keeps the initial model" ||
        fail "custom_method ($kind) --server-lr 0 moved the global model"
done
"$TMP/custom_method-shared" --model mlp "${tiny[@]}" --out "$TMP/slr1" || fail "custom_method --server-lr 1"
[ "$(json_field server_lr "$TMP/slr1/summary.json")" = 1 ] &&
    [ "$(json_field global_model_sha256 "$TMP/slr1/summary.json")" != "$initial" ] &&
    pass "custom_method --server-lr 1 (its default) trains the global model" ||
    fail "custom_method --server-lr 1: the global model did not move"
expect_error "custom_method --server-lr 11" "--server-lr" "$TMP/custom_method-shared" --server-lr 11

# examples/custom_loss.c: a loss term of its own, in its file alone. With weight 0 the term adds exactly
# nothing, which is FedProx with mu 0 (both take the unfused step: a term or a proximal term declared);
# with weight 1 it moves the model elsewhere.
"$PFL" run --algo fedprox --mu 0 --model mlp "${tiny[@]}" --out "$TMP/prox0" || fail "pfl run --algo fedprox --mu 0"
"$TMP/custom_loss-shared" --model mlp "${tiny[@]}" --kd-weight 0 --out "$TMP/kd0" || fail "custom_loss --kd-weight 0"
"$TMP/custom_loss-shared" --model mlp "${tiny[@]}" --kd-weight 1 --out "$TMP/kd1" || fail "custom_loss --kd-weight 1"
prox0=$(json_field global_model_sha256 "$TMP/prox0/summary.json")
[ -n "$prox0" ] && [ "$(json_field global_model_sha256 "$TMP/kd0/summary.json")" = "$prox0" ] &&
    pass "custom_loss --kd-weight 0 trains as FedProx with mu 0, bit for bit" ||
    fail "custom_loss --kd-weight 0 differs from fedprox --mu 0"
[ "$(json_field global_model_sha256 "$TMP/kd1/summary.json")" != "$prox0" ] &&
    [ "$(json_field kd_weight "$TMP/kd1/summary.json")" = 1 ] &&
    pass "custom_loss --kd-weight 1: the distillation term changes the training" ||
    fail "custom_loss --kd-weight 1 trained as without the term"

# A program built on libpfl computes with the BLAS kernels the pfl command does (pfl_init, its first
# call): on a CPU OpenBLAS does not know, both run again with the better kernels, so a run's bits
# do not depend on which of the two ran it. PFL_BLAS_ASSUME_FALLBACK=1 makes this CPU's kernels
# count as such a fallback; OPENBLAS_CORETYPE (the per-kernel suite sets it) would be left alone.
same=(--algo fedprox --mu 0.01 --model mlp "${tiny[@]}")
env -u OPENBLAS_CORETYPE PFL_BLAS_ASSUME_FALLBACK=1 "$PFL" run "${same[@]}" --out "$TMP/fb-pfl" ||
    fail "pfl run under an assumed BLAS fallback"
env -u OPENBLAS_CORETYPE PFL_BLAS_ASSUME_FALLBACK=1 "$TMP/custom_loss-shared" "${same[@]}" --out "$TMP/fb-lib" ||
    fail "custom_loss --algo fedprox under an assumed BLAS fallback"
for d in fb-pfl fb-lib; do
    grep -q 'kernels chosen by pfl' "$TMP/$d/summary.json" && pass "$d: ran again with the kernels pfl chose" ||
        fail "$d: its summary's blas does not say pfl chose the kernels: $(json_field blas "$TMP/$d/summary.json")"
done
fb=$(json_field global_model_sha256 "$TMP/fb-pfl/summary.json")
[ -n "$fb" ] && [ "$(json_field global_model_sha256 "$TMP/fb-lib/summary.json")" = "$fb" ] &&
    [ "$(json_field blas "$TMP/fb-lib/summary.json")" = "$(json_field blas "$TMP/fb-pfl/summary.json")" ] &&
    pass "a libpfl program and pfl run: the same kernels and the same global model on the same flags" ||
    fail "a libpfl program and pfl run differ on the same flags under a BLAS fallback"

"$TMP/custom_model-shared" --algo fedper --head-layers 1 "${tiny[@]}" --out "$TMP/model" || fail "custom_model"
# conv1 8x1x5x5 + 8, fc (8x12x12) x 10 + 10 (examples/custom_model.c)
[ "$(json_field model "$TMP/model/summary.json")" = tiny-cnn ] &&
    [ "$(json_field params "$TMP/model/summary.json")" = $((8 * 25 + 8 + 8 * 12 * 12 * 10 + 10)) ] &&
    [ "$(rounds "$TMP/model")" = "0 1 2 " ] && pass "custom_model: tiny-cnn, 11738 parameters, rounds 0-2" ||
    fail "custom_model: $(grep -E '"(model|params)"' "$TMP/model/summary.json" | tr -d '\n')"
finish
