# Checkpoints through the command: every method (and the ALA and FLAYER
# modules on other methods, and one with --drop-rate) stopped after round 3
# of 5 (--stop-after, with a checkpoint at round 2, so the metrics line of
# round 3, evaluated with --eval-every 3, must go) and resumed with pfl resume on another thread count ends
# with the same global_model_sha256, metrics.jsonl (timings aside) and
# summary.json (timings, threads and peak memory aside; the client store's
# bytes included) as the uninterrupted run. A
# corrupted, truncated or wrong-version checkpoint is refused with one line
# naming the file and the problem, and the outputs stay as they were; a stray
# checkpoint.tmp.PID is removed.
. tests/e2e/lib.sh

common=(--data mnist --model dnn --partition onelabel:50/20 --clients 8 --join 0.5 --rounds 5 --eval-every 3 --quiet)
cases=(
    "fedavg" "local" "fedprox" "fedper" "fedrep" "ditto" "fedala" "flayer"
    "fedamp" "pfedcfr"
    "fedalp --groups 2 --warmup 1"
    "pfedme --pfedme-k 2"
    "cfl --join 1 --cfl-eps1 1e9 --cfl-eps2 0 --cfl-warmup 1"
    "fedtsdp --join 1 --tsdp-hth 0"
    "fedprox --ala"
    "fedavg --flayer-agg --flayer-lr --flayer-mask"
    "fedper --drop-rate 0.3"
    # the client store in a file, resumed into a new one
    "fedala --client-state $TMP"
    "ditto --client-state $TMP"
    # APFL's alpha and FedRoD's personal heads (the methods' stores), LG-FedAvg's local base
    "lgfedavg" "fedbabu --fine-tune-epochs 1" "apfl --apfl-alpha 0.5" "fedrod"
    # extra parameter blocks: FedCP's personal head (client store) and policy (global model), with FLAYER's mask
    "fedcp" "fedcp --flayer-mask --join 0.6"
    # GPFL's CoV and GCE (global model), personal head and conditions (client store), with FLAYER's head mix and mask
    "gpfl" "gpfl --flayer-agg --flayer-mask --join 0.6"
    "fedavg-c" "fedprox-c" "perfedavg --perfedavg-hf" "fedphp --ala"
    # the server's models and P (FedFomo), cores and DR vectors (APPLE, cross-silo), strategies (PartialFed)
    "fedfomo --fomo-m 3"
    "apple --join 1"
    "partialfed --pf-fm 2 --pf-fs 1"
    # prototypes in the global model's message block; FedPCL's client sets and FedPAC's classifiers (the methods' state)
    "fedproto" "fd --fd-target softmax" "fedpcl" "fedgh" "fedgh --gh-start global --ala" "fedpac"
    # traditional methods: SCAFFOLD's c and c_i, FedDyn's h and grad_k (server state, the clients' stores)
    "scaffold" "feddyn" "feddyn --dyn-penalty squared --drop-rate 0.3" "fedlc --lc-counts local" "fedntd --ala"
    # PFLlib's personalized methods: FML's and FedKD's personal models (client store), FedKD's W (its store)
    # and last message size, FedDBE's PRBM (a personal block), FedMTL's copies of the clients' models
    "fml --fml-alpha 0.5 --fml-beta 0.5" "fedkd --join 0.6" "feddbe" "fedmtl --mtl-reg-grad --join 0.6" "fedbn"
    # PFLlib's personalized methods: FedCAC's masks and customized models, FedAS's Fisher block and client
    # models, PFL-DA's global head block, FedGC's server-side heads (with FLAYER's head mix: client rows too)
    "fedcac" "fedcac --cac-round1 customized --join 1" "fedas" "pfl-da" "fedgc" "fedgc --flayer-agg --flayer-mask"
    # PFLlib's traditional methods: MOON's previous local models (a per-client store), sitting-out clients
    "moon --join 0.6"
    # FedGen's generator and its Adam moments (server state)
    "fedgen --fedgen-server-epochs 20"
    # FedCross's middleware models (server state)
    "fedcross"
    # the server optimizers' velocity and moments (server state, in double)
    "fedavgm --server-nesterov --drop-rate 0.3" "fedadam" "fedyogi --server-mean samples" "fedadagrad"
    # FedADMM's dual variables (a per-client store), its random local epochs and its rate schedule
    "fedadmm --epochs 3 --admm-target-round 2 --drop-rate 0.3"
)
# under the sanitizers (several times slower) a sample: client state, ALA,
# FLAYER's modules, clustering and server-side fusion
[ "${PFL_SANITIZED:-0}" = 1 ] && cases=("fedala" "flayer" "fedalp --groups 2 --warmup 1" "fedtsdp --join 1 --tsdp-hth 0" "fedcp" "gpfl")

strip_metrics() { sed -E 's/"(seconds|eval_seconds)":[^,}]*//g' "$1"; }
strip_summary() { grep -Ev '"(threads|seconds_per_round|train_samples_per_second|total_seconds|peak_rss_bytes|ala_start_seconds)"' "$1"; }

i=0
for c in "${cases[@]}"; do
    i=$((i + 1))
    read -r -a args <<<"$c"
    flags=(--algo "${args[@]}")
    "$PFL" run "${common[@]}" "${flags[@]}" --threads 2 --out "$TMP/full$i" || { fail "$c: run failed"; continue; }
    "$PFL" run "${common[@]}" "${flags[@]}" --threads 2 --checkpoint-every 2 --stop-after 3 --out "$TMP/part$i" ||
        { fail "$c: stopped run failed"; continue; }
    [ -f "$TMP/part$i/summary.json" ] && fail "$c: a stopped run wrote summary.json"
    [ "$(cut -c1-11 "$TMP/part$i/metrics.jsonl" | tr '\n' ' ')" = '{"round":0, {"round":3, ' ] ||
        fail "$c: the stopped run's metrics should have rounds 0 and 3: $(cat "$TMP/part$i/metrics.jsonl")"
    "$PFL" resume "$TMP/part$i" --threads 1 --quiet || { fail "$c: resume failed"; continue; }
    sha_full=$(json_field global_model_sha256 "$TMP/full$i/summary.json")
    sha_part=$(json_field global_model_sha256 "$TMP/part$i/summary.json")
    [ -n "$sha_full" ] && [ "$sha_full" = "$sha_part" ] && pass "$c: resumed fingerprint equals the uninterrupted one" ||
        fail "$c: fingerprint $sha_part != $sha_full"
    [ "$(strip_metrics "$TMP/full$i/metrics.jsonl")" = "$(strip_metrics "$TMP/part$i/metrics.jsonl")" ] &&
        pass "$c: metrics.jsonl equal" || fail "$c: metrics.jsonl differ: $(diff <(strip_metrics "$TMP/full$i/metrics.jsonl") <(strip_metrics "$TMP/part$i/metrics.jsonl"))"
    [ "$(strip_summary "$TMP/full$i/summary.json")" = "$(strip_summary "$TMP/part$i/summary.json")" ] &&
        pass "$c: summary.json equal" || fail "$c: summary.json differ: $(diff "$TMP/full$i/summary.json" "$TMP/part$i/summary.json")"
done

# Refusals: a damaged checkpoint is refused and nothing is written.
base=(--algo fedala "${common[@]}")
"$PFL" run "${base[@]}" --checkpoint-every 2 --stop-after 3 --out "$TMP/good" || fail "run for the refusals failed"
ckpt="$TMP/good/checkpoint"
size=$(stat -c %s "$ckpt")
damaged() { # name: a copy of the stopped run whose checkpoint the caller damages
    rm -rf "$TMP/$1"
    cp -r "$TMP/good" "$TMP/$1"
    echo "$TMP/$1"
}
refused() { # what dir needle
    local before
    before=$(md5sum "$2/metrics.jsonl" "$2/checkpoint")
    expect_error "$1" "$3" "$PFL" resume "$2" --quiet
    [ "$(md5sum "$2/metrics.jsonl" "$2/checkpoint")" = "$before" ] && [ ! -e "$2/summary.json" ] &&
        pass "$1: outputs untouched" || fail "$1: the refused resume changed the outputs"
}
d=$(damaged flipped)
printf '\x55' | dd of="$d/checkpoint" bs=1 seek=$((size / 2)) conv=notrunc status=none
refused "flipped byte" "$d" "checkpoint: checksum mismatch"
d=$(damaged truncated)
truncate -s $((size - 100)) "$d/checkpoint"
refused "truncated" "$d" "checkpoint: truncated"
d=$(damaged version)
printf '\x09' | dd of="$d/checkpoint" bs=1 seek=8 conv=notrunc status=none
refused "wrong version" "$d" "checkpoint: checkpoint format version 9"
d=$(damaged missing)
rm "$d/checkpoint"
expect_error "no checkpoint" "$d/checkpoint" "$PFL" resume "$d" --quiet
d=$(damaged nometrics)
rm "$d/metrics.jsonl"
expect_error "no metrics.jsonl" "metrics.jsonl" "$PFL" resume "$d" --quiet
expect_error "resume without a directory" "DIR" "$PFL" resume --threads 2
expect_error "checkpoints need --out" "--out" "$PFL" run "${base[@]}" --checkpoint-every 1

# A crash in the middle of a checkpoint write leaves checkpoint.tmp.PID
# (an older pfl's: checkpoint.tmp) beside the previous good checkpoint:
# resume ignores and removes it.
d=$(damaged stray)
head -c $((size / 3)) "$ckpt" >"$d/checkpoint.tmp.12345"
head -c $((size / 3)) "$ckpt" >"$d/checkpoint.tmp"
"$PFL" resume "$d" --quiet || fail "resume beside a stray checkpoint.tmp failed"
[ ! -e "$d/checkpoint.tmp" ] && [ ! -e "$d/checkpoint.tmp.12345" ] && pass "stray checkpoint.tmp files removed" ||
    fail "checkpoint.tmp left: $(ls "$d")"
"$PFL" run "${base[@]}" --out "$TMP/good_full" || fail "uninterrupted run failed"
[ "$(json_field global_model_sha256 "$d/summary.json")" = "$(json_field global_model_sha256 "$TMP/good_full/summary.json")" ] &&
    pass "resumed beside checkpoint.tmp: same fingerprint" || fail "resumed beside checkpoint.tmp: fingerprint differs"
finish
