#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
# metrics_doc: every metric the agent serves is listed in docs/operations.md.
cd "$(dirname "$0")/../.."
exec python3 tests/static/metrics_doc.py
