/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * perfetto.h - the Perfetto / Chrome trace writer (agent/sinks/perfetto.c):
 * a sink for --replay FILE --perfetto OUT, and the converter behind
 * `agentctl export` (agent/control/control.c).
 */
#ifndef INFERTRACE_PERFETTO_H
#define INFERTRACE_PERFETTO_H

#include <stdio.h>
#include <jansson.h>

#include "agent.h"

/*
 * Chrome trace JSON (opens in ui.perfetto.dev and chrome://tracing) from
 * the agent's own records: one track per CPU thread (launches, off-CPU,
 * slow syscalls, synchronisations, markers), one process per GPU device
 * with a track per stream (kernels, copies, memsets), and a flow arrow from
 * each launch to each kernel it started. Records of other types are
 * ignored (counted). docs/operations.md, "Perfetto export".
 */
struct perfetto;
struct perfetto_stats {
	uint64_t records; /* records given */
	uint64_t events;  /* trace events written (metadata excluded) */
	uint64_t flows;
	uint64_t ignored; /* records that draw nothing */
	uint64_t bad;	  /* records that are not JSON objects with a type */
};
struct perfetto *perfetto_new(void); /* NULL + errno */
int perfetto_add(struct perfetto *p, const json_t *rec);
int perfetto_add_json(struct perfetto *p, const char *json, size_t len);
/* the whole document; 0 or -errno */
int perfetto_write(struct perfetto *p, FILE *f);
void perfetto_get_stats(const struct perfetto *p, struct perfetto_stats *out);
void perfetto_free(struct perfetto *p);
/*
 * A sink that feeds every record to a struct perfetto and writes path at
 * close (--replay FILE --perfetto OUT). NULL + errno.
 */
struct sink *sink_perfetto_open(const char *path);

#endif /* INFERTRACE_PERFETTO_H */
