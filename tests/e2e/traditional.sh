# The traditional methods through the command (SCAFFOLD, FedDyn, FedLC,
# FedNTD, and the server optimizers FedAvgM, FedAdam, FedYogi, FedAdagrad;
# tests/test_traditional.c and test_server_opt.c have their steps by hand):
#
#  - each reduces to FedAvg bit for bit when its own part is zero, with
#    FedAvg's mean (--server-mean samples): SCAFFOLD's round 1 (zero control
#    variates) at --server-lr 1, FedDyn at --dyn-alpha 0, FedLC at --lc-tau 0,
#    FedNTD at --ntd-beta 0, over every round run; and not otherwise;
#  - message bytes: SCAFFOLD sends a control variate each way beside the model
#    (twice FedAvg's bytes), the others FedAvg's; SCAFFOLD's c_i and FedDyn's
#    grad_k are a whole parameter vector per client that trained (the client
#    store's bytes); FedLC's global label counts are one exchange before
#    training (setup_bytes_up/down: clients x classes x 4); FedNTD's masked
#    upload (--flayer-mask) is counted as sent, though it gathers whole;
#  - a bad value of their word flags is refused with one line.
. tests/e2e/lib.sh

# 8 clients of one label each (100 train / 20 test samples), mlp (159010 parameters)
common=(--data mnist --model mlp --partition onelabel:100/20 --clients 8 --batch 20 --lr 0.05 --quiet)
sha() { json_field global_model_sha256 "$TMP/$1/summary.json"; }
run() { # NAME FLAGS...
    local name=$1; shift
    "$PFL" run "${common[@]}" "$@" --out "$TMP/$name" || fail "$name: run failed"
}

run fedavg1 --algo fedavg --rounds 1
run scaffold1 --algo scaffold --rounds 1 --server-mean samples
[ -n "$(sha fedavg1)" ] && [ "$(sha scaffold1)" = "$(sha fedavg1)" ] &&
    pass "scaffold round 1, zero controls, --server-lr 1, --server-mean samples: FedAvg's model" ||
    fail "scaffold round 1 $(sha scaffold1) != fedavg $(sha fedavg1)"
# clients of different sizes (one label each gives 100 samples to all, where the two means agree)
run fedavg1d --algo fedavg --rounds 1 --partition dir:0.5
run scaffold1d --algo scaffold --rounds 1 --partition dir:0.5
[ -n "$(sha fedavg1d)" ] && [ "$(sha scaffold1d)" != "$(sha fedavg1d)" ] &&
    pass "scaffold's uniform mean (the default) is not FedAvg's on clients of different sizes" ||
    fail "scaffold --server-mean uniform gave FedAvg's model on dir:0.5"

run fedavg3 --algo fedavg --rounds 3
run scaffold3 --algo scaffold --rounds 3 --server-mean samples
run feddyn0 --algo feddyn --rounds 3 --dyn-alpha 0 --server-mean samples
run feddyn3 --algo feddyn --rounds 3 --server-mean samples
run fedlc0 --algo fedlc --rounds 3 --lc-tau 0
run fedlc3 --algo fedlc --rounds 3
run fedntd0 --algo fedntd --rounds 3 --ntd-beta 0 --server-mean samples
run fedntd3 --algo fedntd --rounds 3 --server-mean samples
for zero in feddyn0 fedlc0 fedntd0; do
    [ -n "$(sha fedavg3)" ] && [ "$(sha $zero)" = "$(sha fedavg3)" ] && pass "$zero: FedAvg's model after 3 rounds" ||
        fail "$zero: $(sha $zero) != fedavg $(sha fedavg3)"
done
for on in scaffold3 feddyn3 fedlc3 fedntd3; do
    [ "$(sha $on)" != "$(sha fedavg3)" ] && pass "$on: not FedAvg's model" || fail "$on: FedAvg's model bit for bit"
done

# bytes per round: 8 clients, 159010 floats each way, 4 bytes a float
model=$((159010 * 4 * 8))
for name in fedavg3 feddyn3 fedlc3 fedntd3 scaffold3; do
    want=$model
    [ $name = scaffold3 ] && want=$((2 * model))
    s="$TMP/$name/summary.json"
    [ "$(json_field bytes_down_per_round "$s")" = $want ] && [ "$(json_field bytes_up_per_round "$s")" = $want ] &&
        pass "$name: $want bytes each way per round" || fail "$name bytes: $(grep bytes_ "$s")"
done
# SCAFFOLD, FedDyn and FedNTD reduce under MPI (their server state and
# uniform mean are sums over the slots), so a client sends only what
# FedAvg's would: under FLAYER's mask the parameters it sent and a bitmap,
# fewer bytes than the model it received
run fedntd_mask --algo fedntd --rounds 1 --flayer-mask
s="$TMP/fedntd_mask/summary.json"
up=$(json_field bytes_up_per_round "$s")
[ "$(json_field bytes_down_per_round "$s")" = $model ] && [ -n "$up" ] && [ "$up" -lt $model ] &&
    pass "fedntd --flayer-mask: $up bytes up per round, the masked upload, under the model's $model" ||
    fail "fedntd --flayer-mask bytes: $(grep bytes_ "$s")"
for name in scaffold3 feddyn3; do
    got=$(json_field client_state_bytes "$TMP/$name/summary.json")
    [ "$got" = $model ] && pass "$name: the clients' stores hold a parameter vector each ($got bytes)" ||
        fail "$name: client_state_bytes $got, want $model"
done
s="$TMP/fedlc3/summary.json"
[ "$(json_field setup_bytes_up "$s")" = 320 ] && [ "$(json_field setup_bytes_down "$s")" = 320 ] &&
    pass "fedlc: 8 clients x 10 label counts up, the calibration down, once" || fail "fedlc setup bytes: $(grep setup "$s")"
run fedlc_local --algo fedlc --rounds 1 --lc-counts local
grep -q setup_bytes "$TMP/fedlc_local/summary.json" && fail "fedlc --lc-counts local exchanged counts" ||
    pass "fedlc --lc-counts local: nothing exchanged before training"

# The server optimizers (FedAvgM, FedOpt; tests/test_server_opt.c has their steps by hand): at the settings
# that make the server's step x + (mean - x), FedAvg's model bit for bit over 3 rounds (the step is taken in
# double); at their defaults not; FedAvg's bytes; their default means, on clients of different sizes
run fedavgm0 --algo fedavgm --rounds 3 --server-momentum 0
reduce=(--server-beta1 0 --server-beta2 1 --server-tau 0.5 --server-lr 1 --server-mean samples)
run fedadam0 --algo fedadam --rounds 3 "${reduce[@]}"
run fedyogi0 --algo fedyogi --rounds 3 "${reduce[@]}"
for zero in fedavgm0 fedadam0 fedyogi0; do
    [ -n "$(sha fedavg3)" ] && [ "$(sha $zero)" = "$(sha fedavg3)" ] && pass "$zero: FedAvg's model after 3 rounds" ||
        fail "$zero: $(sha $zero) != fedavg $(sha fedavg3)"
done
for algo in fedavgm fedadam fedyogi fedadagrad; do
    run ${algo}3 --algo $algo --rounds 3
    [ -n "$(sha ${algo}3)" ] && [ "$(sha ${algo}3)" != "$(sha fedavg3)" ] && pass "$algo: not FedAvg's model" ||
        fail "$algo: FedAvg's model bit for bit at its defaults"
    s="$TMP/${algo}3/summary.json"
    [ "$(json_field bytes_down_per_round "$s")" = $model ] && [ "$(json_field bytes_up_per_round "$s")" = $model ] &&
        pass "$algo: FedAvg's $model bytes each way per round" || fail "$algo bytes: $(grep bytes_ "$s")"
done
# FedAvgM's mean is FedAvg's (by samples), FedOpt's uniform: with the step reduced as above, FedAvgM stays
# FedAvg's model on clients of different sizes and FedAdam does so only under --server-mean samples
run fedavgm1d --algo fedavgm --rounds 1 --partition dir:0.5 --server-momentum 0
run fedadam1d --algo fedadam --rounds 1 --partition dir:0.5 "${reduce[@]:0:8}"
[ -n "$(sha fedavg1d)" ] && [ "$(sha fedavgm1d)" = "$(sha fedavg1d)" ] &&
    pass "fedavgm: FedAvg's mean by samples by default" || fail "fedavgm's default mean is not FedAvg's on dir:0.5"
[ -n "$(sha fedadam1d)" ] && [ "$(sha fedadam1d)" != "$(sha fedavg1d)" ] &&
    pass "fedadam: the paper's uniform mean by default" || fail "fedadam's default mean is FedAvg's on dir:0.5"
# FedADMM: FedAvg's bytes (the dual variable never leaves its client; the store holds one a client that trained),
# not FedAvg's model; rho 0 (Delta divides by it) and the modules that move the start refused
run fedadmm3 --algo fedadmm --rounds 3 --epochs 2
s="$TMP/fedadmm3/summary.json"
[ -n "$(sha fedadmm3)" ] && [ "$(sha fedadmm3)" != "$(sha fedavg3)" ] && pass "fedadmm: not FedAvg's model" ||
    fail "fedadmm: FedAvg's model"
[ "$(json_field bytes_down_per_round "$s")" = $model ] && [ "$(json_field bytes_up_per_round "$s")" = $model ] &&
    [ "$(json_field client_state_bytes "$s")" = $model ] &&
    pass "fedadmm: FedAvg's bytes each way, a dual variable per client in the store" ||
    fail "fedadmm bytes: $(grep -E 'bytes_(up|down)_per|client_state' "$s")"
expect_error "--admm-rho 0" "--admm-rho" "$PFL" run "${common[@]}" --algo fedadmm --admm-rho 0
expect_error "fedadmm --ala" "--ala" "$PFL" run "${common[@]}" --algo fedadmm --ala
expect_error "bad --admm-epochs" "--admm-epochs" "$PFL" run "${common[@]}" --algo fedadmm --admm-epochs some
expect_error "--server-beta2 above 1" "--server-beta2" "$PFL" run "${common[@]}" --algo fedyogi --server-beta2 1.5
expect_error "--server-momentum 1" "--server-momentum" "$PFL" run "${common[@]}" --algo fedavgm --server-momentum 1
expect_error "fedadagrad has no beta_2" "--server-beta2" "$PFL" run "${common[@]}" --algo fedadagrad --server-beta2 0.9

expect_error "bad --server-mean" "--server-mean" "$PFL" run "${common[@]}" --algo scaffold --server-mean median
expect_error "bad --dyn-penalty" "--dyn-penalty" "$PFL" run "${common[@]}" --algo feddyn --dyn-penalty cube
expect_error "bad --lc-counts" "--lc-counts" "$PFL" run "${common[@]}" --algo fedlc --lc-counts some
expect_error "--server-lr 0" "--server-lr" "$PFL" run "${common[@]}" --algo scaffold --server-lr 0
finish
