#!/usr/bin/env bash
# untrusted.sh — piper-exec runs nothing it cannot trust, and says why:
#   a plan that fails the static check (gpt_pp2's first send edited to 16384 bytes, its buffer,
#   alloc and free with it, against the 8192-byte receive on device 1; legal for the reader) is
#   refused on both ranks before the first step, naming the file and both instructions; with
#   --no-check it runs (transfers move the executor's own layouts, which both ends agree on, and
#   a receive checks its count) with a warning;
#   option values outside their stated ranges (--lr inf, --lr 0, --beta1 1, --eps 0, --steps 1.5,
#   --steps 1e20, --seed 2^64) are refused with exit status 2 and the option named;
#   seeds are exact 64-bit integers: 2^53 and 2^53 + 1 train different models, 2^53 twice the same;
#   a learning rate of 1e30 (finite, so accepted) makes the parameters overflow in step 1: step 2
#   stops with the rank, the step, the figure and the first tensor that is not finite named.
#   usage: untrusted.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/untrusted"
rm -rf "$work"
mkdir -p "$work"
exe="$build/piper-exec"
run2() { timeout 120 "$src/tests/mpirun.sh" 2 "$exe" "$@"; }
# one rank, through mpirun.sh too: its LeakSanitizer suppressions cover OpenMPI's own leaks
run1() { timeout 120 "$src/tests/mpirun.sh" 1 "$exe" "$@"; }
fails=0
bad() { echo "FAIL $1"; [ -f "${2:-}" ] && sed 's/^/    /' "$2"; fails=$((fails + 1)); }
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_pp2.yaml" -o "$work/good.plan" || exit 1
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_single.yaml" -o "$work/single.plan" || exit 1

# the first list's first send: its buffer, and every instruction on that buffer, say 16384 bytes
buf=$(awk '/^list /{l++} l == 1 && / send / {sub(/.* buf=/, ""); sub(/ .*/, ""); print; exit}' "$work/good.plan")
awk -v b="$buf" '/^list /{l++}
  l == 1 && ($0 ~ "^  buf " b " " || $0 ~ " buf=" b " ") { sub(/bytes=8192/, "bytes=16384") } {print}' \
  "$work/good.plan" > "$work/lie.plan"
[ "$(diff "$work/good.plan" "$work/lie.plan" | grep -c '^>')" -eq 4 ] || bad "the edit did not change 4 lines"
run2 "$work/lie.plan" --steps 2 -q --no-sim > "$work/lie.out" 2>&1
rc=$?
pat="lie.plan: the plan fails the static check: device 0 \(list 0\) #[0-9]+ send s=p2p peer=1 tag=[0-9]+ mb=0 stage=0: carries 16384 bytes but its counterpart on device 1, #[0-9]+ recv s=p2p peer=0 tag=[0-9]+ mb=0 stage=1, carries 8192 bytes; both sides of a transfer must agree on its size \(.*--no-check"
if [ $rc -eq 0 ] || grep -q "^1 " "$work/lie.out" || [ "$(grep -cE "rank [01].*(failed|stopping).*$pat" "$work/lie.out")" -ne 2 ]; then
  bad "a plan that fails the static check ran or was not refused on both ranks, named (rc $rc)" "$work/lie.out"
else echo "ok   the static check refuses the edited plan on both ranks"; fi
run2 "$work/lie.plan" --steps 1 -q --no-sim --no-check > "$work/nocheck.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "^1 " "$work/nocheck.out" || ! grep -q "warning: --no-check" "$work/nocheck.out"; then
  bad "--no-check did not run the plan with a warning (rc $rc)" "$work/nocheck.out"
else echo "ok   --no-check runs it, with a warning"; fi

# refuse OPTION VALUE MESSAGE: exit status 2 and exactly this message
refuse() {
  local out="$work/opt.out"
  run1 "$work/single.plan" --steps 1 -q --no-sim "$1" "$2" > "$out" 2>&1
  local rc=$?
  if [ $rc -ne 2 ] || ! grep -qF "piper-exec: $3" "$out"; then bad "$1 $2: rc $rc, want 2 and: $3" "$out"
  else echo "ok   $1 $2 refused"; fi
}
refuse --lr inf "--lr: 'inf' is not a finite number; write a learning rate > 0"
refuse --lr 0 "--lr: '0' is not > 0; write a learning rate > 0"
refuse --beta1 1 "--beta1: '1' is not in [0, 1); write a number in [0, 1), e.g. 0.9"
refuse --eps 0 "--eps: '0' is not > 0; write a number > 0, e.g. 1e-8"
refuse --steps 1.5 "--steps: '1.5' is not a whole number; write a whole number of steps from 1 to 1000000"
refuse --steps 1e20 "--steps: '1e20' is not a whole number; write a whole number of steps from 1 to 1000000"
refuse --steps 1000001 "--steps: '1000001' is not a whole number in [1, 1000000]; write a whole number of steps from 1 to 1000000"
refuse --seed 18446744073709551616 "--seed: '18446744073709551616' does not fit in 64 bits; write a whole number from 0 to 18446744073709551615"

# seeds: 2^53 twice gives one loss, 2^53 + 1 another
loss() { run1 "$work/single.plan" --steps 1 -q --no-sim --seed "$1" | awk '$1 == 1 {print $2}'; }
a=$(loss 9007199254740992) b=$(loss 9007199254740992) c=$(loss 9007199254740993)
if [ -z "$a" ] || [ "$a" != "$b" ] || [ "$a" = "$c" ]; then bad "seeds: 2^53 gives '$a' and '$b', 2^53 + 1 gives '$c'"
else echo "ok   seeds 2^53 ($a) and 2^53 + 1 ($c) train differently"; fi

# a finite but absurd learning rate: the run stops at step 2 on the device with the loss
run2 "$work/good.plan" --steps 3 -q --no-sim --lr 1e30 > "$work/nan.out" 2>&1
rc=$?
pat="rank 1 \(device 1\) failed: step 2: the loss on device 1 is -?nan, not a finite number; the parameter of [A-Za-z0-9.]+, element [0-9]+ of its block on this device, is -?nan; the run stops rather than train on it: lower --lr"
if [ $rc -eq 0 ] || ! grep -qE "$pat" "$work/nan.out" || grep -q "^3 " "$work/nan.out"; then
  bad "--lr 1e30: not stopped at step 2 with the tensor named (rc $rc)" "$work/nan.out"
else echo "ok   a loss that is not finite stops the run, naming rank, step and tensor"; fi
[ $fails -eq 0 ] && echo "untrusted.sh: every untrusted plan, option and number was refused"
exit $fails
