// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * join.c - the GPU join, live and replayed: GPU activity and launch callbacks
 * from the CUPTI shims (agent/sources/shim.c) and launches from the uprobes
 * (agent/sources/decode.c) go through one correlator; a recording's reader
 * (agent/sources/replay.c) runs its own correlator and hands its joined
 * records to the same gpu_joined(). Joined GPU activity goes to the step
 * segmenter and leaves as "kernel"/"memcpy"/"memset" records (deep mode,
 * deep-dives, the flight recorder) or per-interval "gpu_summary" records
 * (sentinel), cut in one place (cut()). NVTX ranges are paired here into
 * step markers.
 *
 * Everything runs on the event loop thread.
 */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "pipeline.h"
#include "correlator.h"
#include "nccl_live.h"
#include "jsonw.h"

#define JSON_BUF (64 * 1024)
/* a recording, sentinel: cut finished intervals once this many records are held */
#define STATS_HOLD 262144

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
	bool recording;	       /* --replay: intervals in the recording's own clock */
	struct markers *mk;    /* live: NVTX pairing of the shims' markers */
	struct corr *corr;     /* live; a recording's correlator belongs to its reader */
	struct corr_stats *st; /* sentinel summaries */
	char *buf;
	uint64_t interval_ns; /* a recording's --interval; 0: one summary at the end */
	uint64_t t_cut;	      /* start of the next summary interval; 0: not started */
	uint64_t max_start;   /* a recording: the latest GPU start seen */
	struct gpu_counts n;
	struct prom_hist l2s; /* --metrics: launch to GPU start of the joined records */
};

static void emit_summary(void *ctx, const struct corr_summary *s);

/*
 * The held statistics become gpu_summary records, up to `upto` (all of them
 * when final). Live, at each --interval tick: one summary since the last
 * cut; GPU records lag their interval, so it starts at the oldest one held.
 * A recording: whole --interval windows of its own clock (empty ones
 * skipped), the rest at the end, or one summary when no interval is set.
 */
static void cut(struct gpu *gp, uint64_t upto, bool final)
{
	uint64_t first = corr_stats__first_ts(gp->st);

	if (!gp->recording) {
		if (!gp->t_cut)
			gp->t_cut = gp->a->last_interval_ns;
		if (first != UINT64_MAX && (upto > gp->t_cut || final))
			corr_stats__cut(gp->st, gp->t_cut < first ? gp->t_cut : first,
					final ? UINT64_MAX : upto, emit_summary, gp);
		gp->t_cut = upto;
		return;
	}
	if (gp->interval_ns) {
		if (final)
			upto = UINT64_MAX - gp->interval_ns;
		if (!gp->t_cut && first != UINT64_MAX)
			gp->t_cut = first;
		while (gp->t_cut && gp->t_cut + gp->interval_ns <= upto) {
			first = corr_stats__first_ts(gp->st);
			if (first == UINT64_MAX)
				break;
			/* skip empty intervals in one step */
			if (first >= gp->t_cut + gp->interval_ns)
				gp->t_cut +=
				    (first - gp->t_cut) / gp->interval_ns * gp->interval_ns;
			if (gp->t_cut + gp->interval_ns > upto)
				break;
			corr_stats__cut(gp->st, gp->t_cut, gp->t_cut + gp->interval_ns,
					emit_summary, gp);
			gp->t_cut += gp->interval_ns;
		}
	}
	if (final)
		corr_stats__cut(gp->st, gp->t_cut ? gp->t_cut : corr_stats__first_ts(gp->st),
				UINT64_MAX, emit_summary, gp);
}

/*
 * A joined GPU record in binary form for route_detail_fmt() (sentinel: kept
 * in the flight recorder, made JSON - names demangled - only if its window
 * is read): the two structs, then the launch's entry point and the kernel's
 * name, NUL-terminated.
 */
struct gpu_blob {
	struct corr_gpu g;
	struct corr_launch l;
	uint8_t has_launch, has_name;
	char strs[REC_FMT_BLOB_MAX - sizeof(struct corr_gpu) - sizeof(struct corr_launch) - 8];
};

static long gpu_fmt(struct agent *a, const char *key, const void *blob, size_t len, char *buf,
		    size_t cap)
{
	const struct gpu_blob *b = blob;
	struct corr_json_common cm = {.host = agent_host(a), .instance = key};
	struct corr_gpu g;
	struct corr_launch l;
	const char *s = b->strs, *end = (const char *)blob + len;

	if (len < offsetof(struct gpu_blob, strs))
		return -1;
	g = b->g;
	l = b->l;
	if (b->has_launch) {
		l.api = s;
		s += strnlen(s, (size_t)(end - s)) + 1;
	}
	g.name = b->has_name && s < end ? s : NULL;
	return corr_gpu_to_json(buf, cap, &cm, &g, b->has_launch ? &l : NULL);
}

/* keep a joined record unformatted; false when its names do not fit (then: JSON now) */
static bool keep_gpu(struct agent *a, uint32_t pid, const char *inst, const struct corr_gpu *g,
		     const struct corr_launch *l, int *err)
{
	static struct gpu_blob b;
	size_t off = 0, n;

	b.g = *g;
	b.g.name = NULL;
	b.has_launch = l != NULL;
	b.has_name = g->name != NULL;
	if (l) {
		b.l = *l;
		b.l.api = NULL;
		n = strlen(l->api) + 1;
		if (n > sizeof(b.strs))
			return false;
		memcpy(b.strs, l->api, n);
		off = n;
	} else {
		memset(&b.l, 0, sizeof(b.l));
	}
	if (g->name) {
		n = strnlen(g->name, sizeof(b.strs) - off);
		if (off + n + 1 > sizeof(b.strs))
			return false;
		memcpy(b.strs + off, g->name, n);
		b.strs[off + n] = '\0';
		off += n + 1;
	}
	*err = route_detail_fmt(a, pid, inst, gpu_fmt, &b, offsetof(struct gpu_blob, strs) + off);
	return true;
}

/*
 * --summary's GPU time by Python call (pyprof.c): the frames the hook wrote
 * between from and to (",\"launch_python\":[...]": the array follows the
 * key, which has no '[') and the record's GPU time
 */
static void prof_add(struct agent *a, const struct corr_gpu *g, const char *from, const char *to)
{
	const char *arr = a->pyprof ? memchr(from, '[', (size_t)(to - from)) : NULL;

	if (arr)
		pyprof_add(a->pyprof, arr, (size_t)(to - arr),
			   g->end_ns > g->start_ns ? g->end_ns - g->start_ns : 0);
}

/*
 * The record in gp->buf (len bytes) with its launch's "launch_python"
 * (capture_hooks.launch_python): the last '}' becomes the field's comma;
 * when the field does not fit, the record stays as it was. The new length.
 */
static int python_field(struct agent *a, struct gpu *gp, const struct corr_gpu *g,
			const struct corr_launch *l, int len)
{
	struct jsonw w = {.buf = gp->buf, .cap = JSON_BUF, .len = (size_t)len - 1};
	long n;

	if (len < 2 || gp->buf[len - 1] != '}' ||
	    !a->cap.launch_python(a, l->pid, l->tid, l->ts_ns, &w))
		return len;
	n = jw_end(&w);
	if (n < 0) {
		gp->buf[len - 1] = '}';
		return len;
	}
	gp->n.launch_python++;
	prof_add(a, g, gp->buf + len - 1, gp->buf + n - 1);
	return (int)n;
}

/*
 * --summary without the record written (sentinel: summaries only): its
 * frames, as the hook writes them, for the GPU time by Python call alone
 */
static void prof_only(struct agent *a, struct gpu *gp, const struct corr_gpu *g,
		      const struct corr_launch *l)
{
	struct jsonw w = {.buf = gp->buf, .cap = JSON_BUF, .first = 1};

	if (a->pyprof && a->cap.launch_python &&
	    a->cap.launch_python(a, l->pid, l->tid, l->ts_ns, &w) && !w.overflow)
		prof_add(a, g, gp->buf, gp->buf + w.len);
}

void gpu_joined(void *ctx, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct gpu *gp = ctx;
	struct agent *a = gp->a;
	uint32_t pid = l ? l->pid : g->pid;
	struct corr_json_common cm;
	const char *inst;
	int len, err;

	gp->n.joined++;
	if (l) /* a start before its launch (clocks apart): none waited */
		prom_hist_add(&gp->l2s,
			      g->start_ns > l->ts_ns ? (g->start_ns - l->ts_ns) / 1e9 : 0);
	gpusum_add(a->gpusum, g, l); /* --summary */
	diag_on_gpu(a->diag, g, l);  /* steps are cut from the GPU stream */
	nccl_on_kernel(a, g, l);     /* an NCCL kernel completes its collectives */
	if (gp->st) {
		corr_stats__add(gp->st, g, l);
		if (gp->recording) {
			if (g->start_ns > gp->max_start)
				gp->max_start = g->start_ns;
			/* a recording is nearly time-ordered: keep two intervals of slack */
			if (gp->interval_ns && gp->n.joined % STATS_HOLD == 0 &&
			    gp->max_start > 2 * gp->interval_ns)
				cut(gp, gp->max_start - 2 * gp->interval_ns, false);
		}
		/* sentinel: deep-dived processes send, the flight recorder keeps (route.c) */
		if (!route_wants_detail(a, pid)) {
			if (l)
				prof_only(a, gp, g, l);
			return;
		}
	}
	inst = agent_instance_of(a, pid);
	if (gp->st && keep_gpu(a, pid, inst, g, l, &err)) {
		if (l) /* formatted later (route.c), without launch_python */
			prof_only(a, gp, g, l);
		if (err && !gp->n.err)
			gp->n.err = -EIO;
		return;
	}
	cm.host = agent_host(a);
	cm.instance = inst;
	len = corr_gpu_to_json(gp->buf, JSON_BUF, &cm, g, l);
	if (len < 0) {
		gp->n.too_long++; /* a name beyond 64 KiB */
		return;
	}
	if (l && a->cap.launch_python) /* its launch's Python frames (live: uprobe launches) */
		len = python_field(a, gp, g, l, len);
	err = gp->st ? route_detail(a, pid, inst, gp->buf, (size_t)len)
		     : rec_emit_raw(a, REC_EVENT, inst, gp->buf, (size_t)len);
	if (err && !gp->n.err)
		gp->n.err = -EIO;
}

static void marker_close(struct gpu *gp, uint32_t pid, uint32_t tid, const struct mk_open *o,
			 uint64_t end)
{
	struct corr_marker m = {
	    .pid = pid, .tid = tid, .ts_ns = o->ts, .cat = "nvtx", .name = o->name};

	if (end < o->ts) {
		gp->mk->unpaired++;
		return;
	}
	m.dur_ns = end - o->ts;
	gp->mk->ranges++;
	diag_on_marker(gp->a->diag, &m);
}

void gpu_on_marker(struct agent *a, const struct gpu_marker_event *e)
{
	struct gpu *gp = a->gpu;
	struct markers *mk = gp ? gp->mk : NULL;
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
			*t = (struct mk_thread){.pid = e->hdr.pid, .tid = e->hdr.tid};
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
		*free_r = (struct mk_range){
		    .pid = e->hdr.pid, .tid = e->hdr.tid, .id = e->range_id, .o.ts = e->hdr.ts_ns};
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

/*
 * --metrics' launch to GPU start (seconds): the upper bounds of
 * infertrace_gpu_launch_to_start_seconds, from 10 us (an idle GPU's queue)
 * to 1 s (a CPU far ahead of its GPU)
 */
static const double l2s_le[] = {1e-5, 2.5e-5, 5e-5,  1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
				5e-3, 0.01,   0.025, 0.05, 0.1,	   0.25, 0.5,  1};
_Static_assert(sizeof(l2s_le) / sizeof(l2s_le[0]) <= PROM_HIST_MAX, "l2s_le");
static const struct prom_hist l2s_none = {.le = l2s_le, .nle = sizeof(l2s_le) / sizeof(l2s_le[0])};

const struct prom_hist *gpu_l2s_hist(const struct agent *a)
{
	return a->gpu ? &a->gpu->l2s : &l2s_none;
}

struct gpu *gpu_new(struct agent *a, bool recording)
{
	const struct agent_opts *o = &a->opts;
	struct corr_opts co = {
	    .sz = sizeof(co), .log = agent_lib_log, .log_ctx = "correlator: ", .emit = gpu_joined};
	struct corr_stats_opts so = {.sz = sizeof(so)};
	struct gpu *gp = calloc(1, sizeof(*gp));

	if (!gp)
		return NULL;
	gp->a = a;
	gp->recording = recording;
	gp->l2s = l2s_none;
	co.emit_ctx = gp;
	gp->buf = malloc(JSON_BUF);
	if (!gp->buf)
		goto fail;
	if (!recording && (!(gp->corr = corr__new(&co)) || !(gp->mk = calloc(1, sizeof(*gp->mk)))))
		goto fail;
	if (o->mode != MODE_DEEP && !(gp->st = corr_stats__new(&so)))
		goto fail;
	if (recording && o->interval_s > 0)
		gp->interval_ns = (uint64_t)(o->interval_s * 1e9);
	return gp;
fail:
	gpu_destroy(gp);
	errno = ENOMEM;
	return NULL;
}

void gpu_finish(struct gpu *gp)
{
	if (gp && gp->corr)
		corr__flush(gp->corr);
	if (gp && gp->st)
		cut(gp, UINT64_MAX, true);
}

void gpu_counts(const struct gpu *gp, struct gpu_counts *out)
{
	*out = gp->n;
	out->stats_dropped = gp->st ? corr_stats__dropped(gp->st) : 0;
}

void gpu_destroy(struct gpu *gp)
{
	if (!gp)
		return;
	corr_stats__free(gp->st);
	corr__free(gp->corr);
	free(gp->buf);
	free(gp->mk);
	free(gp);
}

int gpu_init(struct agent *a)
{
	const struct agent_opts *o = &a->opts;

	if (o->shim_socket && !strcmp(o->shim_socket, "none"))
		return 0;
	a->gpu = gpu_new(a, false);
	return a->gpu ? 0 : -ENOMEM;
}

void gpu_on_activity(struct agent *a, const struct corr_gpu *g)
{
	struct gpu *gp = a->gpu;

	if (gp)
		corr__add_gpu(gp->corr, g);
}

void gpu_on_callback(struct agent *a, const struct gpu_launch_cb_event *cb)
{
	struct gpu *gp = a->gpu;

	if (gp)
		corr__add_callback(gp->corr, cb->hdr.pid, cb->hdr.tid, cb->hdr.ts_ns,
				   cb->correlation_id, cb->domain, cb->cbid);
}

void gpu_on_process_exit(struct agent *a, uint32_t pid, uint64_t ts_ns)
{
	struct gpu *gp = a->gpu;

	if (gp)
		corr__process_exit(gp->corr, pid, ts_ns);
}

void gpu_on_launch(struct agent *a, const struct cuda_launch_event *e)
{
	struct gpu *gp = a->gpu;

	if (gp)
		corr__add_uprobe_launch(gp->corr, e->hdr.pid, e->hdr.tid, e->hdr.ts_ns, e->api);
}

void gpu_interval(struct agent *a, bool final)
{
	struct gpu *gp = a->gpu;
	uint64_t now = now_ns();

	if (!gp)
		return;
	if (final) {
		gpu_finish(gp);
		return;
	}
	corr__advance(gp->corr, now);
	if (gp->st)
		cut(gp, now, false);
}

void gpu_stats(struct agent *a, json_t *r)
{
	struct gpu *gp = a->gpu;
	const struct corr_counters *c;
	json_t *o;

	if (!gp)
		return;
	c = corr__counters(gp->corr);
	o = json_object_get(r, "gpu"); /* the shim's half first (agent/sources/shim.c) */
	if (!o)
		json_object_set_new(r, "gpu", o = json_object());
	/* _new: the packed object is ours to give (json_object_update leaked ~830 B an interval) */
	json_object_update_new(
	    o, json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "gpu_records",
			 (json_int_t)c->gpu_records, "joined", (json_int_t)c->joined, "unmatched",
			 (json_int_t)c->unmatched, "no_launch", (json_int_t)c->no_launch,
			 "launches_evicted", (json_int_t)c->launches_evicted, "gpu_evicted",
			 (json_int_t)c->gpu_evicted, "refused", (json_int_t)c->refused, "too_long",
			 (json_int_t)gp->n.too_long));
	if (gp->mk)
		json_object_set_new(json_object_get(r, "gpu"), "nvtx",
				    json_pack("{s:I,s:I,s:I}", "ranges", (json_int_t)gp->mk->ranges,
					      "unpaired", (json_int_t)gp->mk->unpaired, "overflow",
					      (json_int_t)gp->mk->overflow));
}

void gpu_free(struct agent *a)
{
	struct gpu *gp = a->gpu;

	if (!gp)
		return;
	gpu_destroy(gp);
	a->gpu = NULL;
}

/* the "gpu_summary" record */
static void emit_summary(void *ctx, const struct corr_summary *s)
{
	struct gpu *gp = ctx;
	struct agent *a = gp->a;
	json_t *o, *devs, *streams, *top;

	gp->n.summaries++;
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
		json_array_append_new(
		    devs, json_pack("{s:I,s:I,s:I,s:I,s:I}", "device", (json_int_t)s->dev[i].device,
				    "busy_ns", (json_int_t)s->dev[i].busy_ns, "idle_gaps",
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
						     s->top[i].name ? s->top[i].name : "", "count",
						     (json_int_t)s->top[i].count, "total_ns",
						     (json_int_t)s->top[i].total_ns));
	json_object_set_new(o, "devices", devs);
	json_object_set_new(o, "streams", streams);
	if (s->l2s_count)
		json_object_set_new(
		    o, "launch_to_start_ns",
		    json_pack("{s:I,s:I,s:I,s:I,s:I}", "count", (json_int_t)s->l2s_count, "p50",
			      (json_int_t)s->l2s_p50_ns, "p90", (json_int_t)s->l2s_p90_ns, "p99",
			      (json_int_t)s->l2s_p99_ns, "max", (json_int_t)s->l2s_max_ns));
	else
		json_object_set_new(o, "launch_to_start_ns", json_null());
	json_object_set_new(o, "top_kernels", top);
	rec_emit(a, REC_SUMMARY, o);
}
