#!/usr/bin/env bash
# check.sh — the GPU check of piper's CUDA backend: the script to run whenever a GPU is lent.
# It runs binaries built on the build machine (tests/gpu/bundle.sh), because the GPU machine is
# bare, and finishes in under 5 minutes on one GPU. Every result is written as soon as it is
# known, to $OUT when that variable is set, else to the folder named by --out, else to
# ./gpu-check-<time>:
#   env.txt      the GPU, driver and bundle
#   kernels.txt  (a) each CUDA kernel against the fp32 CPU kernels, with tolerances
#   runtime.txt  (b) 10 training steps on one GPU through the plan runtime (piper-exec-cuda)
#                against piper-exec's losses, computed on the build machine
#   train.txt    (b) 10 training steps of the regions chained by check_kernels, CPU vs GPU
#   bench.txt    (c) qwen3_1b's kernels timed: TFLOP/s against the GPU's peak, next to
#                piper-sim's prediction made on the build machine
#   step.txt     (d) a qwen3_1b training step through the plan runtime: step time, tokens/s, MFU,
#                peak memory, next to piper-sim's prediction of the same plan
#   summary.txt  one line per part
#
#   on the build machine:  tests/gpu/check.sh --dry-run [--build DIR] [--no-build]
#       builds (cmake, in DIR, default build-cuda) unless --no-build, bundles into
#       DIR/gpu-bundle, checks that the bundle starts (no GPU is touched) and lists what the GPU
#       run would do. ctest runs it with --no-build.
#   on the GPU machine:    tests/gpu/check.sh [--bundle DIR] [--out DIR]
#       with the bundle carried (default build-cuda/gpu-bundle).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

dry=0 build_it=1 build="" bundle="" outdir="${OUT:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --no-build) build_it=0 ;;
    --build) build="$2"; shift ;;
    --bundle) bundle="$2"; shift ;;
    --out) [ -n "${OUT:-}" ] || outdir="$2"; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
build="${build:-$root/build-cuda}"
bundle="${bundle:-$build/gpu-bundle}"
if [ -z "$outdir" ]; then
  if [ $dry = 1 ]; then outdir="$build/gpu-check-dry-run"; else outdir="$PWD/gpu-check-$(date +%Y%m%d-%H%M%S)"; fi
fi
mkdir -p "$outdir"
summary="$outdir/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

# Time limits of the GPU run's parts (seconds): under 5 minutes together, with room for startup.
T_KERNELS=90 T_RUNTIME=30 T_TRAIN=30 T_BENCH=80 T_STEP=50

if [ $dry = 1 ]; then
  echo "== check.sh --dry-run: build, bundle, list (nothing runs on a GPU)"
  if [ $build_it = 1 ]; then
    [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
    targets="piper-compile"
    grep -q "^built" "$build/cuda_backend.txt" 2>/dev/null && targets="$targets check_kernels piper-exec-cuda"
    cmake --build "$build" --target $targets piper-exec gpu_predict piper-sim -j"$(nproc)" >/dev/null || exit 1
  fi
  status="$(cat "$build/cuda_backend.txt" 2>/dev/null || echo "unknown: $build is not configured")"
  note "CUDA backend: $status"
  case "$status" in
    built*) ;;
    *) note "dry run: nothing to bundle (the CUDA backend is not built in $build); the GPU run would need a build with it"
       bash -n "$here/bundle.sh" && bash -n "$0" || exit 1
       exit 0 ;;
  esac
  bash "$here/bundle.sh" "$build" "$bundle" > "$outdir/bundle.txt" 2>&1 || { cat "$outdir/bundle.txt"; note "bundle: FAILED"; exit 1; }
  note "bundle: $bundle ($(du -sh "$bundle" | cut -f1))"
  # the bundle starts here: its libraries resolve and the binary runs (--list touches no GPU)
  if PIPER_BUNDLE_TMP="$outdir/lib" "$bundle/run" check_kernels --list > "$outdir/list.txt" 2>&1; then
    note "bundle starts: check_kernels --list ran through the wrapper"
  else
    cat "$outdir/list.txt"; note "bundle: check_kernels does not start"; exit 1
  fi
  if PIPER_BUNDLE_TMP="$outdir/lib" "$bundle/run" piper-exec-cuda --help > "$outdir/runtime_help.txt" 2>&1; then
    note "bundle starts: piper-exec-cuda --help ran through the wrapper (no MPI, no NCCL needed)"
  else
    cat "$outdir/runtime_help.txt"; note "bundle: piper-exec-cuda does not start"; exit 1
  fi
  for f in "$bundle"/data/prediction_*.tsv "$bundle"/data/train_*.cpu.log; do
    [ -e "$f" ] || { note "the bundle lacks $f (piper-sim's prediction or the CPU's losses)"; exit 1; }
  done
  echo "== on a GPU machine, with $bundle carried, check.sh would run (in order, each part with its time limit):"
  echo "   env:      nvidia-smi, nvcc --version, the bundle's MANIFEST                    -> env.txt"
  echo "   (a) ${T_KERNELS}s: run check_kernels --kernels                                      -> kernels.txt"
  sed 's/^/        /' "$outdir/list.txt"
  for f in "$bundle"/data/train_*.plan; do
    g="$(basename "$f" .plan)"
    echo "   (b) ${T_RUNTIME}s: run piper-exec-cuda data/$g.plan $(cat "$bundle/data/train_options.txt") vs data/$g.cpu.log -> runtime.txt"
  done
  echo "       ${T_TRAIN}s: run check_kernels --train (regions chained by the check, CPU vs GPU) -> train.txt"
  for f in "$bundle"/data/prediction_*.tsv; do
    g="$(basename "$f" .tsv)"; g="${g#prediction_}"
    echo "   (c) ${T_BENCH}s on a $g: run check_kernels --bench data/qwen3_1b_$g.plan data/prediction_$g.tsv -> bench.txt"
    grep -E "^(step_seconds|tokens_per_second|mfu|peak_bytes)" "$f" | sed 's/^/          predicted /'
    echo "   (d) ${T_STEP}s on a $g: run piper-exec-cuda data/qwen3_1b_$g.plan --steps 4 (step 4 measured) -> step.txt"
  done
  note "dry run: passed (results in $outdir)"
  exit 0
fi

# ---------------------------------------------------------------- the GPU run
start=$(date +%s)
if [ ! -x "$bundle/run" ]; then
  note "no bundle at $bundle: build one on the build machine (tests/gpu/check.sh --dry-run) and carry it"
  exit 1
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>/dev/null | tail -2 || echo "nvcc: not on PATH"
  cat "$bundle/MANIFEST"
} > "$outdir/env.txt" 2>&1
cat "$outdir/env.txt"
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
case "$gpu_name" in
  *H200*) gpu=H200 ;;
  *H100*|*H800*) gpu=H100 ;;
  *A100*) gpu=A100-80GB ;;
  *) gpu=H200 ;;
esac
fail=0

part() { # name, seconds, file, command...
  local name="$1" secs="$2" file="$3"; shift 3
  echo "== $name (limit ${secs}s)" | tee -a "$outdir/$file"
  timeout --kill-after=10 "$secs" "$@" 2>&1 | tee -a "$outdir/$file"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) note "$name: passed ($(grep -c '^  ok' "$outdir/$file") checks)";;
    124|137) note "$name: TIMED OUT after ${secs}s (results so far in $file)"; fail=1 ;;
    *) note "$name: FAILED (exit $rc; $(grep -c '^  FAIL' "$outdir/$file") failed checks in $file)"; fail=1 ;;
  esac
}

part "(a) kernels vs CPU" $T_KERNELS kernels.txt "$bundle/run" check_kernels --kernels

# (b) the plan runtime against the CPU executor's losses (computed on the build machine)
runtime_train() {
  local rc=0 f g
  for f in "$bundle"/data/train_*.plan; do
    g="$(basename "$f" .plan)"
    # shellcheck disable=SC2046
    if ! "$bundle/run" piper-exec-cuda "$f" $(cat "$bundle/data/train_options.txt") --log "$outdir/$g.cuda.log" \
         --trace "$outdir/$g.trace.json"; then
      echo "  FAIL $g: piper-exec-cuda failed"; rc=1; continue
    fi
    awk -v name="$g" -v tol=2e-2 -v steps=10 -f "$bundle/compare_losses.awk" "$bundle/data/$g.cpu.log" \
      "$outdir/$g.cuda.log" || rc=1
  done
  return $rc
}
# the parts below run under timeout, which runs programs: the functions go through bash -c
export -f runtime_train
export bundle outdir
if [ -x "$bundle/bin/piper-exec-cuda" ]; then
  part "(b) plan runtime (piper-exec-cuda) vs CPU" $T_RUNTIME runtime.txt bash -c runtime_train
else
  note "(b) the bundle has no piper-exec-cuda: the plan runtime is not checked"; fail=1
fi
part "(b) kernel-chain training vs CPU" $T_TRAIN train.txt "$bundle/run" check_kernels --train
if [ -e "$bundle/data/prediction_$gpu.tsv" ]; then
  part "(c) qwen3_1b kernels on $gpu_name vs piper-sim ($gpu)" $T_BENCH bench.txt \
    "$bundle/run" check_kernels --bench "$bundle/data/qwen3_1b_$gpu.plan" "$bundle/data/prediction_$gpu.tsv"
else
  note "(c) no prediction for $gpu in the bundle"; fail=1
fi

# (d) a qwen3_1b step through the plan runtime, next to piper-sim's prediction of the same plan
runtime_step() {
  local pred="$bundle/data/prediction_$gpu.tsv" log="$outdir/qwen3_1b.cuda.log"
  "$bundle/run" piper-exec-cuda "$bundle/data/qwen3_1b_$gpu.plan" --steps 4 --memory --log "$log" \
    --trace "$outdir/qwen3_1b.trace.json" || { echo "  FAIL piper-exec-cuda failed on qwen3_1b"; return 1; }
  awk -v gpu="$gpu_name" '
    FNR == 1 { f++ }
    f == 1 && $1 == "step_seconds" { ps = $2 } f == 1 && $1 == "tokens_per_second" { pt = $2 }
    f == 1 && $1 == "mfu" { pm = $2 } f == 1 && $1 == "peak_bytes" { pp = $2 }
    f == 2 && !/^#/ { s = $6; t = $7; m = $9; p = $10; r = $11; q = $13 }
    END {
      printf "     qwen3_1b step on %s    measured (step 4)   piper-sim\n", gpu
      printf "     step time             %10.1f ms      %10.1f ms   (measured / predicted %.2f)\n", s * 1e3, ps * 1e3, s / ps
      printf "     tokens/s              %10.0f         %10.0f\n", t, pt
      printf "     MFU                   %10.1f %%       %10.1f %%\n", 100 * m, 100 * pm
      printf "     peak memory           %10.2f GiB     %10.2f GiB   (asked of the allocator: every buffer the plan sizes)\n", q / 2^30, pp / 2^30
      printf "                           %10.2f GiB                    (handed out in size classes; %.2f GiB reserved from cudaMalloc)\n", p / 2^30, r / 2^30
      if (s > 0) printf "  ok   qwen3_1b: a training step ran through the plan runtime\n"; else { printf "  FAIL no step time\n"; exit 1 }
    }' "$pred" "$log"
}
export -f runtime_step
export gpu gpu_name
if [ -x "$bundle/bin/piper-exec-cuda" ] && [ -e "$bundle/data/prediction_$gpu.tsv" ]; then
  part "(d) qwen3_1b step (piper-exec-cuda) vs piper-sim ($gpu)" $T_STEP step.txt bash -c runtime_step
fi
note "total: $(( $(date +%s) - start ))s; results in $outdir"
exit $fail
