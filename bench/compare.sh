#!/usr/bin/env bash
# Compares federated methods under one common setting: runs `build/pfl run`
# once per method, one after the other, and writes a markdown table (best and
# final personalized accuracy, final global accuracy, seconds per round,
# rounds run) to OUT/table.md and stdout.
#
# Usage: bench/compare.sh [--name NAME] [--methods SPEC] [--out-dir DIR]
#                         [--resume] [--paper "LABEL=ACC ..."] -- PFL_RUN_FLAGS...
#
#   --name NAME     names the comparison (default: compare); OUT defaults to
#                   bench/results/NAME (gitignored)
#   --out-dir DIR   OUT explicitly (relative paths: to the current directory)
#   --methods SPEC  the methods, default "fedavg fedper fedrep ditto fedala flayer".
#                   SPEC is a list of entries separated by commas or newlines:
#                     ALGO [ALGO...]              one method per algorithm name,
#                                                 labelled by the name
#                     LABEL=ALGO [PFL FLAGS...]   one method labelled LABEL: --algo
#                                                 ALGO plus these flags, for this
#                                                 method only
#                   e.g. "fedavg fedala, fedprox+ala=fedprox --ala, ditto-l1=ditto --lambda 1"
#                   Labels: letters, digits, . _ + - (they name OUT/LABEL).
#                   Method flags come after the common flags, so they override
#                   them (pfl keeps the last value of a repeated flag). Flags
#                   are split on whitespace, no quoting.
#   --resume        skip methods whose OUT/LABEL/summary.json exists, and
#                   continue an unfinished method from its last checkpoint
#                   (`pfl resume OUT/LABEL`; every method checkpoints after
#                   each round), so a long table can be built over several
#                   sessions; without --resume every method is run afresh
#                   (OUT/LABEL is deleted first)
#   --paper SPEC    "LABEL=ACC LABEL=ACC ..." (spaces or commas): adds a column
#                   "paper (%)" with these reference accuracies, e.g. a paper's table
#   -- FLAGS        flags given to every `pfl run` (not --algo or --out);
#                   relative paths in them (--data-dir) are relative to the repo root.
#                   A flag written ALGO:--flag=VALUE (or ALGO:--switch) goes only
#                   to the methods whose algorithm is ALGO, after the common
#                   flags: pfl refuses a method's flag given to another method,
#                   so one list can carry several methods' own settings, e.g.
#                   -- --data mnist fedprox:--mu=0.01 fedalp:--groups=10
#
# Per method: OUT/LABEL/{metrics.jsonl,summary.json} (pfl's output),
# OUT/LABEL.log (pfl's stderr: progress lines, errors), OUT/LABEL.cmd (the
# exact command). A failed method becomes a "failed" row with the first line
# of its error; the others still run, and the script exits 1 at the end.
#
# Example:
#   bench/compare.sh --name fmnist-pat2 --methods "fedavg fedala flayer fedper fedrep ditto" \
#       -- --data fmnist --model cnn --partition pat:2 --clients 20 --rounds 50 --lr 0.005
set -euo pipefail

die() { echo "compare.sh: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

name=compare methods="fedavg fedper fedrep ditto fedala flayer" out_dir="" resume=0 paper=""
while [ $# -gt 0 ]; do
    case "$1" in
        --name) [ $# -ge 2 ] || die "--name needs a value"; name=$2; shift 2 ;;
        --methods) [ $# -ge 2 ] || die "--methods needs a value"; methods=$2; shift 2 ;;
        --out-dir) [ $# -ge 2 ] || die "--out-dir needs a value"; out_dir=$2; shift 2 ;;
        --paper) [ $# -ge 2 ] || die "--paper needs a value"; paper=$2; shift 2 ;;
        --resume) resume=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "unknown option '$1' (pfl flags go after --; see --help)" ;;
    esac
done
common=() scoped=()   # scoped: "ALGO:--flag=value" entries, for that algorithm's methods only
for f in "$@"; do
    case "$f" in
        --algo|-algo|--algo=*|--out|--out=*) die "'$f' cannot be a common flag: give methods with --methods, OUT with --out-dir" ;;
    esac
    if [[ "$f" =~ ^[a-z0-9-]+:- ]]; then
        [[ "${f#*:}" =~ ^--[a-z0-9-]+(=.*)?$ ]] || die "'$f': a method's flag is ALGO:--flag=VALUE or ALGO:--switch"
        scoped+=("$f")
    else
        common+=("$f")
    fi
done
# The flags of the scoped list that go to algorithm $1.
scoped_for() {
    local f
    for f in "${scoped[@]}"; do [ "${f%%:*}" != "$1" ] || printf '%s\n' "${f#*:}"; done
}
[[ "$name" =~ ^[A-Za-z0-9._+-]+$ ]] || die "--name '$name': use letters, digits, . _ + -"
read -r -a pitems <<<"${paper//,/ }"
for item in "${pitems[@]}"; do
    [[ "$item" =~ ^[A-Za-z0-9._+-]+=[0-9]+(\.[0-9]*)?$ ]] || die "--paper entry '$item' is not LABEL=ACC (ACC in %)"
done

# OUT is resolved against the caller's directory, then we work from the repo root.
[ -n "$out_dir" ] || out_dir="$(cd "$(dirname "$0")" && pwd)/results/$name"
case "$out_dir" in /*) ;; *) out_dir="$PWD/$out_dir" ;; esac
cd "$(dirname "$0")/.."

py=/usr/bin/python3
[ -x "$py" ] || py=python3

# ---- parse --methods into parallel arrays: labels, algos, method flags
labels=() algos=() mflags=()
while IFS= read -r entry; do
    entry="${entry#"${entry%%[![:space:]]*}"}"   # trim
    entry="${entry%"${entry##*[![:space:]]}"}"
    [ -n "$entry" ] || continue
    if [[ "$entry" == *=* ]]; then
        label="${entry%%=*}" rest="${entry#*=}"
        label="${label%"${label##*[![:space:]]}"}"
        read -r -a words <<<"$rest"
        [ ${#words[@]} -ge 1 ] || die "method '$entry': no algorithm after '='"
        labels+=("$label") algos+=("${words[0]}") mflags+=("${words[*]:1}")
    else
        read -r -a words <<<"$entry"
        for w in "${words[@]}"; do
            [[ "$w" != -* ]] || die "method entry '$entry': flags need a label, as LABEL=ALGO $w ..."
            labels+=("$w") algos+=("$w") mflags+=("")
        done
    fi
done < <(printf '%s\n' "$methods" | tr ',' '\n')
[ ${#labels[@]} -ge 1 ] || die "--methods is empty"
for i in "${!labels[@]}"; do
    [[ "${labels[$i]}" =~ ^[A-Za-z0-9._+-]+$ ]] || die "label '${labels[$i]}': use letters, digits, . _ + -"
    for j in "${!labels[@]}"; do
        [ "$j" -le "$i" ] || [ "${labels[$i]}" != "${labels[$j]}" ] || die "label '${labels[$i]}' appears twice"
    done
done

# PFL=BINARY: another pfl (scripts/gpu-methods.sh: the CUDA build); else build/pfl, made first
if [ -z "${PFL:-}" ]; then
    make -s build/pfl
    PFL=build/pfl
fi
mkdir -p "$out_dir"
manifest="$out_dir/.manifest.tsv"
: >"$manifest"

# Copies pfl's stderr into the log and shows it prefixed by the label. On a
# terminal the progress lines overwrite each other in place (cut to its width);
# warnings, errors and the final "done" line stay. Elsewhere: every line.
progress() { # label log
    local line text tty=0 cols=0
    if [ -t 2 ]; then
        tty=1
        cols=$( (stty size </dev/tty) 2>/dev/null | cut -d' ' -f2) || true
        [[ "$cols" =~ ^[0-9]+$ ]] || cols=0
    fi
    while IFS= read -r line || [ -n "$line" ]; do
        printf '%s\n' "$line" >>"$2"
        text="  $1: ${line#\[pfl\] }"
        if [ $tty = 0 ]; then
            printf '%s\n' "$text" >&2
        elif [[ "$line" == "[pfl] round "* || "$line" == "[pfl] wrote "* || "$line" == "[pfl] loaded "* || "$line" == "[pfl] partition "* ]]; then
            [ "$cols" -le 1 ] || text=${text:0:cols-1}
            printf '\r\033[K%s' "$text" >&2
        else
            printf '\r\033[K%s\n' "$text" >&2
        fi
    done
    [ $tty = 0 ] || printf '\r\033[K' >&2
}

n=${#labels[@]} failed=0
for i in "${!labels[@]}"; do
    label=${labels[$i]} algo=${algos[$i]}
    read -r -a extra <<<"${mflags[$i]}"
    mapfile -t own < <(scoped_for "$algo")
    dir="$out_dir/$label" log="$out_dir/$label.log"
    # --checkpoint-every after --out: the comparison of commands below ignores it
    cmd=("$PFL" run "${common[@]}" --algo "$algo" "${own[@]}" "${extra[@]}" --out "$dir" --checkpoint-every 1)
    cmdline=$(printf '%q ' "${cmd[@]}"); cmdline=${cmdline% }
    desc="$algo${mflags[$i]:+ ${mflags[$i]}}"
    if [ $resume = 1 ] && [ -f "$dir/summary.json" ]; then
        same=1
        prev=$(cat "$out_dir/$label.cmd" 2>/dev/null || true)
        if [ -n "$prev" ] && [ "${prev% --out *}" != "${cmdline% --out *}" ]; then   # OUT may have moved
            same=0
            echo "== [$((i + 1))/$n] $label: kept (--resume), but it was run as: $prev" >&2
        else
            echo "== [$((i + 1))/$n] $label: kept (--resume, $dir/summary.json exists)" >&2
        fi
        printf '%s\t%s\treused\t0\t%s\n' "$label" "$desc" "$same" >>"$manifest"
        continue
    fi
    prev=$(cat "$out_dir/$label.cmd" 2>/dev/null || true)
    if [ $resume = 1 ] && [ -f "$dir/checkpoint" ] && [ "${prev% --out *}" = "${cmdline% --out *}" ]; then
        echo "== [$((i + 1))/$n] $label: continuing from $dir/checkpoint (--resume)" >&2
        cmd=("$PFL" resume "$dir")
    else
        rm -rf "$dir"
        : >"$log"
        printf '%s\n' "$cmdline" >"$out_dir/$label.cmd"
        echo "== [$((i + 1))/$n] $label: $cmdline" >&2
    fi
    set +e
    # shellcheck disable=SC2094  # stdout and the progress copy of stderr both append to the log
    { "${cmd[@]}" 2>&1 1>&3 | progress "$label" "$log"; } 3>>"$log"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" = 0 ] && [ -f "$dir/summary.json" ]; then
        printf '%s\t%s\tok\t0\t1\n' "$label" "$desc" >>"$manifest"
    else
        [ "$rc" != 0 ] || rc=-1   # exit 0 without a summary.json
        failed=$((failed + 1))
        echo "== $label FAILED (exit status $rc), see $log" >&2
        printf '%s\t%s\tfailed\t%s\t1\n' "$label" "$desc" "$rc" >>"$manifest"
    fi
done

cpu=$(grep -m1 -E '^(model name|Model|cpu model)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//') || true
commonline=$(printf '%q ' "${common[@]}" "${scoped[@]}"); commonline=${commonline% }
"$py" - "$out_dir" "$manifest" "$commonline" "$(date '+%Y-%m-%d %H:%M %Z')" "$(nproc)" "${cpu:-unknown CPU}" "$paper" <<'PY'
import json, os, re, sys

out, manifest, common, date, ncpu, cpu, paper_spec = sys.argv[1:8]
paper = {}
for item in re.split(r"[\s,]+", paper_spec.strip()):
    if not item:
        continue
    if "=" not in item:
        sys.exit(f"compare.sh: --paper entry '{item}' is not LABEL=ACC")
    k, v = item.split("=", 1)
    try:
        paper[k] = float(v)
    except ValueError:
        sys.exit(f"compare.sh: --paper entry '{item}': '{v}' is not a number")

rows = [line.rstrip("\n").split("\t") for line in open(manifest) if line.strip()]
for k in paper:
    if k not in {r[0] for r in rows}:
        print(f"compare.sh: --paper label '{k}' is not among the methods", file=sys.stderr)

pct = lambda v: "-" if v is None else f"{100 * v:.2f}"
cell = lambda s: str(s).replace("|", "\\|")


def first_error(label, rc):
    """The first line of the log that is not one of pfl's own '[pfl] ...' status lines."""
    try:
        lines = [l.strip() for l in open(os.path.join(out, label + ".log"), errors="replace")]
    except OSError:
        lines = []
    for l in lines:
        if l and not l.startswith("[pfl]"):
            return l
    rc = int(rc)
    if rc == -1:
        return "exit status 0 but no summary.json"
    if rc > 128:
        return f"killed by signal {rc - 128}" + (f" (last output: {lines[-1]})" if lines and lines[-1] else "")
    return f"exit status {rc}" + (f" (last output: {lines[-1]})" if lines and lines[-1] else "")


head = ["method", "best local (%)", "best round", "final local (%)", "final global (%)", "s/round", "rounds"]
if paper:
    head.append("paper (%)")
head.append("pfl flags")
md = [
    f"Common flags: `{common or '(none: pfl defaults)'}`  ",
    f"{date}, {ncpu} cores ({cpu}). Accuracies: personalized (local) and global, "
    "Σ correct / Σ test over all clients (docs/evaluation.md); best over rounds 1..R.",
    "",
    "| " + " | ".join(head) + " |",
    "|---|" + "---:|" * (len(head) - 2) + "---|",
]
notes = []
for label, desc, status, rc, same in rows:
    name = label if same == "1" else label + " *"
    if same != "1":
        notes.append(f"\\* {label}: kept from an earlier run with other flags, see {label}.cmd")
    ref = [("-" if label not in paper else f"{paper[label]:.2f}")] if paper else []
    if status == "failed":
        cells = [name, "failed: " + first_error(label, rc)] + ["-"] * 5
    else:
        s = json.load(open(os.path.join(out, label, "summary.json")))
        rounds = s.get("rounds")
        try:  # rounds actually evaluated (the last round in metrics.jsonl)
            with open(os.path.join(out, label, "metrics.jsonl")) as f:
                rounds = max(json.loads(l)["round"] for l in f if l.strip())
        except (OSError, ValueError, KeyError):
            pass
        spr = s.get("seconds_per_round")
        cells = [name, pct(s.get("best_local_acc")), str(s.get("best_local_round", "-")),
                 pct(s.get("final_local_acc")), pct(s.get("final_global_acc")),
                 "-" if spr is None else f"{spr:.2f}", str(rounds)]
    md.append("| " + " | ".join(cell(c) for c in cells + ref + [f"`{desc}`"]) + " |")
reused = [r[0] for r in rows if r[2] == "reused"]
if reused:
    notes.append("Kept from an earlier session (--resume): " + ", ".join(reused) + "; their s/round was measured then.")
if notes:
    md.append("")
    md += [n + "  " for n in notes]
text = "\n".join(md) + "\n"
open(os.path.join(out, "table.md"), "w").write(text)
print(text, end="")
PY
rm -f "$manifest"
echo "wrote $out_dir/table.md" >&2
[ $failed = 0 ] || { echo "compare.sh: $failed method(s) failed" >&2; exit 1; }
