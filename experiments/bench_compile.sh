#!/usr/bin/env bash
# bench_compile.sh — how long compiling and checking a large program takes, and how much memory:
# GPT-3 175B on 1,024 H100s (TP8 x PP8 x DP16, ZeRO-1, full recompute, 96 micro-batches) by
# default, or any program given as $1. Prints wall time and peak RSS of piper-compile (the whole
# pipeline: load, DAG, directives, ordering, lowering, deadlock and memory check) and of writing
# the plan file. Target (issue 2): at most 10 s and 4 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
program=${1:-configs/programs/gpt3_175b_1024.yaml}
[ -x build/piper-compile ] || scripts/setup.sh
runs=${RUNS:-3}
echo "program: $program"
for mode in check write; do
  best=""
  for i in $(seq "$runs"); do
    args=(-q)
    [ "$mode" = write ] && args+=(-o /tmp/piper-bench.plan)
    out=$( { /usr/bin/time -f "%e %M" build/piper-compile "$program" "${args[@]}" >/dev/null; } 2>&1 | tail -1)
    secs=${out% *}
    kb=${out#* }
    if [ -z "$best" ] || awk "BEGIN{exit !($secs < ${best% *})}"; then best="$secs $kb"; fi
  done
  printf '%-6s best of %d: wall %6.2f s   peak RSS %7.1f MiB\n' "$mode" "$runs" "${best% *}" \
    "$(awk "BEGIN{print ${best#* }/1024}")"
done
[ -f /tmp/piper-bench.plan ] && printf 'plan file: %s lines, %.1f MiB\n' \
  "$(wc -l < /tmp/piper-bench.plan)" "$(awk "BEGIN{print $(stat -c %s /tmp/piper-bench.plan)/1048576}")"
