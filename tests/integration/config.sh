#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# Configuration: docs/configuration.md is generated from the option table
# and must be current; --config files apply options through the same
# parser, with clear errors for unknown options and bad values.
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
AGENT=$BUILD/infertrace-agent
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if "$AGENT" --config-doc | diff -u docs/configuration.md - >"$tmp/diff"; then
	echo "PASS config_doc_current"
else
	echo "FAIL config_doc_current: docs/configuration.md differs from --config-doc (make docs): $(head -c 400 "$tmp/diff")"
fi

# every visible long option of --help is in the page
missing=""
for o in $("$AGENT" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
	case "$o" in --help | --usage | --version) continue ;; esac
	grep -qF "\`$o\`" docs/configuration.md || missing="$missing $o"
done
[ -z "$missing" ] && echo "PASS config_doc_complete" ||
	echo "FAIL config_doc_complete: options missing from docs/configuration.md:$missing"

# a config file is applied: the mode and the interval show in the records
printf '# test\nmode = deep\ninterval = 0.2   # seconds\nno-net = true\nduration=1\n' >"$tmp/ok.conf"
if [ "$(id -u)" -ne 0 ]; then
	echo "SKIP config_file_applied: needs root to load BPF"
else
	"$AGENT" --config "$tmp/ok.conf" -o "$tmp/out.jsonl" 2>"$tmp/err"
	rc=$?
	modes=$(jq -r 'select(.type == "stats") | .mode' "$tmp/out.jsonl" 2>/dev/null | sort -u)
	nstats=$(grep -c '"type":"stats"' "$tmp/out.jsonl")
	nets=$(grep -c '"type":"net"' "$tmp/out.jsonl")
	if [ "$rc" -eq 0 ] && [ "$modes" = deep ] && [ "$nstats" -ge 3 ] && [ "$nets" -eq 0 ]; then
		echo "PASS config_file_applied"
	else
		echo "FAIL config_file_applied: rc=$rc modes=$modes stats=$nstats net=$nets $(head -c 300 "$tmp/err")"
	fi
fi

# bad files: clear one-line errors naming file, line and option, non-zero exit
check_bad() {
	local name=$1 content=$2 want=$3 out rc
	printf '%b' "$content" >"$tmp/bad.conf"
	out=$("$AGENT" --config "$tmp/bad.conf" 2>&1 >/dev/null)
	rc=$?
	if [ "$rc" -ne 0 ] && grep -qF -- "$want" <<<"$out"; then
		echo "PASS $name"
	else
		echo "FAIL $name: rc=$rc, wanted '$want' in: $(head -c 300 <<<"$out")"
	fi
}
check_bad config_unknown_key 'mode = deep\nbogus = 1\n' "bad.conf:2: unknown option 'bogus'"
check_bad config_bad_value 'interval = fast\n' "--interval takes seconds"
check_bad config_bad_flag 'no-net = maybe\n' "'no-net' takes true or false"
check_bad config_no_value 'output =\n' "'output' needs a value"
out=$("$AGENT" --config "$tmp/nonexistent.conf" 2>&1)
rc=$?
if [ "$rc" -ne 0 ] && grep -q "nonexistent.conf" <<<"$out" && grep -qi "no such file" <<<"$out"; then
	echo "PASS config_missing_file"
else
	echo "FAIL config_missing_file: rc=$rc: $out"
fi
