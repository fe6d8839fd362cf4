// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * route.c - the one place that decides where a record goes: sent now, held
 * back from the sinks that leave the node, or kept in the flight recorder.
 * Every producer (the sources, the join, diagnosis, deep-dives) emits
 * through here; the sinks below only transport what they are given.
 *
 *   class      deep mode / instance in deep-dive     sentinel
 *   event      every sink, and kept in the window     local sinks; remote sinks
 *                                                     get it only when a window
 *                                                     is released (recorder.c)
 *   summary    every sink                             every sink
 *   anomaly    every sink, kept, releases the window  the same
 *   stats      every sink                             every sink
 *
 * GPU detail that sentinel mode only summarises (kernels of processes not in
 * a deep-dive) is not sent at all: route_detail() keeps it in the window;
 * route_detail_fmt() keeps it in its source's binary form (collectives), so
 * it is made JSON only if the window is read.
 */

#include "state.h"
#include "pipeline.h"

int rec_emit_raw(struct agent *a, enum rec_class cls, const char *key, const char *json, size_t len)
{
	bool release = cls != REC_EVENT || deepdive_instance_deep(a, key);
	int err = rec_send(a, cls, key, json, len, release);

	/* before the recorder: a window it sends reuses json's buffer (rec_dump) */
	recent_keep(a, cls, key, json, len); /* agentctl anomalies */
	/* the flight recorder keeps detail; an anomaly sends its window (ops.h) */
	recorder_tap(a, cls, key, json, len);
	return err;
}

int rec_emit(struct agent *a, enum rec_class cls, json_t *rec)
{
	return rec_obj_to(a, cls, rec, rec_emit_raw);
}

bool route_wants_detail(struct agent *a, uint32_t pid)
{
	return deepdive_pid_deep(a, pid) || recorder_enabled(a);
}

int route_detail(struct agent *a, uint32_t pid, const char *key, const char *json, size_t len)
{
	if (deepdive_pid_deep(a, pid))
		return rec_emit_raw(a, REC_EVENT, key, json, len);
	recorder_keep(a, key, json, len);
	return 0;
}

int route_detail_fmt(struct agent *a, uint32_t pid, const char *key, rec_fmt_fn fn,
		     const void *blob, size_t len)
{
	static char buf[64 * 1024]; /* one thread; a GPU record's names can be long */
	long n;

	if (!deepdive_pid_deep(a, pid)) {
		recorder_keep_fmt(a, key, fn, blob, len);
		return 0;
	}
	n = fn(a, key, blob, len, buf, sizeof(buf));
	if (n < 0)
		return -1;
	return rec_emit_raw(a, REC_EVENT, key, buf, (size_t)n);
}
