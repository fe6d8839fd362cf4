#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# The Helm chart (deploy/helm/infertrace), the image recipe and the systemd
# unit, checked without a cluster. One line per case: PASS / FAIL / SKIP.
#
#   helm_yamllint                 yamllint on Chart.yaml, values.yaml, ci/
#   helm_lint / helm_template_*   `helm lint` and `helm template` (only when
#                                 helm is on the PATH; SKIP otherwise)
#   helm_values_* / helm_*_{default,nondefault}
#                                 tests/integration/helm_check.py: .Values
#                                 references, values documentation, renders
#                                 of every template with the default and the
#                                 ci/ values (helm's output when helm exists,
#                                 the checker's partial evaluator otherwise),
#                                 the DaemonSet's security context, mounts,
#                                 probes, the agent.conf options against the
#                                 agent's option table, Kafka TLS/SASL wiring
#   helm_rendered_yamllint_*      yamllint on those renders (duplicate keys,
#                                 which the YAML parser would silently merge)
#   helm_agent_parses_*           the agent accepts the rendered agent.conf
#   systemd_agent_conf_*          ... and deploy/systemd/agent.conf, whose
#                                 commented-out lines are options too
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

# ------------------------------------------------------ helm, if present ----
rendered=()
if command -v helm >/dev/null; then
	if helm lint "$CHART" -f "$CHART/ci/nondefault-values.yaml" >"$tmp/lint" 2>&1; then
		echo "PASS helm_lint"
	else
		echo "FAIL helm_lint: $(grep -E 'ERROR|WARNING' "$tmp/lint" | head -n 3 | tr '\n' ' ')"
	fi
	for set in default nondefault; do
		args=()
		[ "$set" = nondefault ] && args=(-f "$CHART/ci/nondefault-values.yaml")
		if helm template it "$CHART" --namespace infertrace "${args[@]}" >"$tmp/render-$set.yaml" 2>"$tmp/render-$set.err"; then
			echo "PASS helm_template_$set"
			rendered+=(--rendered "$set=$tmp/render-$set.yaml")
		else
			echo "FAIL helm_template_$set: $(head -c 300 "$tmp/render-$set.err")"
		fi
	done
else
	echo "SKIP helm_lint: helm not on PATH (the checks below use helm_check.py's partial evaluator)"
fi

# ---------------------------------------------------- the chart's checks ----
python3 tests/integration/helm_check.py --chart "$CHART" --options "$opts" \
	--options-source "$opts_src" --values "nondefault=$CHART/ci/nondefault-values.yaml" \
	--dump "$tmp/partial" "${rendered[@]}"

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
for set in default nondefault; do
	if [ -f "$tmp/render-$set.yaml" ]; then
		files=("$tmp/render-$set.yaml")
	else
		files=("$tmp"/partial/"$set"-*.yaml)
	fi
	if [ ! -f "${files[0]}" ]; then
		echo "FAIL helm_rendered_yamllint_$set: nothing rendered"
	elif yamllint -f parsable -c "$tmp/rendered.yamllint" "${files[@]}" >"$tmp/ryl" 2>&1; then
		echo "PASS helm_rendered_yamllint_$set"
	else
		echo "FAIL helm_rendered_yamllint_$set: $(head -n 3 "$tmp/ryl" | sed "s|$tmp/||g" | tr '\n' ' ')"
	fi
done

# the agent itself parses each rendered agent.conf and the systemd example:
# --config-doc after --config exits 0 once every line was accepted
for conf in "$tmp/partial/default-agent.conf" "$tmp/partial/nondefault-agent.conf" \
	deploy/systemd/agent.conf; do
	case $conf in
	*/partial/*) name=helm_agent_parses_$(basename "$conf" -agent.conf) ;;
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

# ------------------------------------------------------------ NOTES.txt ----
missing=""
for want in 'CUDA_INJECTION64_PATH' '{{ .Values.shim.hostPath }}/libinfertrace_cupti.so' \
	'INFERTRACE_INSTANCE' '{{ .Values.control.runHostPath }}/shim' 'kubectl' 'exec' \
	'agentctl deep-dive --instance'; do
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
