// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu.c - the live GPU side: records from the CUPTI shims (agent/sources/shim_rx.c)
 * and launches from the uprobes go through one correlator; joined GPU
 * activity leaves as "kernel"/"memcpy"/"memset" records (deep mode) or
 * per-interval "gpu_summary" records (sentinel), the same records --replay
 * writes (docs/events.md). Shim status changes leave as "shim_status".
 *
 * Everything runs on the event loop thread: shim_rx hands records over in
 * shim_rx_drain(), called when its fd is readable.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "ops.h"
#include "correlator.h"
#include "shim_rx.h"

#define JSON_BUF (64 * 1024)
#define MAX_SHIMS 256
#define EXITS_HELD 64 /* exits decoded during one drain */

struct shim_seen {
	uint32_t pid;
	uint32_t clock_mode;
	uint32_t capture;
	uint64_t records_dropped;
	uint64_t cupti_dropped;
};

/*
 * NVTX ranges from the shims become markers for the step segmenter: push
 * and pop pair per thread (a bounded stack), start and end by range id.
 * Bounded tables; what does not fit or does not pair is counted.
 */
#define MK_THREADS 256 /* direct-mapped by tid */
#define MK_DEPTH 16
#define MK_OPEN 256 /* start/end ranges open at once */

struct mk_open {
	uint64_t ts;
	char name[MARKER_NAME_LEN];
};

struct mk_thread {
	uint32_t pid, tid;
	uint32_t depth;
	struct mk_open st[MK_DEPTH];
};

struct mk_range {
	uint32_t pid, tid;
	uint64_t id;
	struct mk_open o;
};

struct markers {
	struct mk_thread thr[MK_THREADS];
	struct mk_range rng[MK_OPEN];
	uint64_t ranges, unpaired, overflow;
};

struct gpu {
	struct agent *a;
	struct markers *mk;
	struct corr *corr;
	struct corr_stats *st; /* sentinel summaries */
	struct shim_rx *rx;
	char *buf;
	uint64_t t_cut; /* start of the next summary interval */
	struct shim_seen shims[MAX_SHIMS];
	int n_shims;
	uint64_t too_long;
	uint64_t conns_seen; /* shims accepted when the mode was last pushed */
	/* exits decoded while a drain delivers messages wait for its end */
	bool draining;
	struct { uint32_t pid; uint64_t ts_ns; } exits[EXITS_HELD];
	int n_exits;
	uint64_t exits_early; /* EXITS_HELD full: handled at once */
};

static void on_gpu(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct gpu *gp = ctx;
	struct agent *a = gp->a;
	struct corr_json_common cm;
	const char *inst;
	bool deep = true;
	int len;

	diag_on_gpu(a->diag, g, l); /* steps are cut from the GPU stream */
	if (gp->st) {
		corr_stats__add(gp->st, g, l);
		/* sentinel: deep-dived processes send, the flight recorder keeps (ops.h) */
		deep = deepdive_pid_deep(a, l ? l->pid : g->pid);
		if (!deep && !recorder_enabled(a))
			return;
	}
	inst = agent_instance_of(a, l ? l->pid : g->pid);
	cm.host = agent_host(a);
	cm.instance = inst;
	len = corr_gpu_to_json(gp->buf, JSON_BUF, &cm, g, l);
	if (len < 0) {
		gp->too_long++;
		return;
	}
	if (deep)
		rec_emit_raw(a, REC_EVENT, inst, gp->buf, (size_t)len);
	else
		recorder_keep(a, inst, gp->buf, (size_t)len);
}

static void on_summary(void *ctx, const struct corr_summary *s)
{
	gpu_emit_summary(ctx, s);
}

/* one shim_status record per process whenever its clock, capture or losses change */
static void on_status(struct gpu *gp, const struct shim_status_event *e)
{
	struct shim_seen *s = NULL;
	json_t *r;

	for (int i = 0; i < gp->n_shims; i++)
		if (gp->shims[i].pid == e->hdr.pid)
			s = &gp->shims[i];
	if (!s) {
		if (gp->n_shims == MAX_SHIMS)
			memmove(gp->shims, gp->shims + 1, (MAX_SHIMS - 1) * sizeof(*s)), gp->n_shims--;
		s = &gp->shims[gp->n_shims++];
		memset(s, 0, sizeof(*s));
		s->pid = e->hdr.pid;
		s->clock_mode = UINT32_MAX; /* first status always reported */
	}
	if (s->clock_mode == e->clock_mode && s->capture == e->capture &&
	    s->records_dropped == e->records_dropped && s->cupti_dropped == e->cupti_dropped)
		return;
	s->clock_mode = e->clock_mode;
	s->capture = e->capture;
	s->records_dropped = e->records_dropped;
	s->cupti_dropped = e->cupti_dropped;
	r = rec_new(gp->a, "shim_status", e->hdr.pid, 0, e->hdr.ts_ns);
	json_object_set_new(r, "clock",
			    json_string(e->clock_mode == SHIM_CLOCK_MONOTONIC_CB ? "monotonic"
					: e->clock_mode == SHIM_CLOCK_OFFSET	 ? "cupti+offset"
										 : "none"));
	json_object_set_new(r, "clock_offset_ns", json_integer(e->clock_offset_ns));
	json_object_set_new(r, "capture", json_string(e->capture == MODE_DEEP ? "deep" : "sentinel"));
	json_object_set_new(r, "records_sent", json_integer((json_int_t)e->records_sent));
	json_object_set_new(r, "records_dropped", json_integer((json_int_t)e->records_dropped));
	json_object_set_new(r, "cupti_dropped", json_integer((json_int_t)e->cupti_dropped));
	rec_emit(gp->a, REC_STATS, r);
}

static void marker_close(struct gpu *gp, uint32_t pid, uint32_t tid, const struct mk_open *o,
			 uint64_t end)
{
	struct corr_marker m = { .pid = pid, .tid = tid, .ts_ns = o->ts, .cat = "nvtx",
				 .name = o->name };

	if (end < o->ts) {
		gp->mk->unpaired++;
		return;
	}
	m.dur_ns = end - o->ts;
	gp->mk->ranges++;
	diag_on_marker(gp->a->diag, &m);
}

static void on_marker(struct gpu *gp, const struct gpu_marker_event *e)
{
	struct markers *mk = gp->mk;
	struct mk_thread *t;
	struct mk_range *free_r = NULL;

	if (!mk)
		return;
	t = &mk->thr[e->hdr.tid % MK_THREADS];
	switch (e->kind) {
	case MARKER_PUSH:
		if (t->pid != e->hdr.pid || t->tid != e->hdr.tid) {
			if (t->depth)
				mk->overflow += t->depth; /* another thread's open ranges go */
			*t = (struct mk_thread){ .pid = e->hdr.pid, .tid = e->hdr.tid };
		}
		if (t->depth == MK_DEPTH) {
			mk->overflow++;
			return;
		}
		t->st[t->depth].ts = e->hdr.ts_ns;
		memcpy(t->st[t->depth].name, e->name, sizeof(e->name));
		t->depth++;
		return;
	case MARKER_POP:
		if (t->pid != e->hdr.pid || t->tid != e->hdr.tid || !t->depth) {
			mk->unpaired++;
			return;
		}
		t->depth--;
		marker_close(gp, e->hdr.pid, e->hdr.tid, &t->st[t->depth], e->hdr.ts_ns);
		return;
	case MARKER_START:
		for (int i = 0; i < MK_OPEN; i++)
			if (!mk->rng[i].pid) {
				free_r = &mk->rng[i];
				break;
			}
		if (!free_r) {
			mk->overflow++;
			return;
		}
		*free_r = (struct mk_range){ .pid = e->hdr.pid, .tid = e->hdr.tid, .id = e->range_id,
					     .o.ts = e->hdr.ts_ns };
		memcpy(free_r->o.name, e->name, sizeof(e->name));
		return;
	case MARKER_END:
		for (int i = 0; i < MK_OPEN; i++) {
			struct mk_range *r = &mk->rng[i];

			if (r->pid == e->hdr.pid && r->id == e->range_id) {
				/* a start/end range belongs to the thread that started it */
				marker_close(gp, r->pid, r->tid, &r->o, e->hdr.ts_ns);
				r->pid = 0;
				return;
			}
		}
		mk->unpaired++;
		return;
	}
}

static void on_shim_record(void *ctx, const struct event_hdr *h, size_t len)
{
	struct gpu *gp = ctx;
	const struct gpu_activity_event *ga = (const void *)h;
	const struct gpu_launch_cb_event *cb = (const void *)h;
	struct corr_gpu g = {};

	(void)len; /* shim_rx checked every size against its type */
	switch (h->type) {
	case EV_GPU_KERNEL:
	case EV_GPU_MEMCPY:
	case EV_GPU_MEMSET:
		g.kind = h->type == EV_GPU_KERNEL	  ? CORR_KIND_KERNEL
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
		corr__add_gpu(gp->corr, &g);
		break;
	case EV_GPU_LAUNCH_CB:
		corr__add_callback(gp->corr, h->pid, h->tid, h->ts_ns, cb->correlation_id, cb->domain,
				   cb->cbid);
		break;
	case EV_SHIM_STATUS:
		on_status(gp, (const void *)h);
		break;
	case EV_GPU_MARKER:
		on_marker(gp, (const void *)h);
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
	struct gpu *gp = ctx;

	/* not from a ring callback (an exit's drain): libbpf would deliver again */
	if (gp->a->rb && !gp->a->in_ring)
		ring_buffer__consume(gp->a->rb);
}

static void exit_now(struct gpu *gp, uint32_t pid, uint64_t ts_ns)
{
	corr__process_exit(gp->corr, pid, ts_ns);
	discovery_on_exit(gp->a, pid);
}

/* read the shim sockets: rounds drains at most, fewer once one finds nothing */
static void read_shims(struct gpu *gp, int rounds)
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
static void take_exits(struct gpu *gp)
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

int gpu_init(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	struct corr_opts co = { .sz = sizeof(co), .log = agent_lib_log,
				.log_ctx = "correlator: " };
	struct corr_stats_opts so = { .sz = sizeof(so) };
	struct shim_rx_opts ro = { .sz = sizeof(ro), .on_record = on_shim_record,
				   .on_msg = on_shim_msg };
	struct gpu *gp;
	int err;

	if (o->shim_socket && !strcmp(o->shim_socket, "none"))
		return 0;
	gp = calloc(1, sizeof(*gp));
	if (!gp)
		return -ENOMEM;
	gp->a = a;
	co.emit = on_gpu;
	co.emit_ctx = gp;
	gp->buf = malloc(JSON_BUF);
	gp->corr = corr__new(&co);
	gp->mk = calloc(1, sizeof(*gp->mk));
	if (!gp->buf || !gp->corr || !gp->mk) {
		err = -ENOMEM;
		goto fail;
	}
	if (o->mode != MODE_DEEP) {
		gp->st = corr_stats__new(&so);
		if (!gp->st) {
			err = -ENOMEM;
			goto fail;
		}
	}
	ro.ctx = gp;
	gp->rx = shim_rx_open(o->shim_socket, &ro);
	if (!gp->rx) {
		err = -errno;
		/* GPU-side capture is optional: the eBPF side works without it */
		pr_warn("CUPTI shim socket %s: %s; GPU activity from shims is not collected",
			o->shim_socket ? o->shim_socket : "/run/infertrace/shim.sock", strerror(-err));
		a->cnt.shim_errors++;
		goto fail_soft;
	}
	err = agent_watch_fd(a, shim_rx_fd(gp->rx), on_shim_readable, gp);
	if (err)
		goto fail;
	a->gpu = gp;
	return 0;

fail_soft:
	err = 0;
fail:
	shim_rx_close(gp->rx);
	corr_stats__free(gp->st);
	corr__free(gp->corr);
	free(gp->buf);
	free(gp->mk);
	free(gp);
	return err;
}

void gpu_on_launch(struct agent *a, const struct cuda_launch_event *e)
{
	struct gpu *gp = a->gpu;

	if (gp)
		corr__add_uprobe_launch(gp->corr, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns, e->api);
}

/*
 * The shim flushes its last records from its destructor, before the process
 * ends: they are in the socket when the exit event is decoded. Take them
 * first, or their launches would already be dropped with the process. An
 * exit decoded during a drain (on_shim_msg) waits for the drain's end.
 */
void gpu_on_exit(struct agent *a, uint32_t pid, uint64_t ts_ns)
{
	struct gpu *gp = a->gpu;

	if (!gp) {
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

int gpu_set_mode(struct agent *a, uint32_t pid, enum agent_mode mode)
{
	struct gpu *gp = a->gpu;

	return gp && gp->rx ? shim_rx_set_mode(gp->rx, pid, mode) : -ENOTCONN;
}

void gpu_interval(struct agent *a, bool final)
{
	struct gpu *gp = a->gpu;
	uint64_t now = now_ns();

	if (!gp)
		return;
	read_shims(gp, 1);
	take_exits(gp);
	if (a->opts.mode == MODE_DEEP) {
		struct shim_rx_stats s;

		/* shims start in always-on capture: newly connected ones are told */
		shim_rx_get_stats(gp->rx, &s);
		if (s.conns_accepted != gp->conns_seen) {
			gp->conns_seen = s.conns_accepted;
			shim_rx_set_mode(gp->rx, 0, MODE_DEEP);
		}
	}
	if (final)
		corr__flush(gp->corr);
	else
		corr__advance(gp->corr, now);
	if (gp->st) {
		uint64_t first = corr_stats__first_ts(gp->st);

		if (!gp->t_cut)
			gp->t_cut = a->last_interval_ns;
		/* GPU records lag their interval: cut up to now, the rest waits */
		if (first != UINT64_MAX && (now > gp->t_cut || final))
			corr_stats__cut(gp->st, gp->t_cut < first ? gp->t_cut : first,
					final ? UINT64_MAX : now, on_summary, a);
		gp->t_cut = now;
	}
}

void gpu_stats(struct agent *a, json_t *r)
{
	struct gpu *gp = a->gpu;
	const struct corr_counters *c;
	struct shim_rx_stats s;

	if (!gp)
		return;
	c = corr__counters(gp->corr);
	shim_rx_get_stats(gp->rx, &s);
	json_object_set_new(
		r, "gpu",
		json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}",
			  "shims_connected",
			  (json_int_t)s.conns_active, "shim_records", (json_int_t)s.records,
			  "shim_bad_records", (json_int_t)s.bad_records, "shim_bad_msgs",
			  (json_int_t)s.bad_msgs, "shim_pid_rewritten", (json_int_t)s.pid_rewritten,
			  "shim_tid_mapped", (json_int_t)s.tid_mapped, "shim_tid_unmapped",
			  (json_int_t)s.tid_unmapped,
			  "shim_dropped", (json_int_t)s.shim_records_dropped, "cupti_dropped",
			  (json_int_t)s.shim_cupti_dropped, "gpu_records", (json_int_t)c->gpu_records,
			  "joined", (json_int_t)c->joined, "unmatched", (json_int_t)c->unmatched,
			  "launches_evicted", (json_int_t)c->launches_evicted, "gpu_evicted",
			  (json_int_t)c->gpu_evicted, "refused", (json_int_t)c->refused, "too_long",
			  (json_int_t)gp->too_long, "exits_early", (json_int_t)gp->exits_early,
			  "shim_reentered", (json_int_t)s.reentered));
	if (gp->mk)
		json_object_set_new(json_object_get(r, "gpu"), "nvtx",
				    json_pack("{s:I,s:I,s:I}", "ranges",
					      (json_int_t)gp->mk->ranges, "unpaired",
					      (json_int_t)gp->mk->unpaired, "overflow",
					      (json_int_t)gp->mk->overflow));
}

void gpu_free(struct agent *a)
{
	struct gpu *gp = a->gpu;

	if (!gp)
		return;
	agent_unwatch_fd(a, shim_rx_fd(gp->rx));
	shim_rx_close(gp->rx);
	corr_stats__free(gp->st);
	corr__free(gp->corr);
	free(gp->buf);
	free(gp->mk);
	free(gp);
	a->gpu = NULL;
}

/* "gpu_summary", shared with agent/sources/replay.c */
void gpu_emit_summary(struct agent *a, const struct corr_summary *s)
{
	json_t *o, *devs, *streams, *top;

	o = rec_new(a, "gpu_summary", s->pid, 0, s->t0_ns);
	if (!o)
		return;
	devs = json_array();
	streams = json_array();
	top = json_array();
	json_object_set_new(o, "interval_start_ns", json_integer((json_int_t)s->t0_ns));
	json_object_set_new(o, "interval_end_ns", json_integer((json_int_t)s->t1_ns));
	json_object_set_new(o, "kernels", json_integer((json_int_t)s->kernels));
	json_object_set_new(o, "memcpys", json_integer((json_int_t)s->memcpys));
	json_object_set_new(o, "memsets", json_integer((json_int_t)s->memsets));
	json_object_set_new(o, "memcpy_bytes", json_integer((json_int_t)s->memcpy_bytes));
	json_object_set_new(o, "matched", json_integer((json_int_t)s->matched));
	json_object_set_new(o, "unmatched", json_integer((json_int_t)s->unmatched));
	for (uint32_t i = 0; i < s->n_dev; i++)
		json_array_append_new(devs,
				      json_pack("{s:I,s:I,s:I,s:I,s:I}", "device",
						(json_int_t)s->dev[i].device, "busy_ns",
						(json_int_t)s->dev[i].busy_ns, "idle_gaps",
						(json_int_t)s->dev[i].gaps, "idle_gap_ns",
						(json_int_t)s->dev[i].gap_ns, "idle_gap_max_ns",
						(json_int_t)s->dev[i].gap_max_ns));
	for (uint32_t i = 0; i < s->n_streams; i++)
		json_array_append_new(streams,
				      json_pack("{s:I,s:I,s:I,s:I}", "device",
						(json_int_t)s->streams[i].device, "stream",
						(json_int_t)s->streams[i].stream, "busy_ns",
						(json_int_t)s->streams[i].busy_ns, "records",
						(json_int_t)s->streams[i].records));
	for (uint32_t i = 0; i < s->n_top; i++)
		json_array_append_new(top, json_pack("{s:s,s:I,s:I}", "name",
						     s->top[i].name ? s->top[i].name : "",
						     "count", (json_int_t)s->top[i].count,
						     "total_ns", (json_int_t)s->top[i].total_ns));
	json_object_set_new(o, "devices", devs);
	json_object_set_new(o, "streams", streams);
	if (s->l2s_count)
		json_object_set_new(o, "launch_to_start_ns",
				    json_pack("{s:I,s:I,s:I,s:I,s:I}", "count",
					      (json_int_t)s->l2s_count, "p50",
					      (json_int_t)s->l2s_p50_ns, "p90",
					      (json_int_t)s->l2s_p90_ns, "p99",
					      (json_int_t)s->l2s_p99_ns, "max",
					      (json_int_t)s->l2s_max_ns));
	else
		json_object_set_new(o, "launch_to_start_ns", json_null());
	json_object_set_new(o, "top_kernels", top);
	rec_emit(a, REC_SUMMARY, o);
}
