// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * record.c - the record builder: every JSON line starts with the same common
 * fields (docs/events.md, "Common fields"), then goes to every sink.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "ops.h"

const struct agent_opts *agent_opts(struct agent *a)
{
	return &a->opts;
}

const char *agent_host(struct agent *a)
{
	return a->host;
}

void agent_set_default_instance(struct agent *a, const char *name)
{
	snprintf(a->default_instance, sizeof(a->default_instance), "%s", name);
}

const char *agent_instance_of(struct agent *a, uint32_t pid)
{
	struct proc *p;

	if (a->opts.instance)
		return a->opts.instance;
	if (pid) {
		p = proc_find(a, pid);
		if (p && p->instance[0])
			return p->instance;
	}
	return a->default_instance[0] ? a->default_instance : a->host;
}

int32_t agent_rank_of(struct agent *a, uint32_t pid)
{
	struct proc *p = pid ? proc_find(a, pid) : NULL;

	return p ? p->rank : -1;
}

json_t *rec_new(struct agent *a, const char *type, uint32_t pid, uint32_t tid, uint64_t ts_ns)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "schema", json_integer(INFERTRACE_SCHEMA_VERSION));
	json_object_set_new(o, "type", json_string(type));
	json_object_set_new(o, "host", json_string(a->host));
	json_object_set_new(o, "instance", json_string(agent_instance_of(a, pid)));
	if (pid)
		json_object_set_new(o, "pid", json_integer(pid));
	if (tid)
		json_object_set_new(o, "tid", json_integer(tid));
	json_object_set_new(o, "ts_ns", json_integer((json_int_t)ts_ns));
	return o;
}

int rec_emit_raw(struct agent *a, enum rec_class cls, const char *key, const char *json,
		 size_t len)
{
	int err = 0;

	for (int i = 0; i < a->n_sinks; i++) {
		struct sink *s = a->sinks[i];
		int ret = s->write(s, cls, key, json, len);

		if (ret) {
			a->cnt.sink_errors++;
			err = ret;
		}
	}
	if (cls < REC_CLASS_COUNT)
		a->cnt.emitted[cls]++;
	/* the flight recorder keeps detail; an anomaly sends its window (ops.h) */
	recorder_tap(a, cls, key, json, len);
	return err;
}

int rec_emit(struct agent *a, enum rec_class cls, json_t *rec)
{
	/* reused across calls: the agent is single-threaded */
	static char *buf;
	static size_t cap = 4096;
	const char *key;
	size_t len;
	int err;

	if (!rec) {
		a->cnt.json_errors++;
		return -ENOMEM;
	}
	if (!buf && !(buf = malloc(cap))) {
		json_decref(rec);
		return -ENOMEM;
	}
	len = json_dumpb(rec, buf, cap, JSON_COMPACT);
	if (len > cap) {
		char *nb = realloc(buf, len);

		if (!nb) {
			json_decref(rec);
			a->cnt.json_errors++;
			return -ENOMEM;
		}
		buf = nb;
		cap = len;
		len = json_dumpb(rec, buf, cap, JSON_COMPACT);
	}
	if (!len) {
		json_decref(rec);
		a->cnt.json_errors++;
		return -EINVAL;
	}
	key = json_string_value(json_object_get(rec, "instance"));
	err = rec_emit_raw(a, cls, key, buf, len);
	json_decref(rec);
	return err;
}
