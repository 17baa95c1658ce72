#!/usr/bin/env bash
# The one prepared check of pfl's CUDA backend on a GPU machine (one H100 or
# H200, 16 cores, PyTorch with CUDA, no network), about 8 minutes on an H100,
# printing one table. docs/architecture.md, "The CUDA backend", says what it
# shows; bench/README.md, "On a GPU", where its numbers go.
#
#   1. builds pfl with the CUDA backend there (with .gpu/'s libraries when the
#      system lacks OpenBLAS, libjansson or libyaml; with .gpu/'s prebuilt
#      binaries when nothing can be built), finds cuBLAS (the CUDA toolkit's,
#      or PyTorch's nvidia packages) and says where cuDNN is (pfl does not use it);
#   2. tests/gpu/test_cuda_ops: every op of every zoo model and each model's
#      one-batch gradient against the CPU (relative error <= 1e-4);
#   3. FedAvg, FedALA and FLAYER on Fashion-MNIST pat:2, 20 clients, 20 rounds,
#      on the GPU and on the machine's CPU cores: final accuracy within 0.5 points;
#   4. FedAvg on the GPU twice (16 and 4 worker threads): the same fingerprint;
#   5. the benchmark: s/round and samples/s of FedAvg cnn Fashion-MNIST pat:2,
#      FedALA cnn CIFAR-10 dir:0.1 and FedAvg resnet18-cifar CIFAR-10 (20
#      clients) for pfl on the GPU, pfl on the CPU cores and PyTorch on the GPU
#      training the clients one after another (bench/torch_fedavg.py --device
#      cuda); then FLAYER Table 2's eight CNN methods on the GPU (s/round, and
#      the hours 2000 rounds of all eight would take). The timed FedALA runs
#      cut ALA's start phase to one epoch (they time the rounds after it).
#
# CIFAR-10 does not travel to that machine (176 MB against the 64 MiB the
# device tool carries): unless data/cifar10 is there, its rows run on random
# CIFAR-10-shaped data (same sizes, labels uniform), which times the same
# work and says nothing of accuracy.
#
# Before: scripts/gpu-pack.sh here (makes .gpu/), then on the GPU machine
#   scripts/gpu-check.sh              (the device tool: carry [".gpu"], timeout 600)
# Without a GPU, the plumbing and the CPU halves on tiny budgets:
#   scripts/gpu-check.sh --dry-run
# Env: WORK=DIR (default /tmp/gpu-check: the runs, their logs, table.md);
#      OUT=DIR (the device tool's folder that comes back; default none): gets
#      table.md and gpu-check.tar.xz (every log, ops.txt, each run's
#      metrics.jsonl and summary.json) only, as that tool returns 8 files;
#      JOBS (default: the cores), ROUNDS (default 20, the accuracy runs).
set -u
cd "$(dirname "$0")/.."
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
RESULT=${OUT:-}
OUT=${WORK:-/tmp/gpu-check}
JOBS=${JOBS:-$(nproc)}
ROUNDS=${ROUNDS:-20}
BUILD=build-gpu
rm -rf "$OUT" && mkdir -p "$OUT"
T0=$SECONDS
say() { echo "[gpu-check $((SECONDS - T0))s] $*" >&2; }
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); } # check, result, detail
# the bench runs: 3 rounds, timed from the second (FLAYER Table 2's cells and
# PyTorch: 2, one timed); ALA's start phase (round 1) is cut to one epoch in
# the bench runs, which time rounds 2 on; a dry run: 5 batches a client, small test splits
BENCH_ROUNDS=3 GPU_THREADS=16 SHORT=()
if [ $DRY = 1 ]; then
    ROUNDS=2 JOBS=2 DEVICE=cpu GPU_THREADS=2 SHORT=(--local-steps 5 --train-fraction 0.98) # and 2% test splits
    say "dry run: no GPU; the GPU halves run on the CPU backend, 2 rounds of 5 batches a client"
else
    DEVICE=cuda
fi

# ---- 1. environment and build ----
SYSFLAGS=()
if ! pkg-config --exists openblas jansson yaml-0.1 2>/dev/null; then
    if [ -f .gpu/sysroot.tar.xz ]; then
        mkdir -p /tmp/pfl-sysroot && tar -C /tmp/pfl-sysroot -xJf .gpu/sysroot.tar.xz
        S=/tmp/pfl-sysroot/sysroot
        SYSFLAGS=(BLAS_CFLAGS=-I$S/include "BLAS_LIBS=-L$S/lib -lopenblas" "JANSSON_LIBS=-L$S/lib -ljansson"
            "YAML_LIBS=-L$S/lib -lyaml" PARSE_CFLAGS=-I$S/include)
        export LD_LIBRARY_PATH=$S/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        say "libraries: OpenBLAS, libjansson, libyaml from .gpu/sysroot.tar.xz"
    else
        say "OpenBLAS, libjansson or libyaml missing and no .gpu/sysroot.tar.xz (run scripts/gpu-pack.sh where they are)"
    fi
fi
# cuBLAS (opened at run time) and cuDNN: the toolkit's, else PyTorch's wheels'
pydirs=$(python3 -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
find_lib() { # NAME: the first folder holding it
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    for p in $pydirs; do
        f=$(find "$p/nvidia" -name "$1" 2>/dev/null | head -1)
        [ -n "$f" ] && { dirname "$f"; return; }
    done
}
for v in 13 12; do
    CUBLAS_DIR=$(find_lib "libcublas.so.$v")
    [ -n "$CUBLAS_DIR" ] && break
done
[ -n "$CUBLAS_DIR" ] && export LD_LIBRARY_PATH=$CUBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
CUDNN_DIR=$(find_lib libcudnn.so.9)
say "cuBLAS: ${CUBLAS_DIR:-not found}; cuDNN: ${CUDNN_DIR:-not found} (pfl does not use it)"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1
else
    echo "no nvidia-smi" >"$OUT/gpu.txt"
fi
say "GPU: $(head -1 "$OUT/gpu.txt")"
say "building pfl with the CUDA backend (make -j$JOBS BUILD=$BUILD)"
if ! make -s -j"$JOBS" BUILD=$BUILD MPI=0 MATIO_LIBS= JPEG_LIBS= "${SYSFLAGS[@]}" $BUILD/pfl $BUILD/tests/test_cuda_ops \
    >"$OUT/build.log" 2>&1; then
    if [ -f .gpu/prebuilt.tar.xz ]; then
        say "build failed (tail $OUT/build.log); using .gpu/prebuilt.tar.xz"
        tar -xJf .gpu/prebuilt.tar.xz
        row build "prebuilt" "the build there failed: $(tail -1 "$OUT/build.log")"
    else
        tail -20 "$OUT/build.log" >&2
        say "build failed and no .gpu/prebuilt.tar.xz"
        exit 1
    fi
else
    row build ok "$(grep -m1 '^CUDA backend' "$OUT/build.log")"
fi
PFL=$BUILD/pfl

# ---- 2. every op, every model, against the CPU ----
$BUILD/tests/test_cuda_ops >"$OUT/ops.txt" 2>&1
rc=$?
if [ $rc = 77 ]; then
    row "ops and one-batch gradients vs CPU" skipped "$(tail -1 "$OUT/ops.txt")"
else
    row "ops and one-batch gradients vs CPU (rel err <= 1e-4)" "$([ $rc = 0 ] && echo PASS || echo FAIL)" \
        "$(tail -1 "$OUT/ops.txt"); worst: $(grep -E '^(ok|FAIL)' "$OUT/ops.txt" | sort -g -k5 | tail -1 | tr -s ' ')"
fi
say "ops: $(tail -1 "$OUT/ops.txt")"

# ---- data: Fashion-MNIST (carried), CIFAR-10 (real if there, else random of its shape) ----
DATA=/tmp/pfl-gpu-data
mkdir -p "$DATA/fmnist"
if [ -d .gpu/fmnist ] && ls .gpu/fmnist/*.xz >/dev/null 2>&1; then
    for f in .gpu/fmnist/*.xz; do xz -dc "$f" >"$DATA/fmnist/$(basename "$f" .xz)"; done
elif [ -d data/fmnist ]; then
    cp -L data/fmnist/* "$DATA/fmnist/"
else
    say "no Fashion-MNIST (data/fmnist or .gpu/fmnist)"
fi
CIFAR_NOTE="real"
if [ -d data/cifar10 ]; then
    ln -sfn "$(cd data/cifar10 && pwd)" "$DATA/cifar10"
else
    CIFAR_NOTE="random data of CIFAR-10's shape (timing only)"
    mkdir -p "$DATA/cifar10"
    python3 - "$DATA/cifar10" <<'PY'
import os, random, sys
r = random.Random(1)
for name, n in [("data_batch_%d.bin" % i, 10000) for i in range(1, 6)] + [("test_batch.bin", 10000)]:
    labels = bytes(b % 10 for b in r.randbytes(n))
    pixels = r.randbytes(n * 3072)
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for k in range(n):
            f.write(labels[k:k + 1]); f.write(pixels[k * 3072:(k + 1) * 3072])
PY
fi
export PFL_DATA=$DATA

# ---- helpers: a run's final accuracy, fingerprint, s/round (rounds after the first) and samples/s ----
final_acc() { grep -o '"final_local_acc": *[^,}]*' "$1/summary.json" 2>/dev/null | sed 's/.*: *//'; }
fingerprint() {
    echo "$(grep -o '"global_model_sha256": *"[0-9a-f]*"' "$1/summary.json" | grep -o '[0-9a-f]\{64\}' | cut -c1-16)/$(
        grep -o '"personal_models_sha256": *"[0-9a-f]*"' "$1/summary.json" | grep -o '[0-9a-f]\{64\}' | cut -c1-16)"
}
speed() { # metrics.jsonl (pfl's or torch_fedavg's): "s/round samples/s" after the first training round
    python3 - "$1" <<'PY'
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
FMNIST=(--data fmnist --model cnn --partition pat:2 --clients 20 --batch 10 --lr 0.005 --seed 1 --quiet "${SHORT[@]}")
pfl_run() { # DIR DEVICE THREADS FLAGS...: a run into $OUT/DIR, its log beside
    local dir=$1 dev=$2 th=$3; shift 3
    $PFL run "$@" --device "$dev" --threads "$th" --out "$OUT/$dir" 2>"$OUT/$dir.log" ||
        say "$dir failed: $(tail -1 "$OUT/$dir.log")"
}

# ---- 3 and 4. accuracy on the GPU, the fingerprint twice ----
# a dry run cuts ALA's start phase (up to 100 epochs a client) to 2
ala_cut() { [ $DRY = 1 ] && [ "$1" = fedala ] && echo "--ala-max-epochs 2"; }
for a in fedavg fedala flayer; do
    say "$a on Fashion-MNIST pat:2, $ROUNDS rounds, --device $DEVICE"
    # shellcheck disable=SC2046
    pfl_run "gpu-$a" $DEVICE $GPU_THREADS --algo $a "${FMNIST[@]}" --rounds "$ROUNDS" $(ala_cut $a)
done
pfl_run gpu-fedavg-again $DEVICE $((GPU_THREADS / 4 > 0 ? GPU_THREADS / 4 : 1)) --algo fedavg "${FMNIST[@]}" --rounds "$ROUNDS"
f1=$(fingerprint "$OUT/gpu-fedavg") f2=$(fingerprint "$OUT/gpu-fedavg-again")
row "FedAvg twice on the GPU ($GPU_THREADS, then $((GPU_THREADS / 4 > 0 ? GPU_THREADS / 4 : 1)) threads): same fingerprint" "$([ -n "$f1" ] && [ "$f1" = "$f2" ] && echo PASS || echo FAIL)" "$f1 / $f2"

# ---- 5. the benchmark, GPU side ----
CIFAR=(--data cifar10 --clients 20 --batch 10 --lr 0.005 --seed 1 --quiet --eval-every 1000 "${SHORT[@]}")
say "bench: FedALA cnn CIFAR-10 dir:0.1 and FedAvg resnet18-cifar on --device $DEVICE"
pfl_run gpu-fedala-cifar $DEVICE $GPU_THREADS --algo fedala --model cnn --partition dir:0.1 "${CIFAR[@]}" \
    --rounds $BENCH_ROUNDS --ala-max-epochs 1
pfl_run gpu-resnet $DEVICE $GPU_THREADS --algo fedavg --model resnet18-cifar --partition dir:0.1 "${CIFAR[@]}" --lr 0.1 \
    --rounds $BENCH_ROUNDS
T2=configs/flayer-t2-cifar10-cnn.yaml
labels=$($PFL preset --runs "$T2" -- --rounds 2 2>/dev/null | cut -f2)
total=0
while IFS= read -r label; do
    [ -n "$label" ] || continue
    dir="t2-$(echo "$label" | tr -cd 'A-Za-z')"
    say "FLAYER Table 2: $label, 2 rounds on --device $DEVICE"
    ala=()
    case $label in *FedALA*) ala=(--ala-max-epochs 1) ;; esac
    if $PFL run --config "$T2" --cell "$label" --rounds 2 --eval-every 1000 --device $DEVICE \
        --threads $GPU_THREADS --quiet --out "$OUT/$dir" "${SHORT[@]}" "${ala[@]}" 2>"$OUT/$dir.log"; then
        read -r s _ <<<"$(speed "$OUT/$dir/metrics.jsonl")"
        total=$(python3 -c "print($total + $s)")
        row "FLAYER T2 $label on the GPU" "$s s/round" "2000 rounds: $(python3 -c "print('%.2f h' % ($s * 2000 / 3600))")"
    else
        row "FLAYER T2 $label on the GPU" refused "$(tail -1 "$OUT/$dir.log" | cut -c1-160)"
    fi
done <<<"$labels"
row "FLAYER T2, the methods the GPU runs, 2000 rounds each" "$(python3 -c "print('%.2f h' % ($total * 2000 / 3600))")" \
    "sum of the rows above ($CIFAR_NOTE)"

# PyTorch on the GPU, the clients one after another (PFLlib's way)
$PFL partition --data fmnist --partition pat:2 --clients 20 --seed 1 --quiet --save "$OUT/fmnist.json" 2>/dev/null
$PFL partition --data cifar10 --partition dir:0.1 --clients 20 --seed 1 --quiet --save "$OUT/cifar.json" 2>/dev/null
TDEV=$([ $DRY = 1 ] && echo cpu || echo cuda)
if python3 -c "import torch" 2>/dev/null; then
    say "PyTorch FedAvg on $TDEV (cnn Fashion-MNIST, 2 rounds; resnet18-cifar, 2 rounds of 50 batches a client)"
    python3 bench/torch_fedavg.py --partition-file "$OUT/fmnist.json" --data-dir "$DATA" --model cnn --rounds 2 \
        --eval-every 1000 --device $TDEV --out "$OUT/torch-cnn.jsonl" 2>"$OUT/torch-cnn.log"
    python3 bench/torch_fedavg.py --partition-file "$OUT/cifar.json" --data-dir "$DATA" --model resnet18-cifar \
        --rounds 2 --lr 0.1 --local-steps 50 --eval-every 1000 --device $TDEV --out "$OUT/torch-resnet.jsonl" \
        2>"$OUT/torch-resnet.log"
else
    say "no PyTorch here: its rows are left out"
fi

# ---- the CPU side: the same runs on the machine's cores ----
CPU_THREADS=$JOBS
for a in fedavg fedala flayer; do
    say "$a on the CPU ($CPU_THREADS threads), $ROUNDS rounds"
    # shellcheck disable=SC2046
    pfl_run "cpu-$a" cpu "$CPU_THREADS" --algo $a "${FMNIST[@]}" --rounds "$ROUNDS" $(ala_cut $a)
    g=$(final_acc "$OUT/gpu-$a") c=$(final_acc "$OUT/cpu-$a")
    row "$a Fashion-MNIST pat:2 $ROUNDS rounds: GPU vs CPU final acc within 0.5 points" \
        "$(python3 -c "print('PASS' if abs(float('${g:-nan}') - float('${c:-nan}')) * 100 <= 0.5 else 'FAIL')" 2>/dev/null || echo FAIL)" \
        "GPU ${g:-?}, CPU ${c:-?}"
done
pfl_run cpu-fedala-cifar cpu "$CPU_THREADS" --algo fedala --model cnn --partition dir:0.1 "${CIFAR[@]}" \
    --rounds $BENCH_ROUNDS --ala-max-epochs 1
pfl_run cpu-resnet cpu "$CPU_THREADS" --algo fedavg --model resnet18-cifar --partition dir:0.1 "${CIFAR[@]}" --lr 0.1 \
    --rounds $BENCH_ROUNDS --local-steps $([ $DRY = 1 ] && echo 2 || echo 20)

# ---- the table ----
bench() { # LABEL GPU-DIR CPU-DIR TORCH-JSONL
    read -r gs gx <<<"$(speed "$OUT/$2/metrics.jsonl" 2>/dev/null || echo - -)"
    read -r cs cx <<<"$(speed "$OUT/$3/metrics.jsonl" 2>/dev/null || echo - -)"
    read -r ts tx <<<"$( [ -f "$OUT/$4" ] && speed "$OUT/$4" || echo - -)"
    row "bench: $1 (s/round, samples/s)" "GPU ${gs:--} s, ${gx:--}/s" \
        "CPU $CPU_THREADS threads ${cs:--} s, ${cx:--}/s; PyTorch on the GPU ${ts:--} s, ${tx:--}/s"
}
bench "FedAvg cnn Fashion-MNIST pat:2" gpu-fedavg cpu-fedavg torch-cnn.jsonl
bench "FedALA cnn CIFAR-10 dir:0.1 ($CIFAR_NOTE)" gpu-fedala-cifar cpu-fedala-cifar none
bench "FedAvg resnet18-cifar CIFAR-10 dir:0.1 ($CIFAR_NOTE; CPU and PyTorch: 20 and 50 batches a client)" \
    gpu-resnet cpu-resnet torch-resnet.jsonl
{
    echo "# scripts/gpu-check.sh$([ $DRY = 1 ] && echo ' --dry-run (no GPU: the GPU column ran on the CPU backend)')"
    echo
    echo "GPU: $(head -1 "$OUT/gpu.txt"); $(grep -m1 'device: cuda' "$OUT/gpu-fedavg.log" 2>/dev/null | sed 's/^\[pfl\] //')"
    echo "CPU: $(nproc) cores, $(grep -m1 'BLAS:' "$OUT/cpu-fedavg.log" 2>/dev/null | sed 's/^\[pfl\] //'); $((SECONDS - T0)) s in all"
    echo
    echo "| check | result | detail |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/table.md"
if [ -n "$RESULT" ]; then # what comes back: the table and one archive
    mkdir -p "$RESULT" && cp "$OUT/table.md" "$RESULT/" &&
        (cd "$OUT" && find . -name '*.log' -o -name '*.txt' -o -name '*.jsonl' -o -name summary.json -o -name table.md |
            tar -cJf "$RESULT/gpu-check.tar.xz" -T -)
fi
grep -q '| FAIL |' "$OUT/table.md" && exit 1
exit 0
