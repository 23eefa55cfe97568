#!/usr/bin/env bash
# runtime_emulated_mpi.sh — the CUDA plan runtime's communication without GPUs: piper-exec-cuda
# built over the CPU emulator of the kernels and NCCL emulated over MPI (emu/nccl_mpi.c) runs
# multi-device plans under tests/mpirun.sh, one emulated GPU per rank, and its losses (and the
# gradient norm where the plan computes one) must match the CPU executor's on the same plan:
#   gpt_dp2_clip          data parallelism: gradient buckets, the norm's sum, clipping
#   gpt_zero1_clip        ZeRO-1 and ZeRO-2 with clipping: gradients reduce-scattered in pieces
#   gpt_zero2_clip        through a staging buffer (ZeRO-2: each micro-batch's piece added into
#                         the kept one), the norm over each device's pieces and the plan's
#                         all-reduce of the scalar, the optimizer step on the piece, parameters
#                         all-gathered back
#   gpt_zero3, moe_zero3  ZeRO-3: parameters held as the device's piece, gathered per pass into
#                         the plan's comm buffers (GPT: the head's gather carries the tied token
#                         table), the update on the piece
#   gpt_tp2_dp2_zero3     ZeRO-3 over TP2 x DP2 on 4 ranks (_clip: with clipping): the gathers
#     (and _clip)         on a stream of their own beside the TP all-reduces (compute stream)
#                         and the gradient syncs and reduce-scatters (dp stream), so three
#                         streams carry collectives at once; these caught the emulator blocking
#                         the host on one stream's transfer (emu.h: streams are queues)
#   gpt_tp2_clip          tensor parallelism with clipping: TP gradient sums, the norm over
#                         shards (replicated tensors counted once)
#   gpt_tp2_sp            tensor + sequence parallelism: reduce-scatter / all-gather of
#                         activations, TP gradient sums, the head's vocabulary-parallel reductions
#   gpt_tp2_fuse          fused collectives (fuse_collectives): each TP region's all-reduces
#   gpt_tp2_sp_fuse       (_sp_: reduce-scatters and all-gathers) of the 4 micro-batches as one
#                         collective of 4 pieces inside one NCCL group
#   moe_ep2               expert parallelism: all-to-all
#   gpt_pp2_clip          a pipeline with tied embeddings: the last stage's copy of the token
#                         table, summed with the embedding's over the tied pair; p2p; clipping
#   gpt4_pp2x2_dualpipev  a pipeline (two stages per device): p2p on two-rank communicators,
#                         sendrecv groups between group start and end
# This exercises what a one-GPU run cannot: the communicator keys and ncclCommSplit, peer ranks,
# grouping, the world communicator's unique id over the MPI boot shim (libpiper_boot_mpi.so).
# 3 steps each (the emulator is slow); tolerances as runtime_emulated.sh (2e-2, step 1 1e-4).
#   usage: runtime_emulated_mpi.sh BUILD_DIR PIPER_EXEC_CUDA_EMU
set -euo pipefail
build="$1" emu="$2"
src="$(cd "$(dirname "$0")/../.." && pwd)"
work="$build/tests/exec_cuda/runtime_emulated_mpi"
rm -rf "$work"
mkdir -p "$work"
export PIPER_BOOT_MPI="$build/libpiper_boot_mpi.so"
rc=0
for prog in gpt_dp2_clip gpt_zero1_clip gpt_zero2_clip gpt_zero3 moe_zero3 gpt_tp2_dp2_zero3 \
            gpt_tp2_dp2_zero3_clip gpt_tp2_clip gpt_tp2_sp gpt_tp2_fuse gpt_tp2_sp_fuse moe_ep2 \
            gpt_pp2_clip gpt4_pp2x2_dualpipev; do
  "$build/piper-compile" -q "$src/tests/exec_mpi/programs/$prog.yaml" -o "$work/$prog.plan"
  # one rank per device that has work: the devices the program's directives name
  np="$(awk '$1 == "list" && /instrs=/ { n = $0; sub(/.*instrs=/, "", n); work[$2] = n + 0 }
             $1 == "devices" { in_dev = 1; next }
             in_dev && /list=/ { l = $0; sub(/.*list=/, "", l); sub(/ .*/, "", l); if (work[l] > 0) c = $1 + 1 }
             END { print c }' "$work/$prog.plan")"
  opts=(--steps 3 --seed 3 --lr 3e-3 --grad-clip 1 --timeout 120 -q)
  "$src/tests/mpirun.sh" "$np" "$build/piper-exec" "$work/$prog.plan" "${opts[@]}" --log "$work/$prog.cpu.log" > /dev/null
  if ! "$src/tests/mpirun.sh" "$np" "$emu" "$work/$prog.plan" "${opts[@]}" --log "$work/$prog.cuda.log" \
       > "$work/$prog.cuda.out" 2>&1; then
    cat "$work/$prog.cuda.out"; echo "$prog: piper-exec-cuda (emulated) failed"; rc=1; continue
  fi
  awk -v name="$prog" -v tol=2e-2 -v tol1=1e-4 -v steps=3 -f "$src/tests/gpu/compare_losses.awk" \
    "$work/$prog.cpu.log" "$work/$prog.cuda.log" || rc=1
done
exit $rc
