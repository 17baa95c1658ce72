# The modules (--ala, --flayer-agg, --flayer-lr, --flayer-mask) on every
# method:
#
#  - every method with every module it accepts: the final models must differ
#    from the plain method's (personal_models_sha256 or global_model_sha256: a
#    module that changes nothing, as --flayer-mask on FedAMP or --ala on
#    FedPer's head did, is a failure) and stay above chance (personalized
#    accuracy > 1/classes);
#  - every pair a method refuses: one error line naming the flag, exit 1 or 2
#    (no module is silently ignored);
#  - FedAMP + ALA and FedAMP + FLAYER's head mix where an untrained model once showed
#    (Fashion-MNIST dnn pat:2, 10 clients, 3 rounds of 20 steps at lr 0.05):
#    within 1 point of FedAMP or above (both once mixed with FedAMP's
#    never-trained global model: 0.794 and 0.773 against 0.984);
#  - summary.json records the modules; --ala with --flayer-agg is refused;
#    the literal Eq. 9 aggregation differs from the masked mean;
#  - stateful and server-side personalized methods, and those whose
#    personalized model is built when evaluated (FedAvg-C's fine-tuning,
#    Per-FedAvg's steps), give the same model on 1 and 2 threads.
. tests/e2e/lib.sh

# tiny: 6 clients of one label each (100 train / 20 test samples), 3 rounds
tiny=(--data mnist --model mlp --partition onelabel:100/20 --clients 6 --rounds 3 --batch 20 --lr 0.05 --quiet)
strip() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }
field() { json_field "$2" "$TMP/$1/summary.json"; }
# a method's own flags, so that every part of it runs within 3 rounds
algo_flags() {
    case $1 in
        fedalp) echo --groups 2 --warmup 1 ;;
        cfl) echo --cfl-eps1 1e9 --cfl-eps2 0 --cfl-warmup 1 ;;
        fedtsdp) echo --public 500 --tsdp-hth 0 ;;
        fedgen) echo --fedgen-server-epochs 20 ;; # the generator's 1000 steps a round are most of a tiny run
        partialfed) echo --pf-fm 1 --pf-fs 1 ;; # 5 batches a round: the default 8 + 2 would never train the strategy
        # one label per client gives balanced softmax a zero loss (the absent
        # classes' offsets are log 0), so the generic model would never move
        fedrod) echo --partition dir:0.3 --local-steps 5 ;;
        fd) echo --fd-target softmax ;; # the raw logits as targets diverge on one label per client at lr 0.05
        # the same for FedGC's cross-entropy over a client's own classes
        fedgc) echo --partition dir:0.3 ;;
    esac
}
# the modules a method switches on by itself (the flag would change nothing)
builtin_modules() {
    case $1 in
        fedala) echo --ala ;;
        flayer) echo --flayer-agg --flayer-lr --flayer-mask ;;
    esac
}
# the pairs a method refuses, with the word its error line must name
refused() {
    case "$1 $2" in
        "local --ala" | "local --flayer-agg") echo "nothing to mix" ;;
        "local --flayer-mask" | "fedamp --flayer-mask" | "pfedcfr --flayer-mask") printf '%s\n' --flayer-mask ;;
        "fedala --flayer-agg" | "flayer --ala") echo "choose one" ;;
        "pfedme --flayer-lr" | "perfedavg --flayer-lr") printf '%s\n' --flayer-lr ;;
        "fedalp --ala" | "fedalp --flayer-agg" | "fedalp --flayer-mask" | "cfl --ala" | "cfl --flayer-agg" | \
            "cfl --flayer-mask" | "fedtsdp --ala" | "fedtsdp --flayer-agg" | "fedtsdp --flayer-mask") printf '%s\n' "$2" ;;
        # they download multiple client models (FedALA, Table 4) and send uploads on whole
        "fedfomo --ala" | "fedfomo --flayer-agg" | "fedfomo --flayer-mask" | "apple --ala" | "apple --flayer-agg" | \
            "apple --flayer-mask") printf '%s\n' "$2" ;;
        # GPFL and FedCP route features through a valve or a policy, ALA learns on
        # the backbone's output head(h); APFL trains with its own steps
        "gpfl --ala" | "fedcp --ala" | "apfl --flayer-lr") printf '%s\n' "$2" ;;
        # the methods that exchange class prototypes: nothing received to mix, no uploaded model to mask
        # (FedGH mixes its received header as LG-FedAvg its head)
        "fedproto --ala" | "fedproto --flayer-agg" | "fedproto --flayer-mask" | "fd --ala" | "fd --flayer-agg" | \
            "fd --flayer-mask" | "fedpcl --ala" | "fedpcl --flayer-agg" | "fedpcl --flayer-mask" | \
            "fedgh --flayer-mask" | "fedpac --ala" | "fedpac --flayer-agg" | "fedpac --flayer-mask") printf '%s\n' "$2" ;;
        # SCAFFOLD's server derives c_i+ - c_i from how far a client trained from x at one rate; its and
        # FedDyn's server state read every parameter of an upload
        "scaffold --ala" | "scaffold --flayer-agg" | "scaffold --flayer-lr" | "scaffold --flayer-mask" | \
            "feddyn --flayer-mask") printf '%s\n' "$2" ;;
        # PFLlib's personalized methods: FML and FedKD train two models with their own steps, FedKD sends SVD
        # factors of whole tensors, FedDBE's output reads h + m (not ALA's head(h)), FedMTL averages nothing
        "fml --flayer-lr" | "fedkd --flayer-lr" | "fedkd --flayer-mask" | "feddbe --ala" | "fedmtl --flayer-mask")
            printf '%s\n' "$2" ;;
        "fedmtl --ala" | "fedmtl --flayer-agg") echo "nothing to mix" ;;
        # PFLlib's personalized methods: FedCAC and FedAS build the starting model themselves, FedCAC's server
        # reads whole uploads, PFL-DA sends only its global head (a block the mask sends whole), ALA learns its
        # weights on all classes where a FedGC client classifies among its own
        "fedcac --ala" | "fedcac --flayer-agg" | "fedcac --flayer-mask" | "fedas --ala" | "fedas --flayer-agg" | \
            "pfl-da --ala" | "pfl-da --flayer-agg" | "pfl-da --flayer-mask" | "fedgc --ala") printf '%s\n' "$2" ;;
        # the generator learns on the averaged head, the uploads' ensemble only when every head is sent whole
        "fedgen --flayer-mask") printf '%s\n' "$2" ;;
        # each client trains a middleware model, not the global one; the server keeps whole uploads
        "fedcross --ala" | "fedcross --flayer-agg" | "fedcross --flayer-mask") printf '%s\n' "$2" ;;
        # FedADMM's update counts the client's move from the global model it starts from
        "fedadmm --ala" | "fedadmm --flayer-agg") printf '%s\n' "$2" ;;
    esac
}

algos=(fedavg local fedprox fedper fedrep ditto fedala flayer fedamp pfedcfr fedalp pfedme cfl fedtsdp
    fedavg-c fedprox-c perfedavg fedphp
    fedfomo apple partialfed
    fedcp gpfl fedrod fedbabu lgfedavg apfl
    fedproto fd fedpcl fedgh fedpac
    scaffold feddyn fedlc fedntd
    fml fedkd feddbe fedmtl fedbn
    fedcac fedas pfl-da fedgc
    moon fedgen fedcross
    fedavgm fedadam fedyogi fedadagrad fedadmm)
# under the sanitizers (several times slower) the methods whose module paths
# what the round's semantics changed, and refusals
[ "${PFL_SANITIZED:-0}" = 1 ] && algos=(local fedper fedamp pfedme cfl)
for algo in "${algos[@]}"; do
    # shellcheck disable=SC2046
    "$PFL" run "${tiny[@]}" --algo "$algo" $(algo_flags "$algo") --out "$TMP/$algo" || { fail "$algo: run failed"; continue; }
    for mod in --ala --flayer-agg --flayer-lr --flayer-mask; do
        case " $(builtin_modules "$algo") " in *" $mod "*) continue ;; esac
        want=$(refused "$algo" "$mod")
        if [ -n "$want" ]; then
            # shellcheck disable=SC2046
            expect_error "$algo $mod refused" "$want" "$PFL" run "${tiny[@]}" --algo "$algo" $(algo_flags "$algo") "$mod"
            continue
        fi
        name="$algo$mod"
        # shellcheck disable=SC2046
        "$PFL" run "${tiny[@]}" --algo "$algo" $(algo_flags "$algo") "$mod" --out "$TMP/$name" ||
            { fail "$algo $mod: run failed"; continue; }
        if [ "$(field "$algo" personal_models_sha256)" = "$(field "$name" personal_models_sha256)" ] &&
            [ "$(field "$algo" global_model_sha256)" = "$(field "$name" global_model_sha256)" ]; then
            fail "$algo $mod: the same models as plain $algo, bit for bit (the module changed nothing)"
        else
            pass "$algo $mod changes the models"
        fi
        acc=$(field "$name" final_local_acc)
        awk -v a="$acc" 'BEGIN { exit !(a > 0.1) }' && pass "$algo $mod: local accuracy $acc above chance" ||
            fail "$algo $mod: local accuracy $acc is not above chance (0.1)"
    done
done

grep -q '"ala": true' "$TMP/fedper--ala/summary.json" && pass "summary records ala" || fail "summary lacks ala: true"
grep -q '"ala": false' "$TMP/fedper/summary.json" && pass "summary records ala off" || fail "plain fedper says ala on"
grep -q '"flayer_lr": true' "$TMP/fedamp--flayer-lr/summary.json" && pass "summary records flayer_lr" ||
    fail "no flayer_lr: true"
for m in mask literal; do
    "$PFL" run "${tiny[@]}" --algo fedavg "--flayer-mask$([ $m = literal ] && echo -literal)" --out "$TMP/fedavg_$m" ||
        fail "fedavg --flayer-mask ($m): run failed"
done
[ -n "$(field fedavg_mask global_model_sha256)" ] &&
    [ "$(field fedavg_literal global_model_sha256)" != "$(field fedavg_mask global_model_sha256)" ] &&
    pass "literal Eq. 9 differs from the masked mean" || fail "literal and masked aggregation agree"
expect_error "ala and flayer-agg together" "--ala" "$PFL" run "${tiny[@]}" --algo fedavg --ala --flayer-agg
expect_error "bad --eval-moment" "--eval-moment" "$PFL" run "${tiny[@]}" --eval-moment later
expect_error "bad --init-clients" "--init-clients" "$PFL" run "${tiny[@]}" --init-clients some
expect_error "bad --step-budget" "--step-budget" "$PFL" run "${tiny[@]}" --step-budget half
expect_error "--ala-p above what fedper sends" "--ala-p" "$PFL" run "${tiny[@]}" --algo fedper --ala --ala-p 2

if [ "${PFL_SANITIZED:-0}" != 1 ]; then # training speed: the optimized suite runs these
    # FedAMP + ALA must not mix with an untrained model
    amp=(--data fmnist --model dnn --partition pat:2 --clients 10 --rounds 3 --local-steps 20 --lr 0.05 --quiet
        --algo fedamp)
    "$PFL" run "${amp[@]}" --out "$TMP/amp" && "$PFL" run "${amp[@]}" --ala --out "$TMP/amp_ala" &&
        "$PFL" run "${amp[@]}" --flayer-agg --out "$TMP/amp_flayer-agg" || fail "fedamp on fmnist: run failed"
    a=$(field amp final_local_acc)
    for m in ala flayer-agg; do # the head mix took the same untrained model as ALA (0.7726 when it did)
        b=$(field "amp_$m" final_local_acc)
        awk -v a="$a" -v b="$b" 'BEGIN { exit !(b >= a - 0.01) }' && pass "fedamp + $m $b within 1 point of fedamp $a" ||
            fail "fedamp + $m $b more than 1 point below fedamp $a"
    done
fi

# Stateful and server-side personalized methods give the same model on 1 and
# 2 threads.
algos=(fedala flayer fedrep ditto fedalp fedamp pfedcfr fedavg-c perfedavg fedphp gpfl)
algos+=(fedcac fedas pfl-da fedgc) # PFLlib's personalized methods
algos+=(fedproto fd fedpcl fedgh fedpac) # the methods that exchange class prototypes
# under the sanitizers (several times slower) a sample that still covers
# client state, modules and server-side fusion
[ "${PFL_SANITIZED:-0}" = 1 ] && algos=(fedala pfedcfr)
common=(--data mnist --model mlp --partition onelabel:100/20 --clients 10 --join 0.3 --rounds 2 --quiet)
for algo in "${algos[@]}"; do
    extra=()
    [ "$algo" = fedalp ] && extra=(--groups 2 --warmup 1)
    [ "$algo" = fedgc ] && extra=(--partition dir:0.3) # one label a client: nothing to classify among
    # FD's raw logits as targets diverge on one label a client (NaN from round 2: the run now stops there,
    # exit 2, where the two NaN runs were compared before): its softmax targets, as algo_flags gives it
    [ "$algo" = fd ] && extra=(--fd-target softmax)
    for t in 1 2; do
        "$PFL" run "${common[@]}" --algo "$algo" --threads $t "${extra[@]}" --out "$TMP/${algo}_t$t" ||
            fail "$algo --threads $t: run failed"
    done
    [ "$(field "${algo}_t1" global_model_sha256)" = "$(field "${algo}_t2" global_model_sha256)" ] &&
        pass "$algo: threads 1 and 2 agree" || fail "$algo: threads 1 and 2 differ"
    [ "$(strip "$TMP/${algo}_t1/metrics.jsonl")" = "$(strip "$TMP/${algo}_t2/metrics.jsonl")" ] &&
        pass "$algo: metrics agree" || fail "$algo: metrics differ"
done
finish
