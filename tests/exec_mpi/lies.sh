#!/usr/bin/env bash
# lies.sh — a plan whose stated roles disagree with its instructions is refused, naming the
# instruction, rather than run some other way: piper-exec binds buffers and collectives by the
# roles and purposes the plan states (exec/bind.c) and checks them against the instructions'
# shapes. gpt_zero3's plan is edited once per case (the first match, in every list), each edit
# legal for the reader (a role of the buffer's memory category, a purpose of the collective's
# kind), and the run must fail at start-up on both ranks with the cause named:
#   a zero3_gather that says it is a zero_update_gather (the gathered buffer then has no filler);
#   a ZeRO-3 parameter piece that says it is whole parameters (role params);
#   a forward's saved activations that say they are recomputed;
#   a buffer and a collective that state nothing (none: the binding does not guess).
#   usage: lies.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/lies"
rm -rf "$work"
mkdir -p "$work"
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_zero3.yaml" -o "$work/good.plan" || exit 1
fails=0
# lie CASE FROM TO PATTERN: replace the first FROM of each list by TO; the run must fail, and
# both ranks' output match PATTERN
lie() {
  local name="$1" from="$2" to="$3" pat="$4"
  awk -v a="$from" -v b="$to" '/^list /{done=0} !done && index($0, a) {sub(a, b); done=1} {print}' \
    "$work/good.plan" > "$work/$name.plan"
  if cmp -s "$work/good.plan" "$work/$name.plan"; then
    echo "FAIL $name: the edit changed nothing"; fails=$((fails + 1)); return
  fi
  timeout 120 "$src/tests/mpirun.sh" 2 "$build/piper-exec" "$work/$name.plan" --steps 1 -q --no-sim \
    > "$work/$name.out" 2>&1
  local rc=$? ok=1
  if [ $rc -eq 0 ]; then echo "  $name: the run succeeded"; ok=0; fi
  for r in 0 1; do
    if ! grep -qE -- "rank $r.*(failed|stopping).*$pat" "$work/$name.out"; then
      echo "  $name: rank $r says nothing matching: $pat"; ok=0
    fi
  done
  if [ $ok -eq 1 ]; then echo "ok   $name"; else
    echo "FAIL $name; its output:"; sed 's/^/    /' "$work/$name.out"; fails=$((fails + 1))
  fi
}
lie gather_purpose "purpose=zero3_gather" "purpose=zero_update_gather" \
  "#[0-9]+ compute .*disagree with its instructions: buffer ALL_GATHER[^ ]* has role gathered, but no zero3_gather of this device fills it"
lie piece_role "role=param_piece" "role=params" \
  "#[0-9]+ coll .*all_gather.*disagree with its instructions: a zero3_gather of 1 buffers \(the first of role params\)"
lie act_role "role=saved" "role=recomputed" \
  "#[0-9]+ compute .*gpt.embed.F.*writes activation buffer F.embed.mb0[^ ]* of role recomputed; a forward writes what it keeps \(saved\)"
lie role_none "role=saved" "role=none" \
  "buffer F.embed.mb0[^ ]* states no role \(role=none\); .* compile the program with piper-compile, or state its role"
lie purpose_none "purpose=zero_scatter" "purpose=none" \
  "#[0-9]+ coll .*reduce_scatter.*states no purpose \(purpose=none\); .* compile the program with piper-compile, or state its purpose"
[ $fails -eq 0 ] && echo "lies.sh: every plan whose roles disagree with its instructions was refused"
exit $fails
