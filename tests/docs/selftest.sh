#!/usr/bin/env bash
# selftest.sh — run_docs.sh on a Markdown file of known blocks (ctest `docs_runner`): a passing
# block, a failing one, one past its time limit, skipped and console blocks that must not run,
# an earlier block's output used by a later one, and malformed markers, each reported with its
# line.
# usage: tests/docs/selftest.sh BUILD_DIR
set -uo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/piper-docs-self.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src"
cat > "$work/src/T.md" <<'MD'
# blocks of known outcome

<!-- docs-test: skip gpu no GPU in this test -->
```sh
exit 3
```

```sh
echo made > out.txt
```

```console
$ exit 1
```

```
exit 1
```

<!-- docs-test: timeout 2 -->
```bash
grep -q made out.txt
sleep 30
```

```sh
false
echo not reached
```

<!-- docs-test: skip gpu -->

```sh
true
```
<!-- docs-test: skip lunch -->
```sh
true
```
<!-- docs-test: wibble -->
```sh
true
```
MD
out=$(bash "$here/run_docs.sh" "$work/src" "$build" T.md 2>&1)
rc=$?
echo "$out"
fail=0
want() {
  grep -qF -- "$1" <<<"$out" || { echo "selftest: missing from the report: $1"; fail=1; }
}
[ "$rc" -eq 1 ] || { echo "selftest: run_docs.sh exited $rc; expected 1"; fail=1; }
want "T.md:4: skipped (gpu no GPU in this test)"
want "T.md:8: ok"
want "T.md:21: the block did not finish in its time limit of 2 s"
want "T.md:26: the block failed with exit status 1"
want "T.md:31: a docs-test marker that no"
want "T.md:33: ok"
want "T.md:37: skip reason 'lunch' is not one of gpu, long, network, ci"
want "T.md:40: unknown docs-test marker 'wibble'"
want "docs: 5 blocks run, 1 skipped, 5 failed"
if grep -q "not reached" <<<"$(grep -v '^    |' <<<"$out")"; then echo "selftest: a block went on after a failing command"; fail=1; fi
[ "$fail" -eq 0 ] && echo "selftest: every outcome as expected"
exit "$fail"
