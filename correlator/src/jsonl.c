// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * jsonl.c - the agent's own JSON lines (docs/events.md).
 * Lines are small, so jansson parses each; errors name the line.
 *
 * Used records:
 *   kernel / memcpy / memset (json_out.c writes them, live and in replay):
 *     a joined record re-creates its launch from pid, tid, launch_ts_ns,
 *     launch_api, launch_cbid, launch_src, correlation_id, then the GPU
 *     record itself joins it again: a deep-mode recording re-analysed
 *     offline gives the same joins (tests/integration/gpu_live.sh);
 *   cuda_launch {pid, tid, ts_ns, api} (agent/sources/decode.c): a uprobe launch
 *     (api by name). Alone it joins nothing: a recording holds no callbacks;
 *   gpu_launch_cb {pid, tid, ts_ns, correlation_id, domain, cbid}: a shim
 *     callback. The agent writes no such record (callbacks only feed its
 *     correlator); accepted for recordings made by other tools.
 * Others are skipped.
 */
#include <errno.h>
#include <string.h>
#include <jansson.h>

#include "internal.h"

static uint64_t ju(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	if (json_is_integer(v))
		return json_integer_value(v) < 0 ? 0 : (uint64_t)json_integer_value(v);
	if (json_is_real(v))
		return json_real_value(v) < 0 ? 0 : (uint64_t)json_real_value(v);
	return 0;
}

static void u32x3(json_t *o, const char *k, uint32_t v[3])
{
	json_t *a = json_object_get(o, k);

	for (size_t i = 0; i < 3 && json_is_array(a) && i < json_array_size(a); i++)
		v[i] = (uint32_t)json_integer_value(json_array_get(a, i));
}

static int one(struct replay_ctx *rc, json_t *o)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	struct corr_gpu g;
	int err;

	rc->st->events++;
	if (!type) {
		rc->st->skipped++;
		return 0;
	}
	if (!strcmp(type, "kernel") || !strcmp(type, "memcpy") || !strcmp(type, "memset")) {
		memset(&g, 0, sizeof(g));
		g.kind = type[0] == 'k' ? CORR_KIND_KERNEL :
			 type[3] == 'c' ? CORR_KIND_MEMCPY :
					  CORR_KIND_MEMSET;
		g.pid = (uint32_t)ju(o, "pid");
		g.corr_id = (uint32_t)ju(o, "correlation_id");
		g.device = (uint32_t)ju(o, "device");
		g.context = (uint32_t)ju(o, "context");
		g.stream = (uint32_t)ju(o, "stream");
		g.graph_id = (uint32_t)ju(o, "graph_id");
		g.graph_node_id = ju(o, "graph_node_id");
		g.start_ns = ju(o, "start_ns");
		g.end_ns = ju(o, "end_ns");
		g.bytes = ju(o, "bytes");
		g.copy_kind = (uint32_t)ju(o, "copy_kind");
		u32x3(o, "grid", g.grid);
		u32x3(o, "block", g.block);
		g.name = json_string_value(json_object_get(o, "name"));
		if (g.pid && json_is_integer(json_object_get(o, "launch_ts_ns"))) {
			const char *src = json_string_value(json_object_get(o, "launch_src"));
			bool cb = src && (!strcmp(src, "cupti") || !strcmp(src, "uprobe+cupti"));
			bool up = !src || strcmp(src, "cupti");

			rc->st->launches++;
			err = corr_add_launch_src(rc->c, g.pid, (uint32_t)ju(o, "tid"),
						  ju(o, "launch_ts_ns"), g.corr_id,
						  (uint32_t)ju(o, "launch_cbid"),
						  json_string_value(json_object_get(o, "launch_api")),
						  up, cb);
			if (err)
				return err;
		}
		rc->st->gpu_records++;
		return corr__add_gpu(rc->c, &g);
	}
	if (!strcmp(type, "cuda_launch")) {
		const char *api = json_string_value(json_object_get(o, "api"));
		int a = api ? corr_api_from_name(api) : -1;

		rc->st->launches++;
		return corr__add_uprobe_launch(rc->c, (uint32_t)ju(o, "pid"), (uint32_t)ju(o, "tid"),
					       ju(o, "ts_ns"), a < 0 ? 0xffff : (uint16_t)a);
	}
	if (!strcmp(type, "gpu_launch_cb")) {
		rc->st->launches++;
		return corr__add_callback(rc->c, (uint32_t)ju(o, "pid"), (uint32_t)ju(o, "tid"),
					  ju(o, "ts_ns"), (uint32_t)ju(o, "correlation_id"),
					  (uint32_t)ju(o, "domain"), (uint32_t)ju(o, "cbid"));
	}
	rc->st->skipped++;
	return 0;
}

int jsonl_read(struct replay_ctx *rc, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len;
	size_t line = 0;
	int err = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', end - p);
		const char *e = nl ? nl : end;
		json_error_t jerr;
		json_t *o;

		line++;
		/* skip blank lines */
		while (p < e && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		if (p == e) {
			p = e + 1;
			continue;
		}
		o = json_loadb(p, e - p, JSON_DISABLE_EOF_CHECK, &jerr);
		if (!o || !json_is_object(o)) {
			replay_log(rc, CORR_LOG_ERROR, "JSON lines: line %zu (byte offset %zu): %s",
				   line, (size_t)(p - buf) + (o ? 0 : (size_t)jerr.position),
				   o ? "not a JSON object" :
				   !nl ? "truncated last line" : jerr.text);
			json_decref(o);
			return -EINVAL;
		}
		err = one(rc, o);
		json_decref(o);
		if (err)
			return err;
		p = e + 1;
	}
	return 0;
}
