#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# tests/run.sh - run every test tier and sum the results.
#
#   unit:        build/tests/unit/test_*   (cmocka; "[  PASSED  ] N test(s)." lines)
#   static:      tests/static/*.sh         (checks over the sources; same output as:)
#   integration: tests/integration/*.sh    (print "PASS name", "FAIL name: why",
#                                           "SKIP name: why", one line per test)
#
# Ends with "N passed, N failed, N skipped"; exits non-zero on any failure or
# when no test ran. TEST_FILTER=regex runs only matching test files.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
export INFERTRACE_DATA=${INFERTRACE_DATA:-$(cd .. && pwd)/shared/data}
passed=0 failed=0 skipped=0
logdir=$BUILD/test-logs
mkdir -p "$logdir"

want() { [ -z "${TEST_FILTER:-}" ] || [[ "$1" =~ $TEST_FILTER ]]; }

# cmocka prints "[  PASSED  ] N test(s)." / "[  FAILED  ] N test(s)..." /
# "[  SKIPPED ] N test(s)..." per group.
count_cmocka() {
	local log=$1 p f s
	p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
	echo "$p $f $s"
}

for t in "$BUILD"/tests/unit/test_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	case "$t" in *.o|*.d) continue ;; esac
	name=$(basename "$t")
	want "$name" || continue
	log=$logdir/$name.log
	timeout 600 "$t" >"$log" 2>&1
	rc=$?
	read -r p f s < <(count_cmocka "$log")
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed or timed out before its summary
		echo "FAIL $name: exit $rc (see $log)"
	fi
	[ "$f" -gt 0 ] && { echo "--- $name"; grep -E '^\[  (FAILED|ERROR)|^\[  FAILED|Error|error:' "$log" | head -20; }
	echo "unit $name: $p passed, $f failed, $s skipped"
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done

for t in tests/static/*.sh tests/integration/*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	want "$name" || continue
	log=$logdir/$name.log
	timeout 900 bash "$t" >"$log" 2>&1
	rc=$?
	p=$(grep -c '^PASS ' "$log") f=$(grep -c '^FAIL ' "$log") s=$(grep -c '^SKIP ' "$log")
	grep -E '^(PASS|FAIL|SKIP) ' "$log"
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		echo "FAIL $name: exit $rc without a FAIL line (see $log)"
	fi
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ $((passed + failed)) -gt 0 ]
