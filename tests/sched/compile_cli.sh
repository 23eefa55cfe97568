#!/bin/sh
# compile_cli.sh — piper-compile's exit statuses and messages: 2 for usage errors (unknown
# option, option without its file, no program, a pass --dump-after does not know), 1 for a
# program that cannot be read or compiled, 0 for --help and a good program (whose plan file -o
# writes); and --dump-after, each pass's dump showing what that pass did.
# usage: compile_cli.sh PIPER_COMPILE SOURCE_DIR
set -u
compile=$1
src=$2
tmp=$(mktemp -d /tmp/piper_compile_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS TEXT ARGS...: exit status STATUS and TEXT somewhere in stdout or stderr
expect() {
  want=$1
  text=$2
  shift 2
  "$compile" "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: piper-compile $*: exit status $got, want $want" >&2
    cat "$tmp/out" >&2
    failed=$((failed + 1))
  elif ! grep -qF -- "$text" "$tmp/out"; then
    echo "FAIL: piper-compile $*: output lacks '$text':" >&2
    cat "$tmp/out" >&2
    failed=$((failed + 1))
  fi
}

prog=$src/configs/programs/dp2.yaml
expect 2 "piper-compile: --bogus: unknown option; see piper-compile --help" "$prog" --bogus
expect 2 "piper-compile: -o: needs a value (FILE)" "$prog" -o
expect 2 "usage: piper-compile PROGRAM" 
expect 2 "one program at a time" "$prog" "$prog"
expect 1 "error: $tmp/missing.yaml: cannot open file" "$tmp/missing.yaml"
printf 'batch: {global: 1}\ndirectives: []\nmodel: nowhere.yaml\n' >"$tmp/bad.yaml"
expect 1 "error: $tmp/bad.yaml:3:8:" "$tmp/bad.yaml"
expect 0 "exit status: 0 on success" --help

# --micro-batch / --global-batch: a bare Piper array's batch (default micro-batch 1)
arr=$src/tests/fixtures/piper_schema/harness_1f1b.json
mc="--model $src/tests/fixtures/programs/tiny_gpt.yaml --cluster $src/configs/clusters/cpu_8.yaml"
expect 0 "(default: the program's; a bare array of directives" --help
expect 0 "batch 8 sequences = micro-batch 1 x 4 micro-batches x data-parallel 2" "$arr" $mc
expect 0 "batch 16 sequences = micro-batch 2 x 4 micro-batches x data-parallel 2" "$arr" $mc --micro-batch 2
expect 0 "batch 16 sequences = micro-batch 2 x 4 micro-batches x data-parallel 2" "$arr" $mc --micro-batch 2 --global-batch 16
expect 1 "global batch 7 is not a multiple of the micro-batch 2" "$arr" $mc --micro-batch 2 --global-batch 7
expect 2 "--micro-batch: '0' is too small; write a whole number of sequences >= 1" "$arr" $mc --micro-batch 0
expect 2 "--global-batch: needs a value (N)" "$arr" $mc --global-batch
# bounded readers (docs/programs.md, "Inputs"): a device without end, a file over the limit (sparse,
# so the test writes nothing) and a directory are refused by name, at once
start=$(date +%s)
expect 1 "error: /dev/zero: more than piper reads from one input (64.00 MiB) and still going" /dev/zero
[ $(( $(date +%s) - start )) -le 10 ] || { echo "FAIL: /dev/zero took over 10 s to refuse" >&2; failed=$((failed + 1)); }
truncate -s 100M "$tmp/huge.yaml"
expect 1 "error: $tmp/huge.yaml: 100.00 MiB, more than piper reads from one input (64.00 MiB); give a smaller file" "$tmp/huge.yaml"
expect 1 "error: $src/configs: is a directory; give a file" "$src/configs"
# unequal stage placement is reported at the placement directive that made it, with a remedy
sed -e "s|\.\./\.\./\.\./|$src/|" -e 's/devices: \[0\]}/devices: [0, 1]}/' -e 's/devices: \[1\]}/devices: [2]}/' \
  "$src/tests/exec_mpi/programs/gpt_pp2.yaml" >"$tmp/unequal.yaml"
expect 1 "error: $tmp/unequal.yaml:10:5: directive 2 (place): after the placement directives, 'F L0.mlp mb0' on 2 devices feeds 'F L1.attn mb0' on 1 devices; piper sends device i to device i, so place both on the same number of devices" "$tmp/unequal.yaml"
# expert and tensor parallelism on the same two devices: refused at shard_tensor, with a remedy
cat >"$tmp/ep_tp.yaml" <<EOF
model: $src/configs/models/moe_tiny.yaml
cluster: $src/configs/clusters/cpu_8.yaml
batch: {global: 4, micro: 1}
dtype: fp32
annotations: {ep: true, tp: true}
directives:
  - {op: split, num_microbatches: 2}
  - {op: replicate, filter: {}, devices: [0, 1], zero: 0}
  - {op: shard, filter: {EP: "*"}, devices: [0, 1], stream: ep}
  - {op: shard_tensor, filter: {TP: "*"}, devices: [0, 1]}
EOF
expect 1 "error: $tmp/ep_tp.yaml:10:5: directive 3 (shard_tensor): after the placement directives, 'F embed mb0' runs on 2 devices with expert parallelism of degree 2, and tensor parallelism of degree 2 on the same devices leaves a data-parallel degree of 1 that EP does not divide (EP groups form inside DP); give TP devices of its own" "$tmp/ep_tp.yaml"
# an order file that deadlocks: the schedule directive and the CSV cells that cannot proceed
sed -e "s|\.\./\.\./\.\./|$src/|" "$src/tests/exec_mpi/programs/gpt_pp2.yaml" >"$tmp/dl.yaml"
echo '  - {op: schedule, file: dl.csv}' >>"$tmp/dl.yaml"
printf '0F0,0F1,0F2,0F3,0B0,0B1,0B2,0B3\n1F1,1F0,1F2,1F3,1B0,1B1,1B2,1B3\n' >"$tmp/dl.csv"
expect 1 "error: $tmp/dl.yaml:11:5: directive 3 (schedule): the order file $tmp/dl.csv deadlocks: the stuck actions are $tmp/dl.csv:1:1: rank 0, column 1 ('0F0'); $tmp/dl.csv:2:1: rank 1, column 1 ('1F1'); reorder those cells" "$tmp/dl.yaml"
# a cluster beyond IR_CLUSTER_MAX_DEVICES is refused at its nodes key
printf 'gpu: H100\nnodes: 16384\ngpus_per_node: 8\n' >"$tmp/huge_cluster.yaml"
printf 'model: %s/configs/models/gpt_1.7b.yaml\ncluster: huge_cluster.yaml\nbatch: {global: 2}\ndirectives: []\n' "$src" >"$tmp/huge_prog.yaml"
expect 1 "huge_cluster.yaml:2:8: nodes x gpus_per_node = 16384 x 8 = 131072 devices, more than piper handles (65536); use fewer nodes" "$tmp/huge_prog.yaml"
expect 0 "plan written to $tmp/dp2.plan" "$prog" -o "$tmp/dp2.plan"
if ! head -n 1 "$tmp/dp2.plan" | grep -qx 'piper-plan 2'; then
  echo "FAIL: $tmp/dp2.plan does not start with 'piper-plan 2'" >&2
  failed=$((failed + 1))
fi

# --dump-after=PASS: the IR after each pass of the compiler's table (sched/compile.c)
expect 0 "placements are final" --dump-after=list
expect 0 "passes, in the order they run" --help
expect 0 "default-schedule" --help
expect 2 "no compiler pass is named 'bogus'; name one of build, directives, mirror, p2p, orders, default-schedule, batch, launch, lower, check" "$prog" --dump-after=bogus
if [ "$("$compile" --dump-after=list | grep -c '^  [a-z]')" -ne 10 ]; then
  echo "FAIL: --dump-after=list does not list the 10 passes" >&2
  failed=$((failed + 1))
fi

# dump PROGRAM PASS: piper-compile's stdout with --dump-after=PASS into $tmp/PASS (exit 0)
dump() {
  if ! "$compile" "$1" --dump-after="$2" >"$tmp/$2" 2>"$tmp/$2.err"; then
    echo "FAIL: piper-compile $1 --dump-after=$2 failed:" >&2
    cat "$tmp/$2.err" >&2
    failed=$((failed + 1))
  fi
}
# count PASS PATTERN WANT: WANT lines of $tmp/PASS match the extended regex PATTERN
count() {
  got=$(grep -cE -- "$2" "$tmp/$1")
  if [ "$got" -ne "$3" ]; then
    echo "FAIL: after the $1 pass, $got lines match '$2', want $3" >&2
    failed=$((failed + 1))
  fi
}
# same A B: the dumps after passes A and B are identical (B changed nothing here)
same() {
  if ! cmp -s "$tmp/$1" "$tmp/$2"; then
    echo "FAIL: the $2 pass changed the IR of $pp2 (it has nothing to do there)" >&2
    failed=$((failed + 1))
  fi
}

# gpt_tiny (6 regions) in 2 stages on 2 devices, 4 micro-batches, nothing ordered: each pass
# leaves a DAG whose counts are known (tests/fixtures/sched/pp2_m4.yaml says why)
pp2=$src/tests/fixtures/sched/pp2_m4.yaml
for pass in build directives mirror p2p orders default-schedule batch launch lower check; do
  dump "$pp2" $pass
done
count build '^# piper DAG: 18 nodes, .* 1 micro-batches$' 1
count build '^n[0-9]+ F ' 6
count directives '^# piper DAG: .* 4 micro-batches$' 1
count directives '^n[0-9]+ F ' 24
count directives '^n[0-9]+ (SEND|RECV) ' 0
same directives mirror
count p2p '^n[0-9]+ SEND .* pp=0 .* to=n' 4
count p2p '^n[0-9]+ SEND .* pp=1 .* to=n' 4
count p2p '^n[0-9]+ RECV ' 8
same p2p orders
count p2p '^n[0-9]+ ORDER ' 0
# 1F1B, one order per rank of 2m = 8 cells: 7 ORDER dummies each
count default-schedule '^n[0-9]+ ORDER ' 14
same default-schedule batch
count launch '^# piper launch order: 2 device classes$' 1
count launch '^class [01] devices [01]: 36 nodes$' 2
count lower '^piper-plan [0-9]+$' 1
"$compile" -q "$pp2" -o "$tmp/pp2.plan" >/dev/null 2>&1
if ! cmp -s "$tmp/check" "$tmp/pp2.plan"; then
  echo "FAIL: the dump after the check pass is not the plan -o writes" >&2
  failed=$((failed + 1))
fi
if ! "$compile" "$pp2" --dump-after=build | head -n 1 | grep -q '^# piper DAG'; then
  echo "FAIL: --dump-after prints the summary too, not the DAG alone" >&2
  failed=$((failed + 1))
fi

# DualPipe: the mirror pass copies stages 0-3 as stages 4-7 (before it there are none)
dp=$src/tests/exec_mpi/programs/gpt8u_pp4_dualpipe.yaml
dump "$dp" directives
dump "$dp" mirror
count directives ' pp=[4-7] ' 0
if [ "$(grep -c ' pp=[4-7] ' "$tmp/mirror")" -eq 0 ]; then
  echo "FAIL: after the mirror pass, $dp has no mirrored stage 4-7" >&2
  failed=$((failed + 1))
fi
[ "$failed" -eq 0 ]
