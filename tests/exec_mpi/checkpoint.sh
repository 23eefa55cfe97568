#!/usr/bin/env bash
# checkpoint.sh — piper-exec's --save / --resume (exec/README.md, "Checkpoints"):
#   1. resuming is exact: under DP2 ZeRO-1, PP2 (the head stage's copy of the tied token table and
#      its optimizer state) and DP2 ZeRO-3, 5 steps straight and 2 steps + --save + --resume + 3
#      steps end with the same parameters bit for bit (the dumps print every value with 17
#      digits, and must be byte-identical) and the same losses and gradient norms in steps 3-5;
#   2. a checkpoint loads under another strategy of the same model: DP2 ZeRO-1 saved after step 2
#      and resumed as PP2 for 3 steps, PP2 saved and resumed as TP2, and the MoE model saved
#      under EP2 and resumed under TP2, against the uninterrupted
#      single-device run. The resumed steps sum gradients in another order than the reference,
#      so fp32 agrees to rounding only: the tolerances of equiv.sh (1e-5 for losses, 1e-4 for
#      parameters after AdamW steps, key biases left out: their gradient is zero in exact
#      arithmetic and AdamW turns its rounding noise into full steps); the same runs in fp64 agree
#      to 1e-10, which shows that nothing but rounding is being tolerated;
#   4. periodic checkpoints (--save-every 2, 5 steps under DP2 ZeRO-1): DIR/step-000002,
#      step-000004 and step-000005, DIR/latest names step-000005; resuming DIR/step-000002 for 3
#      steps ends bit for bit where the straight run does, and resuming DIR itself continues after
#      step 5; with --keep 2 (--save-every 1) exactly step-000004 and step-000005 are left, and
#      saving step 5 again over them replaces it (no .partial left, the same bytes);
#   3. bad checkpoints fail on every rank with a message naming the cause: no directory, a
#      directory without a checkpoint, no manifest, a truncated manifest, a missing, truncated or
#      corrupt shard, a shard left out of the manifest (elements missing), a manifest whose step
#      or seed was edited (each shard's header disagrees, the field named), a latest naming
#      something else, the format of an older piper-exec, another model, another seed, another
#      optimizer, other data; bad --save-every and --keep values; a save on a full disk (ENOSPC
#      named with the shard's path, the previous checkpoint untouched); and a bad --data source.
#      (checkpoint_kill.sh kills saves mid-write.)
# PART runs 1 and 2 (resume) or 3 (errors), so that ctest runs them as two tests of a
# sanitizer-friendly length; default: all.
#   usage: checkpoint.sh BUILD_DIR SOURCE_DIR [resume|errors|all]
set -uo pipefail
build="$1" src="$2" part="${3:-all}"
work="$build/tests/exec_mpi/work/checkpoint_$part"
rm -rf "$work"
mkdir -p "$work"
progs="$src/tests/exec_mpi/programs"
exe="$build/piper-exec"
cmpx="$build/tests/exec_mpi/exec_compare"
mpi() { local n="$1"; shift; timeout 120 "$src/tests/mpirun.sh" "$n" "$exe" "$@"; }
for p in gpt_single gpt_zero1 gpt_zero3 gpt_pp2 gpt_tp2 gpt4_single moe_single moe_ep2 moe_tp2; do
  "$build/piper-compile" -q "$progs/$p.yaml" -o "$work/$p.plan" || exit 1
done
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# the deterministic columns of a --log (step loss ce aux grad_norm), steps >= $2
cols() { awk -v s="$2" '!/^#/ && $1 >= s {print $1, $2, $3, $4, $5}' "$1"; }

# 1. exact resumption
[ "$part" = errors ] && exact_cases="zero1:2" || exact_cases="zero1:2 pp2:2 zero3:2"
for s in $exact_cases; do
  p="gpt_${s%%:*}" n="${s##*:}" d="$work/exact_$p"
  mkdir -p "$d"
  common=(--seed 7 -q --timeout 60)
  mpi "$n" "$work/$p.plan" --steps 5 "${common[@]}" --log "$d/straight.log" --dump-params "$d/straight" > /dev/null &&
    mpi "$n" "$work/$p.plan" --steps 2 "${common[@]}" --log "$d/first.log" --save "$d/ck" > /dev/null &&
    mpi "$n" "$work/$p.plan" --steps 3 -q --timeout 60 --resume "$d/ck" --log "$d/resumed.log" \
      --dump-params "$d/resumed" > /dev/null || { fail "$p: a run failed"; continue; }
  ok=1
  for k in $(seq 0 $((n - 1))); do
    cmp -s "$d/straight/params.dev$k.txt" "$d/resumed/params.dev$k.txt" || { ok=0; fail "$p: device $k's parameters after step 5 differ"; }
  done
  [ "$(cols "$d/straight.log" 3)" = "$(cols "$d/resumed.log" 3)" ] || { ok=0; fail "$p: steps 3-5 differ in loss or norm"; }
  [ "$(cols "$d/straight.log" 1 | head -2)" = "$(cols "$d/first.log" 1)" ] || { ok=0; fail "$p: steps 1-2 differ"; }
  [ "$(cols "$d/resumed.log" 1 | wc -l)" = 3 ] || { ok=0; fail "$p: the resumed run did not run steps 3-5"; }
  [ $ok = 1 ] && echo "ok   exact resumption under ${p#gpt_}: parameters bit for bit, losses of steps 3-5 equal"
done

# 2. another strategy: reference 5 steps on one device; save under A after 2, resume under B for 3
cross() { # NAME DTYPE TOL PTOL SAVE_PLAN SAVE_N RESUME_PLAN RESUME_N [REFERENCE_PLAN]
  local name="$1" dt="$2" tol="$3" ptol="$4" d="$work/cross_$1" ref="${9:-gpt_single}"
  mkdir -p "$d"
  local o=(--seed 7 -q --timeout 60 --dtype "$dt")
  mpi 1 "$work/$ref.plan" --steps 5 "${o[@]}" --log "$d/ref.log" --dump-params "$d/ref" \
    --dump-grads "$d/ref" > /dev/null &&
    mpi "$6" "$work/$5.plan" --steps 2 "${o[@]}" --save "$d/ck" > /dev/null &&
    mpi "$8" "$work/$7.plan" --steps 3 -q --timeout 60 --dtype "$dt" --resume "$d/ck" \
      --log "$d/run.log" --dump-params "$d/run" > /dev/null || { fail "$name: a run failed"; return; }
  cols "$d/ref.log" 3 > "$d/ref3.log"
  cols "$d/run.log" 3 > "$d/run3.log"
  if "$cmpx" losses "$d/ref3.log" "$d/run3.log" --tol "$tol" > "$d/losses.out" &&
     "$cmpx" params "$d/ref" "$d/run" --tol "$ptol" --skip-zero-grads "$d/ref" > "$d/params.out"; then
    echo "ok   $name: $(tail -1 "$d/losses.out" | cut -c1-60)...; $(tail -1 "$d/params.out" | sed 's/.*worst/worst/')"
  else
    fail "$name"
    cat "$d/losses.out" "$d/params.out" 2>/dev/null | sed 's/^/    /'
  fi
}
if [ "$part" != errors ]; then
cross zero1_to_pp2 fp32 1e-5 1e-4 gpt_zero1 2 gpt_pp2 2
cross zero1_to_pp2_fp64 fp64 1e-10 1e-10 gpt_zero1 2 gpt_pp2 2
cross pp2_to_tp2_fp64 fp64 1e-10 1e-10 gpt_pp2 2 gpt_tp2 2
# MoE: experts split over two ranks (EP2) saved, resumed with every expert TP-split (TP2)
cross moe_ep2_to_tp2_fp64 fp64 1e-10 1e-10 moe_ep2 2 moe_tp2 2 moe_single
fi
# 4. periodic checkpoints
if [ "$part" != errors ]; then
  d="$work/every" straight="$work/exact_gpt_zero1"
  mkdir -p "$d"
  if mpi 2 "$work/gpt_zero1.plan" --steps 5 --seed 7 -q --timeout 60 --save "$d/ck" --save-every 2 > /dev/null &&
     mpi 2 "$work/gpt_zero1.plan" --steps 3 -q --timeout 60 --resume "$d/ck/step-000002" --dump-params "$d/resumed" > /dev/null &&
     mpi 2 "$work/gpt_zero1.plan" --steps 1 --timeout 60 --resume "$d/ck" --log "$d/after.log" > "$d/after.out"; then
    ok=1
    for s in step-000002 step-000004 step-000005; do [ -f "$d/ck/$s/manifest.txt" ] || { ok=0; fail "save-every: no $s/manifest.txt"; }; done
    [ "$(ls "$d/ck" | tr '\n' ' ')" = "latest step-000002 step-000004 step-000005 " ] ||
      { ok=0; fail "save-every: DIR holds $(ls "$d/ck" | tr '\n' ' ')"; }
    [ "$(cat "$d/ck/latest")" = step-000005 ] || { ok=0; fail "save-every: latest is '$(cat "$d/ck/latest")', not step-000005"; }
    for k in 0 1; do
      cmp -s "$straight/straight/params.dev$k.txt" "$d/resumed/params.dev$k.txt" ||
        { ok=0; fail "save-every: device $k's parameters after step2 + 3 steps differ from 5 straight steps"; }
    done
    grep -q "resumed from $d/ck/step-000005 after step 5" "$d/after.out" && [ "$(cols "$d/after.log" 1 | cut -d' ' -f1)" = 6 ] ||
      { ok=0; fail "save-every: resuming the directory did not continue after step 5"; sed 's/^/    /' "$d/after.out"; }
    [ $ok = 1 ] && echo "ok   save-every 2: step-000002, 4, 5 written, latest = step-000005; step 2 + 3 steps bit for bit; DIR resumes at step 6"
  else
    fail "save-every: a run failed"
  fi
  # --keep 2: the two newest stay; a step saved again replaces its directory whole
  if mpi 2 "$work/gpt_zero1.plan" --steps 5 --seed 7 -q --timeout 60 --save "$d/keep" --save-every 1 --keep 2 > /dev/null; then
    [ "$(ls -A "$d/keep" | tr '\n' ' ')" = "latest step-000004 step-000005 " ] && [ "$(cat "$d/keep/latest")" = step-000005 ] &&
      cmp -s "$d/keep/step-000005/shard.dev0.bin" "$d/ck/step-000005/shard.dev0.bin" &&
      echo "ok   keep 2: exactly step-000004 and step-000005 left, latest = step-000005, the same shards as without --keep" ||
      fail "keep 2: DIR holds $(ls -A "$d/keep" | tr '\n' ' '), latest $(cat "$d/keep/latest")"
    cp "$d/keep/step-000005/manifest.txt" "$d/manifest5"
    if mpi 2 "$work/gpt_zero1.plan" --steps 5 --seed 7 -q --timeout 60 --save "$d/keep" --keep 2 > /dev/null; then
      [ "$(ls -A "$d/keep" | tr '\n' ' ')" = "latest step-000004 step-000005 " ] && cmp -s "$d/manifest5" "$d/keep/step-000005/manifest.txt" &&
        echo "ok   saving step 5 again replaces step-000005 (the same manifest), nothing else left" ||
        fail "re-save: DIR holds $(ls -A "$d/keep" | tr '\n' ' ')"
    else
      fail "re-save: the run failed"
    fi
  else
    fail "keep: a run failed"
  fi
fi
[ "$part" = resume ] && { [ $fails -eq 0 ] && echo "checkpoint.sh resume: all cases pass"; exit $((fails > 0)); }

# 3. bad checkpoints: every case fails, on every rank, naming the cause
good="$work/exact_gpt_zero1/ck"
bad() { # NAME PATTERN CHECKPOINT_DIR [piper-exec options]
  local name="$1" pat="$2" ck="$3"
  shift 3
  mpi 2 "$work/gpt_zero1.plan" --steps 1 -q --timeout 30 --resume "$ck" "$@" > "$work/$name.out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE -- "$pat" "$work/$name.out" &&
     grep -q "rank 1.*failed\|rank 1: stopping because" "$work/$name.out"; then
    echo "ok   $name (exit $rc): $(grep -m1 -E -- "$pat" "$work/$name.out" | cut -c1-150)"
  else
    fail "$name (exit $rc); output:"
    sed 's/^/    /' "$work/$name.out"
  fi
}
# each case edits a copy of the --save directory; S names its step directory
S=step-000002
copy() { rm -rf "$work/$1"; cp -r "$good" "$work/$1"; }
bad no_dir "no such checkpoint directory" "$work/nowhere"
mkdir -p "$work/empty_dir"
bad empty_dir "empty_dir: no checkpoint here: neither manifest.txt nor latest" "$work/empty_dir"
copy no_manifest; rm "$work/no_manifest/$S/manifest.txt"
bad no_manifest "the checkpoint is incomplete" "$work/no_manifest"
copy short_manifest; head -n 5 "$good/$S/manifest.txt" > "$work/short_manifest/$S/manifest.txt"
bad short_manifest "manifest.txt:6:1: the manifest is truncated" "$work/short_manifest"
copy no_shard; rm "$work/no_shard/$S/shard.dev1.bin"
bad no_shard "shard.dev1.bin: cannot read.*lacks a shard" "$work/no_shard"
copy short_shard; head -c 1000 "$good/$S/shard.dev1.bin" > "$work/short_shard/$S/shard.dev1.bin"
bad short_shard "shard.dev1.bin: 1000 bytes where the manifest says" "$work/short_shard"
copy corrupt; printf '\x55' | dd of="$work/corrupt/$S/shard.dev0.bin" bs=1 seek=5000 conv=notrunc 2> /dev/null
bad corrupt "shard.dev0.bin: checksum mismatch" "$work/corrupt"
copy one_shard; grep -v 'shard.dev1' "$good/$S/manifest.txt" | sed 's/^shards 2/shards 1/' > "$work/one_shard/$S/manifest.txt"
bad one_shard "holds no value for element [0-9]+ of .*the checkpoint is incomplete" "$work/one_shard"
# an edited manifest is refused by every shard's own header, naming the field
copy edited_step; sed -i 's/^step 2$/step 7/' "$work/edited_step/$S/manifest.txt"
bad edited_step "shard.dev0.bin: the shard records step '2' where .*manifest.txt says '7'; the manifest was edited" "$work/edited_step"
copy edited_seed; sed -i 's/^seed 7$/seed 8/' "$work/edited_seed/$S/manifest.txt"
bad edited_seed "shard.dev0.bin: the shard records seed '7' where .*manifest.txt says '8'; the manifest was edited" "$work/edited_seed"
copy bad_latest; echo ../elsewhere > "$work/bad_latest/latest"
bad bad_latest "latest:1:1: names '../elsewhere', not a step-N directory" "$work/bad_latest"
copy gone_latest; echo step-000009 > "$work/gone_latest/latest"
bad gone_latest "latest:1:1: names step-000009, which is not there" "$work/gone_latest"
copy old_format; sed -i '1s/.*/piper-checkpoint 1/' "$work/old_format/$S/manifest.txt"
bad old_format "manifest.txt:1:1: a checkpoint of format 1 \(an older piper-exec's layout\)" "$work/old_format"
mpi 1 "$work/gpt4_single.plan" --steps 1 -q --save "$work/other_model" > /dev/null || fail "saving gpt4"
bad other_model "another model \(the checkpoint has name=gpt_tiny4? .*where the plan has name=gpt_tiny" "$work/other_model"
bad other_seed "--seed 3, but the checkpoint .* was written with seed 7" "$good" --seed 3
bad other_optimizer "--optimizer sgd, but the checkpoint .* holds adamw state" "$good" --optimizer sgd
bad other_data "trained on data 'synthetic', this run reads 'corpus bytes=[0-9]+'" "$good" --data corpus
# an unwritable --save fails before the first step, on every rank; --save-every needs --save
touch "$work/a_file"
mpi 2 "$work/gpt_zero1.plan" --steps 1 --timeout 30 --save "$work/a_file/ck" > "$work/bad_save.out" 2>&1
if [ $? -eq 1 ] && grep -q "rank 1.*failed: --save .*a_file/ck: cannot create the directory\|rank 1: stopping because rank 0 (device 0) failed: --save .*a_file/ck: cannot create the directory" "$work/bad_save.out" &&
   ! grep -q "^1 " "$work/bad_save.out"; then
  echo "ok   bad_save: $(grep -m1 'cannot create' "$work/bad_save.out" | cut -c1-150)"
else
  fail "bad_save; output:"
  sed 's/^/    /' "$work/bad_save.out"
fi
for args in "--save-every 2" "--save $work/x --save-every 0" "--save $work/x --save-every two" \
            "--keep 2" "--save $work/x --keep 0" "--save $work/x --keep many"; do
  opt="${args##*--}" opt="--${opt%% *}"
  # shellcheck disable=SC2086
  mpi 1 "$work/gpt_zero1.plan" --steps 1 $args > "$work/bad_every.out" 2>&1
  if [ $? -ne 0 ] && grep -q -- "$opt" "$work/bad_every.out"; then
    echo "ok   bad $opt ($args): $(grep -m1 -- "$opt" "$work/bad_every.out" | cut -c1-120)"
  else
    fail "bad $opt ($args); output:"
    sed 's/^/    /' "$work/bad_every.out"
  fi
done
# a full disk: a save that finds no space names the shard's path and ENOSPC, fails the run, and
# leaves the previous checkpoint whole (a 1600 KiB tmpfs holds one checkpoint of 2 x 700 KB; only
# where this user may mount one, as root in CI)
small="$work/small_fs"
mkdir -p "$small"
if mount -t tmpfs -o size=1600k tmpfs "$small" 2> /dev/null; then
  trap 'umount "$small" 2> /dev/null' EXIT
  mpi 2 "$work/gpt_zero1.plan" --steps 2 --seed 7 -q --timeout 60 --save "$small/ck" > /dev/null 2>&1
  cp -r "$small/ck" "$work/small_before"
  mpi 2 "$work/gpt_zero1.plan" --steps 1 -q --timeout 60 --resume "$small/ck" --save "$small/ck" > "$work/full.out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q "failed: $small/ck/step-000003.partial/shard.dev[01].bin: cannot write the checkpoint shard (No space left on device)" "$work/full.out" &&
     [ "$(cat "$small/ck/latest")" = step-000002 ] && diff -r "$work/small_before/step-000002" "$small/ck/step-000002" > /dev/null &&
     [ -z "$(ls -A "$small/ck/step-000003.partial")" ]; then
    echo "ok   disk full (exit $rc): $(grep -m1 'No space' "$work/full.out" | cut -c1-160); step-000002 untouched, no temporary left"
  else
    fail "disk full (exit $rc); output:"
    sed 's/^/    /' "$work/full.out"
    ls -laR "$small" | sed 's/^/    /'
  fi
  umount "$small"
  trap - EXIT
else
  echo "skip disk full: this user cannot mount a small tmpfs"
fi
# a bad --data source stops every rank at start-up, named
mpi 2 "$work/gpt_zero1.plan" --steps 1 -q --data uint16:"$work/nothing.bin" > "$work/bad_data.out" 2>&1
if [ $? -eq 1 ] && grep -q "rank 1: stopping because rank 0 (device 0) failed: --data uint16:.*cannot open" "$work/bad_data.out"; then
  echo "ok   bad_data: $(grep -m1 'cannot open' "$work/bad_data.out" | cut -c1-150)"
else
  fail "bad_data; output:"
  sed 's/^/    /' "$work/bad_data.out"
fi

[ $fails -eq 0 ] && echo "checkpoint.sh: all cases pass" || echo "checkpoint.sh: $fails failures"
exit $((fails > 0))
