// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/otlp_check.mjs RECORDS.jsonl REQUESTS.jsonl - the agent's
// JSON lines (--output) against what the OTLP receiver decoded
// (otlp_receiver.mjs). Prints a JSON summary; exit 1 with "problems" when:
//   - a request did not decode (the receiver's "error" lines);
//   - a step, anomaly, level_shift or process record is not exactly one log record, with
//     event.name infertrace.<type>, its resource's host.name and
//     service.instance.id, process.pid, thread.id, and every other field as
//     an infertrace.<field> attribute of the right type (int: intValue,
//     number: doubleValue, string, bool, object: kvlistValue, array:
//     arrayValue; null: absent), timeUnixNano set, severity WARN for an
//     anomaly or level_shift, INFO for the others;
//   - per resource, the data points of a metric infertrace.<type>.<field>
//     are not the record's integer fields in record order (delta, monotonic
//     sums), or a *_hist_us histogram's buckets do not add up to the
//     record's counts.
import { readFileSync } from "node:fs";

const [recFile, reqFile] = process.argv.slice(2);
const lines = (f) => readFileSync(f, "utf8").split("\n").filter((l) => l.trim());
// JSON.parse forgets whether a number was written 2 or 2.0: mark the reals
// (a literal with a fraction or an exponent) so their type can be checked
const REAL = "__infertrace_real__";
const markReals = (l) => l.replace(/"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g,
	(t) => t[0] === '"' || /^-?\d+$/.test(t) ? t : `{"${REAL}":${t}}`);
const unmark = (v) => Array.isArray(v) ? v.map(unmark) : v && typeof v === "object" ?
	(REAL in v ? v[REAL] : Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unmark(x)]))) : v;
const typed = lines(recFile).map((l) => { try { return JSON.parse(markReals(l)); } catch { return null; } })
	.filter((r) => r && typeof r === "object");
const recs = typed.map(unmark);
const recsTyped = typed
	.filter((r) => r && typeof r === "object");
const reqs = lines(reqFile).map((l) => JSON.parse(l));
const problems = [];
const problem = (p) => { if (problems.length < 20) problems.push(p); };

const COMMON = new Set(["schema", "type", "host", "instance", "pid", "tid", "ts_ns"]);
const POSITION = new Set(["interval_ns", "interval_start_ns", "interval_end_ns", "ifindex", "netns"]);
const LOG_TYPES = new Set(["step", "anomaly", "level_shift", "process"]);
const WARN_TYPES = new Set(["anomaly", "level_shift"]);
const METRIC_TYPES = new Set(["thread", "net", "gpu_summary"]);

const attrs = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, kv.value]));
function anyOf(v) {
	if (v === null) return undefined;
	if (typeof v === "string") return { stringValue: v };
	if (typeof v === "boolean") return { boolValue: v };
	if (v && typeof v === "object" && REAL in v) return { doubleValue: v[REAL] };
	if (typeof v === "number") return { intValue: String(v) };
	if (Array.isArray(v)) return { arrayValue: { values: v.map((x) => anyOf(x) ?? {}) } };
	return { kvlistValue: { values: Object.entries(v).filter(([, x]) => x !== null).map(([key, x]) => ({ key, value: anyOf(x) })) } };
}
function same(a, b) {
	if (a === b) return true;
	if (typeof a === "number" && typeof b === "number") return Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a));
	if (!a || !b || typeof a !== "object" || typeof b !== "object") return false;
	const ka = Object.keys(a), kb = Object.keys(b);
	return ka.length === kb.length && ka.every((k) => same(a[k], b[k]));
}

// --- what arrived
const logs = [], points = new Map(); // "host|inst|metric" -> [{kind, metric, dp}]
let decodeErrors = 0;
for (const r of reqs) {
	if (r.error) { decodeErrors++; problem(`${r.path}: ${r.error}`); continue; }
	for (const rl of r.request.resourceLogs ?? []) {
		const res = attrs(rl.resource?.attributes);
		for (const sl of rl.scopeLogs ?? [])
			for (const lr of sl.logRecords ?? []) logs.push({ res, lr, a: attrs(lr.attributes) });
	}
	for (const rm of r.request.resourceMetrics ?? []) {
		const res = attrs(rm.resource?.attributes);
		const key = `${res["host.name"]?.stringValue}|${res["service.instance.id"]?.stringValue}`;
		for (const sm of rm.scopeMetrics ?? [])
			for (const m of sm.metrics ?? []) {
				const kind = m.sum ? "sum" : m.histogram ? "histogram" : m.gauge ? "gauge" : "?";
				const data = m[kind] ?? {};
				if (kind === "sum" && (data.isMonotonic !== true || data.aggregationTemporality !== 1))
					problem(`${m.name}: a sum that is not a monotonic delta`);
				if (kind === "histogram" && data.aggregationTemporality !== 1) problem(`${m.name}: not delta`);
				const k = `${key}|${m.name}`;
				if (!points.has(k)) points.set(k, []);
				for (const dp of data.dataPoints ?? []) points.get(k).push({ kind, unit: m.unit, dp });
			}
	}
}

// --- logs: one log record per step/anomaly/level_shift/process record
const byKey = new Map();
for (const l of logs) {
	const k = `${l.a["event.name"]?.stringValue}|${l.res["service.instance.id"]?.stringValue}|${l.a["infertrace.ts_ns"]?.intValue}|${l.a["infertrace.seq"]?.intValue ?? ""}|${l.a["infertrace.kind"]?.stringValue ?? ""}`;
	if (!byKey.has(k)) byKey.set(k, []);
	byKey.get(k).push(l);
}
let logRecs = 0, logMatched = 0;
for (const [i, rec] of recs.entries()) {
	if (!LOG_TYPES.has(rec.type)) continue;
	const typedRec = recsTyped[i];
	logRecs++;
	const k = `infertrace.${rec.type}|${rec.instance}|${rec.ts_ns}|${rec.seq ?? ""}|${WARN_TYPES.has(rec.type) ? rec.kind : ""}`;
	const found = byKey.get(k) ?? [];
	if (found.length !== 1) { problem(`${rec.type} ${rec.instance} ts ${rec.ts_ns}: ${found.length} log records`); continue; }
	const { res, lr, a } = found.shift();
	byKey.set(k, found);
	const want = (name, v) => {
		if (!same(a[name], v)) problem(`${rec.type} ts ${rec.ts_ns}: ${name} is ${JSON.stringify(a[name])?.slice(0, 100)}, want ${JSON.stringify(v)?.slice(0, 100)}`);
	};
	if (res["host.name"]?.stringValue !== rec.host) problem(`${rec.type}: resource host.name ${JSON.stringify(res["host.name"])}`);
	if (res["service.instance.id"]?.stringValue !== rec.instance) problem(`${rec.type}: service.instance.id`);
	want("process.pid", rec.pid === undefined ? undefined : { intValue: String(rec.pid) });
	want("thread.id", rec.tid === undefined ? undefined : { intValue: String(rec.tid) });
	for (const [f, v] of Object.entries(typedRec)) if (!COMMON.has(f)) want(`infertrace.${f}`, anyOf(v));
	const extra = Object.keys(a).filter((n) => !["event.name", "process.pid", "thread.id", "infertrace.ts_ns"].includes(n) &&
		!(n.startsWith("infertrace.") && n.slice(11) in rec));
	if (extra.length) problem(`${rec.type}: attributes not from the record: ${extra}`);
	if (!/^[1-9][0-9]*$/.test(lr.timeUnixNano ?? "")) problem(`${rec.type}: timeUnixNano ${lr.timeUnixNano}`);
	if (lr.severityNumber !== (WARN_TYPES.has(rec.type) ? 13 : 9)) problem(`${rec.type}: severityNumber ${lr.severityNumber}`);
	if (!lr.body?.stringValue) problem(`${rec.type}: no body`);
	logMatched++;
}
const logLeft = [...byKey.values()].reduce((s, l) => s + l.length, 0);
if (logLeft) problem(`${logLeft} log records with no record in the file`);

// --- metrics: per resource and metric, the data points in record order
const expected = new Map(); // key -> [{kind, value}]
const push = (k, e) => { if (!expected.has(k)) expected.set(k, []); expected.get(k).push(e); };
let metricRecs = 0;
for (const rec of recs.filter((r) => METRIC_TYPES.has(r.type))) {
	metricRecs++;
	const rk = `${rec.host}|${rec.instance}`;
	for (const [f, v] of Object.entries(rec)) {
		if (COMMON.has(f) || POSITION.has(f)) continue;
		const name = `infertrace.${rec.type}.${f}`;
		if (Number.isInteger(v)) push(`${rk}|${name}`, { kind: "sum", value: String(v), pid: rec.pid });
		else if (v && typeof v === "object" && !Array.isArray(v) && f.endsWith("_hist_us"))
			push(`${rk}|infertrace.${rec.type}.${f.slice(0, -8)}`, { kind: "histogram", count: String(Object.values(v).reduce((s, x) => s + x, 0)), pid: rec.pid });
		else if (Array.isArray(v))
			for (const el of v)
				for (const [ef, ev] of Object.entries(el ?? {})) {
					if (["name", "nr", "device", "stream"].includes(ef)) continue;
					if (Number.isInteger(ev)) push(`${rk}|${name}.${ef}`, { kind: "sum", value: String(ev), pid: rec.pid });
					else if (ev && typeof ev === "object" && ef.endsWith("hist_us"))
						push(`${rk}|${ef === "hist_us" ? name : `${name}.${ef.slice(0, -8)}`}`, { kind: "histogram", count: String(Object.values(ev).reduce((s, x) => s + x, 0)), pid: rec.pid });
				}
	}
}
let pointsChecked = 0;
for (const [k, want] of expected) {
	const got = points.get(k) ?? [];
	if (got.length !== want.length) { problem(`${k}: ${got.length} data points, want ${want.length}`); continue; }
	want.forEach((w, i) => {
		const g = got[i];
		const pid = attrs(g.dp.attributes)["process.pid"]?.intValue;
		if (g.kind !== w.kind) problem(`${k}[${i}]: a ${g.kind}, want a ${w.kind}`);
		else if (w.kind === "sum" && g.dp.asInt !== w.value) problem(`${k}[${i}]: ${g.dp.asInt}, want ${w.value}`);
		else if (w.kind === "histogram") {
			const bc = g.dp.bucketCounts ?? [], eb = g.dp.explicitBounds ?? [];
			if (g.dp.count !== w.count || bc.length !== eb.length + 1 ||
				String(bc.reduce((s, x) => s + Number(x), 0)) !== w.count)
				problem(`${k}[${i}]: histogram count ${g.dp.count}, buckets ${bc.length}/${eb.length}, want ${w.count}`);
		}
		if (pid !== (w.pid === undefined ? undefined : String(w.pid))) problem(`${k}[${i}]: process.pid ${pid}, want ${w.pid}`);
		if (!/^[1-9][0-9]*$/.test(g.dp.timeUnixNano ?? "") || BigInt(g.dp.startTimeUnixNano ?? 0) > BigInt(g.dp.timeUnixNano ?? 0))
			problem(`${k}[${i}]: times ${g.dp.startTimeUnixNano}..${g.dp.timeUnixNano}`);
		pointsChecked++;
	});
}
const histograms = [...expected.values()].flat().filter((e) => e.kind === "histogram").length;
console.log(JSON.stringify({ requests: reqs.length, decode_errors: decodeErrors, log_records: logRecs,
	log_matched: logMatched, metric_records: metricRecs, points_checked: pointsChecked, histograms, problems }));
process.exit(problems.length ? 1 : 0);
