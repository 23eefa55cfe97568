#!/usr/bin/env bash
# check_includes.sh — the consumers of plans (sim/, and exec/ when asked) may include, of piper's
# own headers, only sched/plan.h, base/base.h, viz/trace.h (the Chrome-trace writer) and their own
# module's headers, and may link only the plan library (piper_plan) and the trace writer
# (piper_trace), never the compiler (DESIGN.md, "Layout"). Registered as a ctest; prints each
# offending line and exits 1.
#   usage: tests/check_includes.sh [SOURCE_DIR] [MODULE...]   (default module: sim)
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
shift || true
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(sim)

re_inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^">]+)[">]'
bad=0
for m in "${modules[@]}"; do
  dir="$root/$m"
  [ -d "$dir" ] || { echo "check_includes: no module $m in $root"; exit 1; }
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
        case "$inc" in base/*|ir/*|sched/*|sim/*|exec/*|viz/*|tests/*)
          echo "$rel:$n: includes <$inc>: include piper headers with quotes, and only sched/plan.h and base/base.h"
          bad=1;;
        esac
        continue
      fi
      # resolve the quoted path against the file's folder, then the source root
      path="$inc"
      [ -e "$root/$here/$inc" ] && path="$(realpath -m --relative-to="$root" "$root/$here/$inc")"
      case "$path" in
        sched/plan.h|base/base.h|viz/trace.h|"$m"/*) ;;
        *) echo "$rel:$n: includes \"$inc\" ($path): $m/ may include only sched/plan.h, base/base.h, viz/trace.h and its own headers"
           bad=1;;
      esac
    done < "$f"
  done < <(find "$dir" -name '*.[ch]' -print0 | sort -z)
  if [ -f "$dir/CMakeLists.txt" ] && grep -nE 'piper_(sched|ir|doc|model|cluster)\b' "$dir/CMakeLists.txt"; then
    echo "$m/CMakeLists.txt: links a compiler library; $m/ may link only piper_plan (and piper_base)"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "check_includes: ${modules[*]}: only sched/plan.h, base/base.h and viz/trace.h of piper's headers"
exit $bad
