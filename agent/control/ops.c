// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * ops.c - one entry point per lifecycle step for the operating modules
 * (ops.h), so main.c calls three functions, not fifteen. Each module's
 * stats object is registered with stats.c here (stats_provide), so that the
 * modules that read them (control.c, metrics.c) never call back up.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "nccl_live.h"

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
		err = recent_init(a);
	if (!err)
		err = flight_start(a); /* its kernel half: the BPF source's rings */
	if (!err)
		err = deepdive_init(a);
	if (!err)
		err = control_init(a);
	if (!err)
		err = metrics_init(a);
	if (!err)
		err = control_kafka_init(a);
	/* the stats record's objects, in this order (stats.c gathers them) */
	stats_provide(a, control_stats);
	stats_provide(a, deepdive_stats);
	stats_provide(a, recorder_stats);
	stats_provide(a, metrics_stats);
	stats_provide(a, control_kafka_stats);
	stats_provide(a, nccl_stats);
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

void ops_free(struct agent *a)
{
	if (!a->ops)
		return;
	recorder_send_all(a); /* a window being sent: before the formatters go */
	control_kafka_free(a);
	metrics_free(a);
	control_free(a);
	deepdive_free(a);
	flight_stop(a);
	recorder_free(a);
	recent_free(a);
	json_decref(a->ops->last_stats);
	json_decref(a->ops->rates);
	free(a->ops);
	a->ops = NULL;
}
