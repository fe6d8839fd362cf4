// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * shim.c - the CUPTI shims as a source: their socket (shim_rx.c) is read on
 * the event loop, and each record goes into the pipeline (agent/pipeline/
 * join.c: GPU activity, launch callbacks, NVTX markers); status changes
 * leave as "shim_status" records. Process exits are ordered here: a shim's
 * last records are read before its process leaves the correlator and then
 * discovery.
 *
 * Everything runs on the event loop thread: shim_rx hands records over in
 * shim_rx_drain(), called when its fd is readable.
 */
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "nccl_live.h"
#include "shim_rx.h"
#include "shim/proto.h"

#define MAX_SHIMS 256
#define EXITS_HELD 64 /* exits decoded during one drain */

struct shim_seen {
	uint32_t pid;
	uint32_t clock_mode;
	uint32_t capture;
	uint64_t records_dropped;
	uint64_t cupti_dropped;
};

struct shim_src {
	struct agent *a;
	struct shim_rx *rx;
	struct shim_seen shims[MAX_SHIMS];
	int n_shims;
	uint64_t conns_seen; /* shims accepted when the mode was last pushed */
	/* exits decoded while a drain delivers messages wait for its end */
	bool draining;
	struct {
		uint32_t pid;
		uint64_t ts_ns;
	} exits[EXITS_HELD];
	int n_exits;
	uint64_t exits_early; /* EXITS_HELD full: handled at once */
};

/* one shim_status record per process whenever its clock, capture or losses change */
static void on_status(struct shim_src *gp, const struct shim_status_event *e)
{
	struct shim_seen *s = NULL;
	json_t *r;

	for (int i = 0; i < gp->n_shims; i++)
		if (gp->shims[i].pid == e->hdr.pid)
			s = &gp->shims[i];
	if (!s) {
		if (gp->n_shims == MAX_SHIMS)
			memmove(gp->shims, gp->shims + 1, (MAX_SHIMS - 1) * sizeof(*s)),
			    gp->n_shims--;
		s = &gp->shims[gp->n_shims++];
		memset(s, 0, sizeof(*s));
		s->pid = e->hdr.pid;
		s->clock_mode = UINT32_MAX; /* first status always reported */
	}
	if (s->clock_mode == e->clock_mode && s->capture == e->capture &&
	    s->records_dropped == e->records_dropped && s->cupti_dropped == e->cupti_dropped)
		return;
	s->clock_mode = e->clock_mode;
	/* NCCL collectives of this process wait for their kernels when it has a GPU */
	nccl_on_shim(gp->a, e->hdr.pid, e->clock_mode != SHIM_CLOCK_NONE);
	s->capture = e->capture;
	s->records_dropped = e->records_dropped;
	s->cupti_dropped = e->cupti_dropped;
	r = rec_new(gp->a, "shim_status", e->hdr.pid, 0, e->hdr.ts_ns);
	json_object_set_new(r, "clock",
			    json_string(e->clock_mode == SHIM_CLOCK_MONOTONIC_CB ? "monotonic"
					: e->clock_mode == SHIM_CLOCK_OFFSET	 ? "cupti+offset"
										 : "none"));
	json_object_set_new(r, "clock_offset_ns", json_integer(e->clock_offset_ns));
	json_object_set_new(r, "capture",
			    json_string(e->capture == MODE_DEEP ? "deep" : "sentinel"));
	json_object_set_new(r, "records_sent", json_integer((json_int_t)e->records_sent));
	json_object_set_new(r, "records_dropped", json_integer((json_int_t)e->records_dropped));
	json_object_set_new(r, "cupti_dropped", json_integer((json_int_t)e->cupti_dropped));
	rec_emit(gp->a, REC_STATS, r);
}

/*
 * A CUDA device of the process and its GPU's UUID: a gpu_device record (which
 * GPU of the node a process runs on), and to the detector, which matches it
 * with NVML's readings (pipeline.h).
 */
static void on_device(struct shim_src *gp, const struct gpu_device_event *e)
{
	const uint8_t *u = e->uuid;
	char uuid[48];
	json_t *r;

	/* as NVML and nvidia-smi -L print it: GPU-, 8-4-4-4-12 hex digits of the bytes in order */
	snprintf(uuid, sizeof(uuid),
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
		 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		 u[14], u[15]);
	r = rec_new(gp->a, "gpu_device", e->hdr.pid, 0, e->hdr.ts_ns);
	if (r) {
		json_object_set_new(r, "device", json_integer(e->device));
		json_object_set_new(r, "uuid", json_string(uuid));
		json_object_set_new(r, "mig", json_boolean(e->flags & GPU_DEV_F_MIG));
		rec_emit(gp->a, REC_SUMMARY, r);
	}
	diag_on_gpu_device(gp->a->diag, e->hdr.pid, e->device, uuid);
}

static void on_shim_record(void *ctx, const struct event_hdr *h, size_t len)
{
	struct shim_src *gp = ctx;
	const struct gpu_activity_event *ga = (const void *)h;
	const struct gpu_launch_cb_event *cb = (const void *)h;
	struct corr_gpu g = {};

	(void)len; /* shim_rx checked every size against its type */
	switch (h->type) {
	case EV_GPU_KERNEL:
	case EV_GPU_MEMCPY:
	case EV_GPU_MEMSET:
		g.kind = h->type == EV_GPU_KERNEL   ? CORR_KIND_KERNEL
			 : h->type == EV_GPU_MEMCPY ? CORR_KIND_MEMCPY
						    : CORR_KIND_MEMSET;
		g.pid = h->pid;
		g.corr_id = ga->correlation_id;
		g.device = ga->device;
		g.context = ga->context;
		g.stream = ga->stream;
		g.graph_id = ga->graph_id;
		g.graph_node_id = (uint64_t)ga->graph_node_id_hi << 32 | ga->graph_node_id_lo;
		g.start_ns = ga->start_ns;
		g.end_ns = ga->end_ns;
		memcpy(g.grid, ga->grid, sizeof(g.grid));
		memcpy(g.block, ga->block, sizeof(g.block));
		g.copy_kind = ga->copy_kind;
		g.bytes = ga->bytes;
		g.name = ga->name[0] ? ga->name : NULL;
		if (h->cpu & GPU_F_NO_LAUNCH)
			g.flags = CORR_GPU_F_NO_LAUNCH;
		gpu_on_activity(gp->a, &g);
		break;
	case EV_GPU_LAUNCH_CB:
		gpu_on_callback(gp->a, cb);
		break;
	case EV_SHIM_STATUS:
		on_status(gp, (const void *)h);
		break;
	case EV_GPU_MARKER:
		gpu_on_marker(gp->a, (const void *)h);
		break;
	case EV_GPU_DEVICE:
		on_device(gp, (const void *)h);
		break;
	}
}

/*
 * A launch's uprobe record (API entry) is in the BPF ring before the shim
 * message with its callback (API exit) is sent, but the rings wake us only
 * per batch: decode what they hold after each message is received and
 * before its records are, or the callback would stand alone and its kernels
 * leave with the callback's time instead of the entry's. Once per drain is
 * not enough: messages sent while a drain runs arrive in it.
 */
static void on_shim_msg(void *ctx)
{
	struct shim_src *gp = ctx;

	/* the rings, the slots' NCCL calls (slots.c: rb_cuda alone from an exit) */
	slots_consume(gp->a);
}

static void exit_now(struct shim_src *gp, uint32_t pid, uint64_t ts_ns)
{
	gpu_on_process_exit(gp->a, pid, ts_ns);
	discovery_on_exit(gp->a, pid);
}

/* read the shim sockets: rounds drains at most, fewer once one finds nothing */
static void read_shims(struct shim_src *gp, int rounds)
{
	gp->draining = true;
	for (int i = 0; i < rounds && shim_rx_drain(gp->rx) > 0; i++)
		;
	gp->draining = false;
}

/*
 * The exits decoded while shim messages were being delivered, in order:
 * the message in hand when one was decoded was sent before it, and its
 * records still needed the process's launches. Each takes what its shim
 * sent last first, as gpu_on_exit() does (which may hold more exits).
 */
static void take_exits(struct shim_src *gp)
{
	while (gp->n_exits > 0) {
		uint32_t pid = gp->exits[0].pid;
		uint64_t ts = gp->exits[0].ts_ns;

		memmove(gp->exits, gp->exits + 1, --gp->n_exits * sizeof(gp->exits[0]));
		read_shims(gp, 64);
		exit_now(gp, pid, ts);
	}
}

static void on_shim_readable(struct agent *a, void *ctx)
{
	(void)a;
	read_shims(ctx, 1);
	take_exits(ctx);
}

static int shim_set_mode(struct agent *a, uint32_t pid, enum agent_mode mode)
{
	struct shim_src *gp = a->shim;

	return gp && gp->rx ? shim_rx_set_mode(gp->rx, pid, mode) : -ENOTCONN;
}

/*
 * The group that may connect to the shim socket (--shim-group, default
 * "infertrace"): a name, or a number (a container's /etc/group does not
 * know the node's groups). 0 and a message when there is no such group:
 * the socket stays root's, and only workloads running as root reach it.
 */
static gid_t shim_gid(const struct agent_opts *o)
{
	const char *name = o->shim_group ? o->shim_group : SHIM_GROUP_DEFAULT;
	struct group *g;
	char *end;
	unsigned long v;

	if (!*name || !strcmp(name, "root") || !strcmp(name, "0"))
		return 0;
	errno = 0;
	v = strtoul(name, &end, 10);
	if (!errno && !*end && v > 0 && v < UINT32_MAX)
		return (gid_t)v;
	g = getgrnam(name);
	if (g)
		return g->gr_gid;
	/*
	 * Asked for by name: a warning. The default missing (a machine the
	 * package or chart did not set up): said once as info, so that every
	 * start does not warn about an option nobody gave.
	 */
	agent_log(o->shim_group ? LOG_WARN : LOG_INFO,
		  "--shim-group %s: no such group; the shim socket stays root:root 0660, so only "
		  "workloads running as root can send GPU activity (create the group, e.g. "
		  "'groupadd --system %s', or pass --shim-group GID)",
		  name, name);
	return 0;
}

int shim_init(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	struct shim_rx_opts ro = {
	    .sz = sizeof(ro), .on_record = on_shim_record, .on_msg = on_shim_msg};
	struct shim_src *gp;
	int err;

	if (!a->gpu)
		return 0; /* GPU-side capture is off (--shim-socket none) */
	gp = calloc(1, sizeof(*gp));
	if (!gp)
		return -ENOMEM;
	gp->a = a;
	ro.ctx = gp;
	ro.sock_gid = shim_gid(o);
	gp->rx = shim_rx_open(o->shim_socket, &ro);
	if (!gp->rx) {
		err = -errno;
		/* GPU-side capture is optional: the eBPF side works without it */
		pr_warn("CUPTI shim socket %s: %s; GPU activity from shims is not collected",
			o->shim_socket ? o->shim_socket : "/run/infertrace/shim.sock",
			strerror(-err));
		a->cnt.shim_errors++;
		free(gp);
		gpu_free(a); /* no shim, no GPU records: the join is not needed */
		return 0;
	}
	if (shim_rx_gid_error(gp->rx))
		pr_warn(
		    "--shim-group: cannot give the shim socket to group %u: %s; it stays "
		    "root's, so only workloads running as root can connect (the agent needs the "
		    "group among its own groups: SupplementaryGroups=, the pod's "
		    "supplementalGroups, or CAP_CHOWN)",
		    (unsigned)ro.sock_gid, strerror(-shim_rx_gid_error(gp->rx)));
	err = agent_watch_fd(a, shim_rx_fd(gp->rx), on_shim_readable, gp);
	if (err) {
		shim_rx_close(gp->rx);
		free(gp);
		return err;
	}
	a->shim = gp;
	a->cap.shim_mode = shim_set_mode;
	return 0;
}

/*
 * The shim flushes its last records from its destructor, before the process
 * ends: they are in the socket when the exit event is decoded. Take them
 * first, or their launches would already be dropped with the process. An
 * exit decoded during a drain (on_shim_msg) waits for the drain's end.
 * Without a shim channel the process ends at once: correlator, then discovery.
 */
void shim_on_exit(struct agent *a, uint32_t pid, uint64_t ts_ns)
{
	struct shim_src *gp = a->shim;

	if (!gp) {
		gpu_on_process_exit(a, pid, ts_ns);
		discovery_on_exit(a, pid);
		return;
	}
	if (gp->draining) {
		if (gp->n_exits < EXITS_HELD) {
			gp->exits[gp->n_exits].pid = pid;
			gp->exits[gp->n_exits++].ts_ns = ts_ns;
			return;
		}
		gp->exits_early++; /* records still in flight go unmatched */
		exit_now(gp, pid, ts_ns);
		return;
	}
	read_shims(gp, 64);
	exit_now(gp, pid, ts_ns);
	take_exits(gp);
}

void shim_interval(struct agent *a)
{
	struct shim_src *gp = a->shim;

	if (!gp)
		return;
	read_shims(gp, 1);
	take_exits(gp);
	shim_rx_expire(gp->rx); /* connections that never said hello */
	if (a->opts.mode == MODE_DEEP) {
		struct shim_rx_stats s;

		/* shims start in always-on capture: newly connected ones are told */
		shim_rx_get_stats(gp->rx, &s);
		if (s.conns_accepted != gp->conns_seen) {
			gp->conns_seen = s.conns_accepted;
			shim_rx_set_mode(gp->rx, 0, MODE_DEEP);
		}
	}
}

/* the shim's half of the stats record's "gpu" object (join.c adds the join's) */
void shim_stats(struct agent *a, json_t *r)
{
	struct shim_src *gp = a->shim;
	struct shim_rx_stats s;
	json_t *more;

	if (!gp)
		return;
	shim_rx_get_stats(gp->rx, &s);
	json_object_set_new(
	    r, "gpu",
	    json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "shims_connected",
		      (json_int_t)s.conns_active, "shim_records", (json_int_t)s.records,
		      "shim_bad_records", (json_int_t)s.bad_records, "shim_bad_msgs",
		      (json_int_t)s.bad_msgs, "shim_pid_rewritten", (json_int_t)s.pid_rewritten,
		      "shim_tid_mapped", (json_int_t)s.tid_mapped, "shim_tid_unmapped",
		      (json_int_t)s.tid_unmapped, "shim_dropped",
		      (json_int_t)s.shim_records_dropped, "cupti_dropped",
		      (json_int_t)s.shim_cupti_dropped, "exits_early", (json_int_t)gp->exits_early,
		      "shim_reentered", (json_int_t)s.reentered));
	/* what the receiver refused or shed (issue 18): metrics.c exports each */
	more = json_pack(
	    "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "shim_conns_refused",
	    (json_int_t)s.conns_refused, "shim_conns_refused_pid", (json_int_t)s.conns_refused_pid,
	    "shim_conns_refused_full", (json_int_t)s.conns_refused_full, "shim_conns_evicted",
	    (json_int_t)s.conns_evicted, "shim_hello_timeouts", (json_int_t)s.conns_hello_timeout,
	    "shim_bad_abi", (json_int_t)s.conns_bad_abi, "shim_no_hello", (json_int_t)s.no_hello,
	    "shim_truncated", (json_int_t)s.truncated, "shim_fds_closed", (json_int_t)s.fds_closed,
	    "shim_status_absurd", (json_int_t)s.status_absurd, "shim_shed_msgs",
	    (json_int_t)s.shed_msgs, "shim_shed_bytes", (json_int_t)s.shed_bytes, "shim_tid_scans",
	    (json_int_t)s.tid_scans, "shim_tid_scans_shed", (json_int_t)s.tid_scans_shed);
	json_object_update(json_object_get(r, "gpu"), more);
	json_decref(more);
}

void shim_free(struct agent *a)
{
	struct shim_src *gp = a->shim;

	if (!gp)
		return;
	a->cap.shim_mode = NULL;
	agent_unwatch_fd(a, shim_rx_fd(gp->rx));
	shim_rx_close(gp->rx);
	free(gp);
	a->shim = NULL;
}
