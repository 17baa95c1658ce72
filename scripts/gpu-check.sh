#!/usr/bin/env bash
# The one prepared check of pfl's CUDA backend on a GPU machine (one H100 or
# H200, 16 cores, PyTorch with CUDA, no network). It keeps to a time budget
# (BUDGET seconds, default 400: the device tool's 15 minutes must hold a
# machine's start, this run and one shorter rerun), doing the most valuable
# checks first and skipping, with a row saying so, what no longer fits; every
# run has its own time cap. Its table grows row by row (OUT/table.md), and
# OUT/gpu-check.tar.gz (every log, ops.txt, each run's metrics.jsonl and
# summary.json) is renewed after each stage, so a run stopped from outside
# still hands back what it did. docs/architecture.md, "The CUDA backend",
# says what it shows; bench/README.md, "On a GPU", where its numbers go.
#
#   1. builds pfl with the CUDA backend there (with .gpu/'s libraries when the
#      system lacks OpenBLAS, libjansson or libyaml), in the background while
#      .gpu/'s prebuilt test_cuda_ops (built on the project's machine) runs;
#      finds cuBLAS (the CUDA toolkit's, or PyTorch's nvidia packages) and
#      says where cuDNN is (pfl does not use it);
#   2. tests/gpu/test_cuda_ops: every op of every zoo model and each model's
#      one-batch gradient against the CPU (relative error <= 1e-4);
#   3. FedAvg on Fashion-MNIST pat:2, 20 clients, ROUNDS rounds on the GPU,
#      its accuracy every 5 rounds against the CPU's (REF/ALGO/metrics.jsonl,
#      runs with the same flags made on the project's machine, default
#      docs/results/fmnist-pat2-r50: the CPU's bits do not depend on the
#      thread count), within 0.5 points at the last round;
#   4. FedAvg on the GPU again with 4 worker threads: the same fingerprint
#      (over 3 rounds, twice, when the 20 rounds took over a minute);
#   5. the benchmark: s/round and training samples/s (the rounds after the
#      first) of FedAvg cnn Fashion-MNIST pat:2 for pfl on the GPU, PyTorch on
#      the GPU training the clients one after another as PFLlib does
#      (bench/torch_fedavg.py --device cuda) and pfl on the machine's cores
#      (whose 5th round is also checked against REF's); the
#      GPU's concurrent streams: 1 and 16 worker threads on 50 batches a client;
#   6. FedALA and FLAYER as in 3;
#   7. FedAvg resnet18-cifar and FedALA cnn on CIFAR-10 dir:0.1 (50 batches a
#      client for the ResNet; ALA's start phase cut to one epoch, the rounds
#      after it timed), GPU, PyTorch on the GPU (the ResNet) and the CPU cores;
#      then FLAYER Table 2's eight CNN methods on the GPU, 2 rounds (the
#      second timed), and the hours 2000 rounds of all of them would take.
#
# CIFAR-10 does not travel to that machine (176 MB against the 64 MiB the
# device tool carries): unless data/cifar10 is there, its rows run on random
# CIFAR-10-shaped data (same sizes, labels uniform), which times the same
# work and says nothing of accuracy; their test splits are 2% (evaluation is
# not what they time).
#
# Before: scripts/gpu-pack.sh here (makes .gpu/), then on the GPU machine
#   scripts/gpu-check.sh              (the device tool: carry [".gpu"])
# or, when the tool carries another checkout's files, scripts/gpu-pack.sh
# --bundle DIR and the command its header gives (bench/README.md, "On a GPU").
# Without a GPU, the plumbing and the CPU halves on tiny budgets:
#   scripts/gpu-check.sh --dry-run
# Env: WORK=DIR (default /tmp/gpu-check: the runs, their logs);
#      OUT=DIR (the device tool's folder that comes back; default none): gets
#      table.md and gpu-check.tar.gz only, as that tool returns 8 files;
#      BUDGET (seconds, default 400), JOBS (default: the cores),
#      ROUNDS (default 20, the accuracy runs), REF (the CPU's runs, above).
set -u
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
RESULT=${OUT:-}
OUT=${WORK:-/tmp/gpu-check}
JOBS=${JOBS:-$(nproc)}
ROUNDS=${ROUNDS:-20}
BUDGET=${BUDGET:-400}
BUILD=build-gpu
REF=${REF:-docs/results/fmnist-pat2-r50} # the CPU's runs (ALGO/metrics.jsonl), evaluated every 5 rounds
rm -rf "$OUT" && mkdir -p "$OUT"
[ -n "$RESULT" ] && mkdir -p "$RESULT"
T0=$SECONDS
say() { echo "[gpu-check $((SECONDS - T0))s] $*" >&2; }
left() { echo $((BUDGET - (SECONDS - T0))); }
HEAD_LINES=()
table() { # the table so far, into OUT/table.md (and RESULT's)
    {
        echo "# scripts/gpu-check.sh$([ $DRY = 1 ] && echo ' --dry-run (no GPU: the GPU column ran on the CPU backend)')"
        echo
        printf '%s\n' "${HEAD_LINES[@]}"
        echo
        echo "| check | result | detail |"
        echo "| --- | --- | --- |"
        cat "$OUT/rows"
    } >"$OUT/table.md"
    [ -n "$RESULT" ] && cp "$OUT/table.md" "$RESULT/table.md"
}
touch "$OUT/rows"
row() { echo "| $1 | $2 | $3 |" >>"$OUT/rows"; echo "ROW | $1 | $2 | $3 |" >&2; table; } # check, result, detail
snapshot() { # the logs and metrics so far, into RESULT
    [ -n "$RESULT" ] || return 0
    (cd "$OUT" && find . \( -name '*.log' -o -name '*.txt' -o -name '*.jsonl' -o -name summary.json -o -name table.md \) \
        -size -4M | tar -czf "$RESULT/gpu-check.tar.gz.part" -T - && mv "$RESULT/gpu-check.tar.gz.part" "$RESULT/gpu-check.tar.gz")
}
# fits NEED CAP: prints the seconds a step may take (CAP, or what is left less
# 10 s for the table), nothing when fewer than NEED seconds are left
fits() {
    local l=$(($(left) - 10)) cap=$(($2 * CAPX))
    [ "$l" -ge "$1" ] && echo $((cap < l ? cap : l))
}
# the bench runs: 3 rounds, timed from the second; a dry run: 5 batches a client, small test splits
BENCH_ROUNDS=3 GPU_THREADS=16 SHORT=() CAPX=1
if [ $DRY = 1 ]; then # its caps ten times the GPU machine's: 2 shared cores
    ROUNDS=2 JOBS=2 DEVICE=cpu GPU_THREADS=2 SHORT=(--local-steps 5 --train-fraction 0.98) CAPX=10
    say "dry run: no GPU; the GPU halves run on the CPU backend, 2 rounds of 5 batches a client"
else
    DEVICE=cuda
fi

# ---- 1. environment and build ----
. scripts/gpu-env.sh
gpu_libs
say "cuBLAS: ${CUBLAS_DIR:-not found}; cuDNN: ${CUDNN_DIR:-not found} (pfl does not use it)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
else
    echo "no nvidia-smi" >"$OUT/gpu.txt"
fi
HEAD_LINES=("GPU: $(head -1 "$OUT/gpu.txt"); CPU: $(nproc) cores; commit $(cat .gpu/commit 2>/dev/null || git rev-parse --short HEAD 2>/dev/null)")
say "GPU: $(head -1 "$OUT/gpu.txt")"

# CIFAR-10: real if there, else random data of its shape, made while the rest runs
DATA=/tmp/pfl-gpu-data
rm -rf "$DATA" && mkdir -p "$DATA/fmnist"
CIFAR_NOTE="real"
if [ -d data/cifar10 ]; then
    ln -sfn "$(cd data/cifar10 && pwd)" "$DATA/cifar10"
    CIFAR_PID=
else
    CIFAR_NOTE="random data of CIFAR-10's shape (timing only)"
    mkdir -p "$DATA/cifar10/cifar-10-batches-bin" # where the official tarball puts them (bench/common_torch.py reads there)
    python3 - "$DATA/cifar10/cifar-10-batches-bin" <<'PY' &
import os, random, sys
r = random.Random(1)
for name, n in [("data_batch_%d.bin" % i, 10000) for i in range(1, 6)] + [("test_batch.bin", 10000)]:
    labels = bytes(b % 10 for b in r.randbytes(n))
    pixels = r.randbytes(n * 3072)
    with open(os.path.join(sys.argv[1], name + ".part"), "wb") as f:
        f.write(b"".join(labels[k:k + 1] + pixels[k * 3072:(k + 1) * 3072] for k in range(n)))
    os.rename(os.path.join(sys.argv[1], name + ".part"), os.path.join(sys.argv[1], name))
PY
    CIFAR_PID=$!
fi
if [ $DRY = 1 ] && [ -d data/fmnist ]; then
    cp -L data/fmnist/* "$DATA/fmnist/"
else
    gpu_fmnist "$DATA"
fi
export PFL_DATA=$DATA

# the build, in the background; the prebuilt test meanwhile
say "building pfl with the CUDA backend (make -j$JOBS BUILD=$BUILD, at most $((150 * CAPX)) s)"
build_start=$SECONDS
timeout $((150 * CAPX)) make -s -j"$JOBS" BUILD=$BUILD MPI=0 MATIO_LIBS= JPEG_LIBS= "${SYSFLAGS[@]}" $BUILD/pfl $BUILD/tests/test_cuda_ops \
    >"$OUT/build.log" 2>&1 &
BUILD_PID=$!
PRE=/tmp/pfl-prebuilt
OPS_BIN=
if [ $DRY = 0 ] && [ -f .gpu/prebuilt.tar.xz ]; then
    untar .gpu/prebuilt.tar.xz $PRE && OPS_BIN=$PRE/$BUILD/tests/test_cuda_ops
fi

# ---- 2. every op, every model, against the CPU ----
ops_check() { # BINARY LABEL
    local cap file=$OUT/ops-${2// /-}.txt
    cap=$(fits 20 90) || true
    [ -n "$cap" ] || { row "ops and one-batch gradients vs CPU ($2)" "not run" "out of time"; return; }
    timeout "$cap" "$1" >"$file" 2>&1
    local rc=$?
    if [ $rc = 77 ]; then
        row "ops and one-batch gradients vs CPU ($2)" skipped "$(tail -1 "$file")"
    else
        row "ops and one-batch gradients vs CPU, rel err <= 1e-4 ($2)" \
            "$([ $rc = 0 ] && echo PASS || echo "FAIL (exit $rc)")" \
            "$(grep -m1 '^CUDA backend on' "$file"); $(tail -1 "$file"); worst: $(
                grep -E '^(ok|FAIL)' "$file" | awk '{print $NF "\t" $0}' | sort -g | tail -1 | cut -f2 | tr -s ' ')"
        grep '^FAIL' "$file" | head -20 >&2
    fi
    say "ops ($2): $(tail -1 "$file")"
}
ops_start=$SECONDS
[ -n "$OPS_BIN" ] && ops_check "$OPS_BIN" "prebuilt"
ops_seconds=$((SECONDS - ops_start))
snapshot
# the build's end
wait $BUILD_PID
brc=$?
PFL=$BUILD/pfl
if [ $brc = 0 ]; then
    row build ok "built there in $((SECONDS - build_start)) s: $(grep -m1 '^CUDA backend' "$OUT/build.log")"
    # the build's own test too, when the prebuilt's was quick (or did not run)
    [ -z "$OPS_BIN" ] || [ $ops_seconds -le 20 ] && ops_check $BUILD/tests/test_cuda_ops "built there"
elif [ -n "$OPS_BIN" ]; then
    row build "FAIL (exit $brc): the prebuilt runs" "$(grep -m1 -E 'error|Error' "$OUT/build.log" | cut -c1-200)"
    PFL=$PRE/$BUILD/pfl
    tail -20 "$OUT/build.log" >&2
else
    row build "FAIL (exit $brc)" "$(grep -m1 -E 'error|Error' "$OUT/build.log" | cut -c1-200)"
    tail -20 "$OUT/build.log" >&2
    snapshot
    exit 1
fi
snapshot

# ---- helpers ----
final_acc() { grep -o '"final_local_acc": *[^,}]*' "$1/summary.json" 2>/dev/null | sed 's/.*: *//'; }
fingerprint() {
    echo "$(grep -o '"global_model_sha256": *"[0-9a-f]*"' "$1/summary.json" 2>/dev/null | grep -o '[0-9a-f]\{64\}' | cut -c1-16)/$(
        grep -o '"personal_models_sha256": *"[0-9a-f]*"' "$1/summary.json" 2>/dev/null | grep -o '[0-9a-f]\{64\}' | cut -c1-16)"
}
acc_at() { # metrics.jsonl ROUND: local_acc at that round (empty when not evaluated)
    python3 - "$1" "$2" <<'PY' 2>/dev/null
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("round") == int(sys.argv[2]) and r.get("local_acc") is not None:
        print("%.4f" % r["local_acc"])
PY
}
speed() { # metrics.jsonl (pfl's or torch_fedavg's): "s/round samples/s" after the first training round
    python3 - "$1" <<'PY' 2>/dev/null || echo "- -"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# the first training round is left out: pfl's round 1, torch_fedavg's round 0 (it trains after evaluating)
first = 1 if rows and rows[0].get("impl") == "torch" else 2
rows = [r for r in rows if r.get("round", 0) >= first and r.get("train_samples")]
if not rows:
    print("- -")
else:
    key = "train_seconds" if "train_seconds" in rows[0] else "seconds"
    s = sum(r[key] for r in rows) / len(rows)
    print("%.3f %.0f" % (s, sum(r["train_samples"] for r in rows) / sum(r[key] for r in rows)))
PY
}
FMNIST=(--data fmnist --model cnn --partition pat:2 --clients 20 --batch 10 --lr 0.005 --seed 1 "${SHORT[@]}")
RAN=() # the runs that ended well
pfl_run() { # DIR NEED CAP DEVICE THREADS FLAGS...: a run into $OUT/DIR, its log beside; skipped without NEED s left
    local dir=$1 need=$2 cap=$3 dev=$4 th=$5 cap_s start=$SECONDS
    shift 5
    cap_s=$(fits "$need" "$cap") || true
    if [ -z "$cap_s" ]; then
        say "$dir: skipped (out of time)"
        echo "skipped: out of time" >"$OUT/$dir.log"
        return 1
    fi
    say "$dir: --device $dev --threads $th $* (at most $cap_s s)"
    timeout "$cap_s" $PFL run "$@" --device "$dev" --threads "$th" --out "$OUT/$dir" >"$OUT/$dir.log" 2>&1
    local rc=$?
    echo "exit $rc after $((SECONDS - start)) s" >>"$OUT/$dir.log"
    if [ $rc = 0 ]; then
        RAN+=("$dir")
        say "$dir: done in $((SECONDS - start)) s"
    else
        say "$dir failed (exit $rc$([ $rc = 124 ] && echo ", stopped at its $cap_s s cap")): $(grep -v '^exit' "$OUT/$dir.log" | tail -1)"
    fi
    return $rc
}
ran() { [[ " ${RAN[*]} " == *" $1 "* ]]; }
why_not() { # a run's exit (124: its time cap) and its last line
    echo "$(grep '^exit' "$OUT/$1.log" 2>/dev/null | tail -1)$(grep -q '^exit 124 ' "$OUT/$1.log" 2>/dev/null &&
        echo ' (its time cap)'): $(grep -v '^exit' "$OUT/$1.log" 2>/dev/null | tail -1 | cut -c1-160)"
}
first_line() { grep -m1 "$2" "$OUT/$1.log" 2>/dev/null | sed 's/^\[pfl\] //' | cut -c1-240; }
# GPU against the committed CPU run, every 5 rounds; PASS when the last is within 0.5 points
accuracy_row() { # ALGO
    local a=$1 g c r curve="" last_g="" last_c=""
    if ! ran "gpu-$a"; then
        row "$a Fashion-MNIST pat:2 $ROUNDS rounds: GPU vs CPU" "not run" "$(why_not "gpu-$a")"
        return
    fi
    for r in $(seq 5 5 "$ROUNDS") "$ROUNDS"; do
        g=$(acc_at "$OUT/gpu-$a/metrics.jsonl" "$r") c=$(acc_at "$REF/$a/metrics.jsonl" "$r")
        [[ " $curve " == *" r$r:"* ]] && continue
        curve+=" r$r: GPU ${g:-?} CPU ${c:-?};"
        last_g=$g last_c=$c
    done
    local verdict="no CPU reference at round $ROUNDS"
    [ -n "$last_c" ] && verdict=$(python3 -c "print('PASS' if abs(float('${last_g:-nan}') - float('$last_c')) * 100 <= 0.5 else 'FAIL')")
    row "$a Fashion-MNIST pat:2 $ROUNDS rounds: GPU vs CPU ($REF) final personalized acc within 0.5 points" \
        "$verdict" "${curve# }"
}

# ---- 3 and 4. FedAvg on the GPU, twice ----
EV=(--eval-every 5)
pfl_run gpu-fedavg 30 150 $DEVICE $GPU_THREADS --algo fedavg "${FMNIST[@]}" --rounds "$ROUNDS" "${EV[@]}"
t_fedavg=$((SECONDS - T0))
HEAD_LINES+=("$(first_line gpu-fedavg 'device: ')")
accuracy_row fedavg
snapshot
FP_THREADS=$((GPU_THREADS / 4 > 0 ? GPU_THREADS / 4 : 1))
if ran gpu-fedavg; then
    d=$(python3 -c "import json; print(json.load(open('$OUT/gpu-fedavg/summary.json')).get('seconds_per_round', 0))" 2>/dev/null)
    if python3 -c "import sys; sys.exit(0 if ${d:-99} * $ROUNDS < 60 else 1)"; then
        pfl_run gpu-fedavg-again 30 150 $DEVICE $FP_THREADS --algo fedavg "${FMNIST[@]}" --rounds "$ROUNDS" "${EV[@]}"
        A=gpu-fedavg B=gpu-fedavg-again FP_ROUNDS=$ROUNDS
    else # the twice over 3 rounds: the full run would cost too much
        pfl_run gpu-fp16 20 60 $DEVICE $GPU_THREADS --algo fedavg "${FMNIST[@]}" --rounds 3
        pfl_run gpu-fp4 20 60 $DEVICE $FP_THREADS --algo fedavg "${FMNIST[@]}" --rounds 3
        A=gpu-fp16 B=gpu-fp4 FP_ROUNDS=3
    fi
    f1=$(fingerprint "$OUT/$A") f2=$(fingerprint "$OUT/$B")
    row "FedAvg $FP_ROUNDS rounds twice on the GPU ($GPU_THREADS, then $FP_THREADS threads): same fingerprint" \
        "$(ran $B && [ "$f1" = "$f2" ] && echo PASS || echo FAIL)" "$f1 / $f2"
fi
snapshot

# ---- 5. the FedAvg cnn benchmark: PyTorch on the GPU, the streams, the CPU cores ----
TDEV=$([ $DRY = 1 ] && echo cpu || echo cuda)
HAVE_TORCH=0
python3 -c "import torch" 2>/dev/null && HAVE_TORCH=1
torch_run() { # NAME NEED CAP FLAGS...
    local name=$1 need=$2 cap=$3 cap_s start=$SECONDS
    shift 3
    cap_s=$(fits "$need" "$cap") || true
    [ $HAVE_TORCH = 1 ] && [ -n "$cap_s" ] || { say "$name: skipped (no PyTorch or out of time)"; return 1; }
    say "$name: bench/torch_fedavg.py --device $TDEV $* (at most $cap_s s)"
    PYTHONUNBUFFERED=1 timeout "$cap_s" python3 bench/torch_fedavg.py --data-dir "$DATA" --device $TDEV --eval-every 1000 \
        "$@" --out "$OUT/$name.jsonl" 2>"$OUT/$name.log"
    local rc=$?
    echo "exit $rc after $((SECONDS - start)) s" >>"$OUT/$name.log"
    say "$name: exit $rc after $((SECONDS - start)) s"
}
$PFL partition --data fmnist --partition pat:2 --clients 20 --seed 1 --quiet --save "$OUT/fmnist.json" 2>"$OUT/partition-fmnist.log"
torch_run torch-cnn 30 90 --partition-file "$OUT/fmnist.json" --model cnn --rounds 2 \
    $([ $DRY = 1 ] && echo "--local-steps 5")
# concurrent streams: the same 50 batches a client on 1 and on 16 worker threads (streams)
STREAMS=(--algo fedavg "${FMNIST[@]}" --rounds 2 --eval-every 1000 --local-steps $([ $DRY = 1 ] && echo 5 || echo 50))
pfl_run gpu-streams1 20 60 $DEVICE 1 "${STREAMS[@]}"
pfl_run gpu-streams16 15 40 $DEVICE $GPU_THREADS "${STREAMS[@]}"
# the CPU cores: 5 rounds, the 5th also against the committed CPU run
CPU_THREADS=$JOBS
pfl_run cpu-fedavg 30 90 cpu "$CPU_THREADS" --algo fedavg "${FMNIST[@]}" --rounds 5 --eval-every 5
bench_row() { # LABEL GPU-DIR CPU-DIR TORCH-JSONL
    local gs gx cs cx ts tx
    read -r gs gx <<<"$(ran "$2" && speed "$OUT/$2/metrics.jsonl" || echo - -)"
    read -r cs cx <<<"$(ran "$3" && speed "$OUT/$3/metrics.jsonl" || echo - -)"
    read -r ts tx <<<"$([ -f "$OUT/$4" ] && speed "$OUT/$4" || echo - -)"
    row "bench: $1 (s/round, train samples/s)" "GPU ${gs:--} s, ${gx:--}/s" \
        "CPU $CPU_THREADS threads ${cs:--} s, ${cx:--}/s; PyTorch on the GPU ${ts:--} s, ${tx:--}/s$(
            ratio "GPU/PyTorch" "$gx" "$tx")$(ratio "GPU/CPU" "$gx" "$cx")"
}
ratio() { python3 -c "print('; $1 %.1fx' % (float('$2') / float('$3')))" 2>/dev/null; } # NAME A B: A/B, or nothing
bench_row "FedAvg cnn Fashion-MNIST pat:2, 20 clients, batch 10" gpu-fedavg cpu-fedavg torch-cnn.jsonl
read -r s1 x1 <<<"$(ran gpu-streams1 && speed "$OUT/gpu-streams1/metrics.jsonl" || echo - -)"
read -r s16 x16 <<<"$(ran gpu-streams16 && speed "$OUT/gpu-streams16/metrics.jsonl" || echo - -)"
row "bench: the GPU's concurrent streams, FedAvg cnn Fashion-MNIST, 50 batches a client (s/round, samples/s)" \
    "1 thread ${s1:--} s, ${x1:--}/s" "$GPU_THREADS threads (streams) ${s16:--} s, ${x16:--}/s"
if ran cpu-fedavg; then
    c=$(acc_at "$OUT/cpu-fedavg/metrics.jsonl" 5) r=$(acc_at "$REF/fedavg/metrics.jsonl" 5)
    row "FedAvg on this machine's CPU cores, round 5: the accuracy of REF's CPU run" \
        "$([ -n "$c" ] && [ "$c" = "$r" ] && echo same || echo differs)" "here ${c:-?}, $REF ${r:-?} ($(first_line cpu-fedavg 'BLAS'))"
fi
snapshot

# ---- 6. FedALA and FLAYER on the GPU ----
# a dry run cuts ALA's start phase (up to 100 epochs a client) to 2
pfl_run gpu-fedala 40 120 $DEVICE $GPU_THREADS --algo fedala "${FMNIST[@]}" --rounds "$ROUNDS" "${EV[@]}" \
    $([ $DRY = 1 ] && echo "--ala-max-epochs 2")
accuracy_row fedala
snapshot
pfl_run gpu-flayer 30 100 $DEVICE $GPU_THREADS --algo flayer "${FMNIST[@]}" --rounds "$ROUNDS" "${EV[@]}"
accuracy_row flayer
snapshot

# ---- 7. CIFAR-10: ResNet-18, FedALA, FLAYER Table 2 ----
[ -n "${CIFAR_PID:-}" ] && wait "$CIFAR_PID"
CIFAR=(--data cifar10 --clients 20 --batch 10 --lr 0.005 --seed 1 --eval-every 1000 --train-fraction 0.98
    "${SHORT[@]}")
RES_STEPS=$([ $DRY = 1 ] && echo 2 || echo 50)
pfl_run gpu-resnet 25 60 $DEVICE $GPU_THREADS --algo fedavg --model resnet18-cifar --partition dir:0.1 "${CIFAR[@]}" \
    --lr 0.1 --rounds $BENCH_ROUNDS --local-steps $RES_STEPS
$PFL partition --data cifar10 --partition dir:0.1 --clients 20 --seed 1 --quiet \
    --save "$OUT/cifar.json" 2>"$OUT/partition-cifar.log"
torch_run torch-resnet 30 60 --partition-file "$OUT/cifar.json" --model resnet18-cifar --rounds 2 --lr 0.1 \
    --local-steps $RES_STEPS
pfl_run cpu-resnet 30 60 cpu "$CPU_THREADS" --algo fedavg --model resnet18-cifar --partition dir:0.1 "${CIFAR[@]}" \
    --lr 0.1 --rounds 2 --local-steps $([ $DRY = 1 ] && echo 2 || echo 10)
bench_row "FedAvg resnet18-cifar CIFAR-10 dir:0.1 ($CIFAR_NOTE), 20 clients, batch 10, GPU and PyTorch 50 batches a client, CPU 10" \
    gpu-resnet cpu-resnet torch-resnet.jsonl
snapshot
pfl_run gpu-fedala-cifar 20 40 $DEVICE $GPU_THREADS --algo fedala --model cnn --partition dir:0.1 "${CIFAR[@]}" \
    --rounds $BENCH_ROUNDS --ala-max-epochs 1
pfl_run cpu-fedala-cifar 20 50 cpu "$CPU_THREADS" --algo fedala --model cnn --partition dir:0.1 "${CIFAR[@]}" \
    --rounds $BENCH_ROUNDS --ala-max-epochs 1
bench_row "FedALA cnn CIFAR-10 dir:0.1 ($CIFAR_NOTE), 20 clients, batch 10" gpu-fedala-cifar cpu-fedala-cifar none
snapshot
T2=configs/flayer-t2-cifar10-cnn.yaml
labels=$($PFL preset --runs "$T2" -- --rounds 2 2>/dev/null | cut -f2)
total=0 counted=0
while IFS= read -r label; do
    [ -n "$label" ] || continue
    dir="t2-$(echo "$label" | tr -cd 'A-Za-z')"
    ala=()
    case $label in *FedALA*) ala=(--ala-max-epochs 1) ;; esac
    if pfl_run "$dir" 12 30 $DEVICE $GPU_THREADS --config "$T2" --cell "$label" --rounds 2 --eval-every 1000 \
        --train-fraction 0.98 "${SHORT[@]}" "${ala[@]}"; then
        read -r s _ <<<"$(speed "$OUT/$dir/metrics.jsonl")"
        total=$(python3 -c "print($total + $s)") counted=$((counted + 1))
        row "FLAYER T2 $label on the GPU, 2 rounds ($CIFAR_NOTE)" "$s s/round" \
            "2000 rounds: $(python3 -c "print('%.2f h' % ($s * 2000 / 3600))")"
    else
        row "FLAYER T2 $label on the GPU" "not run" "$(why_not "$dir")"
    fi
done <<<"$labels"
row "FLAYER T2, the $counted methods the GPU ran, 2000 rounds each" "$(python3 -c "print('%.2f h' % ($total * 2000 / 3600))")" \
    "sum of the rows above"
HEAD_LINES+=("done in $((SECONDS - T0)) s of a $BUDGET s budget")
table
snapshot
cat "$OUT/table.md"
grep -q '| FAIL' "$OUT/table.md" && exit 1
exit 0
