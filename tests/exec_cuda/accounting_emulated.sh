#!/usr/bin/env bash
# accounting_emulated.sh — a GPU holds what piper-sim predicts: the CUDA plan runtime over the
# CPU emulator of its kernels (piper-exec-cuda-emu, one emulated GPU per MPI rank) runs two steps
# of bf16 plans with --memory, and on every rank
#   - every memory category of its buffers (params, grads, optimizer, activations, comm,
#     workspace) holds exactly the plan's bytes: parameters bf16, gradients fp32 (the programs say
#     grad_dtype: fp32, as the CUDA backend and Megatron's bf16 training accumulate them), the
#     optimizer state the fp32 master copy and AdamW's moments of the device's piece, the act
#     buffers what F keeps (ir_region_activation_bytes at bf16), the workspaces
#     ir_region_work_bytes at bf16;
#   - the peak of the bytes asked of the caching allocator during step 1 equals the peak of the
#     plan's own buffer sizes over the same run's allocations and frees, byte for byte: nothing is
#     allocated outside the plan's buffers, nor in other sizes.
# The programs are the CPU executor's test programs (tests/exec_mpi/programs) compiled as
# `dtype: bf16, grad_dtype: fp32` over the models of tests/exec_cuda/models: flash attention (the
# CUDA attention keeps the log-sum-exp, not the s x s probabilities) and no dropout (the CUDA
# kernels regenerate masks from their counters where the cost model keeps a byte per element).
# Under recompute (full, selective, and full from the previous region's recompute) F keeps and R
# rebuilds the plan's split of the layout, and the losses of two steps equal, bit for bit, those
# of the same program without recompute (R reproduces F exactly, so the backward reads the same
# tensors). Under sequence parallelism each device keeps its rows of the norm inputs and outputs
# and the backward reads the plan's all-gather of them; its losses equal TP2's without it bit for
# bit too (two ranks: a reduce-scatter and an all-reduce add the same two numbers). A fused
# collective's pieces (fuse_collectives, one NCCL group) take no memory beyond the plan's
# buffers, and moe_tp2 fused computes what it computes unfused bit for bit (untied: fusion keeps
# every summation order).
#   usage: accounting_emulated.sh BUILD_DIR PIPER_EXEC_CUDA_EMU
set -uo pipefail
build="$1" emu="$2"
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$build/tests/exec_cuda/accounting_emulated"
rm -rf "$work"
mkdir -p "$work"
models="$src/tests/exec_cuda/models"
export PIPER_BOOT_MPI="$build/libpiper_boot_mpi.so" # the MPI boot shim beside the build's binaries
fails=0 checked=0
for case in gpt_single:1:gpt_tiny_flash gpt_dp2:2:gpt_tiny_flash gpt_zero1:2:gpt_tiny_flash \
            gpt_zero2:2:gpt_tiny_flash gpt_zero3:2:gpt_tiny_flash gpt_tp2:2:gpt_tiny_flash \
            gpt_pp2:2:gpt_tiny_flash gpt_pp2_dp2:4:gpt_tiny_flash gpt_tp2_dp2_zero3:4:gpt_tiny_flash \
            gpt4_pp4_zbh1:4:gpt_tiny4_flash moe_single:1:moe_tiny_flash moe_ep2:2:moe_tiny_flash \
            moe_zero3:2:moe_tiny_flash gpt_dp2_recompute:2:gpt_tiny_flash:gpt_dp2 \
            gpt_dp2_selective:2:gpt_tiny_flash:gpt_dp2 gpt_tp2_recompute:2:gpt_tiny_flash:gpt_tp2 \
            moe_dp2:2:moe_tiny_flash moe_dp2_recompute:2:moe_tiny_flash:moe_dp2 \
            moe_ep2_recompute:2:moe_tiny_flash:moe_ep2 gpt_tp2_sp:2:gpt_tiny_flash:gpt_tp2 \
            moe_pp2_dp2_ep2_dualpipe_zero1:4:moe_tiny_flash moe_tp2:2:moe_tiny_flash \
            moe_tp2_fuse:2:moe_tiny_flash:moe_tp2; do
  IFS=: read -r p n model ref <<< "$case"
  prog="$work/$p.yaml" plan="$work/$p.plan" out="$work/$p.out"
  sed 's/^dtype: fp32$/dtype: bf16\ngrad_dtype: fp32/' "$src/tests/exec_mpi/programs/$p.yaml" > "$prog"
  if ! grep -q '^grad_dtype: fp32$' "$prog"; then
    echo "FAIL $p: the program does not say dtype: fp32"; fails=$((fails + 1)); continue
  fi
  if ! "$build/piper-compile" -q "$prog" --model "$models/$model.yaml" \
       --cluster "$src/configs/clusters/cpu_8.yaml" -o "$plan" > "$out" 2>&1; then
    echo "FAIL $p: piper-compile"; sed 's/^/    /' "$out"; fails=$((fails + 1)); continue
  fi
  if [ "$n" -eq 1 ]; then
    launch=("$emu")
  else
    launch=("$src/tests/mpirun.sh" "$n" "$emu")
  fi
  if ! timeout 300 "${launch[@]}" "$plan" --steps 2 --memory --timeout 120 --log "$work/$p.log" \
       > "$out" 2>&1; then
    echo "FAIL $p: piper-exec-cuda-emu"; sed 's/^/    /' "$out"; fails=$((fails + 1)); continue
  fi
  # "device D buffers, plan / CUDA runtime (bytes): params A / B; grads ...; ..." and
  # "device D accounting, step 1, CUDA runtime / plan (bytes): peak X / Y (allocator ...)"
  # the losses of a recompute program against its reference's (run earlier in this list)
  if [ -n "${ref:-}" ]; then
    if ! cmp -s <(awk '!/^#/ { print $1, $2 }' "$work/$ref.log") <(awk '!/^#/ { print $1, $2 }' "$work/$p.log"); then
      echo "FAIL $p: its losses differ from $ref's (recompute must reproduce the forward bit for bit)"
      paste "$work/$ref.log" "$work/$p.log" | awk '!/^#/ { print "    " $2, $15 }'
      fails=$((fails + 1)); continue
    fi
    echo "ok $p: 2 steps' losses equal $ref's bit for bit"
  fi
  if awk -v n="$n" -v name="$p" '
      / buffers, plan \/ CUDA runtime \(bytes\):/ {
        d = $2; line = $0; sub(/^.*CUDA runtime \(bytes\): /, "", line); sub(/ \(parameters.*$/, "", line)
        k = split(line, parts, ";")
        for (i = 1; i <= k; i++) {
          if (parts[i] !~ /\//) continue
          split(parts[i], ab, "/"); a = ab[1]; b = ab[2]; gsub(/^ +| +$/, "", a); gsub(/^ +| +$/, "", b)
          cat = a; sub(/ .*$/, "", cat); sub(/^[a-z]+ /, "", a)
          if (a != b) { printf "device %s %s: plan %s, CUDA runtime %s\n", d, cat, a, b; bad = 1 }
        }
        cats++
      }
      / accounting, step 1,/ {
        d = $2; for (i = 1; i <= NF; i++) if ($i == "peak") { got = $(i+1); want = $(i+3) }
        if (got != want) { printf "device %s: peak asked of the allocator %s bytes, plan peak %s\n", d, got, want; bad = 1 }
        if (got + 0 > max) max = got + 0
        peaks++
      }
      END {
        if (cats != n || peaks != n) { printf "%d buffer lines and %d accounting lines for %d ranks\n", cats, peaks, n; bad = 1 }
        if (!bad) printf "ok %s: every memory category and the peak (%d bytes) equal the plan on %d rank%s\n", name, max, n, (n > 1 ? "s" : "")
        exit bad
      }' "$out"; then
    checked=$((checked + 1))
  else
    echo "FAIL $p ($out)"; fails=$((fails + 1))
  fi
done
# a plan that counts what these kernels do not keep (s x s attention probabilities, dropout
# masks: gpt_tiny as the zoo has it) is read, and --memory says why its activations differ
prog="$work/not_flash.yaml"
sed 's/^dtype: fp32$/dtype: bf16\ngrad_dtype: fp32/' "$src/tests/exec_mpi/programs/gpt_single.yaml" > "$prog"
if "$build/piper-compile" -q "$prog" --model "$src/configs/models/gpt_tiny.yaml" \
     --cluster "$src/configs/clusters/cpu_8.yaml" -o "$work/not_flash.plan" > "$work/not_flash.out" 2>&1 &&
   "$emu" "$work/not_flash.plan" --check --memory >> "$work/not_flash.out" 2>&1 &&
   grep -q "activation bytes more than this runtime: .*flash_attention: true. and no dropout" "$work/not_flash.out"; then
  echo "ok a plan without flash attention: --memory says why its activations differ"
else
  echo "FAIL a plan without flash attention: no explanation of the difference"; sed 's/^/    /' "$work/not_flash.out"
  fails=$((fails + 1))
fi
# sequence parallelism with recompute is refused at open, with what to change (as piper-exec)
prog="$work/sp_recompute.yaml"
sed -e 's/^dtype: fp32$/dtype: bf16\ngrad_dtype: fp32/' \
    -e 's/^directives:$/directives:\n  - {op: recompute, filter: {REGION: attn}, mode: full}/' \
    "$src/tests/exec_mpi/programs/gpt_tp2_sp.yaml" > "$prog"
if "$build/piper-compile" -q "$prog" --model "$models/gpt_tiny_flash.yaml" \
     --cluster "$src/configs/clusters/cpu_8.yaml" -o "$work/sp_recompute.plan" > "$work/sp_recompute.out" 2>&1 &&
   ! "$emu" "$work/sp_recompute.plan" --check --device 0 >> "$work/sp_recompute.out" 2>&1 &&
   grep -q "sequence-parallel and recomputed; .*drop the recompute or sequence_parallel" "$work/sp_recompute.out"; then
  echo "ok sequence parallelism with recompute is refused with what to change"
else
  echo "FAIL sequence parallelism with recompute: no clear refusal"; sed 's/^/    /' "$work/sp_recompute.out"
  fails=$((fails + 1))
fi
echo "CUDA accounting: $checked programs equal their plans, $fails failed"
[ "$fails" -eq 0 ]
