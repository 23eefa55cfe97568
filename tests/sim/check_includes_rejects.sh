#!/usr/bin/env bash
# check_includes_rejects.sh — tests/check_includes.sh must fail on each layering breach it exists
# to catch, and pass on the tree as it is: it copies the checked modules into a scratch folder,
# breaks one rule at a time and expects exit 1 with the offending file named.
#   usage: tests/sim/check_includes_rejects.sh SOURCE_DIR
set -euo pipefail
src="${1:?usage: check_includes_rejects.sh SOURCE_DIR}"
check="$src/tests/check_includes.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-includes.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

fresh() { rm -rf "$tmp/t" && mkdir -p "$tmp/t" && for m in base plan ir sched sim exec viz; do cp -r "$src/$m" "$tmp/t/"; done; }

# expect MODULE NEEDLE WHAT: check_includes.sh on MODULE fails and names NEEDLE
expect() {
  local out rc=0
  out=$("$check" "$tmp/t" "$1" 2>&1) || rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qF "$2" <<< "$out"; then
    echo "check_includes_rejects: $3: expected exit 1 naming '$2', got exit $rc:"
    sed 's/^/    /' <<< "$out"
    fail=1
  fi
}

fresh
for m in plan ir sim exec; do
  "$check" "$tmp/t" "$m" > /dev/null || { echo "check_includes_rejects: the pristine copy fails for $m/"; fail=1; }
done

fresh; sed -i '1a #include "../sched/sched.h"' "$tmp/t/sim/replay.c"
expect sim "sim/replay.c:2: includes \"../sched/sched.h\"" "a sim/ library file includes the compiler"

fresh; sed -i '1a #include "../sim/sim.h"' "$tmp/t/exec/interp.c"
expect exec "exec/interp.c:2: includes \"../sim/sim.h\"" "an exec/ library file includes the simulator"

fresh; sed -i '1a #include "../ir/ir.h"' "$tmp/t/sim/piper_sim.c"
expect sim "sim/piper_sim.c:2: includes \"../ir/ir.h\"" "piper-sim's main includes more than the compiler's contract"

fresh; sed -i 's/^target_link_libraries(piper_sim PUBLIC /target_link_libraries(piper_sim PUBLIC piper_sched /' "$tmp/t/sim/CMakeLists.txt"
expect sim "piper_sim links piper_sched" "the simulator library links the compiler"

fresh; sed -i 's/^target_link_libraries(piper_exec PUBLIC /target_link_libraries(piper_exec PUBLIC piper_sim /' "$tmp/t/exec/CMakeLists.txt"
expect exec "piper_exec links piper_sim" "the executor library links the simulator"

fresh; sed -i 's/^target_link_libraries(piper-exec PRIVATE /target_link_libraries(piper-exec PRIVATE piper_sched /' "$tmp/t/exec/CMakeLists.txt"
expect exec "piper-exec links piper_sched" "piper-exec links the compiler"

[ "$fail" -eq 0 ] && echo "check_includes_rejects: every breach is caught, the tree passes"
exit "$fail"
