#!/usr/bin/env bash
# compare_outputs.sh — what piper emits, before and after a change: compiles every program
# (configs/programs/*.yaml, tests/exec_mpi/programs/*.yaml and the golden programs
# tests/fixtures/sched/golden_*.yaml, as tests/golden/regen.sh does) with piper-compile on two
# sides, simulates each side's own plans with piper-sim --json, runs every tests/exec_mpi program
# (and the option variants tests/exec_mpi/CMakeLists.txt gives exec_equiv) for 3 steps through
# tests/mpirun.sh with piper-exec, and compares the two sides: plans after normalize_plan (below),
# the simulator's JSON and the loss trajectories (step loss ce aux grad_norm, as printed) byte for
# byte. For refactorings whose contract is "the plans change only by new fields and the version,
# the simulated and executed numbers not at all".
# The base side is a revision, checked out with `git worktree add --detach` into a temporary
# directory and built (piper-compile piper-sim piper-exec only, without the CUDA backend) under
# ${XDG_CACHE_HOME:-~/.cache}/piper-compare/<commit>, reused while its stamp file is there. The
# head side is the working tree with the binaries already in ./build (build them first), another
# build directory (--head-build), or another revision (--head).
#   usage: tests/compare_outputs.sh [--base REV] [--head REV | --head-build DIR] [--keep DIR]
#                                   [--jobs N] [--quick]
#          tests/compare_outputs.sh --compare-only DIR
#   exit status: 0 when nothing differs, 1 when something does, 2 on usage or build errors.
# shellcheck disable=SC2317  # cleanup and job run through trap and xargs
set -euo pipefail

# normalize_plan: a plan file (stdin) as the comparison sees it (stdout). It drops
#   - the format's version line, the first line `piper-plan N` (docs/plan-format.md), since the
#     refactoring bumps N;
#   - the fields the refactoring adds: every ` KEY=VALUE` token whose KEY is in PLAN_NEW_FIELDS,
#     on instruction lines (`  I OP s=...`) and buffer lines (`  buf I NAME ...`). VALUE is a bare
#     token or a quoted string (`"..."` with backslash escapes), the format's two forms.
# The refactoring's new field names go in PLAN_NEW_FIELDS and nowhere else; if a new field sits on
# another kind of line, widen PLAN_FIELD_LINES (a sed -E address) to it.
PLAN_NEW_FIELDS="role purpose piece owner"
PLAN_FIELD_LINES='^[[:space:]]+([0-9]+|buf)[[:space:]]'
normalize_plan() {
  local keys
  keys=$(tr ' ' '|' <<< "$PLAN_NEW_FIELDS")
  LC_ALL=C sed -E \
    -e '1{/^piper-plan [0-9]+[[:space:]]*$/d;}' \
    -e "\\%${PLAN_FIELD_LINES}%s/[[:space:]]+(${keys})=(\"([^\"\\\\]|\\\\.)*\"|[^[:space:]]*)//g"
}

usage() {
  cat <<'EOF'
usage: tests/compare_outputs.sh [--base REV] [--head REV | --head-build DIR] [--keep DIR]
                                [--jobs N] [--quick]
       tests/compare_outputs.sh --compare-only DIR

Generates piper's outputs on two sides and compares them: the acceptance check of a refactoring
that may change the plans only by new fields and the format version, and the simulated and
executed numbers not at all. Run it from anywhere inside the repository.

sides:
  --base REV        the old side (default HEAD~1): checked out with `git worktree add --detach`
                    into a temporary directory (removed at exit), configured with
                    cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPIPER_WITH_CUDA=OFF
                    -DCMAKE_CUDA_COMPILER=NOTFOUND (no CUDA backend, in revisions with and
                    without the option: the three tools do not use it) and built with only
                    the targets piper-compile piper-sim piper-exec, in
                    ${XDG_CACHE_HOME:-~/.cache}/piper-compare/<commit>/build; a build is reused
                    when it completed (its file `stamp` exists)
  --head REV        the new side is another revision, checked out and built the same way
  --head-build DIR  the new side is the working tree with the binaries in DIR (default:
                    ./build of the repository; they are used as they are, not rebuilt)

what each side generates (files named SET.NAME, SET one of configs, exec_mpi, golden):
  plans/SET.NAME.plan   piper-compile -q PROGRAM -o FILE, run in the side's tree, for every
                        configs/programs/*.yaml, tests/exec_mpi/programs/*.yaml and
                        tests/fixtures/sched/golden_*.yaml (how tests/golden/regen.sh makes
                        the golden plans); plans/tests_golden.NAME.plan: the side's committed
                        tests/golden/NAME.plan. A program that does not compile leaves
                        plans/SET.NAME.err instead ("exit N" and its stderr)
  sim/SET.NAME.json     piper-sim plans/SET.NAME.plan --json FILE -q, for every plan compiled
                        (sim/SET.NAME.err when it fails, stderr without the wall-clock line)
  exec/exec_mpi.NAME.loss
                        tests/mpirun.sh N piper-exec PLAN --steps 3 --seed 7 --timeout 120 -q
                        --no-sim --log LOG for every tests/exec_mpi program, N = 1 + the last
                        device of the plan with instructions (what piper-exec accepts; equiv.sh
                        runs the same counts); of each log line (step loss ce aux grad_norm
                        seconds tokens_per_s gflops_per_s) the first five columns as printed
  exec/equiv.TEST.loss  the same for each exec_equiv(TEST REF RUN RANKS OPTIONS...) of the
                        side's tests/exec_mpi/CMakeLists.txt that has OPTIONS (--dtype fp64,
                        --optimizer sgd, --data corpus, ...): RUN's plan with those options
  exec/*.err            a run that fails: "exit N", piper-exec's stderr lines and mpirun's
                        reports of signals and launch failures (sorted: ranks write in any
                        order; the whole stderr is in raw/)
  raw/                  every tool's stdout and stderr and the full logs (not compared)

comparison: a plan with normalize_plan (the top of this script: it drops the version line and
the fields the refactoring adds, listed in PLAN_NEW_FIELDS) on both sides, everything else
(JSON, losses, .err files) byte for byte with cmp. A file present on one side only differs. Each
differing file is printed with the first lines of its diff, then one summary line:
  compare_outputs: N files compared, M differ (base ... vs head ...)

options:
  --keep DIR        keep the outputs in DIR/base and DIR/head (default: a temporary directory,
                    removed at exit)
  --compare-only DIR
                    only compare DIR/base with DIR/head (outputs of an earlier --keep)
  --jobs N          parallel jobs (default: nproc); MPI runs at most 2 at a time (the ranks of
                    tests/mpirun.sh oversubscribe the cores)
  --quick           leave out the gpt3_175b_* programs (the slow ones: tens of seconds each)
  -h, --help        this help

environment: PIPER_COMPARE_TIMEOUT, the limit in seconds of one tool run (default 900).
exit status: 0 when nothing differs, 1 when something does, 2 on usage or build errors.
EOF
}

die() {
  echo "compare_outputs: $*" >&2
  exit 2
}

base_rev=HEAD~1
head_rev=
head_build=
keep=
compare_only=
jobs=$(nproc 2>/dev/null || echo 2)
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --base) [ $# -ge 2 ] || die "--base needs a revision"; base_rev="$2"; shift 2 ;;
    --head) [ $# -ge 2 ] || die "--head needs a revision"; head_rev="$2"; shift 2 ;;
    --head-build) [ $# -ge 2 ] || die "--head-build needs a directory"; head_build="$2"; shift 2 ;;
    --keep) [ $# -ge 2 ] || die "--keep needs a directory"; keep="$2"; shift 2 ;;
    --compare-only) [ $# -ge 2 ] || die "--compare-only needs a directory"; compare_only="$2"; shift 2 ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a number"; jobs="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "compare_outputs: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
case "$jobs" in ''|*[!0-9]*|0) die "--jobs takes a positive number, not '$jobs'" ;; esac
[ -z "$head_rev" ] || [ -z "$head_build" ] || die "--head and --head-build exclude each other"
if [ -n "$compare_only" ] && { [ -n "$keep" ] || [ -n "$head_rev" ] || [ -n "$head_build" ]; }; then
  die "--compare-only compares existing outputs; it takes no --keep, --head or --head-build"
fi

# ---- comparison --------------------------------------------------------------------------------

# compare_sides BASE_DIR HEAD_DIR: prints each differing file and the summary; returns 0 or 1
compare_sides() {
  local b="$1" h="$2" d f n=0 m=0 label_b label_h
  label_b=$(sed -n 's/^label //p' "$b/meta.txt" 2>/dev/null || true)
  label_h=$(sed -n 's/^label //p' "$h/meta.txt" 2>/dev/null || true)
  while IFS= read -r f; do
    n=$((n + 1))
    if [ ! -e "$b/$f" ] || [ ! -e "$h/$f" ]; then
      if [ -e "$b/$f" ]; then echo "only in base: $f"; else echo "only in head: $f"; fi
      case "$f" in # why a tool failed on one side
        *.err) { cat "$b/$f" "$h/$f" 2>/dev/null || true; } | head -n 8 | sed 's/^/    /' ;;
      esac
      m=$((m + 1))
      continue
    fi
    case "$f" in
      plans/*.plan)
        if ! cmp -s <(normalize_plan < "$b/$f") <(normalize_plan < "$h/$f"); then
          echo "differs (after normalize_plan): $f"
          diff <(normalize_plan < "$b/$f") <(normalize_plan < "$h/$f") | head -n 8 | sed 's/^/    /' || true
          m=$((m + 1))
        fi ;;
      *)
        if ! cmp -s "$b/$f" "$h/$f"; then
          echo "differs: $f"
          diff "$b/$f" "$h/$f" | head -n 8 | sed 's/^/    /' || true
          m=$((m + 1))
        fi ;;
    esac
  done < <(for d in "$b" "$h"; do (cd "$d" && find plans sim exec -type f 2>/dev/null) || true; done |
             LC_ALL=C sort -u)
  echo "compare_outputs: $n files compared, $m differ (base ${label_b:-$b} vs head ${label_h:-$h})"
  [ "$m" -eq 0 ]
}

if [ -n "$compare_only" ]; then
  for s in base head; do
    [ -d "$compare_only/$s" ] || die "$compare_only/$s is not a directory (outputs of --keep)"
  done
  rc=0
  compare_sides "$compare_only/base" "$compare_only/head" || rc=1
  exit $rc
fi

# ---- the two sides -----------------------------------------------------------------------------

root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel 2>/dev/null) ||
  die "$(dirname "$0") is not inside a git repository"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/piper-compare"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/piper-compare.XXXXXX")
worktrees=()
cleanup() {
  local wt
  for wt in "${worktrees[@]}"; do
    git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
  done
  [ ${#worktrees[@]} -eq 0 ] || git -C "$root" worktree prune >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
# the work runs in process groups of its own (in_group), so that an interrupt or a kill of this
# script stops all of it, the MPI ranks included, before the worktrees go
group_pid=
on_signal() {
  trap - INT TERM HUP
  echo "compare_outputs: interrupted" >&2
  [ -z "$group_pid" ] || kill -TERM -- "-$group_pid" 2>/dev/null || true
  exit 2
}
trap cleanup EXIT
trap on_signal INT TERM HUP
# in_group COMMAND...: runs COMMAND (a function) in a process group of its own; its exit status
in_group() {
  local rc=0
  set -m
  "$@" &
  group_pid=$!
  set +m
  wait "$group_pid" || rc=$?
  group_pid=
  return "$rc"
}

if [ -n "$keep" ]; then
  mkdir -p "$keep" || die "cannot create $keep"
  out_root=$(cd "$keep" && pwd)
  for s in base head; do
    if [ -e "$out_root/$s" ]; then
      # only ever delete what an earlier run of this script wrote
      [ -f "$out_root/$s/meta.txt" ] || die "$out_root/$s exists and is not an earlier --keep output"
      rm -rf "${out_root:?}/$s"
    fi
  done
else
  out_root="$tmp/out"
fi

# build_rev REV: checks REV out into a worktree and makes sure its build exists; sets
# side_tree, side_bin, side_label
build_rev() {
  local rev="$1" hash short wt cache
  hash=$(git -C "$root" rev-parse --verify --quiet "$rev^{commit}") || die "unknown revision '$rev'"
  short=$(git -C "$root" rev-parse --short "$hash")
  wt="$tmp/wt-$short-${#worktrees[@]}"
  git -C "$root" worktree add --detach "$wt" "$hash" > "$tmp/worktree.log" 2>&1 ||
    { cat "$tmp/worktree.log" >&2; die "git worktree add $rev failed"; }
  worktrees+=("$wt")
  cache="$cache_root/$hash"
  mkdir -p "$cache"
  in_group build_locked "$rev" "$short" "$hash" "$wt" "$cache" || exit 2
  side_tree="$wt"
  side_bin="$cache/build"
  side_label="$rev ($short)"
}

# build_locked REV SHORT HASH TREE CACHE: the build of one commit, unless a complete one is there
build_locked() {
  local rev="$1" short="$2" hash="$3" wt="$4" cache="$5"
  (
    # one build per commit at a time, also between concurrent runs of this script
    flock 9
    if [ -f "$cache/stamp" ] && [ -x "$cache/build/piper-compile" ] && [ -x "$cache/build/piper-sim" ] &&
       [ -x "$cache/build/piper-exec" ]; then
      echo "== $rev ($short): cached build $cache/build" >&2
      exit 0
    fi
    echo "== $rev ($short): building piper-compile piper-sim piper-exec in $cache/build" >&2
    rm -rf "$cache/build" "$cache/stamp"
    # no CUDA backend (the three tools do not link it): PIPER_WITH_CUDA=OFF where
    # exec/cuda/detect.cmake has the option, CMAKE_CUDA_COMPILER=NOTFOUND (nvcc not looked for)
    # in revisions before it; each is an unused variable to the other's CMake
    if ! { cmake -S "$wt" -B "$cache/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
             -DPIPER_WITH_CUDA=OFF -DCMAKE_CUDA_COMPILER=NOTFOUND &&
           cmake --build "$cache/build" --target piper-compile piper-sim piper-exec -j "$jobs"; } \
         > "$cache/build.log" 2>&1; then
      tail -n 30 "$cache/build.log" >&2
      echo "compare_outputs: the build of $rev ($short) failed; the log: $cache/build.log" >&2
      exit 2
    fi
    printf 'commit %s\nbuilt %s\ntargets piper-compile piper-sim piper-exec\n' "$hash" "$(date -u +%FT%TZ)" \
      > "$cache/stamp"
  ) 9> "$cache_root/$hash.lock"
}

mkdir -p "$cache_root" || die "cannot create $cache_root"
build_rev "$base_rev"
BASE_TREE="$side_tree" BASE_BIN="$side_bin" base_label="$side_label"
if [ -n "$head_rev" ]; then
  build_rev "$head_rev"
  HEAD_TREE="$side_tree" HEAD_BIN="$side_bin" head_label="$side_label"
else
  HEAD_TREE="$root"
  HEAD_BIN=$(cd "${head_build:-$root/build}" 2>/dev/null && pwd) ||
    die "no build directory ${head_build:-$root/build}: build it first, or use --head REV"
  for t in piper-compile piper-sim piper-exec; do
    [ -x "$HEAD_BIN/$t" ] || die "$HEAD_BIN/$t is missing: cmake --build $HEAD_BIN --target piper-compile piper-sim piper-exec"
  done
  if [ -z "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
    head_label="working tree ($(git -C "$root" rev-parse --short HEAD), binaries $HEAD_BIN)"
  else
    head_label="working tree ($(git -C "$root" rev-parse --short HEAD) + changes, binaries $HEAD_BIN)"
  fi
fi
BASE_OUT="$out_root/base" HEAD_OUT="$out_root/head"
for s in base head; do
  mkdir -p "$out_root/$s/plans" "$out_root/$s/sim" "$out_root/$s/exec" "$out_root/$s/raw"
done
printf 'label %s\ntree %s\nbin %s\n' "$base_label" "$BASE_TREE" "$BASE_BIN" > "$BASE_OUT/meta.txt"
printf 'label %s\ntree %s\nbin %s\n' "$head_label" "$HEAD_TREE" "$HEAD_BIN" > "$HEAD_OUT/meta.txt"
export BASE_TREE BASE_BIN BASE_OUT HEAD_TREE HEAD_BIN HEAD_OUT
export PIPER_COMPARE_TIMEOUT="${PIPER_COMPARE_TIMEOUT:-900}" PIPER_COMPARE_ROOT="$root"

# ---- the jobs (run by xargs, one per line: KIND SIDE NAME ARGS...) ------------------------------

# plan_ranks PLAN: the ranks piper-exec needs, 1 + the last device whose list has instructions
plan_ranks() {
  awk '$1 == "list" { for (i = 3; i <= NF; i++) if ($i ~ /^instrs=/) n[$2] = substr($i, 8) + 0 }
       $1 == "devices" && NF == 2 { dev = 1; next }
       $1 == "end" { dev = 0 }
       dev && $1 ~ /^[0-9]+$/ {
         for (i = 2; i <= NF; i++) if ($i ~ /^list=/ && n[substr($i, 6)] > 0) last = $1 + 1 }
       END { print (last > 0 ? last : 1) }' "$1"
}

# job KIND SIDE NAME ARGS...: one tool run; its failure is an output (a .err file), not an error
job() {
  local kind="$1" side="$2" name="$3" tree bin out rc
  shift 3
  case "$side" in
    base) tree="$BASE_TREE" bin="$BASE_BIN" out="$BASE_OUT" ;;
    head) tree="$HEAD_TREE" bin="$HEAD_BIN" out="$HEAD_OUT" ;;
    *) echo "compare_outputs: bad side $side" >&2; return 255 ;;
  esac
  local lim="$PIPER_COMPARE_TIMEOUT"
  case "$kind" in
    compile) # ARGS: the program, relative to the tree (so that messages name it the same way)
      rc=0
      (cd "$tree" && timeout --foreground -k 10 "$lim" "$bin/piper-compile" -q "$1" -o "$out/plans/$name.plan") \
        > "$out/raw/$name.compile.out" 2> "$out/raw/$name.compile.err" || rc=$?
      if [ "$rc" -ne 0 ]; then
        rm -f "$out/plans/$name.plan"
        { echo "exit $rc"; cat "$out/raw/$name.compile.err"; } > "$out/plans/$name.err"
      fi ;;
    sim) # the side's own plan, named relative to the output directory
      rc=0
      (cd "$out" && timeout --foreground -k 10 "$lim" "$bin/piper-sim" "plans/$name.plan" --json "sim/$name.json" -q) \
        > "$out/raw/$name.sim.out" 2> "$out/raw/$name.sim.err" || rc=$?
      if [ "$rc" -ne 0 ]; then
        rm -f "$out/sim/$name.json"
        # the one wall-clock figure piper-sim prints: "N simulated activities in T s (R per second)"
        { echo "exit $rc"; grep -v 'simulated activities in' "$out/raw/$name.sim.err" || true; } \
          > "$out/sim/$name.err"
      fi ;;
    exec) # ARGS: the plan's name, then piper-exec options
      local plan="plans/$1.plan" n mpirun="$tree/tests/mpirun.sh"
      shift
      [ -f "$out/$plan" ] || return 0 # not compiled: plans/*.err says why
      [ -x "$mpirun" ] || mpirun="$PIPER_COMPARE_ROOT/tests/mpirun.sh"
      n=$(plan_ranks "$out/$plan")
      rc=0
      (cd "$out" && timeout --foreground -k 10 "$lim" "$mpirun" "$n" "$bin/piper-exec" "$plan" --steps 3 --seed 7 \
         --timeout 120 -q --no-sim --log "raw/$name.log" "$@") \
        > "$out/raw/$name.exec.out" 2> "$out/raw/$name.exec.err" || rc=$?
      if [ "$rc" -eq 0 ] && grep -qv '^#' "$out/raw/$name.log" 2>/dev/null; then
        # step loss ce aux grad_norm, as printed; seconds, tokens/s and GFLOP/s are wall-clock
        grep -v '^#' "$out/raw/$name.log" | cut -d' ' -f1-5 > "$out/exec/$name.loss"
      else
        # piper-exec's lines and mpirun's reports of signals and launch failures, with process
        # ids masked and sorted (the ranks write in any order); all of it is in raw/
        { echo "exit $rc (tests/mpirun.sh $n piper-exec $plan ... $*)"
          grep -aiE '^piper-exec|signal|unable|not able|error' "$out/raw/$name.exec.err" |
            sed -E 's/(PID|pid) [0-9]+/\1 N/g' | LC_ALL=C sort -u || true; } > "$out/exec/$name.err"
      fi ;;
    *) echo "compare_outputs: bad job kind $kind" >&2; return 255 ;;
  esac
  return 0
}
export -f job plan_ranks

# run_jobs P: runs the job lines on stdin, P at a time
run_jobs() {
  xargs -P "$1" -L 1 bash -c 'job "$@"' job
}

programs() { # TREE: "SET NAME PATH" for every program of the tree, relative paths
  local tree="$1" p
  for p in "$tree"/configs/programs/*.yaml; do
    [ -e "$p" ] || continue
    if [ "$quick" -eq 1 ]; then
      case "$(basename "$p")" in gpt3_175b_*) continue ;; esac
    fi
    echo "configs $(basename "$p" .yaml) configs/programs/$(basename "$p")"
  done
  for p in "$tree"/tests/exec_mpi/programs/*.yaml; do
    [ -e "$p" ] || continue
    echo "exec_mpi $(basename "$p" .yaml) tests/exec_mpi/programs/$(basename "$p")"
  done
  for p in "$tree"/tests/fixtures/sched/golden_*.yaml; do
    [ -e "$p" ] || continue
    echo "golden $(basename "$p" .yaml) tests/fixtures/sched/$(basename "$p")"
  done
}

# the option variants of the exec_equiv tests: "TEST RUN OPTIONS..." (one line each)
equiv_variants() {
  local f="$1/tests/exec_mpi/CMakeLists.txt"
  [ -f "$f" ] || return 0
  sed -n 's/^[[:space:]]*exec_equiv(\(.*\))[[:space:]]*$/\1/p' "$f" |
    awk 'NF > 4 { s = $1 " " $3; for (i = 5; i <= NF; i++) s = s " " $i; print s }'
}

declare -A TREE=([base]="$BASE_TREE" [head]="$HEAD_TREE") OUT=([base]="$BASE_OUT" [head]="$HEAD_OUT")
start=$(date +%s)
echo "== base: $base_label" >&2
echo "== head: $head_label" >&2

compile_jobs() {
  local s
  for s in base head; do
    programs "${TREE[$s]}" | while read -r set name path; do
      case "$name" in gpt3_175b_*) k=0 ;; *) k=1 ;; esac
      echo "$k compile $s $set.$name $path"
    done
  done | sort -n -s -k1,1 | cut -d' ' -f2- | run_jobs "$jobs" # the slow programs first
}
sim_jobs() {
  local s p
  for s in base head; do
    for p in "${OUT[$s]}"/plans/*.plan; do
      [ -e "$p" ] || continue
      case "$(basename "$p")" in tests_golden.*) continue ;; esac
      echo "$(stat -c %s "$p") sim $s $(basename "$p" .plan)"
    done
  done | sort -n -r -s -k1,1 | cut -d' ' -f2- | run_jobs "$jobs" # the largest plans first
}
exec_jobs() {
  local s
  for s in base head; do
    programs "${TREE[$s]}" | while read -r set name path; do
      if [ "$set" = exec_mpi ]; then echo "exec $s exec_mpi.$name exec_mpi.$name"; fi
    done
    equiv_variants "${TREE[$s]}" | while read -r test run opts; do
      echo "exec $s equiv.$test exec_mpi.${run%.yaml} $opts"
    done
  done | run_jobs "$(( jobs < 2 ? jobs : 2 ))"
}

for s in base head; do
  for g in "${TREE[$s]}"/tests/golden/*.plan; do
    if [ -e "$g" ]; then cp "$g" "${OUT[$s]}/plans/tests_golden.$(basename "$g")"; fi
  done
done
for step in compile sim exec; do
  t=$(date +%s)
  in_group "${step}_jobs" || die "$step: a job failed to run (see above)"
  runs=("$BASE_OUT"/raw/*."$step".err "$HEAD_OUT"/raw/*."$step".err)
  echo "== $step: ${#runs[@]} runs in $(( $(date +%s) - t )) s" >&2
done
echo "== generated in $(( $(date +%s) - start )) s; comparing" >&2

rc=0
compare_sides "$BASE_OUT" "$HEAD_OUT" || rc=1
[ -z "$keep" ] || echo "outputs kept in $out_root/base and $out_root/head" >&2
exit $rc
