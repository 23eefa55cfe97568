#!/usr/bin/env bash
# bench_sim.sh — how fast piper-sim simulates one training step, from 8 to 4,096 GPUs (GPT-style
# programs with TP, PP and DP), on one core (taskset -c 0 when available): for each case, the
# compile time, the simulation's wall time (piper-sim alone, on a compiled plan), the number of
# simulated activities (executions and transfers), activities per second, the peak RSS, and how
# many data-parallel replicas were folded. Issue 3's target: the 512-GPU GPT-3 175B step (TP4 PP16
# DP8, global batch 1,536, micro-batch 2, full recompute: configs/programs/gpt3_175b_512.yaml) in
# under 30 s on one core.
#   usage: experiments/bench_sim.sh [BUILD_DIR] [--unfolded]   (default build dir: build)
#   --unfolded   also simulate every case with --no-fold, to show what folding saves
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=build
unfolded=0
for a in "$@"; do
  case "$a" in
    --unfolded) unfolded=1 ;;
    *) build=$a ;;
  esac
done
for t in piper-compile piper-sim; do
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
cluster h100_4096 512
program gpu8 gpt_1.7b 2 2 2 64 2 none h100_8 0
program gpu64 gpt_18.4b 8 4 2 256 2 full h100_64 1
program gpu4096 gpt3_175b 8 16 32 3072 1 full h100_4096 1
cp "$root/configs/programs/gpt3_175b_512.yaml" "$work/gpu512.yaml"
sed -i -e "s#^model: .*#model: $root/configs/models/gpt3_175b.yaml#" -e "s#^cluster: .*#cluster: $root/configs/clusters/h100_512.yaml#" "$work/gpu512.yaml"

printf '%-8s %-44s %9s %9s %12s %12s %10s %8s\n' GPUs case compile_s sim_s activities act_per_s peak_RSS folded
run_case() { # name gpus description [extra piper-sim args]
  local name=$1 gpus=$2 what=$3
  shift 3
  local plan="$work/$name.plan"
  if [ ! -f "$plan" ]; then
    local t0 t1
    t0=$(date +%s.%N)
    "$build/piper-compile" -q --allow-oom "$work/$name.yaml" -o "$plan"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b - a}' > "$work/$name.compile"
  fi
  local out
  out=$( { /usr/bin/time -f "TIME %e %M" "${pin[@]}" "$build/piper-sim" "$plan" -q --no-check --json "$work/$name.json" "$@" >/dev/null; } 2>&1)
  local wall rss acts rate folded
  wall=$(echo "$out" | awk '/^TIME/{print $2}')
  rss=$(echo "$out" | awk '/^TIME/{printf "%.0f MiB", $3/1024}')
  acts=$(echo "$out" | sed -n 's/.*piper-sim: \([0-9]*\) simulated activities.*/\1/p')
  rate=$(awk -v a="$acts" -v w="$wall" 'BEGIN{printf "%.0f", (w > 0 ? a / w : 0)}')
  folded=$(python3 -c "import json,sys; f=json.load(open(sys.argv[1]))['fold']; print('%dx' % f['replicas'] if f['replicas'] > 1 else 'no')" "$work/$name.json")
  printf '%-8s %-44s %9.2f %9.2f %12s %12s %10s %8s\n' "$gpus" "$what$([ $# -gt 0 ] && echo " $*")" \
    "$(cat "$work/$name.compile")" "$wall" "$acts" "$rate" "$rss" "$folded"
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('         step %.3f s, MFU %.1f %%' % (j['step_seconds'], 100 * j['mfu']))" "$work/$name.json"
}
run_case gpu8 8 "GPT 1.7B TP2 PP2 DP2, m=16"
run_case gpu64 64 "GPT 18.4B TP8 PP4 DP2, m=64, recompute"
run_case gpu512 512 "GPT-3 175B TP4 PP16 DP8, m=96, recompute"
run_case gpu4096 4096 "GPT-3 175B TP8 PP16 DP32, m=96, recompute"
if [ "$unfolded" = 1 ]; then
  for c in "gpu8 8 GPT_1.7B" "gpu64 64 GPT_18.4B" "gpu512 512 GPT-3_175B"; do
    set -- $c
    run_case "$1" "$2" "$3" --no-fold
  done
fi
