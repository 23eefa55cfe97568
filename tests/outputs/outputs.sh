#!/usr/bin/env bash
# outputs.sh — every binary's output files go through base_out (base/base.h, "output files"):
#   1. a symbolic link is written through: the link stays, the file it names is replaced
#      (piper-compile -o, piper-sim --json/--trace/--platform-out, piper-viz -o, piper-exec
#      --trace/--dump-params);
#   2. a planted `<out>.tmp` link is not followed: the file it points at is untouched;
#   3. a directory given as the output is refused by name, and stays a directory;
#   4. /dev/full fails with "No space left on device" and stays a character device (when
#      writable; as root it is), /dev/null is written as a device;
#   5. a write cut short by the file size limit (ulimit -f) fails, names the limit, and leaves the
#      previous file byte for byte as it was, with no temporary left beside it.
#   usage: outputs.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/outputs/work"
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
prog="$src/tests/exec_mpi/programs/gpt_single.yaml"
compile() { "$build/piper-compile" -q "$prog" "$@"; }
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
ok() { echo "ok   $*"; }
compile -o ref.plan || { echo "FAIL cannot compile $prog"; exit 1; }

# the writers: NAME and a command that writes its output to the path in $1
w_compile() { compile -o "$1"; }
w_sim_json() { "$build/piper-sim" ref.plan -q --json "$1"; }
w_sim_trace() { "$build/piper-sim" ref.plan -q --trace "$1"; }
w_sim_platform() { "$build/piper-sim" ref.plan -q --platform-out "$1"; }
# piper-viz with tests/viz's LeakSanitizer suppressions (Graphviz and its font stack keep caches
# for the life of the process), piper-exec through tests/mpirun.sh (OpenMPI's own exit leaks):
# in the sanitizer build a leak of theirs would otherwise fail the write being tested
viz() {
  LSAN_OPTIONS="suppressions=$src/tests/viz/lsan.supp:print_suppressions=0" \
  ASAN_OPTIONS="detect_leaks=1:fast_unwind_on_malloc=0" "$build/piper-viz" "$@"
}
w_viz() { viz schedule ref.plan --format svg -o "$1"; }
w_exec_trace() { timeout 120 "$src/tests/mpirun.sh" 1 "$build/piper-exec" ref.plan --steps 1 -q --no-sim --trace "$1"; }
w_exec_dump() { # $1 is a directory here: its params.dev0.txt is the output
  timeout 120 "$src/tests/mpirun.sh" 1 "$build/piper-exec" ref.plan --steps 1 -q --no-sim --dump-params "$1"; }
writers="compile sim_json sim_trace sim_platform exec_trace"
[ -x "$build/piper-viz" ] && writers="$writers viz"

# 1. symlinks are written through
for w in $writers; do
  mkdir -p "link_$w/real"
  echo old > "link_$w/real/out"
  ln -s real/out "link_$w/out"
  if "w_$w" "link_$w/out" > "link_$w.log" 2>&1 && [ -L "link_$w/out" ] && [ -f "link_$w/real/out" ] &&
     [ "$(cat "link_$w/real/out")" != old ] && [ -s "link_$w/real/out" ]; then
    ok "$w: a symlinked output is written through, the link stays"
  else
    fail "$w: symlinked output"; sed 's/^/    /' "link_$w.log"; ls -la "link_$w" "link_$w/real" | sed 's/^/    /'
  fi
done
mkdir -p dump_real && echo old > dump_real/params.dev0.txt && mkdir -p dump_dir && ln -s ../dump_real/params.dev0.txt dump_dir/params.dev0.txt
if w_exec_dump dump_dir > dump.log 2>&1 && [ -L dump_dir/params.dev0.txt ] && grep -q '^# piper-exec params' dump_real/params.dev0.txt; then
  ok "exec --dump-params: a symlinked dump is written through"
else
  fail "exec --dump-params: symlinked dump"; sed 's/^/    /' dump.log
fi

# 2. a planted temporary name is not followed
for w in $writers; do
  d="planted_$w"
  mkdir -p "$d"
  echo precious > "$d/victim"
  ln -s victim "$d/out.tmp"
  if "w_$w" "$d/out" > "$d.log" 2>&1 && [ "$(cat "$d/victim")" = precious ] && [ -f "$d/out" ] && [ ! -L "$d/out" ] &&
     [ "$(ls -A "$d" | wc -l)" = 3 ]; then
    ok "$w: a planted out.tmp symlink is not followed"
  else
    fail "$w: planted out.tmp"; sed 's/^/    /' "$d.log"; ls -la "$d" | sed 's/^/    /'
  fi
done

# 3. a directory is refused
for w in $writers; do
  mkdir -p "dir_$w"
  "w_$w" "dir_$w" > "dir_$w.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q "dir_$w: is a directory; give a file name for" "dir_$w.log" && [ -d "dir_$w" ]; then
    ok "$w: a directory as the output is refused (exit $rc): $(grep -m1 'is a directory' "dir_$w.log")"
  else
    fail "$w: directory output (exit $rc)"; sed 's/^/    /' "dir_$w.log"
  fi
done

# 4. devices are written, never replaced (on a machine whose /dev/null something else replaced
# with a file, writing it would only replace that file again: fail at once)
[ -c /dev/null ] || { echo "FAIL /dev/null is not a character device on this machine"; exit 1; }
for w in $writers; do
  if "w_$w" /dev/null > "null_$w.log" 2>&1 && [ -c /dev/null ]; then
    ok "$w: /dev/null is written as a device"
  else
    fail "$w: /dev/null"; sed 's/^/    /' "null_$w.log"
  fi
  if [ -w /dev/full ]; then
    "w_$w" /dev/full > "full_$w.log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q "/dev/full: cannot write .*(No space left on device)" "full_$w.log" && [ -c /dev/full ]; then
      ok "$w: /dev/full fails (exit $rc) and stays a character device"
    else
      fail "$w: /dev/full (exit $rc)"; sed 's/^/    /' "full_$w.log"; ls -la /dev/full | sed 's/^/    /'
    fi
  fi
done
[ -w /dev/full ] || echo "skip /dev/full: not writable by this user"

# 5. a write cut short keeps the previous file (the size limit counts 1 KiB blocks; not piper-sim,
# whose SimGrid child writes a larger platform file of its own first, nor piper-exec, whose MPI
# start-up needs shared-memory files larger than the limit)
cut="compile"
[ -x "$build/piper-viz" ] && cut="$cut viz"
for w in $cut; do
  d="short_$w"
  mkdir -p "$d"
  "w_$w" "$d/out" > /dev/null 2>&1 || { fail "$w: first write"; continue; }
  cp "$d/out" "$d/before"
  size=$(stat -c %s "$d/out")
  [ "$size" -gt 4096 ] || { fail "$w: output of $size bytes is too small for the test"; continue; }
  (ulimit -f 2; "w_$w" "$d/out") > "$d.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q "out: cannot write .*(File too large); the file size limit" "$d.log" &&
     cmp -s "$d/out" "$d/before" && [ "$(ls -A "$d" | wc -l)" = 2 ]; then
    ok "$w: a write cut at 2 KiB of $size bytes fails (exit $rc), the previous file is intact, no temporary left"
  else
    fail "$w: cut-short write (exit $rc)"; sed 's/^/    /' "$d.log"; ls -la "$d" | sed 's/^/    /'
  fi
done

[ $fails -eq 0 ] && echo "outputs.sh: all cases pass" || echo "outputs.sh: $fails failures"
exit $((fails > 0))
