#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# paths: every repository path named in docs and code comments exists.
cd "$(dirname "$0")/../.."
exec python3 tests/static/paths.py
