#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# modules: the module graph of agent/ and correlator/ has no cycle and every
# call goes down the data flow (tests/static/modules.py says how).
cd "$(dirname "$0")/../.."
if ! command -v ctags >/dev/null || ! ctags --version 2>/dev/null | grep -q Universal; then
	echo "FAIL modules_no_cycle: Universal Ctags missing (make deps installs universal-ctags)"
	exit 0
fi
exec python3 tests/static/modules.py
