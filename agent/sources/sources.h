/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sources.h - the sources: the BPF side (loader.c owns the skeleton;
 * decode.c, aggregate.c), discovery and probe attachment (discovery.c,
 * uprobes.c, usdt.c), the CUPTI shims' socket (shim.c over shim_rx.c) and
 * --replay (replay.c, its entry point in agent.h). Each produces records and
 * feeds the pipeline (agent/pipeline/pipeline.h); main.c starts and stops
 * them. docs/development.md says how to add one.
 */
#ifndef INFERTRACE_SOURCES_H
#define INFERTRACE_SOURCES_H

#include "state.h"

/* sources/shim.c: the CUPTI shims' socket as a source (after gpu_init) */
struct shim_src;
int shim_init(struct agent *a);
/* a traced process ended: its shim's last records, then the correlator and discovery */
void shim_on_exit(struct agent *a, uint32_t pid, uint64_t ts_ns);
void shim_interval(struct agent *a); /* read what is left, push the deep mode to new shims */
void shim_stats(struct agent *a, json_t *stats_record);
void shim_free(struct agent *a);

/* loader.c: open, configure, load, attach the skeleton */
int loader_start(struct agent *a);
void loader_stop(struct agent *a);
int loader_update_runtime_cfg(struct agent *a);
/* a traced process's flags in traced_procs (PROC_F_DEEP), only if it is there */
int loader_set_proc_flags(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags);
/* sum a per-CPU counter map into out[EV_TYPE_MAX] */
int loader_read_type_counts(struct agent *a, int map_fd, uint64_t *out);

/* uprobes.c: CUDA library probes, once per file */
int uprobes_attach_file(struct agent *a, int lib_idx);
void uprobes_detach_file(struct agent *a, int lib_idx); /* asynchronous: see uprobes.c */
/* takes links (a malloc()ed array) and destroys them off the event loop */
void uprobes_reap_links(struct bpf_link **links, int n);
void uprobes_reaper_stop(void); /* waits for queued detaches */
/* entry point names: corr_api_name() (correlator.h), the one table */

/* discovery.c */
int discovery_start(struct agent *a); /* initial /proc scan or --pid set */
void discovery_on_lib_map(struct agent *a, uint32_t pid);
void discovery_on_exec(struct agent *a, uint32_t pid);
void discovery_on_exit(struct agent *a, uint32_t pid);
void discovery_tick(struct agent *a); /* retries, reaps dead processes */
void discovery_reap(struct agent *a); /* free slots of exited processes */
void discovery_stop(struct agent *a);
/* parse one /proc/PID/maps line; exposed for unit tests */
int maps_parse_line(const char *line, unsigned long *dev_major, unsigned long *dev_minor,
		    unsigned long *ino, char *path, size_t path_sz, bool *exec);
/* is this file name a CUDA runtime (1) or driver (2) library, else 0 */
int cuda_lib_kind(const char *path);
/* instance name from an environment block (NUL separated), else NULL */
const char *instance_from_environ(const char *env, size_t len, char *out, size_t out_sz);
int rank_from_environ(const char *env, size_t len);

/* decode.c: ring records -> JSON */
int decode_record(struct agent *a, const void *data, size_t size);

/* usdt.c: the step probes of include/infertrace/step.h */
#define USDT_LINKS 2
/* an executable mapping of path (dev, ino as in /proc/PID/maps): attach if it has the probes */
int usdt_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path);
void usdt_detach(struct proc *p); /* every file of the process */
void usdt_free(struct agent *a); /* the file cache, at shutdown */
/* a cuda_launch record's JSON (deep mode, and the flight recorder's kernel half) */
long decode_launch_json(struct agent *a, const struct cuda_launch_event *e, size_t size,
			char *buf, size_t cap); /* length, or -errno (counted) */
/* the same from a flight-recorder entry, its stack looked up by id */
long decode_flight_json(struct agent *a, const struct flight_launch *f, char *buf, size_t cap);

/* aggregate.c: per-interval summaries from the maps */
int aggregate_init(struct agent *a);
void aggregate_interval(struct agent *a, bool final);
void aggregate_free(struct agent *a);
void aggregate_print_summary(struct agent *a, FILE *out);
/* a single slow-syscall event, counted for the readable summary */
void aggregate_note_syscall(struct agent *a, uint32_t tid, uint32_t nr, uint64_t dur_ns);
/* bucket lower bound in us for a histogram slot; must match bpf hist_slot() */
uint64_t hist_lower_us(unsigned slot);
json_t *hist_to_json(const __u64 *slots, const __u64 *prev, unsigned n);

#endif /* INFERTRACE_SOURCES_H */
