#!/usr/bin/env bash
# check_includes.sh — the module layering (docs/architecture.md, "Layout"), checked on the source:
# which of piper's headers each module may include, which libraries it may link, and that no
# library's sources are chosen by a file-name glob. Registered as a ctest; prints each offending
# line and exits 1.
#
# The rules, one row per module (RULES below):
#   plan/  the bottom contract: base/base.h and its own headers only
#   ir/    base/base.h, plan/plan.h and its own headers (the IR sits on the plan, never on sched/)
#   sim/   the plan's consumers: plan/plan.h, base/base.h, viz/trace.h (the Chrome-trace writer)
#   exec/  and their own headers; they link the plan library and the trace writer, never the
#          compiler
#   usage: tests/check_includes.sh [SOURCE_DIR] [MODULE...]   (default: every module of RULES)
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
shift || true

# module -> the headers of other modules it may include (space-separated); its own are always fine
declare -A RULES=(
  [plan]="base/base.h"
  [ir]="base/base.h plan/plan.h"
  [sim]="base/base.h plan/plan.h viz/trace.h"
  [exec]="base/base.h plan/plan.h viz/trace.h"
)
# modules whose CMakeLists.txt may not link a compiler library
CONSUMERS=" sim exec "

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(plan ir sim exec)

re_inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^">]+)[">]'
bad=0
for m in "${modules[@]}"; do
  dir="$root/$m"
  [ -d "$dir" ] || { echo "check_includes: no module $m in $root"; exit 1; }
  [ -n "${RULES[$m]+x}" ] || { echo "check_includes: no rule for module $m; add one to RULES"; exit 1; }
  allowed=" ${RULES[$m]} "
  while IFS= read -r -d '' f; do
    rel="${f#"$root"/}"
    here="$(dirname "$rel")"
    n=0
    while IFS= read -r line; do
      n=$((n + 1))
      [[ "$line" =~ $re_inc ]] || continue
      kind="${BASH_REMATCH[1]}" inc="${BASH_REMATCH[2]}"
      if [ "$kind" = "<" ]; then
        # system and SimGrid headers are fine; piper's own folders are not reached this way
        case "$inc" in base/*|plan/*|ir/*|sched/*|sim/*|exec/*|viz/*|tests/*)
          echo "$rel:$n: includes <$inc>: include piper's headers with quotes"
          bad=1;;
        esac
        continue
      fi
      # resolve the quoted path against the file's folder, then the source root
      path="$inc"
      [ -e "$root/$here/$inc" ] && path="$(realpath -m --relative-to="$root" "$root/$here/$inc")"
      case "$path" in "$m"/*) continue ;; esac
      case "$allowed" in *" $path "*) continue ;; esac
      list="${RULES[$m]}"
      echo "$rel:$n: includes \"$inc\" ($path): $m/ may include only ${list// /, } and its own headers"
      bad=1
    done < "$f"
  done < <(find "$dir" \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
  while IFS= read -r -d '' cm; do
    rel="${cm#"$root"/}"
    if grep -nE '^[^#]*file\(GLOB' "$cm"; then
      echo "$rel: chooses sources with file(GLOB ...); name each library's sources"
      bad=1
    fi
    case "$CONSUMERS" in *" $m "*)
      if grep -nE 'piper_(sched|ir|doc|model|cluster)\b' "$cm"; then
        echo "$rel: links a compiler library; $m/ may link only piper_plan, piper_trace and piper_base"
        bad=1
      fi;;
    esac
  done < <(find "$dir" -name CMakeLists.txt -print0 | sort -z)
done
[ $bad -eq 0 ] && echo "check_includes: ${modules[*]}: layering holds"
exit $bad
