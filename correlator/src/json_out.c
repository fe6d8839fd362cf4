// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * json_out.c - deep-mode kernel/memcpy/memset records formatted by hand:
 * jansson builds and frees an object per record (~0.1 GB/s), which would make
 * the formatter, not the join, the cost of a replay. Field list and meaning:
 * docs/events.md (must match).
 */
#include <errno.h>
#include <string.h>

#include "internal.h"

/* schema of every JSON line: INFERTRACE_SCHEMA_VERSION in bpf/events.h (must match) */
#define CORR_SCHEMA_VERSION 1

struct out {
	char *p, *end;
	bool full;
};

static inline void put(struct out *o, const char *s, size_t n)
{
	if ((size_t)(o->end - o->p) < n) {
		o->full = true;
		return;
	}
	memcpy(o->p, s, n);
	o->p += n;
}

#define PUTS(o, lit) put(o, lit, sizeof(lit) - 1)

static inline void put_u64(struct out *o, uint64_t v)
{
	char tmp[24];
	int i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put(o, tmp + i, sizeof(tmp) - i);
}

static inline void put_i64(struct out *o, int64_t v)
{
	if (v < 0) {
		PUTS(o, "-");
		put_u64(o, (uint64_t)0 - (uint64_t)v);
	} else {
		put_u64(o, (uint64_t)v);
	}
}

static void put_str(struct out *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const char *run = s;

	PUTS(o, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		char esc[6];

		if (ch >= 0x20 && ch != '"' && ch != '\\')
			continue;
		put(o, run, s - run);
		run = s + 1;
		if (ch == '"' || ch == '\\') {
			esc[0] = '\\';
			esc[1] = (char)ch;
			put(o, esc, 2);
		} else {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[ch >> 4];
			esc[5] = hex[ch & 15];
			put(o, esc, 6);
		}
	}
	put(o, run, s - run);
	PUTS(o, "\"");
}

static void put_u32x3(struct out *o, const uint32_t v[3])
{
	PUTS(o, "[");
	put_u64(o, v[0]);
	PUTS(o, ",");
	put_u64(o, v[1]);
	PUTS(o, ",");
	put_u64(o, v[2]);
	PUTS(o, "]");
}

static const char *const kind_names[] = { "kernel", "memcpy", "memset" };

int corr_gpu_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		     const struct corr_gpu *g, const struct corr_launch *l)
{
	struct out o = { .p = buf, .end = buf + sz };
	const char *dm;

	if (g->kind >= CORR_KIND_COUNT)
		return -EINVAL;
	PUTS(&o, "{\"schema\":");
	put_u64(&o, CORR_SCHEMA_VERSION);
	PUTS(&o, ",\"type\":\"");
	put(&o, kind_names[g->kind], strlen(kind_names[g->kind]));
	PUTS(&o, "\",\"host\":");
	put_str(&o, cm && cm->host ? cm->host : "");
	PUTS(&o, ",\"instance\":");
	put_str(&o, cm && cm->instance ? cm->instance : "");
	if (l) {
		PUTS(&o, ",\"pid\":");
		put_u64(&o, l->pid);
		PUTS(&o, ",\"tid\":");
		put_u64(&o, l->tid);
	} else {
		PUTS(&o, ",\"pid\":null,\"tid\":null");
	}
	PUTS(&o, ",\"ts_ns\":");
	put_u64(&o, g->start_ns);
	PUTS(&o, ",\"start_ns\":");
	put_u64(&o, g->start_ns);
	PUTS(&o, ",\"end_ns\":");
	put_u64(&o, g->end_ns);
	PUTS(&o, ",\"dur_ns\":");
	put_u64(&o, g->end_ns > g->start_ns ? g->end_ns - g->start_ns : 0);
	PUTS(&o, ",\"device\":");
	put_u64(&o, g->device);
	PUTS(&o, ",\"context\":");
	put_u64(&o, g->context);
	PUTS(&o, ",\"stream\":");
	put_u64(&o, g->stream);
	PUTS(&o, ",\"correlation_id\":");
	put_u64(&o, g->corr_id);
	PUTS(&o, ",\"graph_id\":");
	put_u64(&o, g->graph_id);
	PUTS(&o, ",\"graph_node_id\":");
	put_u64(&o, g->graph_node_id);
	PUTS(&o, ",\"matched\":");
	if (l) {
		PUTS(&o, "true,\"launch_api\":");
		put_str(&o, l->api);
		PUTS(&o, ",\"launch_cbid\":");
		put_u64(&o, l->cbid);
		PUTS(&o, ",\"launch_ts_ns\":");
		put_u64(&o, l->ts_ns);
		PUTS(&o, ",\"launch_to_start_ns\":");
		put_i64(&o, (int64_t)(g->start_ns - l->ts_ns));
		PUTS(&o, ",\"launch_src\":");
		if (l->from_uprobe && l->from_callback)
			PUTS(&o, "\"uprobe+cupti\"");
		else if (l->from_callback)
			PUTS(&o, "\"cupti\"");
		else
			PUTS(&o, "\"trace\"");
	} else {
		PUTS(&o, "false,\"launch_api\":null,\"launch_cbid\":null,\"launch_ts_ns\":null,"
			 "\"launch_to_start_ns\":null,\"launch_src\":null");
	}
	if (g->kind == CORR_KIND_KERNEL) {
		PUTS(&o, ",\"grid\":");
		put_u32x3(&o, g->grid);
		PUTS(&o, ",\"block\":");
		put_u32x3(&o, g->block);
	} else {
		PUTS(&o, ",\"bytes\":");
		put_u64(&o, g->bytes);
		if (g->kind == CORR_KIND_MEMCPY) {
			PUTS(&o, ",\"copy_kind\":");
			put_u64(&o, g->copy_kind);
		}
	}
	PUTS(&o, ",\"name\":");
	put_str(&o, g->name ? g->name : "");
	dm = g->kind == CORR_KIND_KERNEL ? corr_demangle(g->name) : NULL;
	PUTS(&o, ",\"demangled\":");
	if (dm)
		put_str(&o, dm);
	else
		put_str(&o, g->name ? g->name : "");
	PUTS(&o, "}");
	if (o.full)
		return -ENOSPC;
	return (int)(o.p - buf);
}
