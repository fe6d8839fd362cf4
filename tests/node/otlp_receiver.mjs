// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/otlp_receiver.mjs - a small OTLP/HTTP JSON receiver for the
// tests. Every request is decoded with the OpenTelemetry protocol
// definitions that @opentelemetry/otlp-transformer ships (protobufjs code
// generated from opentelemetry-proto): the JSON must map onto
// ExportLogsServiceRequest / ExportMetricsServiceRequest with nothing left
// over, and survive a binary encode/decode unchanged. An unknown field, a
// string where a number belongs, a wrong enum: the request is answered 400
// and recorded as an error.
//
//   node otlp_receiver.mjs OUT.jsonl PORTFILE [--fail-first N] [--status CODE]
//
// OUT.jsonl: one line per request, {"path", "request"} (the decoded
// request, in the canonical JSON form) or {"path", "error"}. PORTFILE gets
// the port it listens on (127.0.0.1, chosen by the kernel). --fail-first N
// answers 503 to the first N requests (the agent must retry), --status CODE
// answers CODE to every request. Stops on SIGTERM.
import { createServer } from "node:http";
import { appendFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const root = require("@opentelemetry/otlp-transformer/build/src/generated/root");
const v1 = root.opentelemetry.proto.collector;
const types = {
	"/v1/logs": v1.logs.v1.ExportLogsServiceRequest,
	"/v1/metrics": v1.metrics.v1.ExportMetricsServiceRequest,
};
const conv = { longs: String, enums: Number, bytes: String };

const [out, portFile, ...rest] = process.argv.slice(2);
let failFirst = 0, status = 0;
for (let i = 0; i < rest.length; i++) {
	if (rest[i] === "--fail-first") failFirst = Number(rest[++i]);
	else if (rest[i] === "--status") status = Number(rest[++i]);
}
writeFileSync(out, "");

// proto3: an empty repeated field and an absent one are the same message
function dropEmpty(v) {
	if (Array.isArray(v)) return v.map(dropEmpty);
	if (v && typeof v === "object")
		return Object.fromEntries(Object.entries(v).filter(([, x]) => !(Array.isArray(x) && x.length === 0))
			.map(([k, x]) => [k, dropEmpty(x)]));
	return v;
}

// deep equality that ignores key order
function same(a, b) {
	if (a === b) return true;
	if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
	if (Array.isArray(a) !== Array.isArray(b)) return false;
	const ka = Object.keys(a), kb = Object.keys(b);
	if (ka.length !== kb.length) return false;
	return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && same(a[k], b[k]));
}

// the first place where the two differ, for the error message
function diff(a, b, path = "") {
	if (same(a, b)) return null;
	if (a && b && typeof a === "object" && typeof b === "object") {
		for (const k of new Set([...Object.keys(a), ...Object.keys(b)])) {
			const d = diff(a[k], b[k], `${path}/${k}`);
			if (d) return d;
		}
	}
	return `${path}: sent ${JSON.stringify(a)?.slice(0, 120)}, protocol reads ${JSON.stringify(b)?.slice(0, 120)}`;
}

function decode(path, text) {
	const T = types[path];
	if (!T) throw new Error(`unknown path ${path}`);
	const json = JSON.parse(text);
	const msg = T.fromObject(json);
	const err = T.verify(msg);
	if (err) throw new Error(`verify: ${err}`);
	const canon = T.toObject(msg, conv);
	const d = diff(dropEmpty(json), dropEmpty(canon));
	if (d) throw new Error(`not an exact ${T.name ?? "request"}: ${d}`);
	const back = T.toObject(T.decode(T.encode(msg).finish()), conv);
	const d2 = diff(canon, back);
	if (d2) throw new Error(`binary round trip changed it: ${d2}`);
	return canon;
}

let n = 0;
const server = createServer((req, res) => {
	const chunks = [];
	req.on("data", (c) => chunks.push(c));
	req.on("end", () => {
		n++;
		const path = req.url;
		const reply = (code, body) => {
			res.writeHead(code, { "Content-Type": "application/json" });
			res.end(body);
		};
		if (n <= failFirst) return reply(503, '{"message":"try again"}');
		if (status) return reply(status, '{"message":"refused by the test"}');
		let line;
		try {
			if (req.method !== "POST") throw new Error(`method ${req.method}`);
			if (!/^application\/json/.test(req.headers["content-type"] ?? ""))
				throw new Error(`Content-Type ${req.headers["content-type"]}`);
			line = { path, request: decode(path, Buffer.concat(chunks).toString("utf8")) };
		} catch (e) {
			line = { path, error: String(e.message ?? e) };
		}
		appendFileSync(out, JSON.stringify(line) + "\n");
		if (line.error) reply(400, JSON.stringify({ message: line.error }));
		else reply(200, "{}");
	});
});
server.listen(0, "127.0.0.1", () => writeFileSync(portFile, String(server.address().port)));
process.on("SIGTERM", () => server.close(() => process.exit(0)));
