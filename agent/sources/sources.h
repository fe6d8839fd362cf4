/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * sources.h - the sources: the BPF side (loader.c owns the skeleton;
 * decode.c, aggregate.c, flight.c), discovery and probe attachment (discovery.c,
 * uprobes.c, usdt.c), the CUPTI shims' socket (shim.c over shim_rx.c) and
 * --replay (replay.c, its entry point in agent.h). Each produces records and
 * feeds the pipeline (agent/pipeline/pipeline.h); main.c starts and stops
 * them. docs/development.md says how to add one.
 */
#ifndef INFERTRACE_SOURCES_H
#define INFERTRACE_SOURCES_H

#include <stdio.h>

#include "state.h"

/* sources/shim.c: the CUPTI shims' socket as a source (after gpu_init) */
struct shim_src;
int shim_init(struct agent *a);
/* a traced process ended: its shim's last records, then the correlator and discovery */
void shim_on_exit(struct agent *a, uint32_t pid, uint64_t ts_ns);
void shim_interval(struct agent *a); /* read what is left, push the deep mode to new shims */
void shim_stats(struct agent *a, json_t *stats_record);
void shim_free(struct agent *a);

/*
 * gpu_telemetry.c: the node's GPUs through NVML (--gpu-telemetry), polled by
 * a thread of its own; "gpu_telemetry" records from the loop. telem_start:
 * 0 also when NVML is absent in auto mode (stats say "unavailable");
 * -ENOENT when --gpu-telemetry on cannot load it.
 */
int telem_start(struct agent *a);
void telem_stats(struct agent *a, json_t *stats_record);
/* the latest sample's gauges per GPU in the Prometheus text format (metrics.c) */
void telem_metrics(struct agent *a, FILE *f);
/* --summary: per GPU, its clock range, temperature, power, what held its clocks down */
void telem_print_summary(struct agent *a, FILE *out);
void telem_stop(struct agent *a);

/*
 * loader.c: open, configure, load, attach the skeleton. The only file that
 * includes infertrace.skel.h or touches a->skel: what the other files need
 * of the BPF side's maps, rings and programs is one of these functions
 * (-ENODEV or NULL while it is not loaded).
 */
struct bpf_program;
int loader_start(struct agent *a);
void loader_stop(struct agent *a);
bool loader_loaded(const struct agent *a);
int loader_update_runtime_cfg(struct agent *a);
/* traced_procs: follow a process (any flags), or no longer */
int loader_proc_add(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags);
void loader_proc_remove(struct agent *a, uint32_t pid);
/* a traced process's flags in traced_procs (PROC_F_DEEP), only if it is there */
int loader_set_proc_flags(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags);
/* a traced thread exited (aggregate.c): its BPF state kept by tid goes */
void loader_thread_gone(struct agent *a, uint32_t tid);
/* entries per CPU of the NCCL call slots (--nccl-slots, a power of 2); 0: calls on rb_cuda */
uint32_t loader_nccl_slots(const struct agent *a);
/* the per-CPU event_counts and drop_counts summed by type, out[EV_TYPE_MAX] each */
int loader_event_counts(struct agent *a, uint64_t *events, uint64_t *drops);
/* the maps read from user space: aggregate.c, flight.c */
enum loader_map {
	LOADER_THREAD_STATS,
	LOADER_SYSCALL_STATS,
	LOADER_NETDEV_STATS,
	LOADER_FLIGHT,	   /* mmap'able: the per-CPU launch rings */
	LOADER_FLIGHT_CUR, /* mmap'able: their cursors */
	LOADER_NCCL_SLOTS, /* mmap'able: sentinel's NCCL calls, per CPU */
	LOADER_NCCL_CUR,   /* mmap'able: their cursors */
};
int loader_map_fd(struct agent *a, enum loader_map m);
/* a flight_stacks entry (size: bytes of ips) */
int loader_flight_stack(struct agent *a, int32_t stack_id, __u64 *ips, size_t size);
/* the uprobe program of a CUDA entry point by name (corr_api_name()), the sync-call return */
struct bpf_program *loader_program(struct agent *a, const char *name);
struct bpf_program *loader_sync_return(struct agent *a);
/* the USDT step programs: step_begin, or step_end (end) */
struct bpf_program *loader_step_program(struct agent *a, bool end);
/*
 * rb_cuda into a->rb_cuda (each record to cuda_fn), rb_sched and rb_misc into
 * a->rb (to other_fn); freed by loader_stop()
 */
typedef int (*ring_fn)(void *ctx, void *data, size_t size);
int loader_open_rings(struct agent *a, ring_fn cuda_fn, ring_fn other_fn, void *ctx);

/*
 * slots.c: the per-CPU slot arrays of the BPF side (bpf/lib/common.bpf.h
 * slot_begin/slot_end), mapped read-only: one reader for every such map.
 */
struct slices {
	const unsigned char *base; /* cpus x per_cpu entries of `entry` bytes */
	volatile struct slot_cursor *cur;
	size_t base_len, cur_len, entry;
	uint32_t per_cpu, cpus;
	uint64_t *read;	      /* per CPU: entries consumed */
	uint64_t overwritten; /* entries lost: written over before they were copied */
};
/* map the array (fd) and its cursors (cur_fd); 0 or -errno */
int slices_map(struct slices *s, int fd, int cur_fd, size_t entry, uint32_t per_cpu, uint32_t cpus);
void slices_unmap(struct slices *s);
uint64_t slices_written(const struct slices *s); /* entries written so far, all CPUs */
/* each complete entry written since the last call, to fn (a copy); returns how many */
uint64_t slices_read(struct slices *s, void (*fn)(void *ctx, const void *entry), void *ctx);
/*
 * sentinel's NCCL calls (after loader_start(); registers a->cap.nccl_flush and
 * nccl_counts). slots_consume(): consume the rings, then hand the slots'
 * calls entered before that on to nccl_live.c in time order (every
 * ring_buffer__consume() of the agent goes through it); from an rb_misc
 * callback it consumes rb_cuda alone, from an rb_cuda one neither. decode.c
 * calls slots_nccl_before() before an NCCL record of rb_cuda is decoded,
 * and slots_consume() before an exit of rb_misc.
 */
int slots_nccl_start(struct agent *a);
void slots_nccl_stop(struct agent *a);
int slots_consume(struct agent *a);
void slots_nccl_before(struct agent *a, uint64_t ts);

/*
 * flight.c: the flight recorder's kernel half (after recorder_init()): maps
 * the per-CPU launch rings and registers the capture_hooks that copy their
 * new entries into the recorder and format them
 */
int flight_start(struct agent *a);
void flight_stop(struct agent *a);

/* uprobes.c: CUDA library probes, once per file */
enum probe_class {
	PROBE_SYNC,   /* synchronisation points and copies: attached with the file */
	PROBE_GRAPH,  /* one per CUDA graph replay: attached only while wanted */
	PROBE_LAUNCH, /* one per kernel launch: attached only while wanted */
	PROBE_CLASSES,
};
enum probe_class uprobes_api_class(unsigned api);
int uprobes_attach_file(struct agent *a, int lib_idx);
/*
 * attach or detach the launch-class probes of every traced file as the mode,
 * --sentinel-launches, deep-dives and --launch-sampling windows say; start
 * registers it as a->cap.launch_probes, the loop calls it every tick
 */
void uprobes_launch_start(struct agent *a);
void uprobes_launch_policy(struct agent *a);
void uprobes_detach_file(struct agent *a, int lib_idx); /* asynchronous: see uprobes.c */
/* the path to attach to a file by: lf->path, or its descriptor once that process is gone */
const char *uprobes_file_path(const struct libfile *lf, char *buf, size_t sz);
/*
 * one uprobe (ret: uretprobe) on sym of the file, for every process (pid -1):
 * by uprobes_file_path(), and by the descriptor if its process left meanwhile
 */
struct bpf_link *uprobes_attach_probe(const struct libfile *lf, struct bpf_program *prog,
				      const char *sym, bool ret);
/* takes links (a malloc()ed array) and destroys them off the event loop */
void uprobes_reap_links(struct bpf_link **links, int n);
void uprobes_reaper_stop(void); /* waits for queued detaches */
/* entry point names: corr_api_name() (correlator.h), the one table */

/*
 * nccl.c: the NCCL probes (bpf/nccl.bpf.c) on a libnccl file, once per
 * file like uprobes.c; detached by uprobes_detach_file()
 */
int nccl_attach_file(struct agent *a, int lib_idx);
/* the uretprobe that reports ncclCommInit* and ncclCommSplit (loader.c) */
struct bpf_program *loader_nccl_comm_return(struct agent *a);

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
/* is this file name a CUDA runtime (1), driver (2) or NCCL (3) library, else 0 */
int cuda_lib_kind(const char *path);
/* discovery.c: field 22 (starttime) of a /proc/PID/stat line; 0 when absent */
uint64_t stat_start_time(const char *stat);
/*
 * instance name from an environment block (NUL separated), else NULL: valid
 * UTF-8 (U+FFFD for invalid bytes), cut at a character to fit out_sz
 */
const char *instance_from_environ(const char *env, size_t len, char *out, size_t out_sz);
int rank_from_environ(const char *env, size_t len);

/* decode.c: ring records -> JSON */
int decode_record(struct agent *a, const void *data, size_t size);

/* usdt.c: the step probes of include/infertrace/step.h */
#define USDT_LINKS 2
/* an executable mapping of path (dev, ino as in /proc/PID/maps): attach if it has the probes */
int usdt_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path);
void usdt_detach(struct proc *p); /* every file of the process */

/*
 * python.c: the Python frames of traced processes (--python-stacks),
 * sampled by bpf/python.bpf.c. python_on_mapping: a file the process maps
 * executable (discovery.c, with usdt_on_mapping); python_detach: at its
 * exit or exec; python_on_stack: an EV_PY_STACK (decode.c);
 * python_interval: the python_profile records.
 */
int python_start(struct agent *a);
void python_on_mapping(struct agent *a, struct proc *p, dev_t dev, ino_t ino, const char *path,
		       bool is_exe);
void python_detach(struct agent *a, struct proc *p);
struct py_stack_event;
void python_on_stack(struct agent *a, const struct py_stack_event *e);
/*
 * the launch (pid, tid, ts) of a cuda_launch record being written: its
 * Python frames, when they came (PY_F_LAUNCH), as "python_stack"
 */
struct jsonw;
void python_launch_json(struct agent *a, uint32_t pid, uint32_t tid, uint64_t ts, struct jsonw *w);

/*
 * One Python frame's JSON (python_stack, launch_python, python_profile's
 * stack), and a name from a recording cleaned as one read from a process
 * (at most PY_NAME_MAX bytes): agent/sources/replay.c writes recorded frames
 */
void python_frame_json(struct jsonw *w, const char *func, const char *file, int64_t first_line,
		       int64_t line);
const char *python_name_clean(const char *in, char *out, size_t out_sz);
void python_interval(struct agent *a, uint64_t now);
void python_stats(struct agent *a, json_t *stats_record);
void python_print_summary(struct agent *a, FILE *out); /* --summary's section */
void python_stop(struct agent *a);
/*
 * loader.c: the sampler on every CPU at hz (the number of CPUs, or -errno);
 * a process's struct py_proc in py_procs (NULL: removed)
 */
int loader_python_sampler(struct agent *a, uint32_t hz);
struct py_proc;
int loader_python_proc(struct agent *a, uint32_t pid, const struct py_proc *pp);
void usdt_free(struct agent *a); /* the file cache, at shutdown */
/* a cuda_launch record's JSON (deep mode, and the flight recorder's kernel half) */
long decode_launch_json(struct agent *a, const struct cuda_launch_event *e, size_t size, char *buf,
			size_t cap); /* length, or -errno (counted) */

/* aggregate.c: per-interval summaries from the maps */
int aggregate_init(struct agent *a);
void aggregate_interval(struct agent *a, bool final);
void aggregate_free(struct agent *a);
void aggregate_print_summary(struct agent *a, FILE *out);
/*
 * `agentctl summary --reset` (control.c, control_summary_reset()): each
 * --summary section's digest starts anew; records, stats and /metrics are
 * not touched
 */
void aggregate_summary_reset(struct agent *a);
void telem_summary_reset(struct agent *a);
void python_summary_reset(struct agent *a);
/* a single slow-syscall event, counted for the readable summary */
void aggregate_note_syscall(struct agent *a, uint32_t tid, uint32_t nr, uint64_t dur_ns);
/* bucket lower bound in us for a histogram slot; must match bpf hist_slot() */
uint64_t hist_lower_us(unsigned slot);
json_t *hist_to_json(const __u64 *slots, const __u64 *prev, unsigned n);

#endif /* INFERTRACE_SOURCES_H */
