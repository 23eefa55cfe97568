#!/bin/sh
# compile_cli.sh — piper-compile's exit statuses and messages: 2 for usage errors (unknown
# option, option without its file, no program), 1 for a program that cannot be read or compiled,
# 0 for --help and a good program (whose plan file -o writes).
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
expect 2 "unknown option '--bogus'; see piper-compile --help" "$prog" --bogus
expect 2 "-o needs a file name" "$prog" -o
expect 2 "usage: piper-compile PROGRAM" 
expect 2 "one program at a time" "$prog" "$prog"
expect 1 "error: $tmp/missing.yaml: cannot open file" "$tmp/missing.yaml"
printf 'batch: {global: 1}\ndirectives: []\nmodel: nowhere.yaml\n' >"$tmp/bad.yaml"
expect 1 "error: $tmp/bad.yaml:3:8:" "$tmp/bad.yaml"
expect 0 "exit status: 0 on success" --help
expect 0 "plan written to $tmp/dp2.plan" "$prog" -o "$tmp/dp2.plan"
if ! head -n 1 "$tmp/dp2.plan" | grep -qx 'piper-plan 2'; then
  echo "FAIL: $tmp/dp2.plan does not start with 'piper-plan 2'" >&2
  failed=$((failed + 1))
fi
[ "$failed" -eq 0 ]
