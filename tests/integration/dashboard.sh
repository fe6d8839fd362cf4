#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# The Grafana dashboard (deploy/helm/infertrace/dashboards/infertrace.json),
# checked without Grafana. One line per case: PASS / FAIL.
#
#   dashboard_grafana_types   tests/node/dashboard_check.mjs: the JSON
#                             type-checked by the TypeScript compiler
#                             against Grafana's published types
#                             (@grafana/schema: the dashboard, its panels
#                             by plugin, their options and field configs;
#                             tests/node/dashboard_types.ts); an unknown
#                             field or a value of the wrong kind fails
#   dashboard_layout, dashboard_promql, dashboard_series_served,
#   dashboard_queries         tests/integration/dashboard_check.py: ids and
#                             grid, data sources and variables; every query
#                             passes `promtool check rules`, reads only
#                             series the agent serves, and the main panels'
#                             queries give on made-up series the values
#                             worked out by hand (`promtool test rules`)
#   dashboard_helm            the chart (tests/helm/render.go) puts the file
#                             byte for byte in a ConfigMap labelled for
#                             Grafana's sidecar when grafanaDashboard.enabled
#                             (ci/nondefault-values.yaml: its labels,
#                             annotations and namespace), and none by default
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CHART=deploy/helm/infertrace
DASH=$CHART/dashboards/infertrace.json
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ------------------------------------------------------- Grafana's types ----
if ! command -v node >/dev/null || [ ! -d tests/node/node_modules/@grafana/schema ] ||
	[ ! -d tests/node/node_modules/typescript ]; then
	echo "FAIL dashboard_grafana_types: node or tests/node/node_modules (@grafana/schema, typescript) missing (make deps)"
elif node tests/node/dashboard_check.mjs "$DASH" >"$tmp/types" 2>&1; then
	echo "PASS dashboard_grafana_types"
else
	echo "FAIL dashboard_grafana_types: $(head -n 3 "$tmp/types" | tr '\n' ' ' | cut -c1-600)"
fi

# ------------------------------------------------------- queries, layout ----
if ! command -v promtool >/dev/null; then
	for n in dashboard_layout dashboard_promql dashboard_series_served dashboard_queries; do
		echo "FAIL $n: promtool missing (make deps installs Debian's prometheus)"
	done
else
	python3 tests/integration/dashboard_check.py "$DASH" "$tmp" ||
		echo "FAIL dashboard_check: dashboard_check.py exited $?"
fi

# ------------------------------------------------------------------ helm ----
RENDER=$BUILD/tests/helm-render
if ! command -v go >/dev/null || ! make -s BUILD="$BUILD" "$RENDER" >"$tmp/build" 2>&1; then
	echo "FAIL dashboard_helm: cannot build tests/helm/render.go: $(tail -n 3 "$tmp/build" 2>/dev/null | tr '\n' ' ')"
elif ! "$RENDER" -chart "$CHART" -json "$tmp/default.json" -out /dev/null 2>"$tmp/r.err" ||
	! "$RENDER" -chart "$CHART" -f "$CHART/ci/nondefault-values.yaml" -json "$tmp/nondefault.json" \
		-out /dev/null 2>>"$tmp/r.err"; then
	echo "FAIL dashboard_helm: render: $(head -c 300 "$tmp/r.err")"
else
	python3 - "$DASH" "$tmp/default.json" "$tmp/nondefault.json" <<'PY'
import json, sys
dash = open(sys.argv[1]).read()
problems = []
def dashboards(path):
    return [d["object"] for d in json.load(open(path))
            if d["object"].get("kind") == "ConfigMap" and "infertrace.json" in d["object"].get("data", {})]
if dashboards(sys.argv[2]):
    problems.append("the default render has a dashboard ConfigMap (grafanaDashboard.enabled is false)")
cms = dashboards(sys.argv[3])
if len(cms) != 1:
    problems.append("%d dashboard ConfigMaps in the nondefault render, want 1" % len(cms))
else:
    md = cms[0]["metadata"]
    if cms[0]["data"]["infertrace.json"] != dash:
        problems.append("the ConfigMap's infertrace.json is not the chart's file byte for byte")
    if md.get("labels", {}).get("grafana_dashboard") != "1" or md.get("labels", {}).get("team") != "inference":
        problems.append("labels %s: want grafana_dashboard \"1\" and team inference" % md.get("labels"))
    if md.get("annotations") != {"grafana_folder": "Inference"}:
        problems.append("annotations %s" % md.get("annotations"))
    if md.get("namespace") != "monitoring":
        problems.append("namespace %s, want monitoring" % md.get("namespace"))
print("FAIL dashboard_helm: " + "; ".join(problems) if problems else "PASS dashboard_helm")
PY
fi
