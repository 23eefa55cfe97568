#!/usr/bin/env bash
# accounting.sh — no fake sharding: what each rank of piper-exec holds and moves is what its plan
# says. For DP2 with ZeRO-0..3, TP2 (with and without sequence parallelism), PP2, EP2, MoE ZeRO-3,
# full and selective recompute, ZB-H1 (BI/BW split), DualPipeV, DualPipe with MoE, ZeRO-3 over
# TP2 x DP2, TP2 and EP2 with full recompute (recomputes reading each other through copies of the
# collectives), ZeRO-1 with experts on their own EP group (their optimizer state whole) and the
# other compositions, one step with --memory; each rank's accounting line is checked against the
# plan file itself (read here with awk, not through the executor):
#   - parameter bytes held = the bytes of the device's list's `params` buffers;
#   - gradient bytes = the bytes of its `grads` buffers: under ZeRO-2/3 the kept piece of every
#     region plus, per micro-batch, the whole gradient its backward fills and its reduce-scatter
#     consumes (the executor sizes each buffer itself, from the model, not from the plan);
#   - communicated bytes = the sum of `bytes=` of the list's send, recv and coll instructions (a
#     ZeRO collective counts the whole tensor it cuts or assembles, as the plan does; the executor
#     moves no padding);
#   - peak: the executor's measured peak equals the plan's, byte for byte. Every byte it holds
#     is a plan buffer in the kernels' layouts, which are the plan's sizes: activations (the
#     kernels keep exactly the tensors ir/cost.c counts; under recompute F keeps and R rebuilds
#     the plan's split; under sequence parallelism the device's b*s/t tokens of the norm inputs
#     and outputs, the backward reading the others from the plan's all-gather), workspaces (each
#     pass's, ir_region_work_bytes, and what it computes but does not keep), the tensors regions
#     hand each other, and a reduce-scatter's receive buffer. Checked on the "peak composition"
#     line: the executor's peak = its plan buffers then = the plan's live bytes then = the plan's
#     peak, with nothing of its own (boundary slots, work buffers, staging, activations held past
#     the plan's free: all 0).
# The programs are compiled with dtype fp32, the executor's dtype, so bytes compare exactly.
#   usage: accounting.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/accounting"
rm -rf "$work"
mkdir -p "$work"
fails=0
for case in gpt_dp2:2 gpt_zero1:2 gpt_zero2:2 gpt_zero3:2 gpt_tp2:2 gpt_tp2_sp:2 gpt_pp2:2 \
            moe_ep2:2 moe_zero3:2 gpt_pp2_dp2:4 moe_pp2_dp2_ep2:4 gpt_dp2_recompute:2 \
            gpt_dp2_selective:2 moe_dp2_recompute:2 gpt4_pp4_zbh1:4 gpt4_pp2x2_dualpipev:2 \
            gpt_tp2_dp2_zero3:4 moe_pp2_dp2_ep2_dualpipe:4 gpt_tp2_recompute:2 moe_ep2_recompute:2 \
            moe_pp2_dp2_ep2_dualpipe_zero1:4; do
  IFS=: read -r p n <<< "$case"
  plan="$work/$p.plan"
  "$build/piper-compile" -q "$src/tests/exec_mpi/programs/$p.yaml" -o "$plan" || exit 1
  if ! timeout 120 "$src/tests/mpirun.sh" "$n" "$build/piper-exec" "$plan" --steps 1 -q --memory --no-sim \
       --timeout 60 > "$work/$p.out" 2>&1; then
    echo "FAIL $p: piper-exec failed"; sed 's/^/    /' "$work/$p.out"; fails=$((fails + 1)); continue
  fi
  # per device: params, grads and communicated bytes of its list, from the plan file
  awk '/^list /{l=$2} /^devices /{l=""; dev=1}
       l!="" && $1 == "buf" { for (i=3;i<=NF;i++) { if ($i ~ /^bytes=/) { split($i, f, "="); b=f[2] } if ($i == "mem=params") par[l]+=b; if ($i == "mem=grads") grad[l]+=b } }
       l!="" && $2 ~ /^(send|recv|coll)$/ { for (i=3;i<=NF;i++) if ($i ~ /^bytes=/) { split($i, f, "="); comm[l]+=f[2] } }
       dev && $2 ~ /^node=/ { for (i=2;i<=NF;i++) if ($i ~ /^list=/) { split($i, f, "="); print $1, par[f[2]]+0, grad[f[2]]+0, comm[f[2]]+0 } }
      ' "$plan" > "$work/$p.want"
  # "device D accounting, step 1, executor / plan (bytes): params A / B; grads C / D; communicated E / F; peak G / H"
  if awk -v want="$work/$p.want" -v n="$n" '
      BEGIN { while ((getline l < want) > 0) { split(l, f, " "); par[f[1]] = f[2]; grad[f[1]] = f[3]; comm[f[1]] = f[4] } }
      / accounting, / {
        gsub(/[;:]/, " "); d = $2
        for (i = 1; i <= NF; i++) { if ($i == "params") { ep = $(i+1); pp = $(i+3) } if ($i == "grads") { eg = $(i+1); pg = $(i+3) }
                                    if ($i == "communicated") { ec = $(i+1); pc = $(i+3) } if ($i == "peak") { ek = $(i+1); pk = $(i+3) } }
        seen++
        if (ep != par[d] || pp != par[d]) { print "device " d ": params " ep " held, plan file " par[d] " (executor read " pp ")"; bad = 1 }
        if (ec != comm[d] || pc != comm[d]) { print "device " d ": communicated " ec ", plan file " comm[d] " (executor read " pc ")"; bad = 1 }
        if (pg != grad[d]) { print "device " d ": the executor read " pg " gradient bytes, plan file " grad[d]; bad = 1 }
        if (eg != grad[d]) { print "device " d ": grads " eg " held, plan " grad[d]; bad = 1 }
        if (!(pk > 0 && ek == pk)) { print "device " d ": peak " ek ", the plan peak " pk; bad = 1 }
        r = ek / pk; if (r > maxr) maxr = r
        peak[d] = ek; ppeak[d] = pk; if (pk > maxpk) maxpk = pk
      }
      # the composition line: plan buffers A, boundary slots B, kernel work C, other scratch D, kept past the free E, live bytes then F
      / peak composition / {
        line = $0; gsub(/[;:,]/, " "); d = $2
        for (i = 1; i <= NF; i++) { if ($i == "buffers") b = $(i+1); if ($i == "slots") sl = $(i+1); if ($i == "work" && $(i-1) == "kernel") w = $(i+1)
                                    if ($i == "scratch") o = $(i+1); if ($i == "free") k = $(i+1); if ($i == "then") pl = $(i+1) }
        comp++
        if (b != pl) { print "device " d ": at its peak the executor holds " b " bytes of plan buffers, the plan " pl; bad = 1 }
        if (b + sl + w + o + k != peak[d]) { print "device " d ": peak " peak[d] " is not buffers + slots + work + staging + kept (" line ")"; bad = 1 }
        if (sl + w + o + k != 0) { print "device " d ": the executor holds memory of its own at its peak (" line ")"; bad = 1 }
        if (pl > ppeak[d]) { print "device " d ": the plan live bytes " pl " exceed its peak " ppeak[d]; bad = 1 }
        extra = peak[d] - ppeak[d]; if (extra > maxx) maxx = extra
      }
      END { if (seen != n || comp != n) { print seen " accounting and " comp " composition lines for " n " ranks"; bad = 1 }
            if (!bad) printf "params, grads, communicated bytes and peak memory equal the plan on %d ranks (peak up to %d bytes)\n", n, maxpk
            exit bad }' "$work/$p.out" > "$work/$p.check"; then
    echo "ok   $p: $(cat "$work/$p.check")"
  else
    echo "FAIL $p:"; sed 's/^/    /' "$work/$p.check"; sed 's/^/    /' "$work/$p.out"; fails=$((fails + 1))
  fi
done
exit $((fails > 0))
