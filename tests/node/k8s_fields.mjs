// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/k8s_fields.mjs - unknown fields of a Kubernetes object, from
// the TypeScript declarations kubernetes-models ships beside its schemas
// (the schemas themselves accept any extra property). A misspelt field, or
// a block indented one level off (a wrong nindent puts the labels' keys
// into metadata), is a field the API server's strict validation would
// refuse.
//
//   unknownFields(object, moduleSpecifier) -> ["/metadata/helm.sh~1chart", ...]
//
// moduleSpecifier: the model's module, e.g. "kubernetes-models/apps/v1/DaemonSet".
// The declarations are read with a small parser of the subset they use:
// interfaces of quoted properties, Array<T>, { [key: string]: T }, inline
// object types, unions, string literals, and `export type { A as B }`
// aliases. A type it cannot resolve accepts anything below it.
import { readFileSync } from "node:fs";
import { dirname, resolve as resolvePath } from "node:path";
import { fileURLToPath } from "node:url";

const files = new Map(); // path -> { text, imports: name -> spec }

function load(path) {
	if (files.has(path)) return files.get(path);
	let text;
	try {
		text = readFileSync(path, "utf8")
			.replace(/\/\*[\s\S]*?\*\//g, "")
			.replace(/^\s*\/\/.*$/gm, "");
	} catch {
		text = null;
	}
	const imports = new Map();
	for (const m of (text ?? "").matchAll(/import\s*\{([^}]*)\}\s*from\s*"([^"]+)"/g))
		for (const n of m[1].split(",").map((s) => s.trim()).filter(Boolean))
			imports.set(n.split(/\s+as\s+/).pop(), { spec: m[2], name: n.split(/\s+as\s+/)[0] });
	const f = { path, text, imports };
	files.set(path, f);
	return f;
}

function dtsOf(spec, fromPath) {
	if (spec.startsWith(".")) return resolvePath(dirname(fromPath), spec.replace(/\.js$/, "") + ".d.ts");
	return fileURLToPath(import.meta.resolve(spec)).replace(/\.js$/, ".d.ts");
}

// ------------------------------------------------------------ parser ----
function tokens(s) {
	const out = [];
	const re = /\s*("(?:[^"\\]|\\.)*"|\[key:\s*string\]|[A-Za-z_$][\w$]*|[{}<>;:|?\[\](),=]|\S)/gy;
	let m;
	while ((m = re.exec(s)) && m[1] !== undefined) out.push(m[1]);
	return out;
}

// type := alt ('|' alt)* ; alt := Array<type> | { members } | name | "lit" | name[]
function parseType(t, i) {
	const alts = [];
	for (;;) {
		let a;
		if (t[i] === "Array" && t[i + 1] === "<") {
			const [inner, j] = parseType(t, i + 2);
			a = { array: inner };
			i = j + 1; // ">"
		} else if (t[i] === "{") {
			const [members, j] = parseMembers(t, i + 1);
			a = members;
			i = j + 1; // "}"
		} else {
			a = t[i].startsWith('"') ? { literal: t[i] } : { ref: t[i] };
			i++;
		}
		while (t[i] === "[" && t[i + 1] === "]") {
			a = { array: a };
			i += 2;
		}
		alts.push(a);
		if (t[i] !== "|") break;
		i++;
	}
	return [alts.length === 1 ? alts[0] : { union: alts }, i];
}

function parseMembers(t, i) {
	const props = new Map();
	let index = null;
	while (i < t.length && t[i] !== "}") {
		if (t[i].startsWith("[key:")) {
			[index, i] = parseType(t, i + 2); // "[key: string]" ":"
		} else if (t[i].startsWith('"') || /^[A-Za-z_$]/.test(t[i])) {
			const name = t[i].startsWith('"') ? JSON.parse(t[i]) : t[i];
			i++;
			if (t[i] === "?") i++;
			let type;
			[type, i] = parseType(t, i + 1); // ":"
			props.set(name, type);
		} else {
			i++;
		}
		if (t[i] === ";" || t[i] === ",") i++;
	}
	return [{ props, index }, i];
}

// the definition of NAME in file f: { props, index } | other type | null
const defs = new Map();
function resolveRef(name, f) {
	const key = `${f.path}#${name}`;
	if (defs.has(key)) return defs.get(key);
	defs.set(key, null); // recursion guard (JSONSchemaProps refers to itself)
	let def = null;
	if (f.imports.has(name)) {
		const imp = f.imports.get(name);
		def = resolveRef(imp.name, load(dtsOf(imp.spec, f.path)));
	} else if (f.text) {
		const alias = [...f.text.matchAll(/export\s+type\s*\{([^}]*)\}/g)]
			.flatMap((m) => m[1].split(",")).map((s) => s.trim().split(/\s+as\s+/))
			.find((p) => p[1] === name);
		const local = alias ? alias[0] : name;
		const iface = new RegExp(`export\\s+interface\\s+${local}\\b[^{]*\\{`).exec(f.text);
		const alias2 = new RegExp(`export\\s+type\\s+${local}\\s*=([^;]*);`).exec(f.text);
		if (iface) {
			def = parseMembers(tokens(f.text.slice(iface.index + iface[0].length)), 0)[0];
			def.file = f;
		} else if (alias2) {
			def = parseType(tokens(alias2[1]), 0)[0];
			def.file = f;
		}
	}
	defs.set(key, def);
	return def;
}

function check(v, type, f, path, out) {
	if (!type || v === null || typeof v !== "object") return;
	if (type.ref) return check(v, resolveRef(type.ref, type.file ?? f), f, path, out);
	if (type.union) {
		const obj = type.union.map((a) => (a.ref ? resolveRef(a.ref, a.file ?? f) : a)).find((a) => a?.props);
		return obj && !Array.isArray(v) ? check(v, obj, f, path, out) : undefined;
	}
	if (type.array) {
		if (Array.isArray(v)) v.forEach((x, i) => check(x, type.array, type.file ?? f, `${path}/${i}`, out));
		return;
	}
	if (!type.props || Array.isArray(v)) return;
	const file = type.file ?? f;
	for (const [k, x] of Object.entries(v)) {
		const p = `${path}/${k.replace(/~/g, "~0").replace(/\//g, "~1")}`;
		if (type.props.has(k)) check(x, type.props.get(k), file, p, out);
		else if (type.index) check(x, type.index, file, p, out);
		else out.push(p);
	}
}

export function unknownFields(object, moduleSpecifier) {
	const f = load(dtsOf(moduleSpecifier, "/"));
	const kind = moduleSpecifier.split("/").pop();
	const root = resolveRef(`I${kind}`, f);
	if (!root) throw new Error(`no interface I${kind} in ${f.path}`);
	const out = [];
	check(object, root, f, "", out);
	return out;
}
