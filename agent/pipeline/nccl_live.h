/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * nccl_live.h - the live NCCL path of the pipeline (agent/pipeline/nccl_live.c):
 * the uprobes' NCCL records (bpf/nccl.bpf.c, decoded by agent/sources/decode.c)
 * become `collective` records joined with their NCCL kernel, feed the
 * cross-rank wait tracker (correlator/include/collective.h) and the
 * per-interval `collective_summary`. Event loop thread only.
 */
#ifndef INFERTRACE_NCCL_LIVE_H
#define INFERTRACE_NCCL_LIVE_H

#include "state.h"

struct corr_gpu;
struct corr_launch;

/* the entry point's symbol ("ncclAllReduce"), "?" outside enum nccl_api */
const char *nccl_api_name(unsigned api);

void nccl_on_call(struct agent *a, const struct nccl_call_event *e);
void nccl_on_comm(struct agent *a, const struct nccl_comm_event *e);
/* a joined GPU record (join.c): an NCCL kernel completes its collectives */
void nccl_on_kernel(struct agent *a, const struct corr_gpu *g, const struct corr_launch *l);
/* a process's CUPTI shim said hello: hold its collectives for their kernels (gpu) */
void nccl_on_shim(struct agent *a, uint32_t pid, bool gpu);
void nccl_on_exit(struct agent *a, uint32_t pid);
/* every loop tick: collectives whose kernel did not come in time go out */
void nccl_tick(struct agent *a, uint64_t now_ns);
/* every --interval: summaries (sentinel), wait timeouts, straggler anomalies */
void nccl_interval(struct agent *a, bool final);
void nccl_stats(struct agent *a, json_t *stats_record);
void nccl_free(struct agent *a);

#endif /* INFERTRACE_NCCL_LIVE_H */
