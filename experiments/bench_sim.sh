#!/usr/bin/env bash
# bench_sim.sh — how fast piper-sim simulates one training step, from 8 to 16,384 GPUs (GPT-style
# programs with TP, PP and DP, and GPT-3 175B and Llama 3 405B from 1,024 to 16,384 GPUs), on one
# core (taskset -c 0 when available): for each case, the compile's wall and CPU seconds, the
# simulation's (piper-sim alone, on a compiled plan, --no-check: the compiler checked it), the
# simulated activities (executions and transfers), activities per CPU second, the peak RSS, how
# many data-parallel replicas were folded, and the ratio of piper-sim's activity rate to that of
# bare-sim (experiments/bare_sim/bare_sim.c: a bare SimGrid program running the same numbers of
# executions and transfers on the same numbers of actors and hosts). Issue 16's targets: the
# 512-GPU GPT-3 175B step (TP4 PP16 DP8, configs/programs/gpt3_175b_512.yaml) under 3 s of CPU at
# 0.8 or more of bare-sim's rate, and 16,384 GPUs end to end under 60 s of CPU and 1 GiB.
#   usage: experiments/bench_sim.sh [BUILD_DIR] [--unfolded] [--max-gpus N]
#   (default build dir: build)
#   --unfolded    also simulate the cases up to 512 GPUs with --no-fold, to show what folding saves
#   --max-gpus N  only the cases of at most N GPUs (compiling 16,384 GPUs takes minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=build
unfolded=0
max_gpus=16384
while [ $# -gt 0 ]; do
  case "$1" in
    --unfolded) unfolded=1 ;;
    --max-gpus) max_gpus=$2; shift ;;
    *) build=$1 ;;
  esac
  shift
done
for t in piper-compile piper-sim bare-sim; do
  [ -x "$build/$t" ] || { echo "bench_sim.sh: $build/$t is missing; build piper first" >&2; exit 1; }
done
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
work=$(mktemp -d "${TMPDIR:-/tmp}/piper-bench-sim-XXXXXX")
trap 'rm -rf "$work"' EXIT

# A cluster of N nodes of 8 H100s (configs/clusters/h100_1024.yaml's links).
cluster() { # name nodes
  sed -e "s/^name: .*/name: $1/" -e "s/^nodes: .*/nodes: $2/" "$root/configs/clusters/h100_1024.yaml" > "$work/$1.yaml"
}

# A GPT program: model tp pp dp global micro recompute(full|none) cluster zero -> $work/NAME.yaml.
# Devices: tp + TP * (dp + DP * pp), as Megatron numbers them.
program() { # name model tp pp dp global micro recompute cluster zero
  local name=$1 model=$2 tp=$3 pp=$4 dp=$5 global=$6 micro=$7 rc=$8 cl=$9 zero=${10}
  local m=$((global / (micro * dp))) f="$work/$name.yaml"
  {
    echo "model: $root/configs/models/$model.yaml"
    echo "cluster: $cl.yaml"
    echo "batch: {global: $global, micro: $micro}"
    echo "optimizer: {name: adamw, grad_clip: 1.0}"
    echo "annotations: {pp: $pp$([ "$tp" -gt 1 ] && echo ', tp: true')}"
    echo "directives:"
    echo "  - {op: split, filter: {}, num_microbatches: $m}"
    [ "$rc" = full ] && echo "  - {op: recompute, filter: {}, mode: full}"
    for ((s = 0; s < pp; s++)); do
      local lo=$((s * tp * dp))
      echo "  - {op: place, filter: {PP: $s}, devices: \"$lo-$((lo + tp * dp - 1))\"}"
      [ "$tp" -gt 1 ] && echo "  - {op: shard_tensor, filter: {PP: $s, TP: \"*\"}, devices: \"$lo-$((lo + tp - 1))\", sequence_parallel: true}"
      if [ "$dp" -gt 1 ]; then
        local devs=$lo
        for ((k = 1; k < dp; k++)); do devs="$devs,$((lo + tp * k))"; done
        echo "  - {op: replicate, filter: {PP: $s}, devices: [$devs], zero: $zero, bucket_size: 100MB}"
      fi
    done
    [ "$pp" -gt 1 ] && echo "  - {op: schedule, name: 1f1b}"
  } > "$f"
}

cluster h100_8 1
cluster h100_64 8
# GPT-3 175B and Llama 3 405B at TP8 PP16 and DP 8, 32, 128 (1,024, 4,096, 16,384 GPUs), with the
# same micro-batches per replica at every size, so that folding leaves the same work to simulate
for dp in 8 32 128; do
  gpus=$((8 * 16 * dp))
  cluster "h100_$gpus" $((gpus / 8))
  program "gpt3_$gpus" gpt3_175b 8 16 "$dp" $((96 * dp)) 1 full "h100_$gpus" 1
  program "llama3_$gpus" llama3_405b 8 16 "$dp" $((32 * dp)) 1 full "h100_$gpus" 1
done
program gpu8 gpt_1.7b 2 2 2 64 2 none h100_8 0
program gpu64 gpt_18.4b 8 4 2 256 2 full h100_64 1
cp "$root/configs/programs/gpt3_175b_512.yaml" "$work/gpu512.yaml"
sed -i -e "s#^model: .*#model: $root/configs/models/gpt3_175b.yaml#" -e "s#^cluster: .*#cluster: $root/configs/clusters/h100_512.yaml#" "$work/gpu512.yaml"

# CPU seconds (user + sys) and peak RSS of a command, from /usr/bin/time: "TIME wall cpu kib"
timed() { # out-file command...
  local out=$1
  shift
  { /usr/bin/time -f "TIME %e %U %S %M" "${pin[@]}" "$@" > "$out.stdout"; } 2> "$out"
}
field() { awk -v k="$2" '/^TIME/{if (k == "wall") print $2; else if (k == "cpu") printf "%.2f", $3 + $4; else printf "%.0f", $5 / 1024}' "$1"; }

printf '%-6s %-40s %8s %8s %8s %8s %10s %10s %7s %6s %6s\n' GPUs case comp_cpu comp_wall sim_cpu sim_wall \
  activities act/cpu_s RSS_MiB folded bare
run_case() { # name gpus description [extra piper-sim args]
  local name=$1 gpus=$2 what=$3
  shift 3
  [ "$gpus" -le "$max_gpus" ] || return 0
  local plan="$work/$name.plan"
  if [ ! -f "$plan" ]; then
    timed "$work/$name.compile" "$build/piper-compile" -q --allow-oom "$work/$name.yaml" -o "$plan"
  fi
  timed "$work/$name.sim" "$build/piper-sim" "$plan" -q --no-check --json "$work/$name.json" "$@"
  local err="$work/$name.sim" acts execs xfers actors hosts cpu rate
  acts=$(sed -n 's/.*piper-sim: \([0-9]*\) simulated activities.*/\1/p' "$err")
  execs=$(sed -n 's/.*; \([0-9]*\) executions, \([0-9]*\) transfers, \([0-9]*\) actors.*/\1/p' "$err")
  xfers=$(sed -n 's/.*; \([0-9]*\) executions, \([0-9]*\) transfers, \([0-9]*\) actors.*/\2/p' "$err")
  actors=$(sed -n 's/.*; \([0-9]*\) executions, \([0-9]*\) transfers, \([0-9]*\) actors.*/\3/p' "$err")
  hosts=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['fold']['simulated_devices'])" "$work/$name.json")
  cpu=$(field "$err" cpu)
  rate=$(awk -v a="$acts" -v c="$cpu" 'BEGIN{printf "%.0f", (c > 0 ? a / c : 0)}')
  # the yardstick: bare SimGrid on the same shape
  timed "$work/$name.bare" "$build/bare-sim" "$hosts" "$actors" "$execs" "$xfers"
  local bacts bcpu ratio
  bacts=$(sed -n 's/^bare-sim: \([0-9]*\) activities.*/\1/p' "$work/$name.bare.stdout")
  bcpu=$(field "$work/$name.bare" cpu)
  ratio=$(awk -v a="$acts" -v c="$cpu" -v b="$bacts" -v d="$bcpu" 'BEGIN{printf "%.2f", (c > 0 && b > 0 && d > 0 ? (a / c) / (b / d) : 0)}')
  local folded
  folded=$(python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['fold']; print('%dx' % f['replicas'] if f['replicas'] > 1 else 'no')" "$work/$name.json")
  printf '%-6s %-40s %8s %8s %8s %8s %10s %10s %7s %6s %6s\n' "$gpus" "$what$([ $# -gt 0 ] && echo " $*")" \
    "$(field "$work/$name.compile" cpu)" "$(field "$work/$name.compile" wall)" "$cpu" "$(field "$err" wall)" \
    "$acts" "$rate" "$(field "$err" rss)" "$folded" "$ratio"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('       step %.3f s, MFU %.1f %%; bare-sim %s activities in %s s CPU' % (j['step_seconds'], 100 * j['mfu'], sys.argv[2], sys.argv[3]))" \
    "$work/$name.json" "$bacts" "$bcpu"
}
run_case gpu8 8 "GPT 1.7B TP2 PP2 DP2, m=16"
run_case gpu64 64 "GPT 18.4B TP8 PP4 DP2, m=64, recompute"
run_case gpu512 512 "GPT-3 175B TP4 PP16 DP8, m=96, recompute"
for dp in 8 32 128; do
  gpus=$((8 * 16 * dp))
  run_case "gpt3_$gpus" "$gpus" "GPT-3 175B TP8 PP16 DP$dp, m=96, recompute"
  run_case "llama3_$gpus" "$gpus" "Llama 3 405B TP8 PP16 DP$dp, m=32, recomp."
done
if [ "$unfolded" = 1 ]; then
  for c in "gpu8 8 GPT_1.7B" "gpu64 64 GPT_18.4B" "gpu512 512 GPT-3_175B"; do
    set -- $c
    run_case "$1" "$2" "$3" --no-fold
  done
fi
