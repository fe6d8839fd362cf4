#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# The Helm chart (deploy/helm/infertrace), the image recipe and the systemd
# unit, checked without a cluster. One line per case: PASS / FAIL / SKIP.
#
#   helm_yamllint                 yamllint on Chart.yaml, values.yaml, ci/
#   helm_render_go_LABEL          tests/helm/render.go (text/template + sprig,
#                                 as Helm) renders the chart with values.yaml
#                                 (LABEL default) and each ci/*-values.yaml
#                                 (LABEL: the file's name less -values.yaml);
#                                 a template error or an unknown function fails
#   helm_renderer_catches_*       ... and fails on a misspelt function, a
#                                 misspelt .Values path, a failing `required`,
#                                 a template that does not parse
#   helm_k8s_schema_LABEL[...]    every rendered object against the Kubernetes
#                                 schemas (tests/node/k8s_validate.mjs, npm
#                                 kubernetes-models) and its type declarations
#                                 (unknown fields)
#   helm_k8s_schema_catches_nindent  ... which refuse a wrong nindent
#   helm_lint / helm_template_*   `helm lint --strict` and `helm template`
#                                 (only when helm is on the PATH; its renders
#                                 then replace render.go's below)
#   helm_values_* / helm_*_LABEL  tests/integration/helm_check.py: .Values
#                                 references, values documentation, and on
#                                 each render the DaemonSet's security
#                                 context, mounts, probes, the agent.conf
#                                 options against the agent's option table,
#                                 Kafka TLS/SASL wiring
#   helm_rendered_yamllint_*      yamllint on those renders (duplicate keys,
#                                 which the YAML parser would silently merge)
#   helm_agent_parses_*           the agent accepts the rendered agent.conf
#   systemd_agent_conf_*          ... and deploy/systemd/agent.conf, whose
#                                 commented-out lines are options too
#   helm_prometheus_rules_LABEL   the PrometheusRule's groups pass `promtool
#                                 check rules` and read only series the
#                                 agent serves (its sources' family names)
#   helm_prometheus_alerts_fire   `promtool test rules` (tests/helm/
#                                 alerts_test.yml) on the nondefault render:
#                                 each alert fires on the node it should,
#                                 with its labels and rendered annotations,
#                                 and not on the healthy one
#   helm_notes                    NOTES.txt tells how to opt in and deep-dive
#   dockerfile_targets            every binary deploy/Dockerfile ships is
#                                 built by the make targets it runs
#   systemd_unit                  systemd-analyze verify on the unit
#
# The agent options come from `infertrace-agent --config-doc` when the agent
# is built (the live table), else from docs/configuration.md, which
# tests/integration/config.sh keeps equal to it.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
CHART=deploy/helm/infertrace
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ! command -v python3 >/dev/null || ! python3 -c 'import yaml' 2>/dev/null; then
	echo "FAIL helm_checker: python3 with PyYAML missing (make deps installs python3-yaml)"
	exit 0
fi

# ------------------------------------------------------------- yamllint ----
if command -v yamllint >/dev/null; then
	if yamllint -f parsable -c "$CHART/.yamllint" "$CHART" >"$tmp/yl" 2>&1; then
		echo "PASS helm_yamllint"
	else
		echo "FAIL helm_yamllint: $(head -n 3 "$tmp/yl" | tr '\n' ' ')"
	fi
else
	echo "FAIL helm_yamllint: yamllint missing (make deps)"
fi

# ------------------------------------------------------ option table -------
opts=docs/configuration.md
opts_src=docs/configuration.md
if [ -x "$BUILD/infertrace-agent" ] && "$BUILD/infertrace-agent" --config-doc >"$tmp/options.md" 2>/dev/null; then
	opts=$tmp/options.md
	opts_src="$BUILD/infertrace-agent --config-doc"
fi

# ------------------------------------------------- the chart, rendered ----
# LABEL=values-file pairs: default is values.yaml alone
sets=("default=")
for f in "$CHART"/ci/*-values.yaml; do
	[ -f "$f" ] && sets+=("$(basename "$f" -values.yaml)=$f")
done
RENDER=$BUILD/tests/helm-render
NODE_DIR=tests/node
if ! command -v go >/dev/null; then
	echo "FAIL helm_render_go: go missing (make deps installs golang-go)"
	RENDER=
elif ! make -s BUILD="$BUILD" "$RENDER" >"$tmp/build" 2>&1; then
	echo "FAIL helm_render_go: building tests/helm/render.go: $(tail -n 3 "$tmp/build" | tr '\n' ' ')"
	RENDER=
fi
schema=true
if ! command -v node >/dev/null || [ ! -d "$NODE_DIR/node_modules/kubernetes-models" ]; then
	echo "FAIL helm_k8s_schema: node or $NODE_DIR/node_modules/kubernetes-models missing (make deps)"
	schema=false
fi

checker_args=()
for s in "${sets[@]}"; do
	label=${s%%=*} file=${s#*=}
	args=()
	[ -n "$file" ] && args=(-f "$file") && checker_args+=(--values "$label=$file")
	[ -n "$RENDER" ] || continue
	if "$RENDER" -chart "$CHART" -name it -namespace infertrace "${args[@]}" \
		-out "$tmp/render-$label.yaml" -json "$tmp/render-$label.json" \
		-notes "$tmp/notes-$label.txt" 2>"$tmp/render.err"; then
		echo "PASS helm_render_go_$label"
		$schema && node "$NODE_DIR/k8s_validate.mjs" "$label" "$tmp/render-$label.json"
	else
		echo "FAIL helm_render_go_$label: $(head -c 400 "$tmp/render.err")"
	fi
done

# the renderer must refuse what Helm refuses: a copy of the chart with one
# fault each (sed expressions on templates/configmap.yaml)
if [ -n "$RENDER" ]; then
	for fault in 'function|s/nindent 4 }}/nindnet 4 }}/' \
		'values_path|s/\.Values\.agent\.mode/.Values.agent.mdoe/' \
		'required|s/{{ \.Values\.agent\.mode }}/{{ required "agent.output is required" .Values.agent.output }}/' \
		'parse|s/{{- if \.Values\.agent\.output }}/{{- if .Values.agent.output }}{{ end }}/'; do
		name=${fault%%|*} expr=${fault#*|}
		rm -rf "$tmp/faulty" && cp -r "$CHART" "$tmp/faulty"
		sed -i "$expr" "$tmp/faulty/templates/configmap.yaml"
		if cmp -s "$CHART/templates/configmap.yaml" "$tmp/faulty/templates/configmap.yaml"; then
			echo "FAIL helm_renderer_catches_$name: the fault '$expr' changed nothing"
		elif "$RENDER" -chart "$tmp/faulty" -out /dev/null 2>"$tmp/faulty.err"; then
			echo "FAIL helm_renderer_catches_$name: rendered without an error"
		else
			echo "PASS helm_renderer_catches_$name"
		fi
	done
	# a wrong nindent renders valid YAML with the labels' keys in metadata:
	# the Kubernetes field check must refuse it
	rm -rf "$tmp/faulty" && cp -r "$CHART" "$tmp/faulty"
	sed -i 's/include "infertrace.labels" . | nindent 4/include "infertrace.labels" . | nindent 2/' \
		"$tmp/faulty/templates/configmap.yaml"
	if ! $schema; then
		:
	elif ! "$RENDER" -chart "$tmp/faulty" -out /dev/null -json "$tmp/faulty.json" 2>"$tmp/faulty.err"; then
		echo "FAIL helm_k8s_schema_catches_nindent: render failed: $(head -c 300 "$tmp/faulty.err")"
	elif node "$NODE_DIR/k8s_validate.mjs" faulty "$tmp/faulty.json" >"$tmp/faulty.out" 2>&1; then
		echo "FAIL helm_k8s_schema_catches_nindent: labels under metadata passed"
	elif grep -q '^FAIL .*ConfigMap.*unknown fields /metadata/' "$tmp/faulty.out"; then
		echo "PASS helm_k8s_schema_catches_nindent"
	else
		echo "FAIL helm_k8s_schema_catches_nindent: $(head -c 300 "$tmp/faulty.out")"
	fi
fi

# ------------------------------------------------------ helm, if present ----
# helm's own renders are checked below instead of render.go's
if command -v helm >/dev/null; then
	if helm lint --strict "$CHART" >"$tmp/lint" 2>&1; then
		echo "PASS helm_lint"
	else
		echo "FAIL helm_lint: $(grep -E 'ERROR|WARNING' "$tmp/lint" | head -n 3 | tr '\n' ' ')"
	fi
	for s in "${sets[@]}"; do
		label=${s%%=*} file=${s#*=}
		args=()
		[ -n "$file" ] && args=(-f "$file")
		if helm template it "$CHART" --namespace infertrace "${args[@]}" \
			>"$tmp/helm-$label.yaml" 2>"$tmp/helm.err"; then
			echo "PASS helm_template_$label"
			mv "$tmp/helm-$label.yaml" "$tmp/render-$label.yaml"
		else
			echo "FAIL helm_template_$label: $(head -c 300 "$tmp/helm.err")"
		fi
	done
else
	echo "SKIP helm_lint: helm not on PATH (the chart is rendered by tests/helm/render.go)"
fi

# ---------------------------------------------------- the chart's checks ----
for s in "${sets[@]}"; do
	label=${s%%=*}
	[ -f "$tmp/render-$label.yaml" ] && checker_args+=(--rendered "$label=$tmp/render-$label.yaml")
done
python3 tests/integration/helm_check.py --chart "$CHART" --options "$opts" \
	--options-source "$opts_src" --dump "$tmp/conf" "${checker_args[@]}"

# renders through yamllint: duplicate keys, trailing blanks, bad indentation
cat >"$tmp/rendered.yamllint" <<'EOF'
extends: default
rules:
  document-start: disable
  line-length: disable
  comments: disable
  comments-indentation: disable
  empty-lines: disable
  indentation: {spaces: consistent, indent-sequences: whatever}
  truthy: disable
EOF
for s in "${sets[@]}"; do
	label=${s%%=*}
	if [ ! -f "$tmp/render-$label.yaml" ]; then
		echo "FAIL helm_rendered_yamllint_$label: nothing rendered"
	elif yamllint -f parsable -c "$tmp/rendered.yamllint" "$tmp/render-$label.yaml" >"$tmp/ryl" 2>&1; then
		echo "PASS helm_rendered_yamllint_$label"
	else
		echo "FAIL helm_rendered_yamllint_$label: $(head -n 3 "$tmp/ryl" | sed "s|$tmp/||g" | tr '\n' ' ')"
	fi
done

# the agent itself parses each rendered agent.conf and the systemd example:
# --config-doc after --config exits 0 once every line was accepted
confs=()
for s in "${sets[@]}"; do confs+=("$tmp/conf/${s%%=*}-agent.conf"); done
for conf in "${confs[@]}" deploy/systemd/agent.conf; do
	case $conf in
	*/conf/*) name=helm_agent_parses_$(basename "$conf" -agent.conf) ;;
	*) name=systemd_agent_conf_parses ;;
	esac
	if [ ! -x "$BUILD/infertrace-agent" ]; then
		echo "SKIP $name: $BUILD/infertrace-agent not built"
	elif [ ! -f "$conf" ]; then
		echo "FAIL $name: $conf was not rendered"
	elif "$BUILD/infertrace-agent" --config "$conf" --config-doc >/dev/null 2>"$tmp/parse.err"; then
		echo "PASS $name"
	else
		echo "FAIL $name: $(head -c 300 "$tmp/parse.err")"
	fi
done
# the commented-out examples of the systemd file are options too
missing=""
for k in $(sed -nE 's/^#?([a-z][a-z0-9-]*)[ \t]*=.*/\1/p' deploy/systemd/agent.conf | sort -u); do
	grep -qF "\`--$k\`" "$opts" || missing="$missing $k"
done
[ -z "$missing" ] && echo "PASS systemd_agent_conf_options" ||
	echo "FAIL systemd_agent_conf_options: not agent options ($opts_src):$missing"

# ------------------------------------------------------- alerting rules ----
# each render's PrometheusRule: its spec is a Prometheus rule file, which
# promtool checks; every infertrace_* series it reads is one the agent
# serves (the family names in its sources); the nondefault render's
# alerts fire, and stay quiet, as tests/helm/alerts_test.yml says
fams=$(grep -rhoE '"infertrace_[a-z0-9_]+' agent --include='*.c' | tr -d '"' | sort -u)
for s in "${sets[@]}"; do
	label=${s%%=*}
	r=$tmp/render-$label.yaml
	[ -f "$r" ] || continue
	python3 - "$r" "$tmp/rules-$label.yml" <<'PY' || echo "FAIL helm_prometheus_rules_$label: cannot read the render"
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if isinstance(d, dict)]
rules = [d for d in docs if d.get("kind") == "PrometheusRule"]
if rules:
    yaml.safe_dump(rules[0]["spec"], open(sys.argv[2], "w"), sort_keys=False)
PY
	[ -f "$tmp/rules-$label.yml" ] || continue
	name=helm_prometheus_rules_$label
	if ! command -v promtool >/dev/null; then
		echo "FAIL $name: promtool missing (make deps installs Debian's prometheus package)"
		continue
	fi
	if ! promtool check rules "$tmp/rules-$label.yml" >"$tmp/pc" 2>&1; then
		echo "FAIL $name: promtool check rules: $(grep -v '^Checking' "$tmp/pc" | head -n 3 | tr '\n' ' ')"
		continue
	fi
	missing=""
	for m in $(grep -oE 'infertrace_[a-z0-9_]+' "$tmp/rules-$label.yml" | sort -u); do
		# a label the agent writes (the step histogram's infertrace_instance) is no series
		grep -qF "$m=" agent/control/metrics.c && continue
		grep -qxF "${m%_bucket}" <<<"$fams" || missing="$missing $m"
	done
	[ -n "$fams" ] && [ -z "$missing" ] && echo "PASS $name" ||
		echo "FAIL $name: series the agent does not serve:${missing:- (no family names found in agent/)}"
	if [ "$label" = nondefault ]; then
		cp tests/helm/alerts_test.yml "$tmp/alerts_test.yml"
		if promtool test rules "$tmp/alerts_test.yml" >"$tmp/pt" 2>&1; then
			echo "PASS helm_prometheus_alerts_fire"
		else
			echo "FAIL helm_prometheus_alerts_fire: $(grep -A6 -m1 FAILED "$tmp/pt" | tr -s ' \n' ' ' | head -c 600)"
		fi
	fi
done
grep -q '^prometheusRule:' "$CHART/ci/nondefault-values.yaml" && [ ! -f "$tmp/rules-nondefault.yml" ] &&
	echo "FAIL helm_prometheus_alerts_fire: the nondefault values render no PrometheusRule"

# ------------------------------------------------------------ NOTES.txt ----
missing=""
for want in 'CUDA_INJECTION64_PATH' '{{ .Values.shim.hostPath }}/libinfertrace_cupti.so' \
	'INFERTRACE_INSTANCE' '{{ .Values.control.runHostPath }}/shim' 'kubectl' 'exec' \
	'agentctl deep-dive --instance' 'agentctl summary'; do
	grep -qF -- "$want" "$CHART/templates/NOTES.txt" || missing="$missing '$want'"
done
[ -z "$missing" ] && echo "PASS helm_notes" || echo "FAIL helm_notes: NOTES.txt lacks$missing"

# ----------------------------------------------------------- Dockerfile ----
# every file the image installs from /build must be an output of the make
# targets it builds: a dry run with an empty BUILD prints every link command
targets=$(sed -n 's/^ARG INFERTRACE_TARGETS="\(.*\)"$/\1/p' deploy/Dockerfile)
shipped=$(grep -oE 'install -D -m [0-7]+ /build/[A-Za-z0-9_.-]+' deploy/Dockerfile | sed 's|.* /build/||')
# shellcheck disable=SC2086 # $targets is a word list
if [ -z "$targets" ] || [ -z "$shipped" ]; then
	echo "FAIL dockerfile_targets: no ARG INFERTRACE_TARGETS or no install from /build in deploy/Dockerfile"
elif ! make -n BUILD=/nonexistent-build $targets >"$tmp/mk" 2>&1; then
	echo "FAIL dockerfile_targets: make -n $targets: $(grep -m1 -iE 'no rule|error' "$tmp/mk")"
else
	missing=""
	for f in $shipped; do
		grep -qE -- "-o /nonexistent-build/$f( |\$)" "$tmp/mk" || missing="$missing $f"
	done
	[ -z "$missing" ] && echo "PASS dockerfile_targets" ||
		echo "FAIL dockerfile_targets: 'make $targets' does not build:$missing"
fi

# -------------------------------------------------------------- systemd ----
unit=deploy/systemd/infertrace-agent.service
if ! command -v systemd-analyze >/dev/null; then
	echo "SKIP systemd_unit: systemd-analyze missing"
else
	# verify needs ExecStart to exist: point it at a stand-in executable
	mkdir -p "$tmp/unit"
	printf '#!/bin/sh\n' >"$tmp/unit/infertrace-agent" && chmod +x "$tmp/unit/infertrace-agent"
	sed "s|/usr/local/bin/infertrace-agent|$tmp/unit/infertrace-agent|g" "$unit" \
		>"$tmp/unit/infertrace-agent.service"
	if SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
		"$tmp/unit/infertrace-agent.service" >"$tmp/sa" 2>&1 &&
		! grep -qiE 'unknown|invalid|failed|ignoring' "$tmp/sa"; then
		echo "PASS systemd_unit"
	else
		echo "FAIL systemd_unit: $(grep -v '^$' "$tmp/sa" | head -n 3 | sed "s|$tmp/unit/||g" | tr '\n' ' ')"
	fi
fi
exit 0
