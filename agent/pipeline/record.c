// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * record.c - the record builder: every JSON line starts with the same common
 * fields (docs/events.md, "Common fields"); rec_send() hands a finished line
 * to every sink. What is sent, held or kept is decided above, in route.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "jsonw.h"

/*
 * A string from outside (a process name, INFERTRACE_INSTANCE, a host name):
 * jansson refuses invalid UTF-8 and the field would be lost; invalid bytes
 * become U+FFFD instead, counted (jsonw.h).
 */
json_t *rec_string(const char *s)
{
	char fixed[1024];

	return json_string(jw_utf8_clean(s ? s : "", fixed, sizeof(fixed)));
}

json_t *rec_new(struct agent *a, const char *type, uint32_t pid, uint32_t tid, uint64_t ts_ns)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "schema", json_integer(INFERTRACE_SCHEMA_VERSION));
	json_object_set_new(o, "type", json_string(type));
	json_object_set_new(o, "host", rec_string(a->host));
	json_object_set_new(o, "instance", rec_string(agent_instance_of(a, pid)));
	if (pid)
		json_object_set_new(o, "pid", json_integer(pid));
	if (tid)
		json_object_set_new(o, "tid", json_integer(tid));
	json_object_set_new(o, "ts_ns", json_integer((json_int_t)ts_ns));
	return o;
}

int rec_send(struct agent *a, enum rec_class cls, const char *key, const char *json, size_t len,
	     bool release)
{
	int err = 0;

	for (int i = 0; i < a->n_sinks; i++) {
		struct sink *s = a->sinks[i];
		int ret;

		if (s->remote && cls == REC_EVENT && !release) {
			s->held++;
			continue;
		}
		ret = s->write(s, cls, key, json, len);
		if (ret) {
			a->cnt.sink_errors++;
			err = ret;
		}
	}
	if (cls < REC_CLASS_COUNT)
		a->cnt.emitted[cls]++;
	return err;
}

const char *rec_dump(struct agent *a, const json_t *rec, size_t *len)
{
	/* reused across calls: the agent is single-threaded */
	static char *buf;
	static size_t cap = 4096;
	size_t n;

	if (!rec) {
		a->cnt.json_errors++;
		return NULL;
	}
	if (!buf && !(buf = malloc(cap)))
		return NULL;
	n = json_dumpb(rec, buf, cap, JSON_COMPACT);
	if (n > cap) {
		char *nb = realloc(buf, n);

		if (!nb) {
			a->cnt.json_errors++;
			return NULL;
		}
		buf = nb;
		cap = n;
		n = json_dumpb(rec, buf, cap, JSON_COMPACT);
	}
	if (!n) {
		a->cnt.json_errors++;
		return NULL;
	}
	*len = n;
	return buf;
}

int rec_obj_to(struct agent *a, enum rec_class cls, json_t *rec, rec_raw_fn fn)
{
	size_t len;
	const char *buf = rec_dump(a, rec, &len);
	int err = buf	? fn(a, cls, json_string_value(json_object_get(rec, "instance")), buf, len)
		  : rec ? -EINVAL
			: -ENOMEM;

	json_decref(rec);
	return err;
}

static int send_released(struct agent *a, enum rec_class cls, const char *key, const char *json,
			 size_t len)
{
	return rec_send(a, cls, key, json, len, true);
}

int rec_send_obj(struct agent *a, enum rec_class cls, json_t *rec)
{
	return rec_obj_to(a, cls, rec, send_released);
}
