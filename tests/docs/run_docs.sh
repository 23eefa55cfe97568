#!/usr/bin/env bash
# run_docs.sh — every shell example of the documentation, run as written in a fresh copy of the
# source tree, so that a command the docs show cannot silently stop working (ctest `docs`).
#
# usage: tests/docs/run_docs.sh SOURCE_DIR BUILD_DIR [FILE.md ...]
#   (default files: README.md docs/*.md exec/README.md exec/cuda/README.md)
#
# The convention (README.md, "Development", says the same):
#   - a fenced block opened with ```sh or ```bash is a command block: its text runs with
#     `bash -e -o pipefail` from the root of the tree; every other block (``` for output,
#     ```console for a transcript, ```yaml, ```json) is shown, never run;
#   - the line right before the opening fence may carry a marker, an HTML comment that Markdown
#     renders as nothing but that anyone reading the source sees:
#       <!-- docs-test: skip REASON why -->   not run; REASON is gpu, long, network or ci
#       <!-- docs-test: timeout SECONDS -->   a longer time limit than the default for this block
#     Skipped blocks are printed with their reason; a marker that is not right before a sh or
#     bash fence, or that says something else, fails the test (it would silently do nothing).
#
# Each file gets its own copy of the tree (the tracked and untracked-but-not-ignored files, as a
# clone would have them) and runs its blocks in order, so that a later block may use what an
# earlier one of the same file wrote, and a file may not rely on another file's outputs. `build`
# in the copy is a link to BUILD_DIR: the docs spell the binaries ./build/piper-*, as a user who
# ran scripts/setup.sh has them. A block fails on a non-zero exit or on its time limit; the test
# names FILE:LINE of every failing block and exits 1 after running them all.
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: tests/docs/run_docs.sh SOURCE_DIR BUILD_DIR [FILE.md ...]" >&2
  exit 2
fi
src=$(cd "$1" && pwd) || exit 2
build=$(cd "$2" && pwd) || exit 2
shift 2
default_timeout=${PIPER_DOCS_TIMEOUT:-60}
# every limit times this (a sanitizer build runs the same commands several times slower)
time_scale=${PIPER_DOCS_TIME_SCALE:-1}
case $time_scale in '' | *[!0-9]* | 0) echo "PIPER_DOCS_TIME_SCALE=$time_scale: give a whole number >= 1" >&2; exit 2 ;; esac
if [ $# -eq 0 ]; then
  # shellcheck disable=SC2046  # the names are the repository's own, without spaces
  set -- $(cd "$src" && ls README.md docs/*.md exec/README.md exec/cuda/README.md) || exit 2
fi
[ -x "$build/piper-compile" ] || { echo "$build/piper-compile: not built; build piper first (cmake --build $build)" >&2; exit 2; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/piper-docs.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT

# A copy of the tree as a clone has it: git's file list when the source is a checkout, else
# everything but build folders and .git.
copy_tree() {
  local dst=$1
  mkdir -p "$dst"
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
       xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
       tar --null -T - -cf -) | (cd "$dst" && tar -xf -)
  else
    (cd "$src" && tar --exclude=./.git --exclude='./build*' -cf - .) | (cd "$dst" && tar -xf -)
  fi
  rm -rf "$dst/build"
  ln -s "$build" "$dst/build"
}

# The blocks of one Markdown file, as records "LINE<TAB>KIND<TAB>ARG<TAB>FILE-OF-TEXT", where
# KIND is run or skip and ARG the timeout or the skip reason.
extract() {
  local md=$1 out=$2
  awk -v out="$out" -v dflt="$default_timeout" '
    function flush_marker() { mkind = ""; marg = "" }
    BEGIN { inblk = 0; n = 0; flush_marker() }
    inblk {
      if ($0 ~ /^```[ \t]*$/) { inblk = 0; close(body); next }
      if (run) print > body
      next
    }
    /^```/ {
      lang = substr($0, 4); sub(/[ \t].*/, "", lang)
      inblk = 1
      run = (lang == "sh" || lang == "bash")
      if (!run && mkind != "" && mkind != "bad") printf "%d\tstray\t-\t-\n", mline
      if (run) {
        n++
        body = sprintf("%s/block%03d.sh", out, n)
        printf "" > body
        kind = "run"; arg = dflt
        if (mkind == "skip") { kind = "skip"; arg = marg }
        else if (mkind == "timeout") arg = marg
        printf "%d\t%s\t%s\t%s\n", NR, kind, arg, body
      }
      flush_marker()
      next
    }
    /^<!-- docs-test: / {
      s = $0; sub(/^<!-- docs-test: /, "", s); sub(/ *-->[ \t]*$/, "", s)
      split(s, w, " ")
      if (w[1] == "skip") { mkind = "skip"; marg = substr(s, 6) }
      else if (w[1] == "timeout" && w[2] ~ /^[0-9]+$/) { mkind = "timeout"; marg = w[2] }
      else { mkind = "bad"; marg = s }
      mline = NR
      if (mkind == "bad") printf "%d\tbad\t%s\t-\n", NR, s
      next
    }
    {
      if (mkind != "" && mkind != "bad") printf "%d\tstray\t-\t-\n", mline
      flush_marker()
    }
  ' "$md"
}

failures=0
ran=0
skipped=0
t_all=$(date +%s)
for md in "$@"; do
  if [ ! -f "$src/$md" ]; then
    echo "$md: no such file in $src" >&2
    failures=$((failures + 1))
    continue
  fi
  tag=$(printf '%s' "$md" | tr '/.' '__')
  tree="$scratch/$tag/tree"
  blocks="$scratch/$tag/blocks"
  mkdir -p "$blocks"
  extract "$src/$md" "$blocks" > "$scratch/$tag/index" || { failures=$((failures + 1)); continue; }
  [ -s "$scratch/$tag/index" ] || continue
  copy_tree "$tree"
  while IFS=$'\t' read -r line kind arg body; do
    case "$kind" in
      bad)
        echo "$md:$line: unknown docs-test marker '$arg'; use 'skip gpu|long|network|ci WHY' or 'timeout SECONDS'"
        failures=$((failures + 1))
        continue ;;
      stray)
        echo "$md:$line: a docs-test marker that no \`\`\`sh or \`\`\`bash fence follows; put it on the line right before the block's fence"
        failures=$((failures + 1))
        continue ;;
      skip)
        reason=${arg%% *}
        case "$reason" in
          gpu|long|network|ci) ;;
          *) echo "$md:$line: skip reason '$reason' is not one of gpu, long, network, ci"
             failures=$((failures + 1))
             continue ;;
        esac
        echo "$md:$line: skipped ($arg)"
        skipped=$((skipped + 1))
        continue ;;
    esac
    t0=$(date +%s.%N)
    log="$body.log"
    arg=$((arg * time_scale))
    (cd "$tree" && timeout --kill-after=10 "$arg" bash -e -o pipefail "$body") > "$log" 2>&1 < /dev/null
    rc=$?
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    ran=$((ran + 1))
    if [ "$rc" -eq 0 ]; then
      echo "$md:$line: ok (${dt} s)"
    else
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "$md:$line: the block did not finish in its time limit of $arg s; make the command faster or mark it (<!-- docs-test: timeout N --> or <!-- docs-test: skip long WHY -->)"
      else
        echo "$md:$line: the block failed with exit status $rc after ${dt} s; fix the command or what it runs"
      fi
      sed 's/^/    | /' "$body" | head -n 20
      echo "    output (last 20 lines):"
      tail -n 20 "$log" | sed 's/^/    > /'
      failures=$((failures + 1))
    fi
  done < "$scratch/$tag/index"
done
echo "docs: $ran blocks run, $skipped skipped, $failures failed in $(( $(date +%s) - t_all )) s"
[ "$failures" -eq 0 ]
