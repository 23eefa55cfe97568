#!/bin/sh
# regen.sh — rewrites the golden plans tests/golden/NAME.plan from their programs
# tests/fixtures/sched/NAME.yaml (every golden_*.yaml there) with piper-compile.
# Review `git diff tests/golden` before committing: a changed golden plan is a change in what
# the compiler emits, and each line of the diff must be one you intended.
# usage: tests/golden/regen.sh [BUILD_DIR]     (default: build-tests at the repository root)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-tests}
for prog in "$root"/tests/fixtures/sched/golden_*.yaml; do
  name=$(basename "$prog" .yaml)
  "$build/piper-compile" -q -o "$root/tests/golden/$name.plan" "$prog"
  echo "wrote tests/golden/$name.plan"
done
