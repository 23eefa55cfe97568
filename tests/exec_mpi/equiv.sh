#!/usr/bin/env bash
# equiv.sh — one equivalence test of piper-exec: a program run distributed computes the same
# training as a single-device reference. Compiles both programs (tests/exec_mpi/programs/),
# runs the reference on 1 rank and the program on N ranks through tests/mpirun.sh for 5 steps
# with the same seed, and checks with exec_compare that the loss trajectories match, that every
# gradient the optimizer steps see in step 1 equals the reference's (per-tensor relative norm),
# and that every parameter after step 5 does (tensors whose gradient is zero in exact arithmetic
# left out under AdamW, which turns rounding noise into full steps).
# Tolerances (relative, per tensor): in fp32, 1e-5 for losses and step-1 gradients (the issue's
# bar) and for parameters after SGD steps, 1e-4 for parameters after 5 AdamW steps (AdamW divides
# by the square root of the second moment, which amplifies a summation order's rounding ~40x in
# 5 steps; the same runs in fp64 agree to 1e-13, so nothing but rounding is being tolerated);
# with --dtype fp64, 1e-10 for everything.
# From the environment (the fused-collective tests, which also compare a program with itself
# unfused on as many ranks): EQUIV_REF_RANKS, the reference's ranks (default 1); EQUIV_TOL, one
# tolerance for all three checks instead of the above (0: bit for bit); EQUIV_RUN_COMPILE,
# piper-compile options for RUN, read from SOURCE_DIR (a bare Piper array's --model, --cluster,
# --global-batch).
#   usage: equiv.sh BUILD_DIR SOURCE_DIR NAME REF.yaml RUN.yaml NRANKS [piper-exec options...]
set -euo pipefail
build="$1" src="$2" name="$3" ref="$4" run="$5" n="$6"
shift 6
work="$build/tests/exec_mpi/work/$name"
rm -rf "$work"
mkdir -p "$work"
progs="$src/tests/exec_mpi/programs"
"$build/piper-compile" -q "$progs/$ref" -o "$work/ref.plan"
read -r -a run_compile <<< "${EQUIV_RUN_COMPILE:-}"
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
compiler="$(abs "$build/piper-compile")" runprog="$(abs "$progs/$run")" runplan="$(abs "$work/run.plan")"
(cd "$src" && "$compiler" -q "$runprog" "${run_compile[@]}" -o "$runplan")
opts=(--steps 5 --seed 7 --timeout 120 -q "$@")
tol=1e-5 ptol=1e-4
case " $* " in *" sgd "*) ptol=1e-5 ;; esac
case " $* " in *" fp64 "*) tol=1e-10 ptol=1e-10 ;; esac
[ -n "${EQUIV_TOL:-}" ] && tol="$EQUIV_TOL" ptol="$EQUIV_TOL"
for side in ref run; do
  np="${EQUIV_REF_RANKS:-1}"
  extra=()
  # EQUIV_RUN_OPTS: options for the distributed side only (negative.sh)
  [ "$side" = run ] && np="$n" && read -r -a extra <<< "${EQUIV_RUN_OPTS:-}"
  echo "== $side: $np rank(s): piper-exec $side.plan ${opts[*]} ${extra[*]}"
  "$src/tests/mpirun.sh" "$np" "$build/piper-exec" "$work/$side.plan" "${opts[@]}" "${extra[@]}" \
    --log "$work/$side.log" --dump-grads "$work/$side" --dump-params "$work/$side"
done
cmp="$build/tests/exec_mpi/exec_compare"
skip=(--skip-zero-grads "$work/ref")
case " $* " in *" sgd "*) skip=() ;; esac
rc=0
"$cmp" losses "$work/ref.log" "$work/run.log" --tol "$tol" || rc=1
"$cmp" grads "$work/ref" "$work/run" --tol "$tol" || rc=1
"$cmp" params "$work/ref" "$work/run" --tol "$ptol" "${skip[@]}" || rc=1
exit $rc
