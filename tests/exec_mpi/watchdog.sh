#!/usr/bin/env bash
# watchdog.sh — piper-exec's watchdogs on 4 ranks (gpt4_pp4_1f1b) name the culprit:
#   stopped: rank 2 is stopped (SIGSTOP) mid-run with --timeout 5; every rank must exit non-zero
#            within 10 s of the stop, and the message names rank 2 and what the others wait for;
#   start-up: rank 2 is stopped before it starts (so before MPI_Init); the job must end within
#            --timeout plus a few seconds, naming rank 2 as not started;
#   truncated: the --data token file is cut short during a run (2 ranks, gpt_dp2); the error
#            names the file instead of the ranks dying of SIGBUS.
#   usage: watchdog.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/watchdog"
rm -rf "$work"
mkdir -p "$work"
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt4_pp4_1f1b.yaml" -o "$work/pp4.plan" || exit 1
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_dp2.yaml" -o "$work/dp2.plan" || exit 1
fails=0
fail() { echo "FAIL $1; its output:"; sed 's/^/    /' "$2"; fails=$((fails + 1)); }

# each rank records its pid (the wrapper execs piper-exec, so the pid is piper-exec's); with
# STOP_RANK set, that rank stops itself before piper-exec starts
wrapper="$work/rank.sh"
cat > "$wrapper" <<'EOF'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-0}
echo $$ > "$PIDS/pid.$r"
[ "${STOP_RANK:-}" = "$r" ] && kill -STOP $$
exec "$@"
EOF
chmod +x "$wrapper"

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# --- a rank stopped mid-run
PIDS="$work" timeout 120 "$src/tests/mpirun.sh" 4 -x PIDS "$wrapper" "$build/piper-exec" "$work/pp4.plan" \
  --steps 100000 -q --no-sim --timeout 5 > "$work/stopped.out" 2>&1 &
job=$!
if ! wait_for "$work/stopped.out" '^[0-9]+ ' 60; then
  kill $job 2>/dev/null
  fail "stopped: the run did not start" "$work/stopped.out"
else
  t0=$(date +%s.%N)
  kill -STOP "$(cat "$work/pid.2")"
  wait $job
  rc=$?
  took=$(echo "$(date +%s.%N) - $t0" | bc)
  kill -CONT "$(cat "$work/pid.2")" 2>/dev/null
  ok=1
  [ $rc -ne 0 ] || { echo "  stopped: the job succeeded"; ok=0; }
  [ "$(echo "$took <= 10" | bc)" = 1 ] || { echo "  stopped: the ranks took ${took} s to exit (over 10 s)"; ok=0; }
  # the rank whose watchdog fired names rank 2 and what it waits for from it; the others
  # report that message
  for pat in "rank 2 \(device 2\) stopped: it does not answer within 2 s" \
             "and the others wait for it: (step [0-9]+: )?device [013]: nothing progressed for 5 s" \
             "peer=2"; do
    grep -qE -- "$pat" "$work/stopped.out" || { echo "  stopped: no line matches: $pat"; ok=0; }
  done
  if [ $ok -eq 1 ]; then echo "ok   stopped (exit $rc ${took} s after the stop)"; else fail stopped "$work/stopped.out"; fi
fi

# --- a rank stopped before MPI_Init
t0=$SECONDS
PIDS="$work" STOP_RANK=2 timeout 120 "$src/tests/mpirun.sh" 4 -x PIDS -x STOP_RANK "$wrapper" \
  "$build/piper-exec" "$work/pp4.plan" --steps 1 -q --no-sim --timeout 5 > "$work/startup.out" 2>&1
rc=$?
took=$((SECONDS - t0))
kill -CONT "$(cat "$work/pid.2" 2>/dev/null)" 2>/dev/null
ok=1
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "  startup: exit status $rc (124: hung)"; ok=0; }
[ $took -le 20 ] || { echo "  startup: ${took} s to end (over --timeout 5 plus 15 s)"; ok=0; }
grep -qE "start-up did not finish within 5 s .*rank 2 has not started" "$work/startup.out" ||
  { echo "  startup: no message names rank 2"; ok=0; }
if [ $ok -eq 1 ]; then echo "ok   startup (exit $rc after ${took} s)"; else fail startup "$work/startup.out"; fi

# --- the token file truncated during a run
python3 -c "
import struct, sys
sys.stdout.buffer.write(struct.pack('<200000H', *[i % 251 for i in range(200000)]))" > "$work/tokens.bin"
timeout 120 "$src/tests/mpirun.sh" 2 "$build/piper-exec" "$work/dp2.plan" --steps 100000 -q --no-sim \
  --timeout 30 --data "uint16:$work/tokens.bin" > "$work/truncated.out" 2>&1 &
job=$!
if ! wait_for "$work/truncated.out" '^[0-9]+ ' 60; then
  kill $job 2>/dev/null
  fail "truncated: the run did not start" "$work/truncated.out"
else
  truncate -s 64 "$work/tokens.bin"
  wait $job
  rc=$?
  ok=1
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || { echo "  truncated: exit status $rc"; ok=0; }
  grep -qE -- "--data uint16:$work/tokens.bin: the file shrank from 400000 to 64 bytes during the run" \
    "$work/truncated.out" || { echo "  truncated: the file is not named"; ok=0; }
  ! grep -qi "bus error\|SIGBUS\|signal 7" "$work/truncated.out" || { echo "  truncated: a rank died of SIGBUS"; ok=0; }
  if [ $ok -eq 1 ]; then echo "ok   truncated (exit $rc)"; else fail truncated "$work/truncated.out"; fi
fi

[ $fails -eq 0 ] && echo "watchdog.sh: every stall and lost file ended with the culprit named"
exit $fails
