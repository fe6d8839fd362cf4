// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * loader.c - the BPF side's lifecycle: open, configure, load, attach, each
 * step checked and named in the log.
 *
 * The only file that includes infertrace.skel.h or touches a->skel: the
 * other sources ask it for what they need from the maps, rings and
 * programs through the small loader_* functions below (state.h), so that
 * a change of the BPF side shows in one file (tests/static/modules.py
 * checks that no other file names the skeleton).
 *
 * The programs are a table: for each hook the best program (tp_btf/fentry)
 * and its fallback (raw_tp/kprobe) calling the same logic. Feature probes
 * against the running kernel choose one before load; the other is not
 * loaded. CUDA uprobes are not in the table: uprobes.c attaches them per
 * library file.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <linux/perf_event.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "util.h"
#include "infertrace.skel.h"

enum hook_kind { HOOK_TP_BTF };

struct prog_spec {
	const char *family; /* sched, syscalls, net, proc */
	const char *best;   /* program name */
	const char *fallback;
	enum hook_kind kind;
	const char *target; /* tracepoint or kernel function */
	bool optional;	    /* the agent runs without it (logged) */
};

static const struct prog_spec progs[] = {
    {"sched", "on_sched_switch", "on_sched_switch_raw", HOOK_TP_BTF, "sched_switch"},
    {"sched", "on_sched_wakeup", "on_sched_wakeup_raw", HOOK_TP_BTF, "sched_wakeup"},
    {"sched", "on_sched_wakeup_new", "on_sched_wakeup_new_raw", HOOK_TP_BTF, "sched_wakeup_new"},
    {"syscalls", "on_sys_enter", "on_sys_enter_raw", HOOK_TP_BTF, "sys_enter"},
    {"syscalls", "on_sys_exit", "on_sys_exit_raw", HOOK_TP_BTF, "sys_exit"},
    {"net", "on_net_dev_xmit", "on_net_dev_xmit_raw", HOOK_TP_BTF, "net_dev_xmit"},
    {"net", "on_netif_receive_skb", "on_netif_receive_skb_raw", HOOK_TP_BTF, "netif_receive_skb"},
    {"net", "on_tcp_retransmit", "on_tcp_retransmit_raw", HOOK_TP_BTF, "tcp_retransmit_skb", true},
    {"net", "on_sock_state", "on_sock_state_raw", HOOK_TP_BTF, "inet_sock_set_state", true},
    {"net", "on_sock_send", "on_sock_send_raw", HOOK_TP_BTF, "sock_send_length", true},
    {"net", "on_sock_recv", "on_sock_recv_raw", HOOK_TP_BTF, "sock_recv_length", true},
    {"proc", "on_mmap_enter", "on_mmap_enter_raw", HOOK_TP_BTF, "sys_enter"},
    {"proc", "on_exec", "on_exec_raw", HOOK_TP_BTF, "sched_process_exec"},
    {"proc", "on_exit", "on_exit_raw", HOOK_TP_BTF, "sched_process_exit"},
};

#define N_PROGS (sizeof(progs) / sizeof(progs[0]))

static struct bpf_link *links[N_PROGS];
static struct btf *vmlinux_btf;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	static int verbose = -1;

	if (verbose < 0)
		verbose = getenv("INFERTRACE_LIBBPF_DEBUG") != NULL;
	if (level == LIBBPF_DEBUG && !verbose)
		return 0;
	if (level == LIBBPF_INFO && !verbose)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* root, or the capabilities loading and attaching needs */
static int check_privileges(void)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct data[2] = {};
	const int need[] = {38 /* CAP_PERFMON */, 39 /* CAP_BPF */};
	bool ok = true;

	if (geteuid() == 0)
		return 0;
	if (syscall(SYS_capget, &hdr, data))
		return -errno;
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
		int c = need[i];

		if (!(data[c / 32].effective & (1u << (c % 32))))
			ok = false;
	}
	if (!ok) {
		pr_err("not root and missing CAP_BPF/CAP_PERFMON: run as root, or grant "
		       "CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE, CAP_SYS_PTRACE and "
		       "CAP_DAC_READ_SEARCH (setcap or the pod's securityContext)");
		return -EPERM;
	}
	return 0;
}

static bool tp_btf_ok(const char *tp)
{
	char name[128];

	snprintf(name, sizeof(name), "btf_trace_%s", tp);
	/* BTF-typed tracepoints came with the btf_trace_* typedefs (v5.5) */
	return vmlinux_btf && btf__find_by_name_kind(vmlinux_btf, name, BTF_KIND_TYPEDEF) > 0;
}

static bool family_enabled(struct agent *a, const char *family)
{
	return !(a->opts.no_net && !strcmp(family, "net"));
}

/* choose best or fallback for every table entry; returns how many fell back */
static int choose_programs(struct agent *a)
{
	struct bpf_object *obj = a->skel->obj;
	int fallbacks = 0;

	for (size_t i = 0; i < N_PROGS; i++) {
		const struct prog_spec *ps = &progs[i];
		struct bpf_program *best = bpf_object__find_program_by_name(obj, ps->best);
		struct bpf_program *fb = bpf_object__find_program_by_name(obj, ps->fallback);
		bool use_best;

		if (!best || !fb) {
			pr_err("BPF object lacks program %s/%s (build mismatch)", ps->best,
			       ps->fallback);
			return -ENOENT;
		}
		if (!family_enabled(a, ps->family)) {
			bpf_program__set_autoload(best, false);
			bpf_program__set_autoload(fb, false);
			continue;
		}
		use_best = tp_btf_ok(ps->target);
		bpf_program__set_autoload(best, use_best);
		bpf_program__set_autoload(fb, !use_best);
		if (!use_best) {
			fallbacks++;
			pr_info("%s: %s unavailable on this kernel, using %s", ps->family, ps->best,
				ps->fallback);
		}
	}
	return fallbacks;
}

bool loader_loaded(const struct agent *a)
{
	return a->skel != NULL;
}

/*
 * runtime_cfg.trace_gen: bumped after every change of traced_procs, so that
 * the threads' cached verdicts (bpf/nccl.bpf.c, nccl_thread) are read again
 */
static uint32_t trace_gen = 1;

static void traced_changed(struct agent *a)
{
	if (!++trace_gen)
		trace_gen = 1; /* 0 is a new hash entry's: never current */
	loader_update_runtime_cfg(a);
}

static int proc_update(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags,
		       __u64 how)
{
	struct traced_proc tp = {.instance_id = instance_id, .flags = flags};

	if (!a->skel)
		return -ENODEV;
	if (bpf_map__update_elem(a->skel->maps.traced_procs, &pid, sizeof(pid), &tp, sizeof(tp),
				 how))
		return -errno;
	traced_changed(a);
	return 0;
}

int loader_proc_add(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags)
{
	return proc_update(a, pid, instance_id, flags, BPF_ANY);
}

void loader_proc_remove(struct agent *a, uint32_t pid)
{
	if (a->skel && !bpf_map__delete_elem(a->skel->maps.traced_procs, &pid, sizeof(pid), 0))
		traced_changed(a);
}

/*
 * Task storage in uprobe programs: Linux 5.12 (a10787e6d58c, "bpf: Enable
 * task local storage for tracing programs", adds bpf_task_storage_get to
 * bpf_tracing_func_proto). INFERTRACE_NO_TASK_STORAGE=1 takes the hash
 * fallback anyway (tests run both).
 */
static bool task_storage_usable(void)
{
	const char *no = getenv("INFERTRACE_NO_TASK_STORAGE");

	if (no && *no && strcmp(no, "0"))
		return false;
	return libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_task_storage_get, NULL) == 1;
}

void loader_thread_gone(struct agent *a, uint32_t tid)
{
	/* task storage goes with its task; the fallback's entries by tid do not */
	if (a->skel && !a->skel->rodata->cfg.task_storage)
		bpf_map__delete_elem(a->skel->maps.nccl_task, &tid, sizeof(tid), 0);
}

int loader_set_proc_flags(struct agent *a, uint32_t pid, uint32_t instance_id, uint32_t flags)
{
	/* BPF_EXIST: never re-add a process discovery just removed */
	return proc_update(a, pid, instance_id, flags, BPF_EXIST);
}

/*
 * Entries per CPU of the NCCL call slots (--nccl-slots rounded up to a power
 * of 2, at least 16 so that a half slice wakes the agent), 0 when sentinel's
 * calls go on rb_cuda: off, deep mode (every call on the ring), replay
 */
uint32_t loader_nccl_slots(const struct agent *a)
{
	const struct agent_opts *o = &a->opts;

	if (!o->nccl_slots || o->replay || o->mode == MODE_DEEP)
		return 0;
	return pow2_clamp(o->nccl_slots, 16, 1u << 20);
}

int loader_update_runtime_cfg(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	struct runtime_cfg rc = {};
	__u32 zero = 0;
	bool deep = o->mode == MODE_DEEP;

	rc.mode = o->mode;
	rc.deep_stacks = o->stacks;
	rc.stack_rate = o->stack_rate;
	rc.stack_period_ns = o->stack_rate ? 1000000000ULL / o->stack_rate : 0;
	rc.deep_procs = deepdive_proc_count(a); /* per-instance deep-dives (ops.h) */
	rc.flight = recorder_kernel_per_cpu(a);
	rc.flight_cpus = rc.flight ? recorder_kernel_cpus() : 0;
	/* deep mode reports every interval unless thresholds were given */
	rc.offcpu_thresh_ns = deep && !o->thresholds_set ? 0 : o->offcpu_thresh_ns;
	rc.runq_thresh_ns = deep && !o->thresholds_set ? 0 : o->runq_thresh_ns;
	rc.syscall_thresh_ns = deep && !o->thresholds_set ? 0 : o->syscall_thresh_ns;
	rc.sync_thresh_ns = deep && !o->thresholds_set ? 0 : o->sync_thresh_ns;
	rc.launches = a->sentinel_launches; /* uprobes_launch_policy() */
	rc.nccl_slots = loader_nccl_slots(a);
	rc.trace_gen = trace_gen;
	if (bpf_map__update_elem(a->skel->maps.runtime_cfg, &zero, sizeof(zero), &rc, sizeof(rc),
				 BPF_ANY)) {
		int err = -errno;

		pr_err("runtime_cfg: update failed: %s", strerror(-err));
		return err;
	}
	return 0;
}

/* sum a per-CPU counter map into out[EV_TYPE_MAX] */
static int read_type_counts(int map_fd, uint64_t *out)
{
	int ncpu = libbpf_num_possible_cpus();
	uint64_t vals[ncpu > 0 ? ncpu : 1];

	if (ncpu <= 0)
		return -EINVAL;
	for (__u32 t = 0; t < EV_TYPE_MAX; t++) {
		out[t] = 0;
		if (bpf_map_lookup_elem(map_fd, &t, vals))
			continue;
		for (int c = 0; c < ncpu; c++)
			out[t] += vals[c];
	}
	return 0;
}

int loader_event_counts(struct agent *a, uint64_t *events, uint64_t *drops)
{
	int err;

	if (!a->skel)
		return -ENODEV;
	err = read_type_counts(bpf_map__fd(a->skel->maps.event_counts), events);
	if (!err)
		err = read_type_counts(bpf_map__fd(a->skel->maps.drop_counts), drops);
	return err;
}

int loader_map_fd(struct agent *a, enum loader_map m)
{
	const struct bpf_map *map = NULL;

	if (!a->skel)
		return -ENODEV;
	switch (m) {
	case LOADER_THREAD_STATS:
		map = a->skel->maps.thread_stats;
		break;
	case LOADER_SYSCALL_STATS:
		map = a->skel->maps.syscall_stats;
		break;
	case LOADER_NETDEV_STATS:
		map = a->skel->maps.netdev_stats;
		break;
	case LOADER_FLIGHT:
		map = a->skel->maps.flight;
		break;
	case LOADER_FLIGHT_CUR:
		map = a->skel->maps.flight_cur;
		break;
	case LOADER_NCCL_SLOTS:
		map = a->skel->maps.nccl_slots;
		break;
	case LOADER_NCCL_CUR:
		map = a->skel->maps.nccl_cur;
		break;
	}
	return map ? bpf_map__fd(map) : -EINVAL;
}

int loader_flight_stack(struct agent *a, int32_t stack_id, __u64 *ips, size_t size)
{
	if (!a->skel)
		return -ENODEV;
	if (bpf_map__lookup_elem(a->skel->maps.flight_stacks, &stack_id, sizeof(stack_id), ips,
				 size, 0))
		return -errno;
	return 0;
}

struct bpf_program *loader_program(struct agent *a, const char *name)
{
	return a->skel ? bpf_object__find_program_by_name(a->skel->obj, name) : NULL;
}

struct bpf_program *loader_sync_return(struct agent *a)
{
	return a->skel ? a->skel->progs.on_sync_return : NULL;
}

struct bpf_program *loader_nccl_comm_return(struct agent *a)
{
	return a->skel ? a->skel->progs.on_nccl_comm_return : NULL;
}

struct bpf_program *loader_step_program(struct agent *a, bool end)
{
	if (!a->skel)
		return NULL;
	return end ? a->skel->progs.infertrace_step_end : a->skel->progs.infertrace_step_begin;
}

/*
 * The Python sampler (bpf/python.bpf.c): a CPU clock event on every CPU,
 * py_sample attached to each. CPUs that are offline are skipped. The clock
 * ticks loader_py_ticks(hz) times hz (4 at the default 49; fewer above
 * 250 Hz, so that it ticks at most PY_TICK_HZ times a second), and
 * py_sample keeps a tick at random gaps of that mean: hz samples a second,
 * never locked onto work that repeats at the sampling period. Each tick is a
 * timer interrupt on every CPU: about 40 us on the 2-CPU VM of
 * docs/operations.md ("Python frames", what it costs), where 4 ticks a
 * sample at 49 Hz should cost about 0.6% (within that bench's noise) and 8
 * measured 1.0055x and 1.0178x of off.
 */
#define PY_TICKS_MAX 4
#define PY_TICK_HZ 1000
static struct bpf_link **py_links;
static int n_py_links;

static uint32_t loader_py_ticks(uint32_t hz)
{
	if (!hz || hz >= PY_TICK_HZ / 2)
		return 1;
	return PY_TICK_HZ / hz < PY_TICKS_MAX ? PY_TICK_HZ / hz : PY_TICKS_MAX;
}

int loader_python_sampler(struct agent *a, uint32_t hz)
{
	int ncpu = libbpf_num_possible_cpus(), err = -ENODEV;

	if (!a->skel)
		return -ENODEV;
	if (!bpf_program__autoload(a->skel->progs.py_sample))
		return -ENOEXEC; /* it did not load (loader_start said why) */
	if (ncpu <= 0)
		return ncpu ? ncpu : -ENODEV;
	py_links = calloc((size_t)ncpu, sizeof(*py_links));
	if (!py_links)
		return -ENOMEM;
	for (int cpu = 0; cpu < ncpu; cpu++) {
		struct perf_event_attr pa = {
		    .type = PERF_TYPE_SOFTWARE,
		    .size = sizeof(pa),
		    .config = PERF_COUNT_SW_CPU_CLOCK,
		    .freq = 1,
		    .sample_freq = (uint64_t)hz * a->skel->rodata->cfg.py_ticks,
		};
		int fd = (int)syscall(__NR_perf_event_open, &pa, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
		struct bpf_link *l;

		if (fd < 0) {
			if (errno != ENODEV) /* an offline CPU */
				err = -errno;
			continue;
		}
		l = bpf_program__attach_perf_event(a->skel->progs.py_sample, fd);
		if (!l) {
			err = -errno;
			close(fd);
			continue;
		}
		py_links[n_py_links++] = l; /* the link closes the event's fd */
	}
	return n_py_links ? n_py_links : err;
}

int loader_python_proc(struct agent *a, uint32_t pid, const struct py_proc *pp)
{
	if (!a->skel)
		return -ENODEV;
	if (!pp) {
		bpf_map__delete_elem(a->skel->maps.py_procs, &pid, sizeof(pid), 0);
		return 0;
	}
	if (bpf_map__update_elem(a->skel->maps.py_procs, &pid, sizeof(pid), pp, sizeof(*pp),
				 BPF_ANY))
		return -errno;
	return 0;
}

int loader_open_rings(struct agent *a, ring_fn cuda_fn, ring_fn other_fn, void *ctx)
{
	const struct bpf_map *rings[2];

	if (!a->skel)
		return -ENODEV;
	/* rb_cuda alone: an exit decoded from rb_misc consumes it first (decode.c) */
	a->rb_cuda = ring_buffer__new(bpf_map__fd(a->skel->maps.rb_cuda), cuda_fn, ctx, NULL);
	if (!a->rb_cuda)
		return -errno;
	rings[0] = a->skel->maps.rb_sched;
	rings[1] = a->skel->maps.rb_misc;
	for (size_t i = 0; i < sizeof(rings) / sizeof(rings[0]); i++) {
		int fd = bpf_map__fd(rings[i]), err;

		if (!a->rb) {
			a->rb = ring_buffer__new(fd, other_fn, ctx, NULL);
			if (!a->rb)
				return -errno;
			continue;
		}
		err = ring_buffer__add(a->rb, fd, other_fn, ctx);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Open the skeleton into a->skel, size its maps, choose its programs and
 * load it; python: with the Python sampler. -errno, a->skel left for the
 * caller to destroy.
 */
static int open_load(struct agent *a, bool python)
{
	struct infertrace_bpf *skel;
	int err;

	skel = infertrace_bpf__open();
	if (!skel) {
		err = -errno;
		pr_err("open BPF object: %s", strerror(-err));
		return err;
	}
	a->skel = skel;

	/* configure: load-time settings and host-dependent sizes */
	skel->rodata->cfg.self_pid = getpid();
	/* the NCCL probes' per-thread state: task storage, or a hash by tid */
	skel->rodata->cfg.task_storage = task_storage_usable();
	skel->rodata->cfg.py_ticks = loader_py_ticks(a->opts.python_hz);
	if (!skel->rodata->cfg.task_storage) {
		pr_info(
		    "no task storage for uprobe programs (Linux < 5.12, or "
		    "INFERTRACE_NO_TASK_STORAGE): NCCL threads in a hash by tid (--max-threads)");
		bpf_map__set_type(skel->maps.nccl_task, BPF_MAP_TYPE_HASH);
		bpf_map__set_map_flags(skel->maps.nccl_task, 0);
		bpf_map__set_max_entries(skel->maps.nccl_task, a->opts.max_threads);
	}
	bpf_map__set_max_entries(skel->maps.rb_cuda, a->opts.ringbuf_kib * 1024 * 4);
	bpf_map__set_max_entries(skel->maps.rb_sched, a->opts.ringbuf_kib * 1024);
	bpf_map__set_max_entries(skel->maps.rb_misc, a->opts.ringbuf_kib * 1024);
	bpf_map__set_max_entries(skel->maps.thread_stats, a->opts.max_threads);
	bpf_map__set_max_entries(skel->maps.syscall_stats, a->opts.max_threads * 4);
	bpf_map__set_max_entries(skel->maps.traced_procs, MAX_PROCS);
	/* the flight recorder's kernel half: per-CPU launch rings, their cursors, stacks */
	if (recorder_kernel_enabled(a)) {
		bpf_map__set_max_entries(skel->maps.flight,
					 recorder_kernel_per_cpu(a) * recorder_kernel_cpus());
		bpf_map__set_max_entries(skel->maps.flight_cur, recorder_kernel_cpus());
		if (a->opts.stacks)
			bpf_map__set_max_entries(skel->maps.flight_stacks, FLIGHT_STACKS);
	}
	/* sentinel's NCCL calls: per-CPU slots and their cursors (agent/sources/slots.c) */
	if (loader_nccl_slots(a)) {
		bpf_map__set_max_entries(skel->maps.nccl_slots,
					 loader_nccl_slots(a) * recorder_kernel_cpus());
		bpf_map__set_max_entries(skel->maps.nccl_cur, recorder_kernel_cpus());
	}
	err = choose_programs(a);
	if (err < 0)
		return err;
	/*
	 * the Python sampler (agent/sources/python.c) and the launch probes'
	 * Python frames (py_launch, bpf/cuda.bpf.c): the same walk, both or
	 * neither
	 */
	bpf_program__set_autoload(skel->progs.py_sample, python);
	bpf_program__set_autoload(skel->progs.py_launch, python);
	if (python && getenv("INFERTRACE_BREAK_PY_SAMPLER")) { /* tests: a kernel that refuses it */
		bpf_program__set_type(skel->progs.py_sample, BPF_PROG_TYPE_TRACING);
		bpf_program__set_type(skel->progs.py_launch, BPF_PROG_TYPE_TRACING);
	}
	err = infertrace_bpf__load(skel);
	if (err || !python)
		return err;
	/* the deep launch probes' tail call; without it launches have no Python frames */
	int fd = bpf_program__fd(skel->progs.py_launch);

	if (bpf_map__update_elem(skel->maps.py_tail, &(__u32){0}, sizeof(__u32), &fd, sizeof(fd),
				 BPF_ANY))
		pr_warn("launches get no Python frames: the launch probes cannot call py_launch "
			"(%s)",
			strerror(errno));
	return 0;
}

int loader_start(struct agent *a)
{
	bool python = a->opts.python_stacks != PYTHON_STACKS_OFF && !a->opts.replay;
	struct infertrace_bpf *skel;
	int err;

	libbpf_set_print(libbpf_print);
	err = check_privileges();
	if (err)
		return err;
	if (access("/sys/kernel/btf/vmlinux", R_OK)) {
		struct utsname u;

		uname(&u);
		pr_err("kernel %s has no BTF (/sys/kernel/btf/vmlinux missing): infertrace needs a "
		       "kernel >= 5.8 built with CONFIG_DEBUG_INFO_BTF=y",
		       u.release);
		return -ENOTSUP;
	}
	vmlinux_btf = btf__load_vmlinux_btf();
	if (!vmlinux_btf) {
		err = -errno;
		pr_err("cannot read kernel BTF: %s", strerror(-err));
		return err;
	}

	err = open_load(a, python);
	if (err && python && a->opts.python_stacks == PYTHON_STACKS_AUTO) {
		/* a kernel whose verifier refuses the sampler keeps the rest */
		pr_warn("the BPF programs with the Python sampler did not load (%s): loading "
			"the others without it (--python-stacks on would refuse to start)",
			strerror(-err));
		infertrace_bpf__destroy(a->skel);
		a->skel = NULL;
		err = open_load(a, false);
	}
	if (err) {
		pr_err("load BPF programs: %s (run with INFERTRACE_LIBBPF_DEBUG=1 for the "
		       "verifier log)%s",
		       strerror(-err),
		       python && a->opts.python_stacks == PYTHON_STACKS_ON
			   ? "; the Python sampler was among them (--python-stacks on): "
			     "--python-stacks auto loads the others without it"
			   : "");
		goto cleanup;
	}
	skel = a->skel;
	err = loader_update_runtime_cfg(a);
	if (err)
		goto cleanup;
	a->cap.proc_flags = loader_set_proc_flags;
	a->cap.runtime_cfg = loader_update_runtime_cfg;

	/* attach the table's loaded programs; uprobes come per library file */
	for (size_t i = 0; i < N_PROGS; i++) {
		const struct prog_spec *ps = &progs[i];
		struct bpf_program *p = bpf_object__find_program_by_name(skel->obj, ps->best);

		if (!bpf_program__autoload(p))
			p = bpf_object__find_program_by_name(skel->obj, ps->fallback);
		if (!bpf_program__autoload(p))
			continue; /* family disabled */
		links[i] = bpf_program__attach(p);
		if (!links[i]) {
			err = -errno;
			if (ps->optional) {
				pr_warn("%s: attach %s to %s failed (%s); continuing without it",
					ps->family, bpf_program__name(p), ps->target,
					strerror(-err));
				err = 0;
				continue;
			}
			pr_err("%s: attach %s to %s: %s", ps->family, bpf_program__name(p),
			       ps->target, strerror(-err));
			goto cleanup;
		}
		pr_debug("%s: attached %s", ps->family, bpf_program__name(p));
	}
	return 0;

cleanup:
	loader_stop(a);
	return err;
}

void loader_stop(struct agent *a)
{
	for (int i = 0; i < n_py_links; i++)
		bpf_link__destroy(py_links[i]);
	free(py_links);
	py_links = NULL;
	n_py_links = 0;
	for (size_t i = 0; i < N_PROGS; i++) {
		bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
	ring_buffer__free(a->rb_cuda); /* their rings are the skeleton's maps */
	ring_buffer__free(a->rb);
	a->rb_cuda = a->rb = NULL;
	infertrace_bpf__destroy(a->skel);
	a->skel = NULL;
	a->cap.proc_flags = NULL;
	a->cap.runtime_cfg = NULL;
	btf__free(vmlinux_btf);
	vmlinux_btf = NULL;
}
