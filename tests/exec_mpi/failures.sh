#!/usr/bin/env bash
# failures.sh — piper-exec's failure handling on 2 ranks: every case must end (nothing hangs),
# with a nonzero status and messages that name the failing rank and the cause on every rank; a
# rank stopped by another's failure also says where its own streams stand.
# The plans are gpt_pp2's, edited so that device 1 (only) goes wrong:
#   start-up: a missing plan file; a compute whose kernel does not fit its region (device 1);
#   during a step: an activation buffer never allocated (device 1's kernel call fails);
#   watchdog: a receive whose tag no send carries (both ranks stuck until --timeout).
# The last two fail piper-exec's static check at open (untrusted.sh tests that); they run with
# --no-check, since what is under test here is how the runtime fails when a plan is wrong.
#   usage: failures.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/failures"
rm -rf "$work"
mkdir -p "$work"
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_pp2.yaml" -o "$work/good.plan" || exit 1
# edit the first line of device 1's list (list 1) that matches $1 with the awk statement $2
edit() {
  awk -v pat="$1" 'BEGIN{l=-1} /^list /{l=$2} l==1 && !done && $0 ~ pat {'"$2"'; done=1} {print}' \
    "$work/good.plan" > "$work/$3.plan"
  if cmp -s "$work/good.plan" "$work/$3.plan"; then echo "failures.sh: edit $3 changed nothing"; exit 1; fi
}
edit ' compute .*kid=gpt.attn.F' 'sub(/kid=gpt.attn.F/, "kid=gpt.mlp.F")' badkernel
edit ' alloc s=compute .*mem=activations' 'sub(/ alloc /, " nop ")' noalloc
edit ' recv ' 'sub(/ tag=[0-9]+/, " tag=999999")' badtag

fails=0
# run CASE PLAN TIMEOUT PATTERN... : the job must fail within the limit, its output match all
run() {
  local name="$1" plan="$2" limit="$3"
  shift 3
  local t0=$SECONDS
  timeout 120 "$src/tests/mpirun.sh" 2 "$build/piper-exec" "$plan" --steps 2 -q --no-check --timeout "$limit" \
    > "$work/$name.out" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  local ok=1
  if [ $rc -eq 0 ]; then echo "  $name: the job succeeded"; ok=0; fi
  if [ $rc -eq 124 ]; then echo "  $name: the job hung (killed after 120 s)"; ok=0; fi
  for pat in "$@"; do
    if ! grep -qE -- "$pat" "$work/$name.out"; then echo "  $name: no line matches: $pat"; ok=0; fi
  done
  if [ $ok -eq 1 ]; then
    echo "ok   $name (exit $rc after ${took} s)"
  else
    echo "FAIL $name; its output:"
    sed 's/^/    /' "$work/$name.out"
    fails=$((fails + 1))
  fi
}
run missing "$work/nothing.plan" 60 \
  "rank 0 \(device 0\) failed: .*nothing.plan" \
  "rank 1: stopping because rank 0 \(device 0\) failed: .*nothing.plan"
run badkernel "$work/badkernel.plan" 60 \
  "rank 1 \(device 1\) failed: .*kernel gpt.mlp.F does not fit region L1.attn" \
  "rank 0: stopping because rank 1 \(device 1\) failed: .*does not fit region L1.attn"
run noalloc "$work/noalloc.plan" 60 \
  "rank 1 \(device 1\) failed: step 1: .*gpt.attn.F .*is not live" \
  "rank 0: stopping because rank 1 \(device 1\) failed: step 1: .*is not live.*; this rank's streams stand at .*\[stream p2p: .*posted"
# both ranks are stuck; whichever watchdog fires first asks the other, which answers (so no rank
# is named as stopped), and tells it
run watchdog "$work/badtag.plan" 3 \
  "rank ([01]) \(device \1\) failed: step 1: device \1: nothing progressed for 3 s .*(recv s=p2p peer=0 tag=999999|send s=p2p peer=1 tag=[0-9]+)" \
  "every rank answers, so none has stopped: the plans do not match.*where each stands: rank [01]: step 1, \[stream" \
  "^piper-exec: rank 0[ :]" "^piper-exec: rank 1[ :]"
[ $fails -eq 0 ] && echo "failures.sh: every failure ended with the rank and cause named"
exit $fails
