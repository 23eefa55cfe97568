#!/usr/bin/env bash
# cli.sh — every binary's command line follows docs/cli.md: `--help` exits 0 and lists each of
# its options (the lists below are the contract: an option dropped or renamed fails here);
# `--version` prints "piper-X VERSION"; `--opt=value` gives the output `--opt value` gives; an
# unknown option, an abbreviation and a bad value exit 2 with "piper-X: --opt: what is wrong;
# what to do"; piper-compile --json parses and has the documented keys; piper-exec --json writes
# one object per step; the progress line shows on a terminal and never on a file.
# usage: cli.sh SOURCE_DIR NAME=BINARY...   (NAME: compile, sim, viz, exec, exec-cuda, search)
set -uo pipefail
src=$1
shift
declare -A bin
for kv in "$@"; do bin[${kv%%=*}]=${kv#*=}; done
tmp=$(mktemp -d /tmp/piper_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# the sanitizer build: what OpenMPI (piper-exec's MPI_Init) and Graphviz keep at exit is theirs,
# as tests/mpirun.sh and tests/viz/ say; the release build ignores these
cat "$src/tests/lsan_mpi.supp" "$src/tests/viz/lsan.supp" > "$tmp/lsan.supp"
export LSAN_OPTIONS="suppressions=$tmp/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# each binary's options, as --help must list them
declare -A options=(
  [compile]="--model --cluster --micro-batch --global-batch -o --json --dump-dag --dump-after --emit-directives --emit-order --quiet --allow-oom --no-sendrecv-groups --p2p-per-channel --no-check --help --version"
  [sim]="--json --trace --platform-out --quiet --links --costs --calib --coll --platform --micro-batch --global-batch --no-fold --no-check --in-process --help --version"
  [viz]="-o --format --title --model --cluster --device --collapse --max-nodes --unit --window --help --version"
  [exec]="--steps --seed --optimizer --lr --weight-decay --beta1 --beta2 --eps --grad-clip --no-check --timeout --memory --quiet --dtype --data --no-sim --log --json --trace --dump-grads --dump-params --save --save-every --keep --resume --help --version"
  [exec-cuda]="--steps --seed --optimizer --lr --weight-decay --beta1 --beta2 --eps --grad-clip --no-check --timeout --memory --quiet --data --gpu --no-nvtx --check --device --log --trace --help --version"
  [search]="--model --cluster --gpus --global-batch --space --fix --top --dry-run -j --json -o --quiet --help --version"
)
# a value each binary refuses, and the message it must give (after "piper-X: ")
declare -A bad=(
  [compile]="--micro-batch=x|--micro-batch: 'x' is not a whole number; write a whole number of sequences >= 1"
  [sim]="--global-batch 0|--global-batch: '0' is too small; write a whole number of sequences >= 1"
  [viz]="--device=-1|--device: '-1' is not a whole number in [0, 1073741824]; write a device number >= 0"
  [exec]="--steps 0|--steps: '0' is not a whole number in [1, 1000000]; write a whole number of steps from 1 to 1000000"
  [exec-cuda]="--lr=inf|--lr: 'inf' is not a finite number; write a learning rate > 0"
  [search]="--top=0|--top: '0' is too small; write a positive integer"
)

# run NAME ARGS...: the binary's stdout in $tmp/out, stderr in $tmp/err, status in $rc
run() {
  local name=$1
  shift
  timeout 120 "${bin[$name]}" "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
}

for name in "${!bin[@]}"; do
  prog=piper-$name
  run "$name" --help
  [ $rc -eq 0 ] || fail "$prog --help exits $rc"
  grep -q "^usage: .*$prog" "$tmp/out" || fail "$prog --help has no usage line"
  for opt in ${options[$name]}; do
    # the option at the start of a help row: "  -o FILE", "  -q, --quiet", "      --steps K"
    grep -qE -- "^  (-., )?( {4})?$opt([ =[]|$)" "$tmp/out" || fail "$prog --help does not list $opt"
  done
  run "$name" --version
  [ $rc -eq 0 ] && grep -qxE "$prog [0-9]+\.[0-9]+\.[0-9]+" "$tmp/out" || fail "$prog --version: rc $rc, '$(cat "$tmp/out")'"
  run "$name" --no-such-option
  [ $rc -eq 2 ] && grep -qxF "$prog: --no-such-option: unknown option; see $prog --help" "$tmp/err" ||
    fail "$prog --no-such-option: rc $rc, '$(cat "$tmp/err")'"
  run "$name" --no-such-option=3
  [ $rc -eq 2 ] && grep -qxF "$prog: --no-such-option: unknown option; see $prog --help" "$tmp/err" ||
    fail "$prog --no-such-option=3: rc $rc, '$(cat "$tmp/err")'"
  # an abbreviation is not a name
  run "$name" --hel
  [ $rc -eq 2 ] && grep -qF "$prog: --hel: unknown option (did you mean --help?)" "$tmp/err" ||
    fail "$prog --hel: rc $rc, '$(cat "$tmp/err")'"
  run "$name" --help=1
  [ $rc -eq 2 ] && grep -qxF "$prog: --help: takes no value; write --help alone" "$tmp/err" ||
    fail "$prog --help=1: rc $rc, '$(cat "$tmp/err")'"
  IFS='|' read -r args msg <<< "${bad[$name]}"
  # shellcheck disable=SC2086
  run "$name" x $args
  [ $rc -eq 2 ] && grep -qxF "$prog: $msg" "$tmp/err" || fail "$prog $args: rc $rc, want 2 and '$prog: $msg'; got '$(cat "$tmp/err")'"
done

# --opt=value gives what --opt value gives
same() { # same NAME "ARGS A" "ARGS B": equal stdout, both exit 0
  local name=$1
  # shellcheck disable=SC2086
  run "$name" $2
  local ra=$rc
  cp "$tmp/out" "$tmp/a"
  # shellcheck disable=SC2086
  run "$name" $3
  if [ $ra -ne 0 ] || [ $rc -ne 0 ] || ! cmp -s "$tmp/a" "$tmp/out" || [ ! -s "$tmp/a" ]; then
    fail "piper-$name $2 (rc $ra) and $3 (rc $rc) differ or fail"
    diff "$tmp/a" "$tmp/out" | head -5 >&2
  fi
}
arr=$src/tests/fixtures/piper_schema/harness_1f1b.json
mc="--model $src/tests/fixtures/programs/tiny_gpt.yaml --cluster $src/configs/clusters/cpu_8.yaml"
same compile "$arr $mc --micro-batch=2" "$arr $mc --micro-batch 2"
same compile "$arr --model=$src/tests/fixtures/programs/tiny_gpt.yaml --cluster=$src/configs/clusters/cpu_8.yaml" "$arr $mc"
prog=$src/configs/programs/pp4_1f1b.yaml
same sim "$prog --costs=unit:F=1,B=2 --json=-" "$prog --costs unit:F=1,B=2 --json -"
[ -n "${bin[viz]:-}" ] && same viz "schedule $prog --unit --title=T -o - --format=dot" "schedule $prog --unit --title T -o - --format dot"

# piper-compile --json: parses, has the documented keys, agrees with the text summary
run compile "$prog" --json "$tmp/summary.json" -o "$tmp/p.plan"
if [ $rc -ne 0 ]; then
  fail "piper-compile --json FILE: rc $rc: $(cat "$tmp/err")"
else
  grep -q "^  deadlock-free: proved (4 devices, " "$tmp/out" || fail "the summary does not say the deadlock proof passed"
  grep -q "^  memory: fits: the largest static peak is " "$tmp/out" || fail "the summary does not say the memory proof passed"
  python3 - "$tmp/summary.json" "$tmp/p.plan" << 'PY' || fail "piper-compile --json: the summary lacks documented keys or facts"
import json, sys
s = json.load(open(sys.argv[1]))
keys = ["format", "version", "program", "model", "gpu", "devices", "nodes", "gpus_per_node", "batch",
        "dag_nodes", "instruction_lists", "communication_groups", "schedule", "p2p_per_channel",
        "memory_capacity_bytes", "memory_reserve_bytes", "checks", "per_device", "plan"]
missing = [k for k in keys if k not in s]
assert not missing, missing
assert s["format"] == "piper-compile-summary" and s["version"] == 1
assert s["devices"] == 4 and len(s["per_device"]) == 4, s["devices"]
assert s["checks"] == {"deadlock_free": True, "memory_fits": True, "devices_over_memory": 0}, s["checks"]
assert s["plan"] == sys.argv[2]
b = s["batch"]
assert b["global"] == b["micro"] * b["microbatches"] * b["data_parallel"], b
for d in s["per_device"]:
    assert set(d["instructions"]) == {"compute", "send", "recv", "coll", "wait", "alloc", "free"}
    assert d["instructions"]["compute"] > 0
    assert abs(sum(d["at_peak_bytes"].values()) - d["peak_bytes"]) <= 1e-6 * d["peak_bytes"]
PY
fi
run compile "$prog" --json -
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["devices"] == 4' "$tmp/out" ||
  fail "piper-compile --json -: stdout is not the JSON summary alone"
run compile "$prog" --no-check
grep -q "^  checks: skipped (--no-check)" "$tmp/out" || fail "piper-compile --no-check: the summary does not say the proofs were skipped"

# piper-exec --json: one object per step, the losses of the text lines
single=$src/tests/exec_mpi/programs/gpt_single.yaml
if "${bin[compile]}" -q "$single" -o "$tmp/single.plan"; then
  timeout 120 "$src/tests/mpirun.sh" 1 "${bin[exec]}" "$tmp/single.plan" --steps=3 -q --json "$tmp/steps.jsonl" > "$tmp/text" 2>&1 ||
    fail "piper-exec --json FILE failed: $(cat "$tmp/text")"
  python3 - "$tmp/steps.jsonl" "$tmp/text" << 'PY' || fail "piper-exec --json: not one object per step with the documented keys"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 3, len(lines)
keys = {"step", "loss", "ce", "aux", "grad_norm", "seconds", "tokens_per_s", "gflops_per_s", "peak_bytes",
        "plan_peak_bytes"}
text = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[2]) if l[:1].isdigit()}
for i, l in enumerate(lines):
    o = json.loads(l)
    assert set(o) == keys, set(o) ^ keys
    assert o["step"] == i + 1
    assert abs(o["loss"] - (o["ce"] + o["aux"])) < 1e-9
    assert abs(o["loss"] - text[o["step"]]) < 5e-6, (o["loss"], text)
    assert len(o["peak_bytes"]) == 1 and o["peak_bytes"][0] > 0
PY
  timeout 120 "$src/tests/mpirun.sh" 1 "${bin[exec]}" "$tmp/single.plan" --steps 2 --json - > "$tmp/stdout" 2> "$tmp/stderr"
  python3 -c 'import json, sys; l = open(sys.argv[1]).read().splitlines(); assert len(l) == 2; [json.loads(x) for x in l]' "$tmp/stdout" ||
    fail "piper-exec --json -: stdout is not the JSON lines alone: $(head -3 "$tmp/stdout")"
  # the progress line: on a terminal (script(1) gives one), never on a file; PIPER_PROGRESS_AFTER=0
  # shows it without the two seconds' wait
  PIPER_PROGRESS_AFTER=0 timeout 120 "${bin[exec]}" "$tmp/single.plan" --steps 40 -q --no-sim > /dev/null 2> "$tmp/stderr"
  grep -q "training" "$tmp/stderr" && fail "piper-exec printed a progress line to a file: $(head -c 200 "$tmp/stderr")"
  if command -v script > /dev/null; then
    PIPER_PROGRESS_AFTER=0 timeout 120 script -qec "'${bin[exec]}' '$tmp/single.plan' --steps 40 -q --no-sim > /dev/null" "$tmp/typescript" > /dev/null 2>&1
    grep -qE "piper-exec: training +[0-9]+% \(step [0-9]+ of 40\), [0-9]+ s elapsed, about [0-9]+ s left" "$tmp/typescript" ||
      fail "piper-exec on a terminal: no progress line with the steps and the time left: $(tr '\r' '\n' < "$tmp/typescript" | tail -3)"
  fi
else
  fail "cannot compile $single"
fi

[ $fails -eq 0 ] && echo "cli.sh: every binary follows the command-line convention"
exit $fails
