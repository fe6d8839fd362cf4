// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ops.c - one entry point per lifecycle step for the operating modules
 * (ops.h), so main.c and stats.c call four functions, not twenty.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "ops.h"

int ops_init(struct agent *a)
{
	int err;

	if (!a->ops) {
		a->ops = calloc(1, sizeof(*a->ops));
		if (!a->ops)
			return -ENOMEM;
	}
	a->ops->last_tick_ns = now_ns();
	err = recorder_init(a);
	if (!err)
		err = deepdive_init(a);
	if (!err)
		err = control_init(a);
	if (!err)
		err = metrics_init(a);
	if (!err)
		err = control_kafka_init(a);
	return err;
}

void ops_tick(struct agent *a)
{
	if (!a->ops)
		return;
	a->ops->last_tick_ns = now_ns();
	deepdive_tick(a);
	recorder_tick(a);
	control_tick(a);
	metrics_tick(a);
	control_kafka_poll(a);
}

void ops_add_objects(struct agent *a, json_t *obj)
{
	if (!a->ops)
		return;
	control_stats(a, obj);
	deepdive_stats(a, obj);
	recorder_stats(a, obj);
	metrics_stats(a, obj);
	control_kafka_stats(a, obj);
}

/* events per second by type, from two successive stats records */
static json_t *rates_of(const json_t *prev, const json_t *cur, double secs)
{
	json_t *out = json_object(), *v;
	const char *k;

	if (!out || secs <= 0)
		return out;
	json_object_foreach((json_t *)json_object_get(cur, "bpf_events"), k, v)
	{
		json_int_t before =
		    json_integer_value(json_object_get(json_object_get(prev, "bpf_events"), k));
		json_int_t now = json_integer_value(v);

		json_object_set_new(out, k, json_real(now >= before ? (now - before) / secs : 0));
	}
	return out;
}

void ops_stats(struct agent *a, json_t *r)
{
	json_t *prev;
	double secs;

	if (!a->ops)
		return;
	ops_add_objects(a, r);
	prev = a->ops->last_stats;
	secs = json_integer_value(json_object_get(r, "interval_ns")) / 1e9;
	json_decref(a->ops->rates);
	a->ops->rates = prev ? rates_of(prev, r, secs) : NULL;
	a->ops->last_stats = json_deep_copy(r);
	json_decref(prev);
}

void ops_free(struct agent *a)
{
	if (!a->ops)
		return;
	control_kafka_free(a);
	metrics_free(a);
	control_free(a);
	deepdive_free(a);
	recorder_free(a);
	json_decref(a->ops->last_stats);
	json_decref(a->ops->rates);
	free(a->ops);
	a->ops = NULL;
}
