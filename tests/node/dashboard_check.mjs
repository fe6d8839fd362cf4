// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/dashboard_check.mjs DASHBOARD.json - the dashboard type-checked
// against Grafana's published types (dashboard_types.ts, @grafana/schema)
// by the TypeScript compiler: its JSON written as an object literal of type
// Dashboard, so that TypeScript's excess-property check refuses any field
// the types do not have. Prints "ok" or the compiler's diagnostics and
// exits 1.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = dirname(fileURLToPath(import.meta.url));
const json = readFileSync(process.argv[2], "utf8");
JSON.parse(json); // a syntax error is the JSON's, not the types'
const dir = mkdtempSync(join(here, ".dashboard-check-"));
const file = join(dir, "check.ts");
writeFileSync(
	file,
	`import type { Dashboard } from "../dashboard_types";\nexport const dashboard: Dashboard = ${json};\n`,
);
const program = ts.createProgram([file], {
	noEmit: true,
	strict: true,
	module: ts.ModuleKind.Node16,
	moduleResolution: ts.ModuleResolutionKind.Node16,
	target: ts.ScriptTarget.ES2022,
	skipLibCheck: true,
});
const diags = ts.getPreEmitDiagnostics(program);
rmSync(dir, { recursive: true, force: true });
if (diags.length) {
	for (const d of diags.slice(0, 10)) {
		const where = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : null;
		console.log(
			(where ? `line ${where.line} col ${where.character + 1}: ` : "") +
				ts.flattenDiagnosticMessageText(d.messageText, " "),
		);
	}
	process.exit(1);
}
console.log("ok");
