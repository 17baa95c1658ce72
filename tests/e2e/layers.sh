# What "a layer" counts (--layer-unit, names given to the layer flags;
# docs/algorithms.md "Layers: what p, s and r count"):
#  - pfl model numbers ResNet-18 in blocks, and the top p blocks of a
#    10-class ResNet-18 hold FedALA's Table 1 counts (0.005 ... 11.182 M);
#  - names and other units give the same model as the row counts they mean,
#    and pFedCFR's per-tensor fusion runs (its Table III counts tensors);
#  - a bad name or unit is refused with one line naming the flag, exit 2.
. tests/e2e/lib.sh

out=$("$PFL" model --model resnet18 --input 3x64x64 --classes 10 --unit blocks) || fail "pfl model --unit blocks failed"
got=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ {print $NF}' | tac | tr '\n' ' ')
[ "$got" = "0.005 8.399 10.499 11.024 11.172 11.182 " ] && pass "FedALA Table 1, p = 1..6: $got" ||
    fail "top p blocks in M: '$got'"
out=$("$PFL" model --model resnet18 --unit tensors) || fail "pfl model --unit tensors failed"
echo "$out" | grep -Eq "^ +55  layer4.1.bn1.weight " && echo "$out" | grep -Eq "^ +61  fc.bias " &&
    pass "tensors numbered 0..61 as torchvision's parameters()" || fail "tensor numbering"

# refusals: one line naming the flag, exit 2 (usage)
refused() {
    local what=$1 needle=$2; shift 2
    local err rc
    err=$("$PFL" run --data mnist --model mlp --rounds 1 --quiet "$@" 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && [[ $err == *"$needle"* ]] &&
        pass "$what -> $err" || fail "$what: exit $rc: $err"
}
refused "unknown name" "--ala-p 'fc2'" --algo fedala --ala-p fc2
refused "not the top layers" "--head-layers 'fc1'" --algo fedper --head-layers fc1
refused "'*' inside a name" "--cfr-layers 'f*c'" --algo pfedcfr --cfr-layers 'f*c'
refused "unknown unit" "--layer-unit 'layers'" --algo fedala --layer-unit layers
refused "more blocks than the model has" "--ala-p 3" --algo fedala --ala-p 3 --layer-unit blocks
expect_error "pfl model --unit" "--unit 'layers'" "$PFL" model --model mlp --unit layers

# the same model whichever way the same layers are named
tiny=(--data mnist --model mlp --partition onelabel:100/20 --clients 4 --rounds 2 --batch 20 --lr 0.05 --threads 1
      --quiet)
sha() { "$PFL" run "${tiny[@]}" "$@" --out "$TMP/run" --overwrite >/dev/null && json_field global_model_sha256 "$TMP/run/summary.json"; }
base=$(sha --algo pfedcfr --cfr-layers 1)
[ -n "$base" ] && [ "$(sha --algo pfedcfr --cfr-layers fc1)" = "$base" ] &&
    [ "$(sha --algo pfedcfr --cfr-layers 1 --layer-unit blocks)" = "$base" ] &&
    pass "pfedcfr: --cfr-layers 1 = fc1 = 1 block (mlp)" || fail "pfedcfr names or blocks differ from rows"
t2=$(sha --algo pfedcfr --cfr-layers 2 --layer-unit tensors) t1=$(sha --algo pfedcfr --cfr-layers 1 --layer-unit tensors)
[ -n "$t2" ] && [ -n "$t1" ] && [ "$t2" != "$base" ] && [ "$t1" != "$t2" ] &&
    pass "pfedcfr in tensors: fc1.weight and fc1.bias fused apart, r = 1 ends inside fc1" ||
    fail "pfedcfr tensors: '$t1' '$t2' vs '$base'"
base=$(sha --algo fedala --local-steps 2)
[ -n "$base" ] && [ "$(sha --algo fedala --local-steps 2 --ala-p fc)" = "$base" ] &&
    [ "$(sha --algo fedala --local-steps 2 --ala-p 2 --layer-unit tensors)" = "$base" ] &&
    pass "fedala: --ala-p 1 = fc = 2 tensors" || fail "fedala: names or tensors differ from rows"
grep -q '"ala_p": 2,' "$TMP/run/summary.json" && grep -q '"ala_p_resolved": 1,' "$TMP/run/summary.json" &&
    grep -q '"layer_unit": "tensors"' "$TMP/run/summary.json" &&
    pass "summary records the count as given, its unit, and the rows it resolved to" || fail "summary: $(grep -o '"ala_p[^,]*' "$TMP/run/summary.json")"
finish
