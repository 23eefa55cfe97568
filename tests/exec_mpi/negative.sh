#!/usr/bin/env bash
# negative.sh — the equivalence check can fail: a run whose learning rate differs slightly from
# the reference's has the same step-1 gradients (they precede the first update) but different
# losses from step 2 on and different parameters, and exec_compare must say exactly that.
#   usage: negative.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
out="$build/tests/exec_mpi/work/negative.out"
mkdir -p "$(dirname "$out")"
EQUIV_RUN_OPTS="--lr 0.0011" bash "$src/tests/exec_mpi/equiv.sh" "$build" "$src" negative \
  gpt_single.yaml gpt_dp2.yaml 2 > "$out" 2>&1
rc=$?
ok=1
[ $rc -ne 0 ] || { echo "negative.sh: the comparison passed a different run"; ok=0; }
grep -q "^losses: .*: FAIL" "$out" || { echo "negative.sh: losses were not flagged"; ok=0; }
grep -q "^grads: .*: ok" "$out" || { echo "negative.sh: step-1 gradients should still agree"; ok=0; }
grep -q "^params: .*: FAIL" "$out" || { echo "negative.sh: parameters were not flagged"; ok=0; }
if [ $ok -eq 1 ]; then
  grep -E "^(losses|grads|params):" "$out"
  echo "negative.sh: a 10% different learning rate is caught"
  exit 0
fi
cat "$out"
exit 1
