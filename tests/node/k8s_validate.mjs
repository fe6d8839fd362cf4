// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/k8s_validate.mjs LABEL DOCS.json - validates every rendered
// Kubernetes object against the Kubernetes OpenAPI schemas the npm package
// kubernetes-models ships (and @kubernetes-models/prometheus-operator for
// the ServiceMonitor CRD). DOCS.json: the array tests/helm/render.go -json
// writes, [{source, object}].
//
// Prints one line per object: "PASS helm_k8s_schema_LABEL[Kind/name]" or
// "FAIL ...: why". A kind with no schema here is a FAIL, not a pass.
// What the schemas check: types, enums, required fields, formats and
// patterns (quantities, durations). What they do not: unknown fields (the
// schemas allow extra properties; `kubectl --validate=strict` is the
// server's check).
import { readFileSync } from "node:fs";

const [label, file] = process.argv.slice(2);
const docs = JSON.parse(readFileSync(file, "utf8"));

// apiVersion -> module that holds its kinds ("group/version" or "version")
const packages = ["kubernetes-models", "@kubernetes-models/prometheus-operator"];

async function modelOf(apiVersion, kind) {
	for (const p of packages) {
		try {
			const m = await import(`${p}/${apiVersion}/${kind}`);
			if (m[kind]) return m[kind];
		} catch (e) {
			if (e.code !== "ERR_PACKAGE_PATH_NOT_EXPORTED" && e.code !== "ERR_MODULE_NOT_FOUND")
				throw e;
		}
	}
	return null;
}

let failed = 0;
if (!Array.isArray(docs) || docs.length === 0) {
	console.log(`FAIL helm_k8s_schema_${label}: no documents in ${file}`);
	process.exit(1);
}
for (const { source, object } of docs) {
	const kind = object?.kind, apiVersion = object?.apiVersion;
	const name = `helm_k8s_schema_${label}[${kind}/${object?.metadata?.name}]`;
	if (typeof kind !== "string" || typeof apiVersion !== "string") {
		console.log(`FAIL ${name}: ${source}: no apiVersion/kind`);
		failed++;
		continue;
	}
	const Model = await modelOf(apiVersion, kind);
	if (!Model) {
		console.log(`FAIL ${name}: no schema for ${apiVersion} ${kind} in ${packages.join(", ")}`);
		failed++;
		continue;
	}
	try {
		new Model(object).validate();
		console.log(`PASS ${name}`);
	} catch (e) {
		console.log(`FAIL ${name}: ${source}: ${String(e.message).split("\n").slice(0, 4).join("; ")}`);
		failed++;
	}
}
process.exit(failed ? 1 : 0);
