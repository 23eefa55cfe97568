#!/usr/bin/env bash
# fuzz.sh TARGET SECONDS — build the libFuzzer target fuzz_TARGET (tests/fuzz/fuzz_TARGET.c) with
# clang into build-fuzz and run it for SECONDS on a scratch copy of its seed corpus
# (build-fuzz/corpus/TARGET, which keeps growing across runs). Every input that crashes, leaks,
# hangs or runs out of memory is copied into tests/fuzz/regressions/TARGET/, which ctest replays
# in every build (fuzz_replay_TARGET): fix the bug and keep the file.
#
# Environment: FUZZ_JOBS (parallel fuzzing processes, default 1), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
cd "$(dirname "$0")/.."

usage="usage: scripts/fuzz.sh TARGET SECONDS   (targets: $(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||' | tr '\n' ' '))"
target=${1:?$usage}
seconds=${2:?$usage}
[ -f "tests/fuzz/fuzz_${target}.c" ] || { echo "$usage" >&2; exit 2; }

cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPIPER_FUZZ=ON >/dev/null
cmake --build build-fuzz --target "fuzz_${target}" -j"$(nproc)" >/dev/null

corpus=build-fuzz/corpus/${target}
artifacts=build-fuzz/artifacts/${target}
regressions=tests/fuzz/regressions/${target}
mkdir -p "$corpus" "$artifacts" "$regressions"
cp -n tests/fuzz/corpus/"${target}"/* "$corpus"/ 2>/dev/null || true
dict=()
[ -f "tests/fuzz/${target}.dict" ] && dict=(-dict="tests/fuzz/${target}.dict")

log=build-fuzz/fuzz-${target}.log
echo "fuzz: fuzz_${target} for ${seconds}s on $corpus (log: $log)"
# Fork mode keeps going after a crash, so one long run can collect several distinct bugs.
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "build-fuzz/tests/fuzz/fuzz_${target}" "$corpus" \
  -fork="${FUZZ_JOBS:-1}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
  -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1
status=$?
set -e

# libFuzzer names findings crash-<sha1>, leak-..., timeout-..., oom-...; the repository ignores
# those names (stray artifacts), so regressions are kept as <kind>_<sha1>.
found=0
for f in "$artifacts"/*; do
  [ -f "$f" ] || continue
  base=$(basename "$f")
  kind=${base%%-*}
  sha=${base#*-}
  dest="$regressions/${kind}_${sha}"
  if [ ! -e "$dest" ]; then
    cp "$f" "$dest"
    found=$((found + 1))
    echo "fuzz: new finding $dest"
  fi
done
grep -E '^#[0-9]+|Done|stat::' "$log" | tail -n 4 || true
echo "fuzz: fuzz_${target} exited with $status; ${found} new input(s) in $regressions"
