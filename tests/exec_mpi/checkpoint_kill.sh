#!/usr/bin/env bash
# checkpoint_kill.sh — a save killed at any point leaves a checkpoint that resumes bit for bit
# (exec/README.md, "Checkpoints"). A DP2 ZeRO-1 run saves after step 2; then each of TRIALS
# trials starts from a copy of that directory, resumes it for 3 steps and saves into the same
# directory (odd trials with --save-every 1: steps 3, 4 and 5; even trials a plain --save: step 5
# only), and SIGKILLs both ranks and mpirun a random moment after the save's step-K.partial
# directory appears (0-9 ms later), i.e. while the shards are being written. After each kill:
#   - DIR/latest names a complete step directory (K = 2 if the kill came before any switch);
#   - resuming DIR for 7 - K steps ends with parameters byte-identical to 7 straight steps and
#     the same losses and gradient norms in steps K+1..7;
#   - every step-N directory without .partial is complete (has its manifest).
# The trials that left a .partial directory behind were killed inside a write; at least one must
# be, or the test has proved nothing. Finally one more save into a killed directory removes the
# leftovers.
#   usage: checkpoint_kill.sh BUILD_DIR SOURCE_DIR [TRIALS]
set -uo pipefail
build="$1" src="$2" trials="${3:-10}"
work="$build/tests/exec_mpi/work/checkpoint_kill"
rm -rf "$work"
mkdir -p "$work"
exe="$build/piper-exec"
plan="$work/zero1.plan"
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_zero1.yaml" -o "$plan" || exit 1
mpi() { timeout 120 "$src/tests/mpirun.sh" 2 "$exe" "$plan" --timeout 60 -q "$@"; }
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
cols() { awk -v s="$2" '!/^#/ && $1 >= s {print $1, $2, $3, $4, $5}' "$1"; }

mpi --steps 7 --seed 7 --log "$work/straight.log" --dump-params "$work/straight" > /dev/null &&
  mpi --steps 2 --seed 7 --save "$work/base" > /dev/null || { echo "FAIL the reference runs failed"; exit 1; }

inside=0
for t in $(seq 1 "$trials"); do
  d="$work/trial$t"
  mkdir -p "$d"
  cp -a "$work/base" "$d/ck"
  [ $((t % 2)) = 1 ] && every=(--save-every 1) || every=()
  "$src/tests/mpirun.sh" 2 "$exe" "$plan" --timeout 60 -q --resume "$d/ck" --steps 3 --save "$d/ck" "${every[@]}" \
    > "$d/killed.out" 2>&1 &
  run=$!
  # the ranks (mpirun's children) are known before the save, so that the kill itself is quick
  ranks=""
  for _ in $(seq 1 30000); do
    [ -z "$ranks" ] || [ "$(echo $ranks | wc -w)" -lt 2 ] && ranks=$(ps -o pid= --ppid "$run" 2> /dev/null | tr '\n' ' ')
    compgen -G "$d/ck/step-*.partial" > /dev/null && break
    kill -0 "$run" 2> /dev/null || break
    sleep 0.001
  done
  # a save has begun (or the run ended): kill it 0-9 ms later, inside the write
  sleep "0.00$((RANDOM % 10))"
  # shellcheck disable=SC2086
  kill -KILL $ranks "$run" 2> /dev/null
  wait "$run" 2> /dev/null
  partial=$(cd "$d/ck" && for p in step-*.partial; do [ -d "$p" ] && echo "$p [$(ls -A "$p" | tr '\n' ' ')]"; done)
  [ -n "$partial" ] && inside=$((inside + 1))
  left=$(ls "$d/ck" | tr '\n' ' ')
  latest=$(cat "$d/ck/latest" 2> /dev/null)
  k=$((10#${latest#step-}))
  ok=1
  for s in "$d"/ck/step-*; do
    case "$s" in *.partial) continue ;; esac
    [ -f "$s/manifest.txt" ] || { ok=0; fail "trial $t: $(basename "$s") has no manifest"; }
  done
  if mpi --resume "$d/ck" --steps $((7 - k)) --log "$d/resumed.log" --dump-params "$d/resumed" > "$d/resumed.out" 2>&1; then
    for r in 0 1; do
      cmp -s "$work/straight/params.dev$r.txt" "$d/resumed/params.dev$r.txt" ||
        { ok=0; fail "trial $t: device $r's parameters after step 7 differ from the straight run's"; }
    done
    [ "$(cols "$work/straight.log" $((k + 1)))" = "$(cols "$d/resumed.log" 1)" ] ||
      { ok=0; fail "trial $t: steps $((k + 1))-7 differ in loss or norm"; }
  else
    ok=0
    fail "trial $t: resuming after the kill failed"
    sed 's/^/    /' "$d/resumed.out"
  fi
  [ $ok = 1 ] && echo "ok   trial $t (${every[*]:-plain --save}): killed leaving $left${partial:+(in ${partial% }) }; latest = $latest, resumes bit for bit to step 7"
done
echo "$inside of $trials trials were killed while a save was being written"
[ "$inside" -ge 1 ] || fail "no trial was killed inside a save: the kill timing proves nothing"

# a later save into a killed directory clears what the kills left
d="$work/trial1"
if mpi --resume "$d/ck" --steps 1 --save "$d/ck" > "$d/after.out" 2>&1 &&
   ! compgen -G "$d/ck/step-*.partial" > /dev/null && ! compgen -G "$d/ck/step-*/.*" > /dev/null; then
  echo "ok   a save after a kill leaves no .partial directory nor temporary behind: $(ls "$d/ck" | tr '\n' ' ')"
else
  fail "a save after the kill: $(ls -a "$d/ck" "$d"/ck/step-* | tr '\n' ' ')"
  sed 's/^/    /' "$d/after.out"
fi
[ $fails -eq 0 ] && echo "checkpoint_kill.sh: all cases pass" || echo "checkpoint_kill.sh: $fails failures"
exit $((fails > 0))
