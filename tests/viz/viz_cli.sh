#!/bin/sh
# viz_cli.sh — piper-viz end to end: each command on real inputs (a bundled program, its plan
# file from piper-compile, a fixture trace) into every format, checked by the files' first bytes
# and a box the figure must contain; and the exit statuses: 2 for usage errors, 1 for inputs that
# cannot be read or drawn, 0 otherwise.
# usage: viz_cli.sh PIPER_VIZ SOURCE_DIR (piper-compile is expected next to piper-viz)
set -u
viz=$1
src=$2
compile=$(dirname "$viz")/piper-compile
tmp=$(mktemp -d /tmp/piper_viz_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failed=0

# expect STATUS TEXT ARGS...: exit status STATUS and TEXT somewhere in stdout or stderr
expect() {
  want=$1
  text=$2
  shift 2
  "$viz" "$@" >"$tmp/out" 2>&1
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL: piper-viz $*: exit status $got, want $want" >&2
    cat "$tmp/out" >&2
    failed=$((failed + 1))
  elif [ -n "$text" ] && ! grep -qF -- "$text" "$tmp/out"; then
    echo "FAIL: piper-viz $*: output lacks '$text':" >&2
    cat "$tmp/out" >&2
    failed=$((failed + 1))
  fi
}

# has FILE TEXT: the file contains TEXT
has() {
  if ! grep -qF -- "$2" "$1"; then
    echo "FAIL: $1 lacks '$2'" >&2
    failed=$((failed + 1))
  fi
}

prog=$src/configs/programs/pp4_1f1b.yaml
trace=$src/tests/fixtures/viz/trace_pp2.json

expect 0 "" schedule "$prog" -o "$tmp/pp4.svg"
has "$tmp/pp4.svg" 'id="r2&#45;F&#45;5" class="node box F"'
expect 0 "" schedule "$prog" -o "$tmp/pp4.png"
expect 0 "" schedule "$prog" -o "$tmp/pp4.pdf"
expect 0 "" schedule "$prog" -o "$tmp/pp4.dot"
has "$tmp/pp4.png" "PNG"
has "$tmp/pp4.pdf" "%PDF"
has "$tmp/pp4.dot" 'id="r2-F-5"'
expect 0 "" schedule "$prog" --unit --title "1F1B" -o "$tmp/unit.svg"
has "$tmp/unit.svg" ">1F1B<"
expect 0 "<svg" schedule "$prog" -o - --format svg
# its own orders name no schedule builder: the title names the model
has "$tmp/pp4.svg" 'gpt_1.7b — p = 4, v = 1, m = 8'

# --column and --width: the figure's width bounded (svg: points; png: pixels at 150 dpi)
# width W -> "WIDTHpt" of the svg, or the png's IHDR width
svg_width() { sed -n 's/^<svg width="\([0-9]*\)pt".*/\1/p' "$1"; }
png_width() { od -An -tu1 -j16 -N4 "$1" | awk '{print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4}'; }
within() { # within WHAT GOT MAX MIN
  if [ -z "$2" ] || [ "$2" -gt "$3" ] || [ "$2" -lt "$4" ]; then
    echo "FAIL: $1 is '$2' wide, want $4..$3" >&2
    failed=$((failed + 1))
  fi
}
zbv=$src/configs/programs/pp4_zbv.yaml
expect 0 "" schedule "$zbv" --column -o "$tmp/col.svg"
has "$tmp/col.svg" 'ZB&#45;V — p = 4, v = 2, m = 8'
within "--column svg" "$(svg_width "$tmp/col.svg")" 252 212
expect 0 "" schedule "$zbv" --width 400 -o "$tmp/w400.svg"
within "--width 400 svg" "$(svg_width "$tmp/w400.svg")" 400 360
expect 0 "" schedule "$zbv" --column -o "$tmp/col.png"
within "--column png" "$(png_width "$tmp/col.png")" 525 440
expect 0 "" schedule "$zbv" --unit --width 300 -o "$tmp/wu.svg"
within "--unit --width 300 svg" "$(svg_width "$tmp/wu.svg")" 300 260

"$compile" -q "$prog" -o "$tmp/pp4.plan" || { echo "FAIL: piper-compile $prog" >&2; failed=$((failed + 1)); }
expect 0 "" schedule "$tmp/pp4.plan" -o "$tmp/plan.svg"
has "$tmp/plan.svg" 'id="r3&#45;B&#45;7"'
expect 0 "" dag "$tmp/pp4.plan" --device 1 --collapse mb -o "$tmp/plan_dag.svg"
has "$tmp/plan_dag.svg" "GPU 1"
expect 0 "" dag "$prog" --collapse mb,layers -o "$tmp/dag.pdf"
has "$tmp/dag.pdf" "%PDF"
expect 0 "" dag "$prog" --collapse layers --device 3 -o "$tmp/dag.svg"
has "$tmp/dag.svg" 'class="node compute F"'

expect 0 "" timeline "$trace" -o "$tmp/tl.svg"
has "$tmp/tl.svg" 'id="lane&#45;0&#45;2" class="node lane comm"'
expect 0 "" timeline "$trace" --window 1ms:5ms -o "$tmp/tlw.png"

# piper-sim's own trace (viz/trace.h writes it), when piper-sim is built: one lane per thread
# the trace names, and its send/receive events drawn as communication
sim=$(dirname "$viz")/piper-sim
if [ -x "$sim" ]; then
  if "$sim" "$src/tests/fixtures/sim/pp4_1f1b_tiny.yaml" --trace "$tmp/sim.json" >"$tmp/out" 2>&1; then
    expect 0 "" timeline "$tmp/sim.json" -o "$tmp/sim.svg"
    if grep -q "previous event of their stream" "$tmp/out"; then
      echo "FAIL: piper-sim's trace has overlapping events on one stream:" >&2
      cat "$tmp/out" >&2
      failed=$((failed + 1))
    fi
    threads=$(grep -c '"thread_name"' "$tmp/sim.json")
    lanes=$(grep -o 'class="node lane' "$tmp/sim.svg" | wc -l)
    if [ "$threads" -eq 0 ] || [ "$threads" -ne "$lanes" ]; then
      echo "FAIL: the trace names $threads threads, the timeline draws $lanes lanes" >&2
      failed=$((failed + 1))
    fi
    has "$tmp/sim.svg" 'class="node event p2p"'
    has "$tmp/sim.svg" 'class="node event F"'
  else
    echo "FAIL: piper-sim --trace:" >&2
    cat "$tmp/out" >&2
    failed=$((failed + 1))
  fi
fi

# usage errors
expect 2 "usage: piper-viz COMMAND"
expect 2 "unknown command 'draw'" draw "$prog" -o "$tmp/x.svg"
expect 2 "say where the figure goes" schedule "$prog"
expect 2 "cannot tell the format from" schedule "$prog" -o "$tmp/x.jpg"
expect 2 "--format 'gif'" schedule "$prog" -o "$tmp/x.svg" --format gif
expect 2 "--unit is for 'schedule'" dag "$prog" --unit -o "$tmp/x.svg"
expect 2 "--window is for 'timeline'" schedule "$prog" --window 1:2 -o "$tmp/x.svg"
expect 2 "--width and --column are for 'schedule'" timeline "$trace" --column -o "$tmp/x.svg"
expect 2 "--width: 'wide' is not a whole number; write the figure's width" schedule "$prog" --width wide -o "$tmp/x.svg"
expect 2 "--width: '10' is not a whole number in [50, 100000]" schedule "$prog" --width 10 -o "$tmp/x.svg"
expect 2 "unknown part 'micro'" dag "$prog" --collapse micro -o "$tmp/x.svg"
expect 2 "expected START:END" timeline "$trace" --window 5ms -o "$tmp/x.svg"
expect 2 "piper-viz: --bogus: unknown option" schedule "$prog" --bogus -o "$tmp/x.svg"
expect 0 "exit status: 0 on success" --help
# inputs that cannot be read or drawn
expect 1 "error: $tmp/missing.yaml" schedule "$tmp/missing.yaml" -o "$tmp/x.svg"
printf '[{"ph": "X", "pid": 0}]\n' >"$tmp/bad.json"
expect 1 "error: $tmp/bad.json:1:2: this event has no 'tid'" timeline "$tmp/bad.json" -o "$tmp/x.svg"
expect 1 "--device 9: the program has devices 0..3" dag "$prog" --device 9 -o "$tmp/x.svg"
expect 1 "x.svg: cannot write the figure" schedule "$prog" -o "$tmp/nodir/x.svg"
[ "$failed" -eq 0 ]
