#!/usr/bin/env bash
# viz_dag_bounded.sh — the README's plan figure (one ZeRO-3 device of GPT 7.5B, micro-batches
# merged: 335 instructions whose F-to-B data edges span the step) must be drawn in seconds, with
# every instruction in it: dot alone took 20 minutes over it (ctest `viz_dag_bounded`).
# usage: tests/docs/viz_dag_bounded.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/piper-vizdag.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$build/piper-compile" -q "$src/configs/programs/zero3.yaml" -o "$work/z3.plan"
t0=$(date +%s)
if ! timeout 30 "$build/piper-viz" dag "$work/z3.plan" --device 0 --collapse mb -o "$work/dev0.svg"; then
  echo "piper-viz dag z3.plan --device 0 --collapse mb: failed or took over 30 s" >&2
  exit 1
fi
echo "drawn in $(( $(date +%s) - t0 )) s"
nodes=$(grep -c '<g id="n[0-9]*" class="node' "$work/dev0.svg" || true)
[ "$nodes" -eq 335 ] || { echo "dev0.svg has $nodes instruction nodes; expected 335" >&2; exit 1; }
grep -q 'class="cluster"' "$work/dev0.svg" || { echo "dev0.svg draws no cluster box (GPU 0)" >&2; exit 1; }
grep -q '<g id="legend&#45;F"' "$work/dev0.svg" || { echo "dev0.svg has no legend" >&2; exit 1; }
echo "dev0.svg: $nodes instruction nodes, GPU 0's box and the legend"
