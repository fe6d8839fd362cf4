// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * recent.c - the last RECENT_MAX records of class anomaly (`anomaly`,
 * `level_shift`) the agent wrote, as its sinks got them, for `agentctl
 * anomalies`: what the detector said lately, on the node, without a reader
 * of the file or a consumer of the Kafka topic. A ring of copies of their
 * JSON text; when it is full the oldest goes. Live only (ops_init()): a
 * replay writes its records to its output and ends.
 *
 * route.c hands every record of class anomaly to recent_keep() after the
 * sinks; control.c reads the ring with recent_write().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"

struct recent_rec {
	char *json;
	size_t len;
	uint64_t seq; /* its place among the records seen, from 1 */
	char instance[INSTANCE_LEN];
};

struct recent {
	struct recent_rec r[RECENT_MAX];
	uint32_t next; /* the slot the next record takes */
	uint32_t n;    /* slots in use */
	uint64_t seen; /* records of class anomaly since the start */
	uint64_t lost; /* of those, not kept: no memory */
};

int recent_init(struct agent *a)
{
	if (a->recent)
		return 0;
	a->recent = calloc(1, sizeof(*a->recent));
	return a->recent ? 0 : -ENOMEM;
}

void recent_free(struct agent *a)
{
	struct recent *rc = a->recent;

	if (!rc)
		return;
	for (uint32_t i = 0; i < RECENT_MAX; i++)
		free(rc->r[i].json);
	free(rc);
	a->recent = NULL;
}

void recent_keep(struct agent *a, enum rec_class cls, const char *key, const char *json, size_t len)
{
	struct recent *rc = a->recent;
	struct recent_rec *e;
	char *copy;

	if (!rc || cls != REC_ANOMALY)
		return;
	rc->seen++;
	copy = malloc(len);
	if (!copy) {
		rc->lost++;
		return;
	}
	memcpy(copy, json, len);
	e = &rc->r[rc->next];
	free(e->json);
	e->json = copy;
	e->len = len;
	e->seq = rc->seen;
	snprintf(e->instance, sizeof(e->instance), "%s", key ? key : "");
	rc->next = (rc->next + 1) % RECENT_MAX;
	if (rc->n < RECENT_MAX)
		rc->n++;
}

/* the i-th record kept, oldest first */
static const struct recent_rec *nth(const struct recent *rc, uint32_t i)
{
	return &rc->r[(rc->next + RECENT_MAX - rc->n + i) % RECENT_MAX];
}

static bool matches(const struct recent_rec *e, const char *instance, int64_t after)
{
	return (int64_t)e->seq > after &&
	       (!instance || !instance[0] || !strcmp(e->instance, instance));
}

json_t *recent_write(struct agent *a, const char *instance, uint32_t last, int64_t after, FILE *out)
{
	const struct recent *rc = a->recent;
	uint32_t matched = 0, skip, written = 0;
	uint64_t oldest, missed = 0;

	if (!rc)
		return NULL;
	for (uint32_t i = 0; i < rc->n; i++)
		matched += matches(nth(rc, i), instance, after);
	skip = last && matched > last ? matched - last : 0;
	for (uint32_t i = 0; i < rc->n; i++) {
		const struct recent_rec *e = nth(rc, i);

		if (!matches(e, instance, after))
			continue;
		if (skip) { /* older than the last `last` */
			skip--;
			continue;
		}
		fwrite(e->json, 1, e->len, out);
		fputc('\n', out);
		written++;
	}
	/* seen after `after` but gone from the ring, or never in it: of any instance */
	oldest = rc->n ? nth(rc, 0)->seq : rc->seen + 1;
	if (after >= 0 && oldest > (uint64_t)after + 1)
		missed = oldest - (uint64_t)after - 1;
	return json_pack("{s:I,s:I,s:i,s:i,s:i,s:i,s:I}", "seen", (json_int_t)rc->seen, "not_kept",
			 (json_int_t)rc->lost, "kept", (int)rc->n, "capacity", RECENT_MAX,
			 "matched", (int)matched, "records", (int)written, "missed",
			 (json_int_t)missed);
}
