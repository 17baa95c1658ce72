# Outputs that cannot lie: what pfl writes is what it says, in files it owns.
#  1. --out of pfl table and pfl plot replaces only a regular file or nothing
#     (a symlink, a FIFO, a directory there: refused, left as it is);
#  2. pfl resume of a finished run changes nothing and says so; resumed from
#     the last round's checkpoint (killed before its summary), the summary is
#     the uninterrupted run's;
#  3. a run folder holding a run is refused by a new run (nothing touched)
#     unless --overwrite, which removes the old run's files once the new run
#     has checked all it can (data, partition, model, federation): a run
#     that fails those checks leaves the old one as it was, --seeds too; a
#     failed run leaves nothing;
#  4. a write error on standard output (a full device, a closed stdout) ends
#     every command with exit 1 and one line; one on a run's files too;
#  5. presets: nesting, size, anchors and a second document refused in one line;
#  6. a preset cannot say where a run writes (out: ...) or how it runs;
#  7. pfl resume keeps only the metrics rows its checkpoint covers (an edited
#     row, or another run's rows, refused) and one folder runs one pfl at a time;
#  9. a checkpoint binds the data its run trained on (a SHA-256 of what was
#     loaded, in summary.json too): pixels changed under the same labels
#     are refused by pfl resume, or taken with a warning under
#     --allow-data-change;
#  8. a run whose loss or global model turns NaN or inf stops after that
#     round with exit 2, its summary saying "diverged_round" (not a success
#     with made-up accuracies); --allow-divergence runs on, still saying so;
# and the smaller ones: --seed beside --seeds, a --join that selects nobody,
# an argument holding a line break, a client store cut short (SIGBUS).
. tests/e2e/lib.sh

small=(--algo ditto --data mnist --model dnn --partition onelabel:50/20 --clients 4 --quiet)
md5() { md5sum "$@" 2>/dev/null | cut -c1-32 | tr '\n' ' '; }

"$PFL" run "${small[@]}" --rounds 3 --checkpoint-every 1 --out "$TMP/run" || fail "the run the checks read failed"

# ---- 1. only a regular file or nothing is replaced
ln -s /proc/self/fd/1 "$TMP/link"
expect_error "table --out a symlink" "link: a symbolic link" "$PFL" table "$TMP/run" --out "$TMP/link"
[ -L "$TMP/link" ] && pass "the symlink is still a symlink" || fail "table --out replaced the symlink"
mkfifo "$TMP/fifo"
expect_error "table --out a FIFO" "fifo: a named pipe" "$PFL" table "$TMP/run" --out "$TMP/fifo"
[ -p "$TMP/fifo" ] && pass "the FIFO is still a FIFO" || fail "table --out replaced the FIFO"
mkdir "$TMP/folder.md"
expect_error "table --out a directory" "folder.md: a directory" "$PFL" table "$TMP/run" --out "$TMP/folder.md"
if command -v gnuplot >/dev/null; then
    ln -s /dev/null "$TMP/curves.png"
    expect_error "plot --out over a symlink" "curves.png: a symbolic link" "$PFL" plot "$TMP/run" --out "$TMP/curves"
    [ -L "$TMP/curves.png" ] && [ ! -e "$TMP/curves.svg" ] && pass "the symlink kept, nothing drawn" ||
        fail "plot replaced the symlink or drew the SVG alone"
    "$PFL" plot "$TMP/run" --out "$TMP/fine" && [ -f "$TMP/fine.png" ] && [ -f "$TMP/fine.svg" ] &&
        pass "plot into new files" || fail "plot into new files failed"
else
    echo "skipped: pfl plot checks (no gnuplot)"
fi
"$PFL" table "$TMP/run" --out "$TMP/table.md" && "$PFL" table "$TMP/run" --out "$TMP/table.md" &&
    grep -q '^| run |' "$TMP/table.md" && pass "table --out writes and replaces a regular file" ||
    fail "table --out over a regular file failed"
# a file that cannot grow (the disk full, as the process sees it): refused, the old file kept
before=$(md5 "$TMP/table.md")
expect_error "table --out, no room" "table.md: write failed" bash -c "trap '' XFSZ; ulimit -f 0; exec \"\$@\"" - \
    "$PFL" table "$TMP/run" --out "$TMP/table.md"
[ "$(md5 "$TMP/table.md")" = "$before" ] && pass "the old table kept" || fail "a failed write changed the table"
ls "$TMP" | grep -q '\.tmp' && fail "temporary files left: $(ls "$TMP")" || pass "no temporary file left"

# ---- 2. resuming a finished run
before=$(md5 "$TMP/run/summary.json" "$TMP/run/metrics.jsonl" "$TMP/run/checkpoint")
out=$("$PFL" resume "$TMP/run" --quiet 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && case $out in *"finished"*"nothing changed"*) true ;; *) false ;; esac &&
    pass "resume of a finished run says so: $out" || fail "resume of a finished run: exit $rc: $out"
[ "$(md5 "$TMP/run/summary.json" "$TMP/run/metrics.jsonl" "$TMP/run/checkpoint")" = "$before" ] &&
    pass "resume of a finished run changed nothing" || fail "resume of a finished run changed its files"
# killed after the last round's checkpoint, before the summary: resumed, the same summary
cp -r "$TMP/run" "$TMP/nosummary" && rm "$TMP/nosummary/summary.json"
"$PFL" resume "$TMP/nosummary" --quiet || fail "resume from the last round's checkpoint failed"
for key in personal_models_sha256 global_model_sha256 final_local_acc; do
    a=$(json_field $key "$TMP/run/summary.json") b=$(json_field $key "$TMP/nosummary/summary.json")
    [ -n "$a" ] && [ "$a" = "$b" ] && pass "resumed at the end: $key as the run's" || fail "resumed at the end: $key $b != $a"
done

# ---- 3. run folders have an owner
before=$(md5 "$TMP/run/summary.json" "$TMP/run/metrics.jsonl" "$TMP/run/checkpoint")
expect_error "a new run into a finished run's folder" "holds a finished run (summary.json): --overwrite" \
    "$PFL" run "${small[@]}" --rounds 1 --out "$TMP/run"
expect_error "... one that fails after the data loads" "holds a finished run" \
    "$PFL" run "${small[@]}" --rounds 1 --clients 100000 --out "$TMP/run"
[ "$(md5 "$TMP/run/summary.json" "$TMP/run/metrics.jsonl" "$TMP/run/checkpoint")" = "$before" ] &&
    pass "the refused runs touched nothing" || fail "a refused run changed the folder"
"$PFL" table "$TMP/run" >/dev/null || fail "the old run no longer reads"
# --overwrite by a run that fails its checks: the old run stays, bit for bit (a partition the data
# cannot make, a data folder that is not there, a model that does not fit the data; a --seeds run too)
for bad in "--partition pat:11" "--data-dir $TMP/no-such-data" "--model fasttext" "--clients 100000" \
    "--seeds 1,2 --partition pat:11"; do
    read -r -a extra <<<"$bad"
    "$PFL" run "${small[@]}" --rounds 1 "${extra[@]}" --overwrite --out "$TMP/run" 2>/dev/null &&
        fail "--overwrite with $bad ran"
    [ "$(md5 "$TMP/run/summary.json" "$TMP/run/metrics.jsonl" "$TMP/run/checkpoint")" = "$before" ] &&
        pass "--overwrite with $bad failed its checks and left the old run as it was" ||
        fail "--overwrite with $bad cost the old run: $(ls "$TMP/run")"
done
cp -r "$TMP/run" "$TMP/over" && touch "$TMP/over/notes.txt"
"$PFL" run "${small[@]}" --rounds 3 --seed 2 --stop-after 1 --checkpoint-every 1 --out "$TMP/over" --overwrite ||
    fail "--overwrite, stopped after round 1"
[ ! -e "$TMP/over/summary.json" ] && [ "$(grep -c . "$TMP/over/metrics.jsonl")" -eq 2 ] && [ -e "$TMP/over/notes.txt" ] &&
    pass "--overwrite: the old summary gone, the new run's rows alone, other files kept" ||
    fail "--overwrite left $(ls "$TMP/over"), metrics: $(cut -c1-12 "$TMP/over/metrics.jsonl")"
expect_error "table of the interrupted run" "summary.json" "$PFL" table "$TMP/over"
expect_error "a new run into an unfinished run's folder" "pfl resume $TMP/over goes on with it" \
    "$PFL" run "${small[@]}" --rounds 1 --out "$TMP/over"
"$PFL" run "${small[@]}" --rounds 1 --seeds 1,2 --out "$TMP/seeds" || fail "--seeds run failed"
expect_error "a new run into a --seeds run's folder" "holds a finished run" "$PFL" run "${small[@]}" --rounds 1 --out "$TMP/seeds"
rm "$TMP/seeds/summary.json"
expect_error "... its seeds alone" "holds a run of several seeds (seed-" "$PFL" run "${small[@]}" --rounds 1 --out "$TMP/seeds"
"$PFL" run "${small[@]}" --rounds 1 --out "$TMP/seeds" --overwrite && [ ! -e "$TMP/seeds/seed-1" ] &&
    pass "--overwrite removes the seeds' folders" || fail "--overwrite over a --seeds run: $(ls "$TMP/seeds")"
expect_error "a failed new run" "--clients 100000" "$PFL" run "${small[@]}" --rounds 1 --clients 100000 --checkpoint-every 1 --out "$TMP/new/deep"
[ ! -e "$TMP/new/deep" ] && pass "a failed new run leaves nothing" || fail "a failed new run left $(ls -R "$TMP/new")"

# ---- 8. a diverged run is no success
"$PFL" run "${small[@]}" --algo fedavg --rounds 3 --lr 1000 --weight-decay 1000 --out "$TMP/nan" 2>"$TMP/nan.err"
rc=$?
[ $rc -eq 2 ] && grep -q "diverged at round 1" "$TMP/nan.err" && [ "$(json_field diverged_round "$TMP/nan/summary.json")" = 1 ] &&
    [ "$(json_field rounds_run "$TMP/nan/summary.json")" = 1 ] &&
    pass "a diverged run stops after its round: exit 2, one line, summary.json's diverged_round 1" ||
    fail "a diverged run: exit $rc, $(tail -n 1 "$TMP/nan.err"), diverged_round $(json_field diverged_round "$TMP/nan/summary.json")"
"$PFL" run "${small[@]}" --algo fedavg --rounds 2 --lr 1000 --weight-decay 1000 --allow-divergence --out "$TMP/nan2" &&
    [ "$(json_field diverged_round "$TMP/nan2/summary.json")" = 1 ] && [ "$(json_field rounds_run "$TMP/nan2/summary.json")" = 2 ] &&
    pass "--allow-divergence runs on, its summary still saying where it diverged" ||
    fail "--allow-divergence: $(json_field rounds_run "$TMP/nan2/summary.json") rounds, diverged_round $(json_field diverged_round "$TMP/nan2/summary.json")"
# Local has no global model: its training loss alone tells
"$PFL" run "${small[@]}" --algo local --rounds 2 --lr 1000 --weight-decay 1000 --out "$TMP/nan3" 2>/dev/null
rc=$?
[ $rc -eq 2 ] && [ "$(json_field diverged_round "$TMP/nan3/summary.json")" = 1 ] &&
    pass "local, no global model: its NaN training loss stops it (exit 2)" ||
    fail "local at lr 1000: exit $rc, diverged_round $(json_field diverged_round "$TMP/nan3/summary.json")"
[ "$(json_field diverged_round "$TMP/run/summary.json")" = null ] && pass "a run that did not diverge: diverged_round null" ||
    fail "a sound run's diverged_round: $(json_field diverged_round "$TMP/run/summary.json")"

# ---- 4. write errors
for cmd in "table $TMP/run" "model --model cnn" "partition --partition iid --clients 2" \
    "preset configs/flayer-t2-cifar10-cnn.yaml" "run --help" "--version"; do
    read -r -a args <<<"$cmd"
    out=$("$PFL" "${args[@]}" 2>&1 >/dev/full | grep -v '^\[pfl\]')
    rc=$("$PFL" "${args[@]}" >/dev/full 2>/dev/null; echo $?)
    [ "$rc" = 1 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && case $out in *"standard output: write failed"*) true ;; *) false ;; esac &&
        pass "pfl $cmd > /dev/full: exit 1, $out" || fail "pfl $cmd > /dev/full: exit $rc: $out"
    rc=$("$PFL" "${args[@]}" >&- 2>/dev/null; echo $?)
    [ "$rc" = 1 ] && pass "pfl $cmd >&-: exit 1" || fail "pfl $cmd with stdout closed: exit $rc"
done
# a run's own files: a metrics line that cannot be written ends the run, with no summary
expect_error "run, metrics.jsonl cannot grow" "metrics.jsonl: write failed" bash -c "trap '' XFSZ; ulimit -f 1; exec \"\$@\"" - \
    "$PFL" run "${small[@]}" --clients 40 --partition onelabel:20/5 --rounds 6 --out "$TMP/full"
[ ! -e "$TMP/full/summary.json" ] && pass "no summary after a lost metrics line" || fail "a summary beside lost metrics"
# a file size limit as the shell sets it (SIGXFSZ not ignored by the caller): pfl ignores the signal itself,
# so each writer says which file could not grow (exit 1, one line) and leaves no temporary file behind
limited() { bash -c "ulimit -f $1; exec \"\$@\"" - "${@:2}"; }
mkdir -p "$TMP/fz/cs"
expect_error "a checkpoint past the size limit" "checkpoint.tmp." limited 20 \
    "$PFL" run "${small[@]}" --rounds 2 --checkpoint-every 1 --out "$TMP/fz/run"
expect_error "partition --save past the size limit" "split.json: write failed" limited 1 \
    "$PFL" partition --data mnist --partition onelabel:50/20 --clients 4 --quiet --save "$TMP/fz/split.json"
expect_error "--export pfllib past the size limit" "pfllib export:" limited 8 \
    "$PFL" partition --data mnist --partition onelabel:50/20 --clients 4 --quiet --export pfllib "$TMP/fz/pf"
expect_error "--client-state past the size limit" "cannot size a file" limited 1 \
    "$PFL" run "${small[@]}" --rounds 1 --client-state "$TMP/fz/cs" --out "$TMP/fz/cs-run"
left=$(cd "$TMP/fz" && find . -mindepth 1 ! -path ./cs | sort | tr '\n' ' ')
[ -z "$left" ] && [ -z "$(ls -A "$TMP/fz/cs")" ] && pass "writers past the size limit left nothing behind" ||
    fail "writers past the size limit left: $left $(ls -A "$TMP/fz/cs")"

# ---- 5. presets: bounded and one document
python3 -c "print('[' * 20000)" >"$TMP/deep.yaml"
expect_error "20,000 '['" "deep.yaml:1: nested deeper than 16 levels" "$PFL" preset --check "$TMP/deep.yaml"
python3 -c "
print('paper: P\ntable: T\ncolumn: C\ncells: [{algo: fedavg, label: FedAvg}]\nderived:')
for i in range(100000): print('  - {what: w%d, printed: p, computed: c}' % i)" >"$TMP/big.yaml"
expect_error "a 4 MB preset" "big.yaml: larger than 1024 KiB" "$PFL" preset --check "$TMP/big.yaml"
printf 'paper: P\ntable: T\ncolumn: C\ncells: [{algo: fedavg, label: FedAvg}]\n---\nsetting: {lr: 9}\n' >"$TMP/two.yaml"
expect_error "a second document" "two.yaml:5: a second YAML document" "$PFL" preset --check "$TMP/two.yaml"
python3 -c "
print('paper: P\ntable: T\ncolumn: C\ncells: [{algo: fedavg, label: FedAvg}]\nderived:')
for i in range(101): print('  - &a%d {what: w}' % i)" >"$TMP/anchors.yaml"
expect_error "101 anchors" "more than 100 anchors" "$PFL" preset --check "$TMP/anchors.yaml"

# ---- 6. where a run writes is the command line's
sed "s|^setting:|setting:\n  out: $TMP/elsewhere|" configs/flayer-t2-cifar10-cnn.yaml >"$TMP/out.yaml"
expect_error "out: in a preset" "setting.out: where and how this machine runs a cell" "$PFL" preset --check "$TMP/out.yaml"
expect_error "pfl run --config with out:" "setting.out" \
    "$PFL" run --config "$TMP/out.yaml" --cell FedAvg --rounds 1 --data-dir "$TMP/no-data" --quiet
[ ! -e "$TMP/elsewhere" ] && pass "nothing written where the preset said" || fail "the preset's out: was written"
for key in checkpoint-every data-dir threads config overwrite; do
    sed "s/^  - algo: flayer/  - algo: flayer\n    flags: {$key: 1}/; /^    flags: {head-layers: 1}/d" \
        configs/flayer-t2-cifar10-cnn.yaml >"$TMP/$key.yaml"
    expect_error "$key: in a cell" ".flags.$key: where and how" "$PFL" preset --check "$TMP/$key.yaml"
done

# ---- 9. a checkpoint binds its data
if [ -f "$PFL_DATA/mnist/train-images-idx3-ubyte" ]; then
    mkdir -p "$TMP/dd/mnist" && cp "$PFL_DATA"/mnist/*-ubyte "$TMP/dd/mnist/"
    "$PFL" run "${small[@]}" --data-dir "$TMP/dd" --rounds 2 --checkpoint-every 1 --stop-after 1 --out "$TMP/dd-run" ||
        fail "the run to resume on other data"
    printf '\377\000\377' | dd of="$TMP/dd/mnist/train-images-idx3-ubyte" bs=1 seek=2000 conv=notrunc 2>/dev/null
    # (the edited file is also warned about as no longer the official one: that line is not the error)
    "$PFL" resume "$TMP/dd-run" --quiet >/dev/null 2>"$TMP/dd.err"
    rc=$?
    out=$(grep -v 'differs from the official file' "$TMP/dd.err")
    [ "$rc" = 1 ] && [ "$(grep -c . <<<"$out")" = 1 ] && grep -q "is not the data the run trained on" <<<"$out" &&
        pass "pfl resume on other pixels, the same labels and clients -> $out" ||
        fail "pfl resume on other pixels: exit $rc: $out"
    [ ! -e "$TMP/dd-run/summary.json" ] && pass "... and the run is left to resume" || fail "a refused resume wrote a summary"
    out=$("$PFL" resume "$TMP/dd-run" --quiet --allow-data-change 2>&1) && grep -q "WARNING.*--allow-data-change" <<<"$out" &&
        [ -n "$(json_field data_sha256 "$TMP/dd-run/summary.json")" ] &&
        pass "--allow-data-change goes on, warning; summary.json names the data" ||
        fail "--allow-data-change: $out"
else
    echo "skipped: the data binding check (no $PFL_DATA/mnist uncompressed)"
fi

# ---- 7c. pfl table shows no accuracy that is none: -5 (-500.00 %) or 1e308 (inf) refused, naming the file and key
for bad in '"best_local_acc": -5' '"final_global_acc": 1e308' '"best_local_acc": {"mean": 0.5, "values": [0.5, 7]}'; do
    mkdir -p "$TMP/tb" && printf '{"final_local_acc": 0.5, %s}' "$bad" >"$TMP/tb/summary.json"
    expect_error "pfl table of a summary holding $bad" "outside [0, 1] (not a summary pfl wrote)" "$PFL" table "$TMP/tb"
done

# ---- 7b. a checkpoint is the run's own file: a symbolic link refused before anything is read or trained
"$PFL" run "${small[@]}" --rounds 3 --checkpoint-every 1 --stop-after 1 --out "$TMP/ln" || fail "the run to link"
mv "$TMP/ln/checkpoint" "$TMP/ln-checkpoint" && ln -s ../ln-checkpoint "$TMP/ln/checkpoint"
rows=$(grep -c . "$TMP/ln/metrics.jsonl")
expect_error "pfl resume through a symlinked checkpoint" "checkpoint: a symbolic link" "$PFL" resume "$TMP/ln" --quiet
[ "$(grep -c . "$TMP/ln/metrics.jsonl")" = "$rows" ] && pass "... refused before a round was trained and appended" ||
    fail "a symlinked checkpoint's resume appended rows"
rm "$TMP/ln/checkpoint"
expect_error "pfl resume without a checkpoint" "no checkpoint (the run stopped before its first one" \
    "$PFL" resume "$TMP/ln" --quiet

# ---- 7. the metrics rows a checkpoint covers, and one pfl per folder
"$PFL" run "${small[@]}" --rounds 5 --checkpoint-every 2 --stop-after 3 --out "$TMP/part" || fail "stopped run failed"
"$PFL" run "${small[@]}" --seed 9 --rounds 5 --out "$TMP/other" || fail "another run failed"
cp -r "$TMP/part" "$TMP/edited"
sed -i '1s/"local_acc":[0-9.]*/"local_acc":0.999/' "$TMP/edited/metrics.jsonl"
before=$(md5 "$TMP/edited/metrics.jsonl" "$TMP/edited/checkpoint")
expect_error "an edited row" "metrics.jsonl: the lines up to round 2 are not the ones the checkpoint was written after" \
    "$PFL" resume "$TMP/edited" --quiet
[ "$(md5 "$TMP/edited/metrics.jsonl" "$TMP/edited/checkpoint")" = "$before" ] && [ ! -e "$TMP/edited/summary.json" ] &&
    pass "refused: nothing changed" || fail "the refused resume changed the folder"
cp -r "$TMP/part" "$TMP/mixed"
cp "$TMP/other/metrics.jsonl" "$TMP/mixed/metrics.jsonl"
expect_error "another run's rows" "are not the ones the checkpoint was written after" "$PFL" resume "$TMP/mixed" --quiet
cp -r "$TMP/part" "$TMP/short"
head -c 100 "$TMP/part/metrics.jsonl" >"$TMP/short/metrics.jsonl"
expect_error "rows cut short" "shorter than the" "$PFL" resume "$TMP/short" --quiet
"$PFL" resume "$TMP/part" --quiet && [ -e "$TMP/part/summary.json" ] && pass "the untouched copy resumes" ||
    fail "the untouched stopped run did not resume"
# two pfl on one folder: the second is refused while the first holds it
"$PFL" run "${small[@]}" --rounds 100000 --checkpoint-every 1 --stop-after 1 --out "$TMP/long" || fail "long run failed"
"$PFL" resume "$TMP/long" --quiet &
pid=$!
for _ in $(seq 1000); do # until the first has trained a round (it took the folder before it began)
    n=$(grep -c . "$TMP/long/metrics.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 3 ] && break
    sleep 0.02
done
expect_error "a second resume of a folder in use" "long: in use by another pfl process" \
    "$PFL" resume "$TMP/long" --quiet --stop-after 2
expect_error "a new run into a folder in use" "in use by another pfl process" \
    "$PFL" run "${small[@]}" --rounds 1 --out "$TMP/long" --overwrite
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null

# ---- the smaller ones
expect_error "--seed beside --seeds" "--seed and --seeds: give one" "$PFL" run "${small[@]}" --rounds 0 --seed 3 --seeds 1,2 --out "$TMP/s"
expect_error "--join that selects nobody" "--join 0.1: selects round(0.1 x 4) = 0" "$PFL" run "${small[@]}" --rounds 0 --join 0.1
expect_error "an --out holding a line break" 'x\x0ay' "$PFL" run "${small[@]}" --rounds 0 --out "$TMP/x
y"
[ ! -e "$TMP/x
y" ] && pass "nothing written" || fail "the --out with a line break was written"
# a client store cut short under the run (another program truncating its file): one line, not a bare SIGBUS
# (run by a bash of its own, whose "Bus error" report goes to /dev/null)
mkdir "$TMP/state"
bash -c '"$@" 2>"$0"' "$TMP/bus.err" "$PFL" run "${small[@]}" --rounds 100000 --client-state "$TMP/state" \
    --out "$TMP/bus" 2>/dev/null &
pid=$!
cut=0
for _ in $(seq 1000); do
    # once every client has trained (round 1 evaluated): each holds its rows, which the store allocated then
    n=$(grep -c . "$TMP/bus/metrics.jsonl" 2>/dev/null || true)
    [ "${n:-0}" -ge 2 ] || { sleep 0.02; continue; }
    for fd in /proc/[0-9]*/fd/*; do
        case $(readlink "$fd" 2>/dev/null) in "$TMP/state/"*) truncate -s 0 "$fd" && cut=1 ;; esac
    done
    [ $cut = 1 ] && break
    sleep 0.02
done
for _ in $(seq 500); do kill -0 $pid 2>/dev/null || break; sleep 0.02; done
pkill -P $pid 2>/dev/null # the run, when it is still going (the check below then fails)
wait $pid
rc=$?
if [ $cut = 0 ]; then
    echo "skipped: the client store's file was not found to cut short"
else
    grep -q 'SIGBUS.*client store of --client-state' "$TMP/bus.err" && [ "$(grep -vc '^\[pfl\]' "$TMP/bus.err")" -eq 1 ] &&
        pass "store cut short: one line ($(grep SIGBUS "$TMP/bus.err" | cut -c1-60)...), exit $rc" ||
        fail "store cut short: exit $rc, stderr: $(cat "$TMP/bus.err")"
fi
finish
