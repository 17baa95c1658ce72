#!/usr/bin/env bash
# The mutation check: does each method's test fail when the method's
# distinctive step is deliberately broken?
#
#   scripts/mutate.sh                 every mutation in scripts/mutations.txt
#   scripts/mutate.sh fedprox apple   those methods' mutations only
#   scripts/mutate.sh --list          the mutations, one line each
#
# Each line of scripts/mutations.txt (fields separated by " | "):
#
#   METHOD | FILE | TESTS | NAME | PERL
#
# PERL is a substitution (perl -0pe, the whole file at once) that must change
# FILE; TESTS are the unit tests (tests/NAME.c) and e2e scripts
# (tests/e2e/NAME.sh), comma-separated, expected to catch it: they run first,
# and a mutant one of them fails on is killed at once. A mutant they all pass
# then meets the whole unit suite (every tests/test_*.c) and every e2e script
# that names the method (its --algo word), so a mutation survives only when
# nothing in the suite notices it. MUTATE_QUICK=1 runs the listed TESTS only
# (while writing a test); MUTATE_UNITS=1 the unit suite without the e2e
# scripts (a lower bound on what the whole suite catches, in minutes, not
# hours, for a long list). TESTS "-" lists none. The script works
# on a copy of the tree in build-mutate/tree/ (the working tree's files as
# they are now, tracked or not ignored; data/ linked), so the working tree is
# never mutated and a build there meanwhile builds the real code. For each
# line it applies the substitution to the copy, rebuilds those tests there
# (the optimized flags), runs them, and puts FILE back. A mutation some test
# fails on is killed; one every test passes survives.
# A line whose NAME ends in "(survives: WHY)" is expected to survive, WHY
# saying why it cannot matter; such a line is reported and not counted.
#
# Exit status: 0 when no unexplained mutation survived (and every explained
# one did survive), 1 otherwise, 2 on a usage or build problem (a mutant that
# does not compile, a substitution that changes nothing, or a test script
# that skips here, exit 77, as mpi.sh does without mpirun, is a broken
# entry: nothing checked it).
set -uo pipefail
cd "$(dirname "$0")/.."
LIST=${MUTATIONS:-scripts/mutations.txt}
BUILD=${MUTATE_BUILD:-build-mutate}
[ -r "$LIST" ] || { echo "mutate.sh: $LIST: cannot read the mutation list" >&2; exit 2; }
LIST=$(realpath "$LIST")

trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; s=${s%"${s##*[![:space:]]}"}; printf '%s' "$s"; }

entries=()
while IFS= read -r line || [ -n "$line" ]; do
    case $line in '' | '#'*) continue ;; esac
    entries+=("$line")
done <"$LIST"

if [ "${1:-}" = --list ]; then
    for e in "${entries[@]}"; do
        IFS='|' read -r m f t n _ <<<"$e"
        printf '%-12s %-28s %s\n' "$(trim "$m")" "$(trim "$f")" "$(trim "$n")"
    done
    exit 0
fi
want=" $* "

restore_file=""
restore() { [ -n "$restore_file" ] && [ -f "$BUILD/mutate.orig" ] && cp "$BUILD/mutate.orig" "$restore_file"; restore_file=""; }
# a signal stops the whole check (the file put back first), not only the mutant's test
trap restore EXIT
trap 'restore; exit 130' INT
trap 'restore; exit 143' TERM

# The tree's files (tracked, or untracked and not ignored; without git every
# file outside the build folders, data/ and bench/results/), NUL-separated.
tree_files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -z --cached --others --exclude-standard
    else
        find . \( -path ./.git -o -path './build*' -o -path ./data -o -path ./bench/results \) -prune -o -type f -print0 |
            sed -z 's|^\./||'
    fi
}

# Brings the copy in $1 to the tree's files: a file whose content changed is
# copied (a new mtime, so make rebuilds what uses it), an unchanged one kept
# (its objects stay valid), one the tree no longer has removed.
sync_copy() {
    local copy=$1 f
    mkdir -p "$copy"
    tree_files >"$copy.list" || return 1
    while IFS= read -r -d '' f; do
        [ -f "$f" ] || continue # deleted from the tree but still in git's index
        cmp -s "$f" "$copy/$f" 2>/dev/null || { mkdir -p "$copy/$(dirname "$f")" && cp "$f" "$copy/$f"; } || return 1
    done <"$copy.list"
    (cd "$copy" && find . \( -path './build*' -o -path ./data \) -prune -o -type f -print0 | sed -z 's|^\./||') |
        while IFS= read -r -d '' f; do
            grep -qzxF -- "$f" "$copy.list" || rm -f "$copy/$f"
        done
    [ -d data ] && ln -sfn "$(realpath data)" "$copy/data"
    return 0
}

mkdir -p "$BUILD"
sync_copy "$BUILD/tree" || { echo "mutate.sh: cannot copy the tree to $BUILD/tree" >&2; exit 2; }
cd "$BUILD/tree" || exit 2
BUILD=build-mutate
mkdir -p "$BUILD"
echo "[mutate] building the unmutated tree in $(pwd)/$BUILD/" >&2
if ! make -s -j"$(nproc)" BUILD="$BUILD" all >"$BUILD/mutate-build.log" 2>&1; then
    echo "mutate.sh: the unmutated tree does not build (see $BUILD/mutate-build.log)" >&2
    exit 2
fi

# run_tests TESTS: 0 when every test passes
run_tests() {
    local t rc=0
    IFS=',' read -ra ts <<<"$1"
    for t in "${ts[@]}"; do
        t=$(trim "$t")
        if [ -f "tests/$t.c" ]; then
            make -s BUILD="$BUILD" "$BUILD/tests/$t" >>"$BUILD/mutate-build.log" 2>&1 || return 3
            OPENBLAS_NUM_THREADS=1 "$BUILD/tests/$t" >"$BUILD/mutate-test.log" 2>&1 || rc=1
        elif [ -f "tests/e2e/$t.sh" ]; then
            make -s -j"$(nproc)" BUILD="$BUILD" "$BUILD/pfl" >>"$BUILD/mutate-build.log" 2>&1 || return 3
            PFL="$BUILD/pfl" BUILD="$BUILD" OPENBLAS_NUM_THREADS=1 bash "tests/e2e/$t.sh" >"$BUILD/mutate-test.log" 2>&1
            case $? in
            0) ;;
            77) return 4 ;; # the script skipped (no mpirun, say): it checked nothing
            *) rc=1 ;;
            esac
        elif [ "$t" = - ]; then
            continue
        else
            echo "mutate.sh: test '$t' is neither tests/$t.c nor tests/e2e/$t.sh" >&2
            return 2
        fi
        [ $rc -ne 0 ] && return 1
    done
    return 0
}

# run_suite METHOD: the whole unit suite, then the e2e scripts that name
# METHOD (as a word: "--algo fedprox", "for a in fedavg fedprox"); 0 when
# every one passes, 1 when one fails, 3 when the mutant does not build. The
# unit tests whose source names the method run first, and each is built
# just before it runs, so a mutant the suite kills costs one or two builds.
run_suite() {
    local method=$1 t name
    local -a first=() rest=()
    for t in tests/test_wiring_*.c tests/test_*.c; do # the wiring tests first: they catch most
        case " ${first[*]} ${rest[*]} " in *" $t "*) continue ;; esac
        if grep -qw -- "$method" "$t"; then first+=("$t"); else rest+=("$t"); fi
    done
    for t in "${first[@]}" "${rest[@]}"; do
        name=$(basename "$t" .c)
        make -s BUILD="$BUILD" "$BUILD/tests/$name" >>"$BUILD/mutate-build.log" 2>&1 || return 3
        OPENBLAS_NUM_THREADS=1 "$BUILD/tests/$name" >"$BUILD/mutate-test.log" 2>&1
        case $? in 0 | 77) ;; *) echo "$name" >"$BUILD/mutate-killer"; return 1 ;; esac
    done
    [ -n "${MUTATE_UNITS:-}" ] && return 0
    make -s -j"$(nproc)" BUILD="$BUILD" "$BUILD/pfl" >>"$BUILD/mutate-build.log" 2>&1 || return 3
    for t in tests/e2e/*.sh; do
        [ "$(basename "$t")" = lib.sh ] && continue
        grep -qw -- "$method" "$t" || continue
        PFL="$BUILD/pfl" BUILD="$BUILD" OPENBLAS_NUM_THREADS=1 bash "$t" >"$BUILD/mutate-test.log" 2>&1
        case $? in 0 | 77) ;; *) echo "e2e/$(basename "$t")" >"$BUILD/mutate-killer"; return 1 ;; esac
    done
    return 0
}

killed=0 survived=0 explained=0 unexpected=0 broken=0
survivors=()
for e in "${entries[@]}"; do
    IFS='|' read -r method file tests name perl <<<"$e"
    method=$(trim "$method") file=$(trim "$file") tests=$(trim "$tests") name=$(trim "$name") perl=$(trim "$perl")
    [ "$want" = "  " ] || [[ $want == *" $method "* ]] || continue
    if [ ! -f "$file" ] || [ -z "$perl" ]; then
        echo "BROKEN   $method: $name: no file $file or no substitution" >&2
        broken=$((broken + 1))
        continue
    fi
    cp "$file" "$BUILD/mutate.orig"
    restore_file=$file
    perl -0pe "$perl" "$BUILD/mutate.orig" >"$file"
    if cmp -s "$file" "$BUILD/mutate.orig"; then
        echo "BROKEN   $method: $name: the substitution does not change $file" >&2
        broken=$((broken + 1))
        restore
        continue
    fi
    rm -f "$BUILD/mutate-killer"
    run_tests "$tests"
    rc=$?
    if [ $rc -eq 0 ] && [ -z "${MUTATE_QUICK:-}" ]; then
        run_suite "$method"
        rc=$?
    fi
    restore
    expect_survive=false
    [[ $name == *"(survives:"* ]] && expect_survive=true
    case $rc in
    0)
        if $expect_survive; then
            echo "survives $method: $name"
            explained=$((explained + 1))
        else
            echo "SURVIVED $method: $name ($tests all pass)"
            survived=$((survived + 1))
            survivors+=("$method: $name")
        fi
        ;;
    1)
        if $expect_survive; then
            echo "KILLED   $method: $name, listed as surviving: remove its (survives: ...)"
            unexpected=$((unexpected + 1))
        else
            echo "killed   $method: $name$([ -f "$BUILD/mutate-killer" ] && echo " (by $(cat "$BUILD/mutate-killer"), not by $tests)")"
            killed=$((killed + 1))
        fi
        ;;
    3)
        echo "BROKEN   $method: $name: the mutant does not compile (see $BUILD/mutate-build.log)" >&2
        broken=$((broken + 1))
        ;;
    4)
        echo "BROKEN   $method: $name: $tests skipped here (exit 77: see $BUILD/mutate-test.log), so nothing checked it" >&2
        broken=$((broken + 1))
        ;;
    *) broken=$((broken + 1)) ;;
    esac
done
# the last mutant's objects: rebuild the unmutated tree so build-mutate/ is left clean
make -s -j"$(nproc)" BUILD="$BUILD" all >>"$BUILD/mutate-build.log" 2>&1

echo "$killed killed, $survived survived, $explained expected to survive, $unexpected killed but listed as surviving, $broken broken"
[ $survived -eq 0 ] && [ $unexpected -eq 0 ] && [ $broken -eq 0 ] && exit 0
[ $broken -gt 0 ] && exit 2
exit 1
