#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# fmt: every C source and header is laid out as .clang-format says
# (`make check-fmt`; `make fmt` fixes it). vmlinux.h is generated, so not checked.
cd "$(dirname "$0")/../.."
command -v clang-format >/dev/null || { echo "FAIL fmt: clang-format missing (make deps installs it)"; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null | grep -v '^bpf/vmlinux/')
[ "${#files[@]}" -gt 0 ] || { echo "SKIP fmt: not a git checkout (no file list)"; exit 0; }
bad=$(clang-format --dry-run "${files[@]}" 2>&1 | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning:.*/\1/p' | sort | uniq -c)
if [ -n "$bad" ]; then
	echo "FAIL fmt: not laid out as .clang-format says (run make fmt): $(echo "$bad" | awk '{printf "%s (%s) ", $2, $1}')"
	exit 1
fi
echo "PASS fmt (${#files[@]} files)"
