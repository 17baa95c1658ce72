# ResNet-18 and the BatchNorm flag end to end: `pfl model` prints the layer
# table PyTorch's model has; FedAvg with resnet18 (torchvision's stem, what
# PFLlib trains on CIFAR-10) on 200 CIFAR-10 training samples over 2 clients
# lowers the training loss round after round and gives the same model on 1
# and 2 threads; FedBN (--bn local) runs, and stopped after round 1 and
# resumed (pfl resume) ends as the uninterrupted run. Needs CIFAR-10 (skipped without it)
# and is skipped under the sanitizers (a resnet step is slow there); the
# table and flag checks run everywhere.
. tests/e2e/lib.sh

out=$("$PFL" model --model resnet18 --data cifar10) || fail "pfl model failed"
echo "$out" | grep -q "^total: 11181642 parameters in 41 layers (62 tensors)" && pass "resnet18: 11181642 parameters, 41 layers" ||
    fail "resnet18 table: $(echo "$out" | tail -2)"
echo "$out" | grep -q "^state: 9600 floats" && pass "resnet18: 9600 running statistics" || fail "resnet18 state"
echo "$out" | grep -Eq "^ +40  fc +5130 +11176512 +0  60-61 +5$" && pass "resnet18: layer 40 is fc at 11176512, tensors 60-61, block 5" ||
    fail "resnet18: fc row missing"
out=$("$PFL" model --model alexnet --input 3x32x32 --classes 10) || fail "pfl model alexnet failed"
echo "$out" | grep -q "^total: 23272266 parameters in 8 layers" && pass "alexnet: 23272266 parameters" || fail "alexnet table"
expect_error "pfl model without --model" "--model" "$PFL" model
expect_error "pfl model bad --input" "--input" "$PFL" model --model cnn --input 3x32 --classes 10
expect_error "bad --bn" "--bn" "$PFL" run --model resnet18 --data cifar10 --bn sometimes --rounds 1 --quiet
expect_error "--bn local without BatchNorm" "--bn" "$PFL" run --model mlp --data mnist --bn local --rounds 1 --quiet

if [ "${PFL_SANITIZED:-0}" = 1 ]; then
    echo "skipped the runs under sanitizers (training speed); they run in the optimized suite"
    finish
    exit 0
fi
if [ ! -d "$PFL_DATA/cifar10" ]; then
    echo "skipped the runs: no CIFAR-10 under $PFL_DATA"
    finish
    exit 0
fi
# --public holds out all but the first 266 samples: 133 per client, 100 of them for training
common=(--algo fedavg --data cifar10 --model resnet18 --partition iid --clients 2 --public 59734 --rounds 3
        --batch 10 --lr 0.01 --quiet)
for t in 1 2; do
    "$PFL" run "${common[@]}" --threads $t --out "$TMP/t$t" || fail "resnet18 run on $t threads failed"
done
losses=$(grep -o '"train_loss":[0-9.]*' "$TMP/t1/metrics.jsonl" | sed 's/.*://' | tr '\n' ' ')
awk -v l="$losses" 'BEGIN { n = split(l, a, " "); if (n != 3) exit 1; for (i = 2; i <= n; i++) if (!(a[i] < a[i-1])) exit 1 }' &&
    pass "resnet18 FedAvg: training loss falls every round ($losses)" || fail "resnet18 loss does not fall: $losses"
s1=$(json_field global_model_sha256 "$TMP/t1/summary.json") s2=$(json_field global_model_sha256 "$TMP/t2/summary.json")
[ -n "$s1" ] && [ "$s1" = "$s2" ] && pass "resnet18: same model on 1 and 2 threads" || fail "threads: $s1 vs $s2"
[ "$(json_field state "$TMP/t1/summary.json")" = 9600 ] && [ "$(json_field bn "$TMP/t1/summary.json")" = stats-local ] &&
    pass "summary: state 9600, bn stats-local (--bn auto on a model with BatchNorm, as PFLlib)" ||
    fail "summary state/bn fields"
"$PFL" run "${common[@]}" --rounds 2 --bn local --out "$TMP/fedbn" || fail "--bn local run failed"
[ "$(json_field bn "$TMP/fedbn/summary.json")" = local ] && pass "FedBN (--bn local) runs" || fail "fedbn summary"
# FedBN stopped after round 1 and resumed: the checkpoint holds the clients'
# own BatchNorm (running statistics included) and the flags --bn local
"$PFL" run "${common[@]}" --rounds 2 --bn local --checkpoint-every 1 --stop-after 1 --out "$TMP/fedbn_part" ||
    fail "stopped --bn local run failed"
"$PFL" resume "$TMP/fedbn_part" --threads 1 --quiet || fail "resuming the --bn local run failed"
strip_metrics() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }
[ "$(json_field bn "$TMP/fedbn_part/summary.json")" = local ] &&
    [ "$(json_field global_model_sha256 "$TMP/fedbn/summary.json")" = "$(json_field global_model_sha256 "$TMP/fedbn_part/summary.json")" ] &&
    [ "$(strip_metrics "$TMP/fedbn/metrics.jsonl")" = "$(strip_metrics "$TMP/fedbn_part/metrics.jsonl")" ] &&
    pass "FedBN resumed after round 1: same fingerprint and metrics as the uninterrupted run" ||
    fail "FedBN resumed: $(diff <(strip_metrics "$TMP/fedbn/metrics.jsonl") <(strip_metrics "$TMP/fedbn_part/metrics.jsonl"))"
finish
