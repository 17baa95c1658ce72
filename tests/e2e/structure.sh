# The house's rooms (docs/architecture.md, "Rooms"): no circle between the
# files of src/ or between its folders, whether through #include or through
# calls (a symbol one object file uses and another defines, read with nm from
# the build), and dependencies point down the documented order
# cli -> run -> algos -> fl -> modules -> backend -> data, nn, cluster -> util. The
# command line knows no method by name. Circles are found with tsort.
. tests/e2e/lib.sh
BUILD=${BUILD:-build}

# "unit unit" lines: files as their path under src/ without the extension
# (model.h and model.c are one unit), an edge per #include of another unit.
include_edges() {
    local f u t
    for f in $(find src -name '*.[ch]' | sort); do
        u=${f#src/}
        u=${u%.*}
        for t in $(sed -n 's/^#include "\([a-z0-9_/]*\)\.h".*/\1/p' "$f"); do
            [ "$t" = "$u" ] || echo "$u $t"
        done
    done | sort -u
}

# An edge from each object file to every other one that defines a symbol it uses.
symbol_edges() {
    local o u s
    declare -A defined
    for o in $(find "$BUILD/src" -name '*.o' | sort); do
        u=${o#"$BUILD"/src/}
        for s in $(nm -g --defined-only "$o" | awk '{print $3}'); do defined[$s]=${u%.o}; done
    done
    for o in $(find "$BUILD/src" -name '*.o' | sort); do
        u=${o#"$BUILD"/src/}
        u=${u%.o}
        for s in $(nm -u "$o" | awk '{print $2}'); do
            [ -n "${defined[$s]:-}" ] && [ "${defined[$s]}" != "$u" ] && echo "$u ${defined[$s]}"
        done
    done | sort -u
}

folders_of() { awk '{ split($1, a, "/"); split($2, b, "/"); if (a[1] != b[1]) print a[1], b[1] }' | sort -u; }

# Fails when the edges ($2, a file) hold a circle, naming it.
no_circle() {
    local loop
    loop=$(tsort "$2" 2>&1 >/dev/null | awk '/contains a loop/ { n++; next } n == 1 { printf "%s ", $2 }')
    [ -z "$loop" ] && pass "no circle between $1" || fail "a circle between $1, through: ${loop% }"
}

include_edges >"$TMP/include"
[ -s "$TMP/include" ] || fail "no #include found in src/"
no_circle "files (#include)" "$TMP/include"
folders_of <"$TMP/include" >"$TMP/include_folders"
no_circle "folders (#include)" "$TMP/include_folders"

if ls "$BUILD"/src/*/*.o >/dev/null 2>&1; then
    symbol_edges >"$TMP/symbol"
    [ -s "$TMP/symbol" ] || fail "nm found no symbol shared between object files in $BUILD/src"
    no_circle "files (calls)" "$TMP/symbol"
    folders_of <"$TMP/symbol" >"$TMP/symbol_folders"
    no_circle "folders (calls)" "$TMP/symbol_folders"
else
    fail "no object files in $BUILD/src (build first)"
fi

# The documented order: a folder uses only folders further down (a folder
# this list does not know is checked for circles only).
rank() {
    case $1 in
    cli) echo 0 ;; run) echo 1 ;; algos) echo 2 ;; fl) echo 3 ;; modules) echo 4 ;; backend) echo 5 ;;
    data | nn | cluster) echo 6 ;; util) echo 7 ;; *) echo "" ;;
    esac
}
while read -r from to; do
    rf=$(rank "$from") rt=$(rank "$to")
    [ -n "$rf" ] && [ -n "$rt" ] && [ "$rf" -ge "$rt" ] && fail "src/$from uses src/$to, which is not below it"
done < <(sort -u "$TMP/include_folders" "$TMP/symbol_folders" 2>/dev/null)
pass "dependencies point down: cli, run, algos, fl, modules, backend, data/nn/cluster, util"

names=$(grep -ilE 'fedalp|cfl|tsdp|fedala|ditto' src/cli/*.c)
[ -z "$names" ] && pass "src/cli names no method" || fail "src/cli names methods: $names"
finish
