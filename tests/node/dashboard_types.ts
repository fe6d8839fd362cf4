// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
//
// tests/node/dashboard_types.ts - the Grafana dashboard's JSON model as
// Grafana's own published types (@grafana/schema) describe it, for
// dashboard_check.mjs, which type-checks the dashboard against `Dashboard`
// here with the TypeScript compiler: a misspelt field, a value of the wrong
// kind or an option its panel does not have fails. The panels this
// dashboard uses are typed by their plugin's options (timeseries, stat);
// a row by Grafana's RowPanel. A panel of another type fails until it is
// added here.
import type * as schema from "@grafana/schema";
import type * as timeseries from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";
import type * as stat from "@grafana/schema/dist/esm/raw/composable/stat/panelcfg/x/StatPanelCfg_types.gen";

// JSON's view of a type: a string enum as its values (JSON has no enums)
type Json<T> = T extends string
	? `${T}`
	: T extends readonly (infer U)[]
		? Json<U>[]
		: T extends object
			? { [K in keyof T]: Json<T[K]> }
			: T;

// A Prometheus query as Grafana's Prometheus data source stores it (its
// query model, dataquery.cue in grafana/grafana: expr, legendFormat, range,
// instant, format, interval, intervalFactor, exemplar, editorMode)
interface PromQuery extends Json<schema.DataQuery> {
	expr: string;
	legendFormat?: string;
	range?: boolean;
	instant?: boolean;
	format?: "time_series" | "table" | "heatmap";
	interval?: string;
	intervalFactor?: number;
	exemplar?: boolean;
	editorMode?: "code" | "builder";
}

type FieldConfigSource<Custom> = {
	defaults: Omit<Json<schema.FieldConfig>, "custom"> & { custom?: Custom };
	overrides: Json<schema.FieldConfigSource>["overrides"];
};

type Common = Omit<Json<schema.Panel>, "type" | "options" | "fieldConfig" | "targets">;

type TimeSeriesPanel = Common & {
	type: "timeseries";
	options: Json<timeseries.Options>;
	fieldConfig: FieldConfigSource<Json<timeseries.FieldConfig>>;
	targets: PromQuery[];
};

type StatPanel = Common & {
	type: "stat";
	options: Json<stat.Options>;
	fieldConfig: FieldConfigSource<never>;
	targets: PromQuery[];
};

export type Dashboard = Omit<Json<schema.Dashboard>, "panels"> & {
	panels: (TimeSeriesPanel | StatPanel | Json<schema.RowPanel>)[];
};
