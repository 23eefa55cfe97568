#!/bin/sh
# compile_examples.sh — every example program in configs/programs/ must compile: piper-compile
# exits 0 (plans built, deadlock-free, within memory). usage: compile_examples.sh PIPER_COMPILE DIR
set -u
compile=$1
dir=$2
n=0
failed=0
for prog in "$dir"/*.yaml "$dir"/*.json; do
  [ -e "$prog" ] || continue
  n=$((n + 1))
  if ! "$compile" -q "$prog"; then
    echo "FAIL: piper-compile $prog exited with status $?" >&2
    failed=$((failed + 1))
  fi
done
if [ "$n" -eq 0 ]; then
  echo "FAIL: no programs in $dir" >&2
  exit 1
fi
echo "$n programs, $failed failed"
[ "$failed" -eq 0 ]
