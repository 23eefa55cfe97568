#!/usr/bin/env bash
# search_cli.sh — piper-search end to end: the same JSON for -j 1 and -j 2, the winner written
# with -o compiling with piper-compile and simulating with piper-sim to the step time the search
# reported, "nothing fits" with its nearest miss, and the command line's errors.
#   usage: search_cli.sh PIPER_SEARCH PIPER_COMPILE PIPER_SIM SOURCE_DIR
set -euo pipefail
search="$1" compile="$2" sim="$3" src="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "search_cli: $*"; exit 1; }
args=(--model "$src/configs/models/gpt_tiny.yaml" --cluster "$src/configs/clusters/a100_4.yaml" --global-batch 8 --top 4)

"$search" "${args[@]}" -j 1 --json "$tmp/j1.json" > "$tmp/j1.txt" 2>/dev/null
"$search" "${args[@]}" -j 2 --json "$tmp/j2.json" -o "$tmp/best.yaml" > "$tmp/j2.txt" 2>/dev/null
cmp "$tmp/j1.json" "$tmp/j2.json" || fail "-j 1 and -j 2 wrote different JSON"
cmp "$tmp/j1.txt" "$tmp/j2.txt" || fail "-j 1 and -j 2 printed different reports"
grep -q '"rank": 4,' "$tmp/j1.json" || fail "the JSON does not rank 4 candidates"

# a dry run counts what the full run compiles: tier (a)'s survivors
"$search" "${args[@]}" --dry-run 2>/dev/null > "$tmp/dry.txt"
valid=$(sed -n 's/.*"valid": \([0-9]*\), "a_kept": \([0-9]*\).*/\1 \2/p' "$tmp/j1.json")
grep -q "looked at, ${valid% *} valid .*, ${valid#* } within the memory bound" "$tmp/dry.txt" ||
  fail "the dry run says '$(cat "$tmp/dry.txt")', the search's JSON '$valid'"

# the winner is a program that piper-compile and piper-sim take unchanged
"$compile" "$tmp/best.yaml" -o "$tmp/best.plan" > /dev/null || fail "piper-compile refused the winner"
"$sim" "$tmp/best.yaml" --json "$tmp/sim.json" -q 2>/dev/null || fail "piper-sim refused the winner"
want=$(sed -n 's/.*"rank": 1, .*"step_seconds": \([0-9.e+-]*\),.*/\1/p' "$tmp/j1.json")
got=$(sed -n 's/.*"step_seconds": \([0-9.e+-]*\).*/\1/p' "$tmp/sim.json" | head -1)
[ -n "$want" ] && [ -n "$got" ] || fail "no step time in the search's or the simulator's JSON"
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-6 * a) }' ||
  fail "the winner simulates to $got s, but the search reported $want s"

# --emit-top writes the best K as programs, each simulating to the step time its rank reported
"$search" "${args[@]}" -q --emit-top 3 "$tmp/top" 2>/dev/null || fail "--emit-top failed"
for k in 1 2 3; do
  f="$tmp/top/rank0$k.yaml"
  [ -f "$f" ] || fail "--emit-top 3 wrote no $f"
  "$sim" "$f" --json "$tmp/top$k.json" -q 2>/dev/null || fail "piper-sim refused $f"
  want=$(sed -n "s/.*\"rank\": $k, .*\"step_seconds\": \([0-9.e+-]*\),.*/\1/p" "$tmp/j1.json")
  got=$(sed -n 's/.*"step_seconds": \([0-9.e+-]*\).*/\1/p' "$tmp/top$k.json" | head -1)
  awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }' ||
    fail "rank $k simulates to $got s, but the search reported $want s"
done
[ ! -e "$tmp/top/rank04.yaml" ] || fail "--emit-top 3 wrote a fourth program"

# nothing fits on 2 MiB GPUs with 8-sequence micro-batches, no TP, ZeRO or recompute: say so,
# with the nearest miss and what would make it fit
set +e
out=$("$search" --model "$src/configs/models/gpt_tiny.yaml" --cluster "$src/tests/fixtures/search/tiny4.yaml" \
  --global-batch 32 --tp 1 --mbs 8 --zero 0 --recompute none 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || fail "nothing fits, but piper-search exited $rc"
grep -q "no candidate fits" <<< "$out" || fail "no 'no candidate fits' in: $out"
grep -q "nearest miss: .* more than usable" <<< "$out" || fail "no nearest miss in: $out"
grep -q "to make it fit: ZeRO-1, full recompute" <<< "$out" || fail "no advice in: $out"

# a global batch that no data-parallel degree of the space divides: nothing is valid, and the
# report says which product fails
set +e
out=$("$search" "${args[@]}" --global-batch 3 --tp 1 --pp 1 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] || fail "nothing is valid, but piper-search exited $rc"
grep -q "nothing in the space is valid, e.g. TP1 PP1 DP4 mb=1: mbs 1 x dp 4 does not divide the global batch 3" \
  <<< "$out" || fail "no reason for an empty space in: $out"

# errors: each with its exit status and a message that says what to do
expect() { # expect STATUS PATTERN ARGS...
  local want_rc=$1 pat=$2
  shift 2
  set +e
  local msg
  msg=$("$search" "$@" 2>&1 >/dev/null)
  local rc=$?
  set -e
  [ $rc -eq "$want_rc" ] || fail "piper-search $* exited $rc, not $want_rc: $msg"
  grep -q -- "$pat" <<< "$msg" || fail "piper-search $*: expected '$pat' in: $msg"
}
expect 1 "gpt_tiny.yaml:[0-9]*:[0-9]*: --tp 3 (command line).*use --tp 1, 2 or 4" "${args[@]}" --tp 3
expect 1 "does not divide the global batch of 8 sequences.*use --mbs 1, 2, 4 or 8" "${args[@]}" --mbs 3
expect 1 "unknown schedule '1f1bb'; did you mean '1f1b'?" "${args[@]}" --schedules 1f1bb
expect 1 "gpt_tiny.yaml:6:9: --pp 3 (command line): pp 3 must divide the 4 GPUs and not exceed the 2 layers; use --pp 1 or 2" "${args[@]}" --pp 3
expect 2 "piper-search: --global-batch: .0. is too small; write a positive integer" "${args[@]}" --global-batch 0
expect 2 "piper-search: --tpp: unknown option" "${args[@]}" --tpp 2
expect 2 "give --model, --cluster and --global-batch" --model x.yaml
expect 2 "--emit-top needs K and a directory" "${args[@]}" --emit-top 3
expect 1 "exists and is not a directory" "${args[@]}" -q --emit-top 3 "$tmp/j1.json"
expect 1 "cannot write the search's JSON" "${args[@]}" -q --json "$tmp/no/such/dir/x.json"
"$search" --help | grep -q -- "--schedules" || fail "--help does not list --schedules"
echo "search_cli: all checks hold"
