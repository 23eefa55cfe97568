#!/usr/bin/env bash
# output.sh — what piper-exec reports besides the per-step lines.
# --trace writes the Chrome trace of piper-sim (viz/trace.h): for PP2
# (1F1B: transfers, sendrecv groups, the tied pair's all-reduce) and TP2xPP2 (collectives) over 2
# steps it checks that
#   - piper-viz's reader reads it back (when piper-viz is built);
#   - there is one process per rank, named, and every event's thread is a named stream of it;
#   - the events are what the plan says each device runs: per step one per compute, collective
#     and transfer, a sendrecv group counting once;
#   - no two events of one thread overlap.
# At the end of a run, piper-sim's prediction of the same plan next to the measurement: the
# predicted peak memory of each rank equals the peak measured with the plan's buffer sizes (both
# replay the plan's allocations; only the interleaving of streams could differ, hence 2%); a
# piper-exec alone in a folder predicts all the same (the simulator is linked in, not run).
#   usage: output.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build="$1" src="$2"
work="$build/tests/exec_mpi/work/output"
rm -rf "$work"
mkdir -p "$work"
fails=0
steps=2
for case in gpt_pp2:2 gpt_tp2_pp2:4; do
  p="${case%%:*}" n="${case##*:}"
  "$build/piper-compile" -q "$src/tests/exec_mpi/programs/$p.yaml" -o "$work/$p.plan" || exit 1
  if ! timeout 120 "$src/tests/mpirun.sh" "$n" "$build/piper-exec" "$work/$p.plan" --steps $steps -q \
       --timeout 60 --trace "$work/$p.json" > "$work/$p.out" 2>&1; then
    echo "FAIL $p: piper-exec failed"; sed 's/^/    /' "$work/$p.out"; fails=$((fails + 1)); continue
  fi
  # (Graphviz's and fontconfig's own leaks are suppressed as in tests/viz for the sanitizer build)
  if [ -x "$build/piper-viz" ] && ! LSAN_OPTIONS="suppressions=$src/tests/viz/lsan.supp:print_suppressions=0" \
       "$build/piper-viz" timeline "$work/$p.json" -o "$work/$p.svg" > "$work/$p.viz" 2>&1; then
    echo "FAIL $p: piper-viz cannot read the trace"; sed 's/^/    /' "$work/$p.viz"; fails=$((fails + 1))
  fi
  # the events each device should have per step, from the plan's lists
  # (devices that share a list, data-parallel replicas, run its instructions: "devices N" maps
  # each device to its list)
  awk '/^list /{l=$2} /^devices /{l=""; dev=1} l!="" && $2 ~ /^(compute|coll|send|recv)$/ {
         g=""; for (i=3;i<=NF;i++) if ($i ~ /^sendrecv=/) g=$i
         if (g == "" || !seen[l, g]++) want[l]++
       }
       dev && $2 ~ /^node=/ { for (i=2;i<=NF;i++) if ($i ~ /^list=/) { split($i, f, "="); print $1, want[f[2]] + 0 } }
      ' "$work/$p.plan" | sort -n > "$work/$p.want"
  # the trace's facts: one line per X event "pid tid ts_ns end_ns", and the named pids/tids
  awk -v n="$n" -v steps=$steps -v want="$work/$p.want" '
    function num(key,   m) { if (match($0, "\"" key "\": [0-9.]+")) { m = substr($0, RSTART, RLENGTH); sub(/.*: /, "", m); return m } return -1 }
    function ns(x,   a) { split(x, a, "."); return a[1] * 1000 + a[2] }
    BEGIN { while ((getline l < want) > 0) { split(l, f, " "); expect[f[1]] = f[2] * steps } }
    /"name": "process_name"/ { procs[num("pid")] = 1 }
    /"name": "thread_name"/ { threads[num("pid") " " num("tid")] = 1 }
    /"ph": "X"/ {
      pid = num("pid"); tid = num("tid"); a = ns(num("ts")); b = a + ns(num("dur"))
      count[pid]++
      if (!((pid " " tid) in threads)) { print "an event on unnamed thread " pid "/" tid; bad = 1 }
      k = pid " " tid
      ev[k, ++nev[k]] = a " " b
    }
    END {
      np = 0; for (p in procs) np++
      if (np != n) { print np " processes for " n " ranks"; bad = 1 }
      for (d = 0; d < n; d++) if (count[d] != expect[d]) { print "device " d ": " count[d] " events, the plan says " expect[d]; bad = 1 }
      for (k in nev) {
        # events arrive per thread in order of completion; sort by start (insertion sort is fine)
        m = nev[k]
        for (i = 1; i <= m; i++) { split(ev[k, i], f, " "); s[i] = f[1]; e[i] = f[2] }
        for (i = 2; i <= m; i++) { x = s[i]; y = e[i]; j = i - 1; while (j >= 1 && s[j] > x) { s[j+1] = s[j]; e[j+1] = e[j]; j-- } s[j+1] = x; e[j+1] = y }
        for (i = 2; i <= m; i++) if (s[i] < e[i-1]) { print "thread " k ": an event starts at " s[i] " ns before the previous ends at " e[i-1]; bad = 1; break }
        total += m
      }
      if (!bad) print "ok " total " events on " length(nev) " threads of " n " processes, none overlapping"
      exit bad
    }' "$work/$p.json" > "$work/$p.check"
  if [ $? -eq 0 ]; then echo "ok   $p: $(cat "$work/$p.check")"; else echo "FAIL $p:"; sed 's/^/    /' "$work/$p.check"; fails=$((fails + 1)); fi
done

# the prediction
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_pp2.yaml" -o "$work/pp2.plan" || exit 1
timeout 120 "$src/tests/mpirun.sh" 2 "$build/piper-exec" "$work/pp2.plan" --steps 3 --timeout 60 > "$work/predict.out" 2>&1
line=$(grep "peak memory (MiB), predicted" "$work/predict.out")
if grep -q "step time: predicted [0-9.]* ms, measured [0-9.]* ms" "$work/predict.out" && [ -n "$line" ] &&
   echo "$line" | awk '{ok = 0; for (i = 1; i <= NF; i++) if ($i ~ /^r[0-9]+$/) { split($(i+1), f, "/"); n++; if (f[1] > 0 && f[1] <= 1.02 * f[2] && f[2] <= 1.02 * f[1]) ok++ } exit !(n == 2 && ok == 2)}'; then
  echo "ok   prediction: $(grep 'step time: predicted' "$work/predict.out" | sed 's/^ *//')"
  echo "     $line"
else
  echo "FAIL prediction; output:"; sed 's/^/    /' "$work/predict.out"; fails=$((fails + 1))
fi
mkdir -p "$work/alone"
cp "$build/piper-exec" "$work/alone/"

single="$work/single.plan"
"$build/piper-compile" -q "$src/tests/exec_mpi/programs/gpt_single.yaml" -o "$single" || exit 1
if timeout 120 "$src/tests/mpirun.sh" 1 "$work/alone/piper-exec" "$single" --steps 1 > "$work/alone.out" 2>&1 &&
   grep -q "step time: predicted [0-9.]* ms" "$work/alone.out" && ! grep -q "no piper-sim prediction" "$work/alone.out"; then
  echo "ok   piper-exec alone predicts: $(grep 'step time: predicted' "$work/alone.out" | sed 's/^ *//')"
else
  echo "FAIL piper-exec alone; output:"; sed 's/^/    /' "$work/alone.out"; fails=$((fails + 1))
fi
exit $((fails > 0))
