#!/usr/bin/env bash
# Fingerprints of a matrix of small runs, one line each:
#
#   NAME global_model_sha256 personal_models_sha256 metrics-sha256 final_local_acc final_local_acc_joined
#
# (metrics-sha256: of metrics.jsonl without its timing fields). Run it before
# and after a change that must keep the bits, and diff the two outputs:
#
#   PFL=build/pfl scripts/fingerprints.sh > before.txt   # on the old build
#   PFL=build/pfl scripts/fingerprints.sh > after.txt    # on the new one
#   diff before.txt after.txt
#
# The matrix: every method, alone and with every module it accepts, at
# --join 1 and 0.5, at both --eval-moment values, with --drop-rate 0.3, on
# MNIST mlp (6 one-label clients, 3 rounds); and the BatchNorm modes on
# resnet18 for the stateful methods (--bn shared, local, stats-local; set
# FP_BN=0 to skip them: they take minutes). A refused combination prints
# "refused". FP_ALGOS="a b ..." runs only those methods (both parts), for a
# change that touches a few. Needs data/mnist.
set -u
PFL=${PFL:-build/pfl}
export PFL_DATA=${PFL_DATA:-./data}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

tiny=(--data mnist --model mlp --partition onelabel:100/20 --clients 6 --rounds 3 --batch 20 --lr 0.05 --quiet --threads 2)
algo_flags() {
    case $1 in
        fedgen) echo --fedgen-server-epochs 20 ;; # the generator's 1000 steps a round are most of a tiny run
        fedalp) echo --groups 2 --warmup 1 ;;
        cfl) echo --cfl-eps1 1e9 --cfl-eps2 0 --cfl-warmup 1 ;;
        fedtsdp) echo --public 500 --tsdp-hth 0 ;;
        fedgc) echo --partition dir:0.3 ;; # one label a client: nothing to classify among
    esac
}

# run NAME FLAGS...: one line
run() {
    local name=$1; shift
    local out="$TMP/$name"
    if ! "$PFL" run "$@" --out "$out" >/dev/null 2>"$out.err"; then
        echo "$name refused"
        return
    fi
    local g p m a j
    g=$(grep -o '"global_model_sha256": *"[0-9a-f]*"' "$out/summary.json" | grep -o '[0-9a-f]\{64\}')
    p=$(grep -o '"personal_models_sha256": *"[0-9a-f]*"' "$out/summary.json" | grep -o '[0-9a-f]\{64\}')
    m=$(sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$out/metrics.jsonl" | sha256sum | cut -c1-64)
    a=$(grep -o '"final_local_acc": *[^,}]*' "$out/summary.json" | sed 's/.*: *//')
    j=$(tail -1 "$out/metrics.jsonl" | grep -o '"local_acc_joined":[^,}]*' | sed 's/.*://')
    echo "$name $g $p $m $a $j"
}

# every registered method (pfl run --help lists them; a method added later is added here)
algos=(fedavg local fedprox fedper fedrep ditto fedala flayer fedamp pfedcfr fedalp pfedme cfl fedtsdp
    fedavg-c fedprox-c perfedavg fedphp lgfedavg fedbabu apfl fedrod fedcp gpfl fedfomo apple partialfed
    fedproto fd fedpcl fedgh fedpac
    scaffold feddyn fedlc fedntd
    fml fedkd feddbe fedmtl fedbn
    fedcac fedas pfl-da fedgc
    moon fedgen fedcross)
# only: whether method $1 is in FP_ALGOS (every method without it)
only() { [ -z "${FP_ALGOS:-}" ] || [[ " $FP_ALGOS " == *" $1 "* ]]; }
for algo in "${algos[@]}"; do
    only "$algo" || continue
    for mod in none --ala --flayer-agg --flayer-lr --flayer-mask; do
        mods=()
        [ "$mod" = none ] || mods=("$mod")
        for join in 1 0.5; do
            for moment in after-init after-train; do
                # shellcheck disable=SC2046
                run "$algo${mods[*]:+_${mod#--}}_j${join}_$moment" "${tiny[@]}" --algo "$algo" $(algo_flags "$algo") \
                    "${mods[@]}" --join "$join" --eval-moment "$moment"
            done
        done
        # shellcheck disable=SC2046
        run "$algo${mods[*]:+_${mod#--}}_drop" "${tiny[@]}" --algo "$algo" $(algo_flags "$algo") "${mods[@]}" \
            --join 0.5 --drop-rate 0.3
    done
done

[ "${FP_BN:-1}" = 0 ] && exit 0
bn=(--data mnist --model resnet18 --partition onelabel:20/5 --clients 4 --rounds 2 --batch 10 --lr 0.05 --quiet
    --threads 2 --eval-batch 10)
for algo in fedavg fedper fedrep ditto fedala flayer fedamp pfedcfr local lgfedavg fedbabu apfl fedrod fedcp gpfl \
    fedphp perfedavg apple partialfed fedfomo scaffold feddyn fedlc fedntd fml fedkd feddbe fedmtl fedbn \
    fedproto fd fedpcl fedgh fedpac \
    fedcac fedas pfl-da fedgc; do
    only "$algo" || continue
    for mode in shared local stats-local; do
        for join in 1 0.5; do
            run "bn_${algo}_${mode}_j$join" "${bn[@]}" --algo "$algo" --bn "$mode" --join "$join"
        done
    done
done
[ -n "${FP_ALGOS:-}" ] && exit 0
run bn_fedper_ala_local "${bn[@]}" --algo fedper --ala --bn local --join 0.5
run bn_fedavg_ala_stats "${bn[@]}" --algo fedavg --ala --bn stats-local --join 0.5
run bn_fedala_aftertrain "${bn[@]}" --algo fedala --bn local --join 0.5 --eval-moment after-train
