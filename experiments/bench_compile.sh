#!/usr/bin/env bash
# bench_compile.sh — how long compiling and checking a large program takes, and how much memory:
# GPT-3 175B on 1,024 H100s (TP8 x PP8 x DP16, ZeRO-1, full recompute, 96 micro-batches) by
# default, or any program given as $1. Prints CPU seconds (user + sys: the machine is shared, so
# wall time is noise), wall seconds and peak RSS of piper-compile (the whole pipeline: load, DAG,
# directives, ordering, lowering, deadlock and memory check), with the check over one device per
# replica class (the default), over every device (--check-all-devices), without it (--no-check),
# and writing the plan file. Target (issue 16): under 2 s of CPU and 1 GiB at 1,024 GPUs, check
# included.
set -euo pipefail
cd "$(dirname "$0")/.."
program=${1:-configs/programs/gpt3_175b_1024.yaml}
[ -x build/piper-compile ] || scripts/setup.sh
runs=${RUNS:-3}
echo "program: $program"
for mode in check all-devices no-check write; do
  best=""
  for i in $(seq "$runs"); do
    args=(-q)
    case "$mode" in
      all-devices) args+=(--check-all-devices) ;;
      no-check) args+=(--no-check) ;;
      write) args+=(-o /tmp/piper-bench.plan) ;;
    esac
    out=$( { /usr/bin/time -f "%U %S %e %M" build/piper-compile "$program" "${args[@]}" >/dev/null; } 2>&1 | tail -1)
    read -r user sys wall kb <<< "$out"
    cpu=$(awk "BEGIN{print $user + $sys}")
    if [ -z "$best" ] || awk "BEGIN{exit !($cpu < ${best%% *})}"; then best="$cpu $wall $kb"; fi
  done
  read -r cpu wall kb <<< "$best"
  printf '%-11s best of %d: CPU %6.2f s   wall %6.2f s   peak RSS %7.1f MiB\n' "$mode" "$runs" "$cpu" "$wall" \
    "$(awk "BEGIN{print $kb/1024}")"
done
[ -f /tmp/piper-bench.plan ] && printf 'plan file: %s lines, %.1f MiB\n' \
  "$(wc -l < /tmp/piper-bench.plan)" "$(awk "BEGIN{print $(stat -c %s /tmp/piper-bench.plan)/1048576}")"
