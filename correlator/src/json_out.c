// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * json_out.c - deep-mode kernel/memcpy/memset records, written with the hand
 * writer (jsonw.h): jansson builds and frees an object per record (~0.1 GB/s),
 * which would make the formatter, not the join, the cost of a replay. Field
 * list and meaning: docs/events.md (must match).
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "jsonw.h"

static const char *const kind_names[] = {"kernel", "memcpy", "memset"};

int corr_gpu_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		     const struct corr_gpu *g, const struct corr_launch *l)
{
	struct jsonw w;
	const char *dm;
	long n;

	if (g->kind >= CORR_KIND_COUNT)
		return -EINVAL;
	jw_init(&w, buf, sz);
	/* unmatched: the sender's pid when the source knew it (a shim: the kernel's word) */
	jw_common(&w, kind_names[g->kind], cm ? cm->host : NULL, cm ? cm->instance : NULL,
		  l	   ? (int64_t)l->pid
		  : g->pid ? (int64_t)g->pid
			   : JW_NULL,
		  l ? (int64_t)l->tid : JW_NULL, g->start_ns);
	jw_uint(&w, "start_ns", g->start_ns);
	jw_uint(&w, "end_ns", g->end_ns);
	jw_uint(&w, "dur_ns", g->end_ns > g->start_ns ? g->end_ns - g->start_ns : 0);
	jw_uint(&w, "device", g->device);
	jw_uint(&w, "context", g->context);
	jw_uint(&w, "stream", g->stream);
	jw_uint(&w, "correlation_id", g->corr_id);
	jw_uint(&w, "graph_id", g->graph_id);
	jw_uint(&w, "graph_node_id", g->graph_node_id);
	jw_bool(&w, "matched", l != NULL);
	if (l) {
		jw_str(&w, "launch_api", l->api);
		jw_uint(&w, "launch_cbid", l->cbid);
		jw_uint(&w, "launch_ts_ns", l->ts_ns);
		jw_int(&w, "launch_to_start_ns", (int64_t)(g->start_ns - l->ts_ns));
		jw_str(&w, "launch_src",
		       l->from_uprobe && l->from_callback ? "uprobe+cupti"
		       : l->from_callback		  ? "cupti"
							  : "trace");
	} else {
		jw_null(&w, "launch_api");
		jw_null(&w, "launch_cbid");
		jw_null(&w, "launch_ts_ns");
		jw_null(&w, "launch_to_start_ns");
		/* why there is none, when known: the reader marks it again */
		if (g->flags & CORR_GPU_F_NO_LAUNCH)
			jw_str(&w, "launch_src", "sampled_out");
		else
			jw_null(&w, "launch_src");
	}
	if (g->kind == CORR_KIND_KERNEL) {
		jw_dim3(&w, "grid", g->grid);
		jw_dim3(&w, "block", g->block);
	} else {
		jw_uint(&w, "bytes", g->bytes);
		if (g->kind == CORR_KIND_MEMCPY)
			jw_uint(&w, "copy_kind", g->copy_kind);
	}
	jw_str(&w, "name", g->name ? g->name : "");
	dm = g->kind == CORR_KIND_KERNEL ? corr_demangle(g->name) : NULL;
	jw_str(&w, "demangled", dm ? dm : g->name ? g->name : "");
	n = jw_end(&w);
	return n < 0 ? -ENOSPC : (int)n;
}
