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
#   exec/  and their own headers; their libraries link the plan library and the trace writer,
#          never the compiler
#   search/ piper-search, above everything it drives: the compiler's and the simulator's
#          contracts (sched/sched.h, sim/sim.h), the IR's, the plan's and base/base.h
# A module's main programs (MAIN_SOURCES: the files of its executables, not of its libraries) may
# also include the contracts in MAIN_RULES, and its executables (MAIN_TARGETS) link their
# libraries (MAIN_LINKS): piper-sim compiles programs in-process with the compiler (sched/sched.h,
# piper_sched) and writes Chakra traces (chakra/chakra.h), piper-exec predicts with the simulator
# (sim/sim.h, piper_sim).
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
  [search]="base/base.h plan/plan.h ir/ir.h sched/sched.h sim/sim.h"
)
# modules whose CMakeLists.txt may not link a compiler library
CONSUMERS=" sim exec "
# the libraries a consumer's target_link_libraries lines may not name: the compiler's, and the other
# consumers' (its own, piper_M and piper_M_*, are fine; MAIN_LINKS may allow one to its executables)
FORBIDDEN_LINKS='piper_(sched|ir|doc|model|cluster|sim|exec)[a-z_]*'
# module -> its main programs' sources, the other headers they may include, the executables and
# what those may link besides the module's own libraries
declare -A MAIN_SOURCES=(
  [sim]="sim/piper_sim.c"
  [exec]="exec/piper_exec.c exec/sim_predict.c"
)
declare -A MAIN_RULES=(
  [sim]="sched/sched.h chakra/chakra.h"
  [exec]="sim/sim.h"
)
declare -A MAIN_TARGETS=(
  [sim]="piper-sim"
  [exec]="piper-exec"
)
declare -A MAIN_LINKS=(
  [sim]="piper_sched"
  [exec]="piper_sim"
)

modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(plan ir sim exec search)

re_inc='^[[:space:]]*#[[:space:]]*include[[:space:]]*([<"])([^">]+)[">]'
bad=0
for m in "${modules[@]}"; do
  dir="$root/$m"
  [ -d "$dir" ] || { echo "check_includes: no module $m in $root"; exit 1; }
  [ -n "${RULES[$m]+x}" ] || { echo "check_includes: no rule for module $m; add one to RULES"; exit 1; }
  while IFS= read -r -d '' f; do
    rel="${f#"$root"/}"
    allowed=" ${RULES[$m]} "
    list="${RULES[$m]}"
    case " ${MAIN_SOURCES[$m]:-} " in *" $rel "*)
      allowed="$allowed${MAIN_RULES[$m]} "
      list="$list ${MAIN_RULES[$m]}";;
    esac
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
      # each target_link_libraries(TARGET ...) line: a forbidden library is fine only on a main
      # program's line, and only the one MAIN_LINKS gives it
      while IFS= read -r hit; do
        line="${hit#*:}"
        target=$(sed -nE 's/^[[:space:]]*target_link_libraries\([[:space:]]*([^[:space:])]+).*/\1/p' <<< "$line")
        libs=$(grep -oE "$FORBIDDEN_LINKS" <<< "$line" | sort -u)
        for lib in $libs; do
          case "$lib" in "piper_$m"|"piper_${m}_"*) continue ;; esac
          case " ${MAIN_TARGETS[$m]:-} " in *" ${target:-?} "*)
            case " ${MAIN_LINKS[$m]:-} " in *" $lib "*) continue ;; esac ;;
          esac
          echo "$rel:${hit%%:*}: $line"
          echo "$rel: ${target:-a target} links $lib; $m/'s libraries may link only piper_plan, piper_trace and" \
               "piper_base (its executables ${MAIN_TARGETS[$m]:-none} also ${MAIN_LINKS[$m]:-nothing else})"
          bad=1
        done
      done < <(grep -nE "^[[:space:]]*target_link_libraries\(.*$FORBIDDEN_LINKS" "$cm" || true)
      ;;
    esac
  done < <(find "$dir" -name CMakeLists.txt -print0 | sort -z)
done
[ $bad -eq 0 ] && echo "check_includes: ${modules[*]}: layering holds"
exit $bad
