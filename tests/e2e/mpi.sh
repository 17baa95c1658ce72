# MPI: `mpirun -np 3` (and -np 2) gives the same global_model_sha256, the
# same metrics.jsonl (every field but the timings) and the same summary.json
# (but timings, threads and traffic; personal_models_sha256 included) as the in-process run with the same
# seed, for every algorithm and the modules; a failure on one rank ends
# every rank instead of hanging. Also with --drop-rate 0.3 (every rank
# drops the same clients; the dropped lists match too), fasttext on AG News
# (each rank builds the vocabulary from the same partition) and a BatchNorm
# model with --bn shared and --bn local (running statistics travel only when
# shared); the bytes a reduction moves; checkpointed runs stopped by SIGKILL
# or SIGTERM to a rank at a random moment and resumed with 3 and with 2
# ranks; --seeds with checkpoints refused under mpirun with one line. Skipped (exit
# 77) when pfl was built without MPI or mpirun is missing. Under the
# sanitizers eight cases run (dense, masked, fused and clustered uploads,
# drops, extra parameter blocks, and SCAFFOLD's own sums along the ranks), with LeakSanitizer off: Open MPI keeps allocations until exit
# that LeakSanitizer reports as leaks.
. tests/e2e/lib.sh

if ! command -v mpirun >/dev/null; then echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; fi
if ! ldd "$PFL" 2>/dev/null | grep -q libmpi; then echo "skipped: $PFL was built without MPI"; exit 77; fi
# root in a container: Open MPI refuses root unless told; 3 ranks on 2 cores
# need --oversubscribe; ranks with several threads must not be pinned to one core
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
if [ "${PFL_SANITIZED:-0}" = 1 ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi

# tiny: 10 clients of 100 train / 30 test samples, 2 rounds (a case's own
# flags come later and win)
common=(--data mnist --model mlp --partition onelabel:100/30 --clients 10 --rounds 2 --batch 20 --quiet)
strip_metrics() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }
# (memory: a process's peak differs with what it holds, and a method's server
# stores are on every rank)
strip_summary() { grep -v -E '"(threads|seconds_per_round|train_samples_per_second|total_seconds|processes|bytes_[a-z_]*|peak_rss_bytes|client_state_bytes|ala_start_seconds)":' "$1"; }

# compare NAME NP FLAGS...: the in-process run $TMP/NAME/inproc (made on
# first use) against mpirun -np NP
compare() {
    local name=$1 np=$2; shift 2
    local dir="$TMP/$name"
    if [ ! -f "$dir/inproc/summary.json" ]; then
        "$PFL" run "${common[@]}" "$@" --threads 2 --out "$dir/inproc" || { fail "$name: in-process run failed"; return; }
    fi
    timeout 300 "${MPIRUN[@]}" -np "$np" "$PFL" run "${common[@]}" "$@" --threads 1 --out "$dir/np$np" \
        >"$dir/np$np.log" 2>&1 || { fail "$name: mpirun -np $np failed: $(tail -5 "$dir/np$np.log")"; return; }
    local a b
    a=$(json_field global_model_sha256 "$dir/inproc/summary.json")
    b=$(json_field global_model_sha256 "$dir/np$np/summary.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "$name -np $np: same fingerprint" || fail "$name -np $np: fingerprint $b != $a"
    [ "$(strip_metrics "$dir/inproc/metrics.jsonl")" = "$(strip_metrics "$dir/np$np/metrics.jsonl")" ] &&
        pass "$name -np $np: same metrics" ||
        fail "$name -np $np: metrics differ: $(diff <(strip_metrics "$dir/inproc/metrics.jsonl") <(strip_metrics "$dir/np$np/metrics.jsonl") | head -4)"
    [ "$(strip_summary "$dir/inproc/summary.json")" = "$(strip_summary "$dir/np$np/summary.json")" ] &&
        pass "$name -np $np: same summary" ||
        fail "$name -np $np: summary differs: $(diff <(strip_summary "$dir/inproc/summary.json") <(strip_summary "$dir/np$np/summary.json") | head -4)"
    [ "$(json_field processes "$dir/np$np/summary.json")" = "$np" ] || fail "$name -np $np: summary does not say $np processes"
}

# flags of a case: the algorithm of that name, the clustering methods forced
# to cluster within 2 rounds, modules on other methods; join 0.6 (clients sit
# out rounds) where the method allows it
case_flags() {
    case $1 in
        fedalp) echo --algo fedalp --groups 2 --warmup 1 --join 0.6 ;;
        cfl) echo --algo cfl --cfl-warmup 0 --cfl-eps1 1e9 --cfl-eps2 0 ;;
        fedtsdp) echo --algo fedtsdp --public 2000 --tsdp-hth 0 ;;
        fedprox_ala) echo --algo fedprox --ala --join 0.6 ;;
        fedavg_literal) echo --algo fedavg --flayer-mask-literal --join 0.6 ;;
        fedper_mask) echo --algo fedper --flayer-mask --flayer-lr --join 0.6 ;;
        ditto_agg) echo --algo ditto --flayer-agg --join 0.6 ;;
        # ALA on what FedAMP sends (u_i), the models training left evaluated
        fedamp_ala) echo --algo fedamp --ala --join 0.6 ;;
        pfedcfr_after_train) echo --algo pfedcfr --eval-moment after-train --join 0.6 ;;
        # personalized models built when evaluated, on the owner of each client
        perfedavg_hf_ala) echo --algo perfedavg --perfedavg-hf --ala --join 0.6 ;;
        fedphp_agg) echo --algo fedphp --flayer-agg --join 0.6 ;;
        # each rank's client rows in a file of its own
        ditto_file) echo --algo ditto --join 0.6 --client-state "$TMP" ;;
        # --drop-rate: round 1 drops 5 of the 6 selected (fedavg), 7 of 10
        drop_fedavg) echo --algo fedavg --join 0.6 --drop-rate 0.3 ;;
        # PFLlib's personalized methods: FedKD's message sizes counted from the uploads on every rank, FedMTL's
        # W from the server's copies, FedDBE's global mean computed on every rank from every client
        fml) echo --algo fml --fml-alpha 0.5 --fml-beta 0.5 --join 0.6 ;;
        fml_mask) echo --algo fml --flayer-mask --join 0.6 ;;
        fedkd) echo --algo fedkd --join 0.6 ;;
        fedkd_update) echo --algo fedkd --kd-update --kd-paper-rank --drop-rate 0.3 ;;
        feddbe) echo --algo feddbe --join 0.6 ;;
        fedmtl) echo --algo fedmtl --join 0.6 ;;
        fedmtl_reg) echo --algo fedmtl --mtl-reg-grad --join 0.6 ;;
        fedbn) echo --algo fedbn --model resnet18 --partition iid --clients 3 --public 69940 --batch 10 --eval-batch 10 ;;
        drop_fedalp) echo --algo fedalp --groups 2 --warmup 1 --drop-rate 0.3 ;;
        drop_cfl) echo --algo cfl --cfl-warmup 0 --cfl-eps1 1e9 --cfl-eps2 0 --drop-rate 0.3 ;;
        # traditional methods: SCAFFOLD's c_i and FedDyn's grad_k on their owners, c and h replicated
        drop_scaffold) echo --algo scaffold --join 0.6 --drop-rate 0.3 ;;
        # the server optimizers: the mean a reduction, the step and its state replicated on every rank
        drop_fedyogi) echo --algo fedyogi --join 0.6 --drop-rate 0.3 ;;
        # FedADMM: the dual variables on their owners, random epochs from each client's stream
        fedadmm) echo --algo fedadmm --join 0.6 --epochs 2 --admm-target-round 1 ;;
        feddyn_ala) echo --algo feddyn --ala --join 0.6 ;;
        fedntd_mask) echo --algo fedntd --flayer-mask --join 0.6 ;;
        fedntd_literal) echo --algo fedntd --flayer-mask-literal --join 0.6 ;; # the uniform literal mean in double
        drop_fedper) echo --algo fedper --join 0.6 --drop-rate 0.3 ;;
        # extra parameter blocks travel as shared layers do, whole under FLAYER's mask
        fedcp_mask) echo --algo fedcp --join 0.6 --flayer-mask ;;
        gpfl_mask) echo --algo gpfl --join 0.6 --flayer-mask --flayer-lr ;;
        # AG News: 1,600 rows of the test split over 4 clients
        fasttext) echo --data agnews --data-dir "$agnews_dir" --model fasttext:2000:32 --partition iid --clients 4 \
            --public 6000 --lr 0.5 --join 0.6 ;;
        # BatchNorm: resnet18 on 3 clients of 20 MNIST samples (seconds)
        bn_shared | bn_local) echo --model resnet18 --partition iid --clients 3 --public 69940 --batch 10 \
            --eval-batch 10 --bn "${1#bn_}" ;;
        apple_silo) echo --algo apple ;; # cross-silo: every client every round
        fedgh_ala) echo --algo fedgh --ala --join 0.6 ;; # ALA on the header the server trained
        # PFLlib's personalized methods: FedAS's trace travels in its block, FedGC's heads under the mask
        # (FedGC on dir:0.3: with one label a client its cross-entropy over the client's classes is zero)
        fedas_mask) echo --algo fedas --join 0.6 --flayer-mask ;;
        fedgc) echo --algo fedgc --join 0.6 --partition dir:0.3 ;;
        fedgc_mask) echo --algo fedgc --join 0.6 --partition dir:0.3 --flayer-mask --flayer-agg ;;
        fedgen) echo --algo fedgen --join 0.6 --fedgen-server-epochs 20 ;;
        *) echo --algo "$1" --join 0.6 ;;
    esac
}
# AG News as agnews.sh finds it (the case is left out without it)
agnews_dir=$PFL_DATA
if [ ! -f "$agnews_dir/agnews/test.csv" ] && [ -f ../shared/data/ag_news/test.csv ]; then
    agnews_dir=$TMP/data
    mkdir -p "$agnews_dir/agnews"
    ln -s "$(pwd)/../shared/data/ag_news/test.csv" "$agnews_dir/agnews/test.csv"
fi
text=()
[ -f "$agnews_dir/agnews/test.csv" ] && text=(fasttext) || echo "no AG News: the fasttext case is left out"
if [ "${PFL_SANITIZED:-0}" = 1 ]; then
    cases=(fedavg flayer pfedcfr fedalp drop_fedavg fedcp gpfl drop_scaffold)
    twice=(fedavg)
else
    cases=(fedavg local fedprox fedper fedrep ditto fedala flayer fedamp pfedcfr fedalp pfedme cfl fedtsdp
        fedprox_ala fedavg_literal fedper_mask ditto_agg fedamp_ala pfedcfr_after_train ditto_file drop_fedavg drop_fedalp
        drop_cfl drop_fedper lgfedavg fedbabu apfl fedrod fedcp fedcp_mask gpfl gpfl_mask
        fedavg-c fedprox-c perfedavg fedphp perfedavg_hf_ala fedphp_agg fedfomo apple_silo partialfed
        fedproto fd fedpcl fedgh fedpac fedgh_ala
        scaffold drop_scaffold feddyn feddyn_ala fedlc fedntd_mask fedntd_literal
        fml fml_mask fedkd fedkd_update feddbe fedmtl fedmtl_reg fedbn
        fedcac fedas fedas_mask pfl-da fedgc fedgc_mask
        moon fedgen fedcross
        fedavgm fedadam drop_fedyogi fedadagrad fedadmm
        "${text[@]}" bn_shared bn_local)
    twice=(fedavg fedala fedalp pfedcfr flayer drop_cfl fedpac)
fi
for name in "${cases[@]}"; do
    read -r -a flags <<<"$(case_flags "$name")"
    compare "$name" 3 "${flags[@]}"
done
# The client rows are split among the ranks that own them, and
# the summary sums what they hold
if [ "${PFL_SANITIZED:-0}" != 1 ]; then
    a=$(json_field client_state_bytes "$TMP/ditto/inproc/summary.json")
    b=$(json_field client_state_bytes "$TMP/ditto/np3/summary.json")
    [ -n "$a" ] && [ "$a" != 0 ] && [ "$a" = "$b" ] && pass "ditto -np 3: the ranks' client stores hold the in-process $a bytes" ||
        fail "ditto -np 3: client_state_bytes $b, in-process $a"
fi
for name in "${twice[@]}"; do
    read -r -a flags <<<"$(case_flags "$name")"
    compare "$name" 2 "${flags[@]}"
done

# the clustering really happened under MPI (else the comparison proves little)
[ "${PFL_SANITIZED:-0}" = 1 ] || {
    grep -q '"clustered": true' "$TMP/fedalp/np3/summary.json" && pass "fedalp clustered" || fail "fedalp did not cluster"
    [ "$(json_field clusters "$TMP/cfl/np3/summary.json")" -gt 1 ] && pass "cfl split" || fail "cfl did not split"
    grep -q '"clustered":true' "$TMP/fedtsdp/np3/metrics.jsonl" && pass "fedtsdp clustered" || fail "fedtsdp did not cluster"
    grep -q '"clustered": true' "$TMP/drop_fedalp/np3/summary.json" && pass "fedalp clustered with drops" ||
        fail "fedalp did not cluster with drops"
    [ "$(json_field clusters "$TMP/drop_cfl/np3/summary.json")" -gt 1 ] && pass "cfl split with drops" ||
        fail "cfl did not split with drops"
    [ "$(json_field state "$TMP/bn_local/np3/summary.json")" -gt 0 ] && pass "bn: the model has running statistics" ||
        fail "bn: the model has no running statistics"
}
# the drops happened (else the drop cases prove little): some round lists dropped clients
grep -q '"dropped":\[[0-9]' "$TMP/drop_fedavg/np3/metrics.jsonl" && pass "drop_fedavg: clients dropped" ||
    fail "drop_fedavg: no client dropped"

# --seeds with checkpoints is refused under mpirun: one line from rank 0, exit 2 (not an abort)
timeout 120 "${MPIRUN[@]}" -np 3 "$PFL" run "${common[@]}" --algo fedavg --threads 1 --seeds 1,2 --checkpoint-every 1 \
    --out "$TMP/seeds" >"$TMP/seeds.log" 2>&1
rc=$?
lines=$(grep -c "does not run under mpirun" "$TMP/seeds.log")
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" = 1 ] && pass "--seeds with checkpoints refused under mpirun (exit $rc)" ||
    fail "--seeds with checkpoints under mpirun: exit $rc, $lines refusal lines: $(head -3 "$TMP/seeds.log")"

# traffic: a reduction (FedAvg) sends the server one model (its shared
# layers, 159,010 float32) and 56 bytes of figures per client of the round
# (its pfl_slot_record: the training statistics and the message bytes)
# (6 of 10); a client rank receives at most two models, the running sum
# from the rank before it and the result (4 processes: a middle rank does)
model=$((159010 * 4))
up=$(json_field bytes_to_server_per_round "$TMP/fedavg/np3/summary.json")
[ "$up" = $((model + 56 * 6)) ] && pass "fedavg: $up bytes to the server per round" ||
    fail "fedavg: $up bytes to the server per round, want $((model + 56 * 6))"
[ "$(json_field aggregation "$TMP/fedavg/np3/summary.json")" = reduce ] &&
    [ "$(json_field aggregation "$TMP/pfedcfr/np3/summary.json")" = gather ] &&
    pass "the summary says fedavg reduces and pfedcfr gathers" || fail "aggregation fields: fedavg reduce, pfedcfr gather"
# SCAFFOLD's c, FedDyn's h and the three's uniform mean are sums along the ranks (pfl_slot_sum), not a gather;
# so is FML's plain mean in double
# (4 processes: a middle rank receives the running sums and passes them on)
[ "${PFL_SANITIZED:-0}" = 1 ] || {
    for name in drop_scaffold feddyn fedntd_mask fedntd_literal fml fml_mask fedkd fedkd_update; do
        [ "$(json_field aggregation "$TMP/$name/np3/summary.json")" = reduce ] && pass "$name reduces under MPI" ||
            fail "$name: aggregation $(json_field aggregation "$TMP/$name/np3/summary.json"), want reduce"
    done
    compare drop_scaffold 4 $(case_flags drop_scaffold)
    compare feddyn 4 $(case_flags feddyn)
}
# FedProto, FD, FedPCL and FedGH gather only the shared rows (the message block; FedGH's header), not the
# backbone each client keeps: less than one model into a client rank, where whole uploads were several
[ "${PFL_SANITIZED:-0}" = 1 ] || {
    for name in fedproto fd fedpcl fedgh; do
        got=$(json_field bytes_to_a_client_rank_per_round "$TMP/$name/np3/summary.json")
        [ -n "$got" ] && [ "$got" -gt 0 ] && [ "$got" -lt "$model" ] &&
            pass "$name gathers its shared rows alone ($got bytes into a client rank a round)" ||
            fail "$name: $got bytes into a client rank a round, want some and under one model ($model)"
    done
}
[ "${PFL_SANITIZED:-0}" = 1 ] || {
    compare fedavg 4 $(case_flags fedavg)
    most=$(json_field bytes_to_a_client_rank_per_round "$TMP/fedavg/np4/summary.json")
    [ -n "$most" ] && [ "$most" -gt "$model" ] && [ "$most" -le $((2 * model)) ] &&
        pass "fedavg -np 4: $most bytes into a client rank per round (one model: $model)" ||
        fail "fedavg -np 4: $most bytes into a client rank per round, want more than one model and at most two ($model)"
}

# a run stopped after round 2 of 4 and resumed reports the traffic of the uninterrupted run: every figure a
# mean over the rounds (and evaluations) the resuming process ran, not a total over them
[ "${PFL_SANITIZED:-0}" = 1 ] || {
    ev=("${common[@]}" --algo fedavg --join 0.6 --rounds 4 --threads 1)
    timeout 300 "${MPIRUN[@]}" -np 3 "$PFL" run "${ev[@]}" --out "$TMP/ev_full" >"$TMP/ev.log" 2>&1 &&
        timeout 300 "${MPIRUN[@]}" -np 3 "$PFL" run "${ev[@]}" --checkpoint-every 1 --stop-after 2 --out "$TMP/ev_part" \
            >>"$TMP/ev.log" 2>&1 &&
        timeout 300 "${MPIRUN[@]}" -np 3 "$PFL" resume "$TMP/ev_part" --quiet >>"$TMP/ev.log" 2>&1 ||
        fail "traffic after a resume: a run failed: $(tail -3 "$TMP/ev.log")"
    for field in bytes_to_server_per_round bytes_to_client_ranks_per_round bytes_evaluation_sums_per_evaluation; do
        full=$(json_field $field "$TMP/ev_full/summary.json")
        [ -n "$full" ] && [ "$full" -gt 0 ] && [ "$(json_field $field "$TMP/ev_part/summary.json")" = "$full" ] &&
            pass "resumed under mpirun: $field $full, the uninterrupted run's" ||
            fail "resumed under mpirun: $field $(json_field $field "$TMP/ev_part/summary.json"), uninterrupted $full"
    done
}

# Checkpoints under mpirun: a 3-rank run with --checkpoint-every 1 stopped
# at a random moment, by SIGKILL to one of its ranks (mpirun ends the others
# within seconds, saying which rank died) or by SIGTERM to one of them
# (every rank finishes the round and its checkpoint, exit 128 + 15), then
# resumed with 3 and with 2 ranks: the uninterrupted run's fingerprints and
# metrics. FedALA: the clients' models and ALA weights live on their ranks.
ck=(--algo fedala --data mnist --model mlp --partition onelabel:100/30 --clients 10 --join 0.6 --rounds 8 --batch 20
    --checkpoint-every 1)
"$PFL" run "${ck[@]}" --quiet --threads 2 --out "$TMP/ck_full" || fail "uninterrupted checkpointed run failed"
strip_dir() { strip_metrics "$1/metrics.jsonl"; grep sha256 "$1/summary.json"; }
# interrupt SIGNAL: the run, stopped by SIGNAL to a random rank a random
# 0-1.2 s after its first checkpoint (the flags, written once the ranks
# started) appeared; resumed twice
interrupt() {
    local sig=$1 out="$TMP/ck_$1" ms rank pid start rc
    "${MPIRUN[@]}" -np 3 "$PFL" run "${ck[@]}" --threads 1 --out "$out" >"$out.log" 2>&1 &
    pid=$!
    for _ in $(seq 3000); do [ -e "$out/checkpoint" ] || ! kill -0 $pid 2>/dev/null && break; sleep 0.01; done
    ms=$((RANDOM % 1200)) rank=$((RANDOM % 3))
    sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
    local ranks=($(pgrep -P $pid | sort -n))
    start=$SECONDS
    [ ${#ranks[@]} = 3 ] && kill -"$sig" "${ranks[$rank]}"
    timeout 60 tail --pid=$pid -f /dev/null
    wait $pid
    rc=$?
    if [ -e "$out/summary.json" ]; then pass "$sig: the run finished before the signal"; return; fi
    [ -e "$out/checkpoint" ] || { fail "$sig: no checkpoint in $out: $(head -5 "$out.log")"; return; }
    local last
    last=$(grep -o '"round":[0-9]*' "$out/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
    local at="rank $rank ${ms} ms in, before round 0 ended"
    [ -n "$last" ] && at="rank $rank ${ms} ms in, after round $last"
    if [ "$sig" = KILL ]; then
        [ $rc -ne 0 ] && [ $((SECONDS - start)) -le 15 ] && [ "$(grep -c 'exited on signal 9' "$out.log")" = 1 ] &&
            ! grep -q "^pfl run" "$out.log" && pass "KILL to $at: the others ended in $((SECONDS - start)) s with one line" ||
            fail "KILL to $at: exit $rc after $((SECONDS - start)) s: $(grep -v '^\[pfl\]' "$out.log" | head -8)"
    else
        [ $rc = 143 ] && grep -q "SIGTERM: stopped after round" "$out.log" && ! grep -q "^pfl run" "$out.log" &&
            pass "TERM to $at: stopped with its checkpoint, exit $rc" ||
            fail "TERM to $at: exit $rc: $(grep -v '^\[pfl\] round' "$out.log" | head -8)"
    fi
    for np in 3 2; do
        cp -a "$out" "$out-np$np"
        timeout 300 "${MPIRUN[@]}" -np $np "$PFL" resume "$out-np$np" --quiet >"$out-np$np.log" 2>&1 ||
            { fail "$sig: resume with $np ranks failed: $(head -5 "$out-np$np.log")"; continue; }
        [ "$(strip_dir "$TMP/ck_full")" = "$(strip_dir "$out-np$np")" ] &&
            pass "$sig to $at: resumed with $np ranks to the uninterrupted fingerprints and metrics" ||
            fail "$sig to $at: resumed with $np ranks: $(diff <(strip_dir "$TMP/ck_full") <(strip_dir "$out-np$np") | head -4)"
    done
}
[ "${PFL_SANITIZED:-0}" = 1 ] || { interrupt KILL; interrupt TERM; }
# the prototype methods' server state under mpirun: FedPCL's client sets
# (replicated) and FedPAC's classifiers (a per-client store), a run stopped
# after round 2 of 4 and resumed with 2 ranks
for a in fedpcl fedpac; do
    [ "${PFL_SANITIZED:-0}" = 1 ] && break
    pk=(--algo "$a" "${ck[@]:2}" --rounds 4) # the last --rounds counts
    "$PFL" run "${pk[@]}" --quiet --threads 2 --out "$TMP/pk_full_$a" || { fail "$a: uninterrupted run failed"; continue; }
    timeout 300 "${MPIRUN[@]}" -np 3 "$PFL" run "${pk[@]}" --quiet --threads 1 --stop-after 2 --out "$TMP/pk_$a" \
        >"$TMP/pk_$a.log" 2>&1 || { fail "$a: stopped run failed: $(tail -3 "$TMP/pk_$a.log")"; continue; }
    timeout 300 "${MPIRUN[@]}" -np 2 "$PFL" resume "$TMP/pk_$a" --quiet >"$TMP/pk_$a-np2.log" 2>&1 ||
        { fail "$a: resume with 2 ranks failed: $(head -5 "$TMP/pk_$a-np2.log")"; continue; }
    [ "$(strip_dir "$TMP/pk_full_$a")" = "$(strip_dir "$TMP/pk_$a")" ] &&
        pass "$a: stopped under 3 ranks, resumed with 2 to the uninterrupted fingerprints and metrics" ||
        fail "$a: resumed with 2 ranks: $(diff <(strip_dir "$TMP/pk_full_$a") <(strip_dir "$TMP/pk_$a") | head -4)"
done

# A folder holding an unfinished run of 3 ranks (its checkpoint and the
# ranks' parts beside it): a new run is refused with one line naming pfl
# resume; --overwrite clears it, the ranks' parts too
parts="$TMP/ck_parts"
"${MPIRUN[@]}" -np 3 "$PFL" run "${ck[@]}" --threads 1 --stop-after 2 --quiet --out "$parts" >"$parts.log" 2>&1 ||
    fail "a 3-rank run stopped after round 2 failed: $(head -3 "$parts.log")"
count_parts() { find "$parts" -maxdepth 1 -name 'checkpoint.[0-9]*' | wc -l; }
before=$(count_parts)
timeout 120 "${MPIRUN[@]}" -np 3 "$PFL" run "${ck[@]}" --threads 1 --quiet --out "$parts" >"$parts.again" 2>&1
rc=$?
[ "$before" -gt 0 ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "holds an unfinished run (checkpoint): pfl resume" "$parts.again" &&
    [ "$(count_parts)" = "$before" ] && pass "a folder with a 3-rank run's checkpoint and $before parts refused (exit $rc)" ||
    fail "a 3-rank run's folder: $before parts, exit $rc: $(head -3 "$parts.again")"
"${MPIRUN[@]}" -np 3 "$PFL" run "${ck[@]}" --checkpoint-every 0 --rounds 1 --threads 1 --quiet --overwrite \
    --out "$parts" >"$parts.over" 2>&1 && [ "$(count_parts)" = 0 ] && [ ! -e "$parts/checkpoint" ] &&
    [ -e "$parts/summary.json" ] && pass "--overwrite under mpirun: the old checkpoint and its ranks' parts removed" ||
    fail "--overwrite under mpirun: $(count_parts) parts left: $(head -3 "$parts.over")"

# a failure on rank 0 alone (its --out is a file) ends the other ranks too
touch "$TMP/not-a-dir"
start=$SECONDS
timeout 120 "${MPIRUN[@]}" -np 3 "$PFL" run "${common[@]}" --algo fedavg --rounds 50 --threads 1 \
    --out "$TMP/not-a-dir/x" >"$TMP/abort.log" 2>&1
rc=$?
if [ $rc -eq 124 ]; then fail "a failing rank 0 left the others hanging"
elif [ $rc -eq 0 ]; then fail "mpirun succeeded with an unwritable --out"
else
    grep -q "pfl run: rank 0: " "$TMP/abort.log" && pass "rank 0's error ends the run (exit $rc, $((SECONDS - start))s)" ||
        fail "no rank 0 error message: $(head -3 "$TMP/abort.log")"
fi
finish
