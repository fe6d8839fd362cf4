#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# tests/integration/helm_check.py - checks of deploy/helm/infertrace and its
# renders. Called by tests/integration/helm.sh; prints one "PASS name",
# "FAIL name: why" or "SKIP name: why" line per case (tests/run.sh counts
# them).
#
# The chart is rendered by tests/helm/render.go (Go's text/template with
# sprig, as Helm) or by `helm template`; helm.sh hands the renders in. Two
# layers of checks:
#   1. Static: every `.Values.a.b` path a template uses exists in values.yaml;
#      every key of a CI values file exists in values.yaml (Helm silently
#      ignores a misspelt key); every value is used by some template; every
#      paragraph of values.yaml starts with a comment.
#   2. Rendered (`--rendered LABEL=FILE`, one per values set): the
#      DaemonSet's security context, mounts and probes, the agent's config
#      file and the Kafka TLS/SASL wiring, checked with the values that
#      produced them. The Kubernetes schemas are checked by
#      tests/node/k8s_validate.mjs.
import re
import sys

import yaml


# what the DaemonSet must grant and mount (issue 6; docs/operations.md)
REQUIRED_CAPS = {"BPF", "PERFMON", "SYS_PTRACE", "SYS_RESOURCE", "DAC_READ_SEARCH"}
REQUIRED_HOST_MOUNTS = {  # container path -> (node path, read-only required)
    "/sys/kernel/btf": ("/sys/kernel/btf", True),
    "/sys/fs/bpf": ("/sys/fs/bpf", False),
    "/sys/kernel/tracing": ("/sys/kernel/tracing", False),
    "/sys/kernel/debug": ("/sys/kernel/debug", False),
}

results = []
DUMP = None  # --dump DIR: the rendered agent.conf files go there


def out(status, name, why=""):
    line = f"{status} {name}" + (f": {why}" if why else "")
    results.append(line)
    print(line, flush=True)


def case(name, problems):
    if problems:
        more = f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
        out("FAIL", name, "; ".join(problems[:4]) + more)
    else:
        out("PASS", name)


# ------------------------------------------------------------ values -------
def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f) or {}


def lookup(values, path):
    """value at dotted path, or KeyError"""
    cur = values
    for part in path:
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(".".join(path))
        cur = cur[part]
    return cur


def leaves(d, prefix=()):
    if isinstance(d, dict) and d:
        for k, v in d.items():
            yield from leaves(v, prefix + (k,))
    else:
        yield prefix


VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def template_refs(text):
    return {tuple(m.group(1)[1:].split(".")) for m in VALUES_REF.finditer(text)}


def freeform_paths(text):
    """values handed to toYaml/toJson/range whole: their sub-keys are free"""
    free = set()
    for m in re.finditer(r"(?:toYaml|toJson|:=|range)\s+\$?\.Values((?:\.\w+)+)", text):
        free.add(tuple(m.group(1)[1:].split(".")))
    for m in re.finditer(r"with\s+\$?\.Values((?:\.\w+)+)\s*-?\}\}(.*?)\{\{-?\s*end", text, re.S):
        if re.search(r"toYaml\s+\.\s", m.group(2)):
            free.add(tuple(m.group(1)[1:].split(".")))
    return free


def check_static(values_path, templates, ci_files):
    defaults = load_yaml(values_path)
    texts = {}
    for t in templates:
        with open(t) as f:
            texts[t] = f.read()
    refs = set()
    for t, text in texts.items():
        for r in template_refs(text):
            refs.add(r)
    problems = []
    for r in sorted(refs):
        try:
            lookup(defaults, r)
        except KeyError:
            where = [t.rsplit("/", 1)[-1] for t, x in texts.items() if r in template_refs(x)]
            problems.append(f".Values.{'.'.join(r)} ({', '.join(where)}) missing from values.yaml")
    case("helm_values_refs_exist", problems)

    free = set()
    for text in texts.values():
        free |= freeform_paths(text)

    def is_free(path):
        return any(path[: len(f)] == f for f in free)

    # every value is read by a template: an unused value documents a lie
    problems = []
    for leaf in leaves(defaults):
        if is_free(leaf):
            continue
        if not any(leaf[: len(r)] == r or r[: len(leaf)] == leaf for r in refs):
            problems.append(f"{'.'.join(leaf)} is used by no template")
    case("helm_values_all_used", problems)

    for ci in ci_files:
        problems = []
        for leaf in leaves(load_yaml(ci)):
            if is_free(leaf[:-1]) or is_free(leaf):
                continue
            try:
                lookup(defaults, leaf)
            except KeyError:
                # a parent that is free-form admits any key below it
                if not any(is_free(leaf[:i]) for i in range(1, len(leaf))):
                    problems.append(f"{'.'.join(leaf)} is not a value of the chart")
        case(f"helm_ci_values_known[{ci.rsplit('/', 1)[-1]}]", problems)

    # "values.yaml documents every value": each paragraph opens with a comment
    problems = []
    with open(values_path) as f:
        lines = f.read().split("\n")
    prev_blank = True
    for i, line in enumerate(lines, 1):
        s = line.strip()
        if not s:
            prev_blank = True
            continue
        if prev_blank and not s.startswith("#"):
            problems.append(f"values.yaml:{i}: '{s[:40]}' starts a paragraph without a comment")
        prev_blank = False
    case("helm_values_documented", problems)


# ------------------------------------------------------ rendered checks ----
def docs_of(text, name, problems):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        problems.append(f"{name}: not YAML after rendering: {str(e).splitlines()[0]}")
        return []


def option_table(doc_path):
    """long option -> 'flag' or value name, from docs/configuration.md or --config-doc"""
    table = {}
    with open(doc_path) as f:
        for line in f:
            m = re.match(r"\|\s*`--([a-z0-9-]+)`\s*\|[^|]*\|\s*([^|]+?)\s*\|", line)
            if m:
                table[m.group(1)] = m.group(2)
    return table


def agent_conf_lines(conf):
    """(option, value) per line, as agent/main.c load_config() splits them"""
    pairs = []
    for line in conf.split("\n"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        k = re.split(r"[ \t=]", line, 1)[0]
        v = line[len(k):].lstrip(" \t=").rstrip()
        pairs.append((k, v))
    return pairs


def by_kind(docs, kind):
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == kind]


def check_rendered(label, docs, values, table, table_src):
    get = lambda *p: lookup(values, p)  # noqa: E731
    problems = []
    for d in docs:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") or \
                not (d.get("metadata") or {}).get("name"):
            problems.append(f"document without apiVersion/kind/metadata.name: {str(d)[:80]}")
    kinds = sorted(d.get("kind", "?") for d in docs if isinstance(d, dict))
    want = {"DaemonSet", "ConfigMap"} | ({"ServiceAccount"} if get("serviceAccount", "create") else set())
    if get("serviceMonitor", "enabled") and get("metrics", "enabled"):
        want |= {"ServiceMonitor", "Service"}
    elif "ServiceMonitor" in kinds:
        problems.append("ServiceMonitor rendered although serviceMonitor.enabled is false")
    if get("prometheusRule", "enabled") and get("metrics", "enabled"):
        want |= {"PrometheusRule"}
    elif "PrometheusRule" in kinds:
        problems.append("PrometheusRule rendered although prometheusRule.enabled is false")
    for k in sorted(want - set(kinds)):
        problems.append(f"no {k} rendered")
    case(f"helm_render_{label}", problems)

    ds = by_kind(docs, "DaemonSet")
    cm = by_kind(docs, "ConfigMap")
    if not ds or not cm:
        out("FAIL", f"helm_daemonset_security_{label}", "no DaemonSet/ConfigMap to check")
        return
    pod = ds[0]["spec"]["template"]["spec"]
    agent = next((c for c in pod.get("containers", []) if c.get("name") == "agent"), None)
    if agent is None:
        out("FAIL", f"helm_daemonset_security_{label}", "no container named agent")
        return

    # --- security context: exactly the capabilities, privileged only on request
    problems = []
    sc = agent.get("securityContext") or {}
    if pod.get("hostPID") is not True:
        problems.append(f"hostPID is {pod.get('hostPID')!r}, not true")
    want_priv = bool(get("securityContext", "privileged"))
    if label == "default" and (want_priv or sc.get("privileged") is not False):
        problems.append("privileged by default: only securityContext.privileged=true may ask")
    if sc.get("privileged") is not want_priv:
        problems.append(f"privileged is {sc.get('privileged')!r} with "
                        f"securityContext.privileged={want_priv}")
    caps = sc.get("capabilities") or {}
    added = set(caps.get("add") or [])
    if added != REQUIRED_CAPS:
        problems.append(f"capabilities.add {sorted(added)} != {sorted(REQUIRED_CAPS)}")
    if "ALL" not in (caps.get("drop") or []):
        problems.append("capabilities.drop lacks ALL (the runtime's defaults would stay)")
    if sc.get("runAsUser") != 0:
        problems.append("runAsUser is not 0 (added capabilities reach uid 0 only)")
    for c in pod.get("initContainers") or []:
        csc = c.get("securityContext") or {}
        if csc.get("privileged") or (csc.get("capabilities") or {}).get("add"):
            problems.append(f"init container {c.get('name')} gets privileges it does not need")
    case(f"helm_daemonset_security_{label}", problems)

    # --- mounts: the node paths the agent needs, from hostPath volumes
    problems = []
    vols = {v["name"]: v for v in pod.get("volumes") or []}

    def host_path(mount):
        v = vols.get(mount.get("name"), {})
        return (v.get("hostPath") or {}).get("path")

    mounts = {m["mountPath"]: m for m in agent.get("volumeMounts") or []}
    need = dict(REQUIRED_HOST_MOUNTS)
    need["/run/infertrace"] = (get("control", "runHostPath"), False)
    if get("kafka", "brokers"):
        need[get("spill", "hostPath")] = (get("spill", "hostPath"), False)
    for path, (node, ro) in sorted(need.items()):
        m = mounts.get(path)
        if not m:
            problems.append(f"agent does not mount {path}")
        elif host_path(m) != node:
            problems.append(f"{path} is not hostPath {node} (is {host_path(m)})")
        elif ro and not m.get("readOnly"):
            problems.append(f"{path} is not read-only")
    if "/proc" in mounts:
        problems.append("/proc is mounted: hostPID already gives the host's /proc")
    if get("shim", "install"):
        inits = [c for c in pod.get("initContainers") or []
                 if "libinfertrace_cupti.so" in " ".join(map(str, c.get("command") or []))]
        if not inits:
            problems.append("no init container copies libinfertrace_cupti.so")
        elif not any(host_path(m) == get("shim", "hostPath")
                     for m in inits[0].get("volumeMounts") or []):
            problems.append(f"the shim init container does not mount {get('shim', 'hostPath')}")
    case(f"helm_daemonset_mounts_{label}", problems)

    # --- scheduling, resources, probes
    problems = []
    for k, v in (get("nodeSelector") or {}).items():
        if (pod.get("nodeSelector") or {}).get(k) != v:
            problems.append(f"nodeSelector lacks {k}={v!r}")
    if label == "default":
        if (pod.get("nodeSelector") or {}).get("nvidia.com/gpu.present") != "true":
            problems.append("default nodeSelector is not nvidia.com/gpu.present=\"true\"")
        if not any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NoSchedule"
                   for t in pod.get("tolerations") or []):
            problems.append("no toleration for nvidia.com/gpu NoSchedule")
    res = agent.get("resources") or {}
    for kind in ("requests", "limits"):
        for r in ("cpu", "memory"):
            if r not in (res.get(kind) or {}):
                problems.append(f"resources.{kind}.{r} missing")
    if get("metrics", "enabled"):
        ports = {p.get("name"): p.get("containerPort") for p in agent.get("ports") or []}
        if ports.get("metrics") != get("metrics", "port"):
            problems.append(f"metrics containerPort {ports.get('metrics')} != {get('metrics', 'port')}")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            hg = (agent.get(probe) or {}).get("httpGet") or {}
            if hg.get("path") != path or hg.get("port") not in ("metrics", get("metrics", "port")):
                problems.append(f"{probe} is not GET {path} on the metrics port: {hg}")
        if str(get("metrics", "address")).startswith("127."):
            problems.append("metrics.address is loopback: the kubelet's probes cannot reach it")
    elif agent.get("livenessProbe") or agent.get("readinessProbe"):
        problems.append("probes without the metrics endpoint")
    if pod.get("hostNetwork") and pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
        problems.append("hostNetwork without dnsPolicy ClusterFirstWithHostNet: no cluster DNS")
    case(f"helm_daemonset_scheduling_{label}", problems)

    # --- the agent's config file: mounted where the args say, every option known
    problems = []
    conf = (cm[0].get("data") or {}).get("agent.conf")
    args = [str(a) for a in agent.get("args") or []]
    conf_args = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--config"]
    if conf is None:
        problems.append("ConfigMap has no agent.conf")
        conf = ""
    cm_mount = next((m for m in agent.get("volumeMounts") or []
                     if (vols.get(m["name"], {}).get("configMap") or {}).get("name")
                     == cm[0]["metadata"]["name"]), None)
    if not cm_mount or not conf_args or conf_args[0] != cm_mount["mountPath"] + "/agent.conf":
        problems.append(f"--config {conf_args[:1]} is not agent.conf of the mounted ConfigMap")
    if DUMP:
        with open(f"{DUMP}/{label}-agent.conf", "w") as f:
            f.write(conf)
    pairs = agent_conf_lines(conf)
    seen = {}
    for k, v in pairs:
        seen.setdefault(k, v)
        if k not in table:
            problems.append(f"agent.conf option '{k}' is not in the agent's option table ({table_src})")
        elif table[k] == "flag" and v not in ("true", "false"):
            problems.append(f"flag '{k}' = '{v}' (the agent takes true or false)")
        elif table[k] != "flag" and not v:
            problems.append(f"option '{k}' has no value")
    for k, path in (("mode", ("agent", "mode")), ("kafka", ("kafka", "brokers")),
                    ("otlp", ("otlp", "endpoint"))):
        want = get(*path)
        if want and seen.get(k) != str(want):
            problems.append(f"{k} = {seen.get(k)!r}, values say {want!r}")
    # auto|on|off values: an unquoted YAML on/off (a boolean) is the word it was
    for k, path in (("gpu-telemetry", ("agent", "gpuTelemetry", "mode")),
                    ("python-stacks", ("agent", "pythonStacks", "mode"))):
        v = get(*path)
        want = {True: "on", False: "off"}.get(v, str(v)) if isinstance(v, bool) else str(v)
        if seen.get(k) != want:
            problems.append(f"{k} = {seen.get(k)!r}, values say {v!r}")
    if seen.get("python-hz") != str(get("agent", "pythonStacks", "hz")):
        problems.append(f"python-hz = {seen.get('python-hz')!r}")
    # workloads mount <runHostPath>/shim at /run/infertrace (NOTES.txt) and
    # the shim looks for /run/infertrace/shim.sock by default
    shim = seen.get("shim-socket", "/run/infertrace/shim.sock")
    run = mounts.get("/run/infertrace")
    if shim != "/run/infertrace/shim/shim.sock" or not run or \
            host_path(run) != get("control", "runHostPath"):
        problems.append(f"shim-socket {shim} is not shim/shim.sock of the "
                        f"{get('control', 'runHostPath')} mount that NOTES.txt tells workloads to mount")
    if get("metrics", "enabled") and seen.get("metrics") != \
            f"{get('metrics', 'address')}:{get('metrics', 'port')}":
        problems.append(f"metrics = {seen.get('metrics')!r}")
    case(f"helm_agent_config_{label}", problems)

    # --- Kafka TLS/SASL from existing Secrets, credentials never in the ConfigMap
    problems = []
    props = dict(v.split("=", 1) for k, v in pairs if k == "kafka-property" and "=" in v)
    # the Secrets are used only with brokers (values.yaml)
    kafka = bool(get("kafka", "brokers"))
    tls = get("kafka", "tls", "secretName") if kafka else ""
    sasl = get("kafka", "sasl", "secretName") if kafka else ""
    if get("kafka", "brokers"):
        proto = {(True, True): "SASL_SSL", (False, True): "SASL_PLAINTEXT",
                 (True, False): "SSL", (False, False): "PLAINTEXT"}[(bool(tls), bool(sasl))]
        if props.get("security.protocol") != proto:
            problems.append(f"security.protocol {props.get('security.protocol')!r}, want {proto}")
    for name, secret in (("tls", tls), ("sasl", sasl)):
        if not secret:
            continue
        if not any((v.get("secret") or {}).get("secretName") == secret for v in vols.values()):
            problems.append(f"Secret {secret} ({name}) is not a volume")
    if tls:
        for key, prop in (("caKey", "ssl.ca.location"), ("certKey", "ssl.certificate.location"),
                          ("keyKey", "ssl.key.location")):
            k = get("kafka", "tls", key)
            if k and not (props.get(prop, "").endswith("/" + k) and any(
                    props[prop] == m["mountPath"] + "/" + k for m in agent.get("volumeMounts") or []
                    if (vols.get(m["name"], {}).get("secret") or {}).get("secretName") == tls)):
                problems.append(f"{prop} does not name {k} in the mounted Secret {tls}")
    if sasl:
        if len(conf_args) < 2:
            problems.append("SASL set but the agent reads no second --config file")
        if any(p in props for p in ("sasl.username", "sasl.password")):
            problems.append("SASL credentials in the ConfigMap")
        ssc = (next((c for c in pod.get("initContainers") or []
                     if any((vols.get(m["name"], {}).get("secret") or {}).get("secretName") == sasl
                            for m in c.get("volumeMounts") or [])), None))
        if not ssc:
            problems.append("no init container reads the SASL Secret")
        elif conf_args[1:] and not any(conf_args[1].startswith(m["mountPath"] + "/")
                                       for m in ssc.get("volumeMounts") or []):
            problems.append("the second --config file is not where the init container writes")
        mem = [v for v in vols.values() if (v.get("emptyDir") or {}).get("medium") == "Memory"]
        if not mem:
            problems.append("SASL credentials are not on a memory-backed volume")
    if not get("kafka", "brokers"):
        # no brokers: no Kafka line, no spill, no Secret mounted for nothing
        stray = sorted({k for k, _ in pairs if k.startswith(("kafka", "spill", "flush"))})
        if stray:
            problems.append(f"Kafka options without kafka.brokers: {stray}")
        if any(v.get("secret") for v in vols.values()) and not (tls or sasl):
            problems.append("a Secret volume without kafka.tls/sasl")
    case(f"helm_kafka_secrets_{label}", problems)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--chart", required=True)
    ap.add_argument("--options", required=True, help="docs/configuration.md or --config-doc output")
    ap.add_argument("--options-source", default="docs/configuration.md")
    ap.add_argument("--values", action="append", default=[],
                    help="LABEL=FILE: a values file over values.yaml (LABEL default: values.yaml alone)")
    ap.add_argument("--rendered", action="append", default=[], help="LABEL=FILE: its render")
    ap.add_argument("--dump", help="write each rendered agent.conf into this directory")
    a = ap.parse_args(argv)

    import glob
    import os
    global DUMP
    DUMP = a.dump
    if DUMP:
        os.makedirs(DUMP, exist_ok=True)
    chart = a.chart
    tmpls = sorted(glob.glob(f"{chart}/templates/*"))
    ci = sorted(glob.glob(f"{chart}/ci/*.yaml"))
    check_static(f"{chart}/values.yaml", tmpls, ci)

    table = option_table(a.options)
    if not table:
        out("FAIL", "helm_option_table", f"no options read from {a.options}")
        return 1
    defaults = load_yaml(f"{chart}/values.yaml")

    def merged(over):
        def merge(base, o):
            if isinstance(base, dict) and isinstance(o, dict):
                r = dict(base)
                for k, v in o.items():
                    r[k] = merge(base.get(k), v)
                return r
            return o
        return merge(defaults, over)

    sets = dict([("default", defaults)] + [
        (lbl, merged(load_yaml(f))) for lbl, f in (v.split("=", 1) for v in a.values)])
    for label, path in (v.split("=", 1) for v in a.rendered):
        if label not in sets:
            out("FAIL", f"helm_render_{label}", "no --values for this render")
            continue
        problems = []
        with open(path) as f:
            docs = docs_of(f.read(), path, problems)
        case(f"helm_templates_yaml_{label}", problems)
        check_rendered(label, docs, sets[label], table, a.options_source)
    return 1 if any(r.startswith("FAIL") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
