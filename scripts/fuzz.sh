#!/usr/bin/env bash
# Fuzzes pfl's file readers with libFuzzer (README, "Robustness").
#
#   scripts/fuzz.sh [SECONDS] [HARNESS...]      (make fuzz FUZZ_SECONDS=.. FUZZ="..")
#
# Builds every harness fuzz/<name>.c (or those named) with clang, libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/, then runs
# each for SECONDS (default 60), one after the other, one process each. Each
# starts from its committed seeds and reproducers (fuzz/corpus/<name>/,
# fuzz/repro/<name>/) plus what earlier runs found (build-fuzz/corpus/<name>/,
# kept between runs). Limits: 10 s per input (FUZZ_TIMEOUT=S sets another:
# the preset reader is held to 1 s, FUZZ_TIMEOUT=1 scripts/fuzz.sh 600 preset),
# 2 GiB of memory, and no single allocation over 512 MiB (inputs are at most
# a few hundred KiB, so a reader asking for more has not bounded it by the
# file). A finding (crash, leak,
# sanitizer report, timeout, a broken message rule in fuzz/fuzz.h) stops that
# harness and lands in build-fuzz/findings/<name>/; replay it with
#   build/fuzz/replay_<name> build-fuzz/findings/<name>/crash-...
# and, once fixed, commit it under fuzz/repro/<name>/ so the tests keep it.
# One summary line per harness goes to stdout and build-fuzz/summary.txt.
# Exits 1 when any harness had a finding.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
case $seconds in '' | *[!0-9]*) echo "scripts/fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2 ;; esac
timeout=${FUZZ_TIMEOUT:-10}
case $timeout in '' | *[!0-9]* | 0) echo "scripts/fuzz.sh: FUZZ_TIMEOUT must be a whole number of seconds, got '$timeout'" >&2; exit 2 ;; esac

if ! command -v clang >/dev/null 2>&1; then
    echo "scripts/fuzz.sh: clang not found (scripts/setup.sh installs it: clang, libclang-rt-dev, libomp-dev)" >&2
    exit 1
fi
rt=$(clang -print-resource-dir)/lib/linux/libclang_rt.fuzzer-x86_64.a
if [ ! -f "$rt" ]; then
    echo "scripts/fuzz.sh: libFuzzer's runtime $rt is missing (apt-get install libclang-rt-dev)" >&2
    exit 1
fi

if [ $# -gt 0 ]; then names=("$@"); else
    names=()
    for f in fuzz/*.c; do
        n=$(basename "$f" .c)
        case $n in fuzz_util | replay | make_seeds) continue ;; esac
        names+=("$n")
    done
fi
for n in "${names[@]}"; do
    [ -f "fuzz/$n.c" ] || { echo "scripts/fuzz.sh: no harness fuzz/$n.c" >&2; exit 2; }
done

B=build-fuzz
# the inputs are written to files: in memory when /dev/shm is there
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then export TMPDIR=/dev/shm; fi
make -s -j"$(nproc)" BUILD=$B CC=clang SANITIZE=fuzz "${names[@]/#/$B/fuzz/fuzz_}" || exit 1

: >"$B/summary.txt"
found=0
for n in "${names[@]}"; do
    mkdir -p "$B/corpus/$n" "$B/findings/$n"
    seeds=("fuzz/corpus/$n")
    [ -d "fuzz/repro/$n" ] && seeds+=("fuzz/repro/$n")
    log="$B/findings/$n/log.txt"
    start=$SECONDS
    "$B/fuzz/fuzz_$n" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -print_final_stats=1 -artifact_prefix="$B/findings/$n/" "$B/corpus/$n" "${seeds[@]}" >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | sed 's/ft: //')
    corpus=$(find "$B/corpus/$n" -type f | wc -l)
    if [ $rc -eq 0 ]; then
        result="no finding"
    else
        found=1
        artifact=$(grep -o "Test unit written to [^ ]*" "$log" | tail -1 | sed 's/Test unit written to //')
        result="FINDING (exit $rc): ${artifact:-see $log}"
    fi
    line="$n: ${runs:-?} inputs in $((SECONDS - start)) s (at most ${timeout} s each), coverage ${cov:-?} edges / ${ft:-?} features, corpus $corpus files: $result"
    echo "$line" | tee -a "$B/summary.txt"
done
exit $found
