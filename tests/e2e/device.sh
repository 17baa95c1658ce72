#!/usr/bin/env bash
# --device and --tf32 on a machine without a GPU (this project's): a GPU run
# is refused with one line and exit 1 before anything is loaded or written,
# whether or not this pfl has the CUDA backend; the CPU is the default and
# names itself nowhere new. The GPU side is scripts/gpu-check.sh's.
. "$(dirname "$0")/lib.sh"
tiny=(--data mnist --model mlp --partition onelabel:100/20 --clients 4 --rounds 1 --threads 1 --quiet)

if "$PFL" run "${tiny[@]}" --device cuda --out "$TMP/gpu" 2>"$TMP/err"; then
    fail "--device cuda ran on a machine without a GPU"
else
    rc=$?
    [ $rc -eq 1 ] && [ "$(grep -c . "$TMP/err")" -eq 1 ] && grep -q -- "--device cuda: " "$TMP/err" &&
        pass "--device cuda without a GPU: exit 1, one line: $(cat "$TMP/err")" ||
        fail "--device cuda without a GPU: exit $rc: $(cat "$TMP/err")"
fi
[ ! -e "$TMP/gpu/metrics.jsonl" ] && pass "nothing written" || fail "--device cuda wrote $TMP/gpu/metrics.jsonl"
if nm "$PFL" 2>/dev/null | grep -q pfl_backend_cuda; then
    grep -q "no NVIDIA driver here\|no usable CUDA GPU\|no CUDA GPU here\|libcublas" "$TMP/err" &&
        pass "a pfl with the CUDA backend says the GPU is missing" || fail "the reason: $(cat "$TMP/err")"
else
    grep -q "built without the CUDA backend" "$TMP/err" && pass "a pfl without the backend says so" ||
        fail "the reason: $(cat "$TMP/err")"
fi
expect_error "an unknown device" "--device tpu: not a backend of this pfl" "$PFL" run "${tiny[@]}" --device tpu
expect_error "--tf32 on the CPU" "--tf32: only for a GPU" "$PFL" run "${tiny[@]}" --tf32
"$PFL" run "${tiny[@]}" --device cpu --out "$TMP/cpu" 2>/dev/null && "$PFL" run "${tiny[@]}" --out "$TMP/default" &&
    [ "$(json_field global_model_sha256 "$TMP/cpu/summary.json")" = "$(json_field global_model_sha256 "$TMP/default/summary.json")" ] &&
    pass "--device cpu is the default" || fail "--device cpu and the default differ"
help=$("$PFL" run --help 2>&1)
grep -q -- "--device" <<<"$help" && grep -q -- "--tf32" <<<"$help" && pass "--help lists --device and --tf32" ||
    fail "--help does not list --device and --tf32"
finish
