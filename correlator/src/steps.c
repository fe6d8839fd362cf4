// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * steps.c - cut each process's GPU activity into inference steps and
 * measure each step (docs/diagnosis.md, "Steps").
 *
 * Sources, first available wins per process:
 *  1. step markers (names from opts.markers, USDT begin/end): the innermost
 *     matching marker of a thread is a step;
 *  2. automatic: the launching thread (most launches) cycles through
 *     "launch the step's work, copy the sampled tokens device-to-host,
 *     synchronise". Each device-to-host copy it launches ends a step; the
 *     step starts at the first launch after the previous copy. Without such
 *     copies, launch gaps far above the usual spacing cut instead;
 *  3. anchor: when markers of the launching thread exist but none is named
 *     as a step, the recurring marker (any name) whose spans each hold at
 *     most one automatic cycle and together hold all of them, with the
 *     least total time, is the step function (LatencyPrism's recurring
 *     function). Its spans give exact boundaries and also the steps that
 *     launched nothing.
 *
 * Everything is held until cut: live, diag_seg__advance() cuts what ended
 * hold_ns ago; replay calls diag_seg__flush() at the end (the recording's
 * events are not in time order).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"
#include "internal.h"
#include "grow.h"
#include "jsonw.h"
#include "pidtab.h"

#define DEFAULT_MARKERS "execute_model,run_batch,forward_batch,ProfilerStep#"
#define MAX_PATTERNS 16
#define GAP_MIN_NS 50000   /* idle gaps shorter than this are launch jitter */
#define CUDA_MEMCPY_DTOH 2 /* CUpti_ActivityMemcpyKind */

struct srec {
	uint64_t launch, start, end;
	uint32_t pid, tid; /* tid 0: no launch joined */
	int32_t name;
	uint32_t corr; /* correlation id */
	uint8_t kind;
	/* nolaunch: its launch record was sampled out (CORR_GPU_F_NO_LAUNCH) */
	uint8_t d2h : 1, graph : 1, comm : 1, nolaunch : 1;
};

struct smark {
	uint64_t ts, end;
	uint32_t pid, tid;
	int32_t name;
	bool step, usdt;
	int64_t tokens, batch, kv;
	int32_t rank; /* rank= metadata; -1 */
	enum diag_phase phase;
};

struct scpu {
	struct diag_cpu_event e;
};

/*
 * Per-process state, in an open-addressing table keyed by pid (linear
 * probing, deletion by backward shift): a replay of 200k processes or a
 * node that starts thousands of short-lived ones must not scan a list per
 * lookup. An exited process's entry goes once nothing of it is held.
 */
struct pstate {
	struct pid_slot k; /* pidtab.h */
	bool exited;	   /* diag_seg__process_exit(): drop once nothing is held */
	uint64_t seq;
	uint64_t done_until; /* steps ending at or before this were emitted */
	/*
	 * the start of the first step the last cut left for later (0: none):
	 * its records launched before the step before it ended stay too
	 */
	uint64_t keep_from;
	uint64_t held_gen; /* cut_all() generation that last kept something of it */
	uint32_t launcher; /* the launching thread of its last automatic cut */
	bool by_gaps;	   /* that cut was by launch gaps (no copies back) */
};

/*
 * Without copies back, a launch gap cuts when it is over GAP_CUT_X times the
 * median of the launching thread's last GAP_WIN gaps before it, and over
 * GAP_CUT_MIN_NS (that alone until GAP_WARM gaps are known). The gaps before
 * are the process's so far, not those of what a cut holds: a live cut holds
 * the last seconds, a replay's one cut the whole recording, and a limit from
 * either gave different steps (the HTA AlexNet trace: 15 steps live, 22 at
 * once). Live, cut_all() keeps the gaps of the records a cut leaves behind
 * (struct gstate, by pid) for processes cut this way; a replay's one cut
 * keeps none.
 */
#define GAP_WIN 64
#define GAP_WARM (GAP_WIN / 2)
#define GAP_CUT_X 20
#define GAP_CUT_MIN_NS 1000000ULL

/* the last GAP_WIN gaps, oldest at g[head] once n == GAP_WIN */
struct gring {
	uint64_t g[GAP_WIN];
	uint32_t n, head;
};

struct gstate {
	struct pid_slot k; /* pidtab.h */
	uint64_t last;	   /* launch of the last launcher record left behind; 0: none */
	struct gring ring;
};

struct usdt_open {
	uint32_t pid, tid;
	uint64_t ts;
	int64_t tokens, batch, kv;
	enum diag_phase phase;
};

struct diag_seg {
	struct diag_seg_opts o;
	char pat[MAX_PATTERNS][64];
	int n_pat;
	struct names *names;
	uint8_t *nf; /* NF_* of each name id, or 0: not looked at yet */
	size_t cnf;
	struct srec *r;
	size_t nr, cr;
	size_t nr_sorted;  /* r[0, nr_sorted) is in cmp_rec order: what the last cut kept */
	struct srec *rtmp; /* the records out of order, while they are merged in */
	size_t crtmp;
	struct jl *jl; /* estimate_launches(): the joined launches by correlation id */
	size_t cjl;
	struct kslot *ks; /* measure(): by name id, its group in the step */
	size_t cks;
	uint32_t kstamp; /* measure() calls */
	struct smark *m;
	size_t nm, cm;
	struct scpu *c;
	size_t nc, cc;
	struct pidtab ps; /* struct pstate by pid */
	struct pidtab gs; /* struct gstate by pid: processes cut by launch gaps */
	uint32_t *gone;	  /* pids that exited, their entries still in ps */
	size_t ngone, cgone;
	uint64_t gen; /* cut_all() calls */
	struct usdt_open uo[64];
	int nuo;
	struct diag_step *out; /* a cut's steps of every process, sent in time order */
	size_t nout, cout;
	bool cpu_seen; /* live: the CPU side is traced, so no event means 0 */
	bool net_seen; /* live: socket bytes are traced, so no event means 0 */
	struct diag_seg_counters cnt;
};

#define slog(sg, ...) corr_log_forward((sg)->o.log, (sg)->o.log_ctx, __VA_ARGS__)

struct diag_seg *diag_seg__new(const struct diag_seg_opts *opts)
{
	struct diag_seg *sg;
	const char *p;

	if (!opts || opts->sz < offsetof(struct diag_seg_opts, step)) {
		errno = EINVAL;
		return NULL;
	}
	sg = calloc(1, sizeof(*sg));
	if (!sg) {
		errno = ENOMEM;
		return NULL;
	}
	pidtab_init(&sg->ps, sizeof(struct pstate));
	pidtab_init(&sg->gs, sizeof(struct gstate));
	memcpy(&sg->o, opts, opts->sz < sizeof(sg->o) ? opts->sz : sizeof(sg->o));
	sg->o.sz = sizeof(sg->o);
	if (!sg->o.hold_ns)
		sg->o.hold_ns = 2000000000ULL;
	if (!sg->o.capacity)
		sg->o.capacity = 1u << 20;
	p = sg->o.markers ? sg->o.markers : DEFAULT_MARKERS;
	while (*p && sg->n_pat < MAX_PATTERNS) {
		size_t n = strcspn(p, ",");

		if (n && n < sizeof(sg->pat[0])) {
			memcpy(sg->pat[sg->n_pat], p, n);
			sg->pat[sg->n_pat++][n] = '\0';
		}
		p += n;
		if (*p == ',')
			p++;
	}
	sg->o.markers = NULL; /* not kept: the patterns are copied */
	sg->names = names_new(1u << 20);
	if (!sg->names) {
		free(sg);
		errno = ENOMEM;
		return NULL;
	}
	return sg;
}

void diag_seg__free(struct diag_seg *sg)
{
	if (!sg)
		return;
	names_free(sg->names);
	free(sg->r);
	free(sg->m);
	free(sg->c);
	free(sg->nf);
	free(sg->rtmp);
	free(sg->jl);
	free(sg->ks);
	pidtab_free(&sg->ps);
	pidtab_free(&sg->gs);
	free(sg->gone);
	free(sg->out);
	free(sg);
}

const struct diag_seg_counters *diag_seg__counters(const struct diag_seg *sg)
{
	return &sg->cnt;
}

static bool is_comm(const char *n)
{
	return n && (strstr(n, "nccl") || strstr(n, "all_reduce") || strstr(n, "allreduce") ||
		     strstr(n, "all_gather") || strstr(n, "reduce_scatter") ||
		     strstr(n, "cross_device") || strstr(n, "multimem"));
}

/* what a GPU record's name says, looked at once per distinct name */
enum { NF_SEEN = 1, NF_COMM = 2, NF_MEMCPY = 4, NF_DTOH = 8 };

static uint8_t name_flags(const char *n)
{
	if (!n)
		return NF_SEEN;
	/*
	 * Kineto records often lack the copy kind: the name says "Memcpy DtoH".
	 * The name also wins over the kind (the Kineto reader files
	 * gpu_memcpy under memset as of this writing).
	 */
	return NF_SEEN | (is_comm(n) ? NF_COMM : 0) | (!strncmp(n, "Memcpy", 6) ? NF_MEMCPY : 0) |
	       (strstr(n, "DtoH") ? NF_DTOH : 0);
}

/*
 * By name id: seven strstr() per kernel were 9% of the agent at 133 k
 * kernels/s (bench/shim.sh). A name the table could not take is looked at
 * each time.
 */
static uint8_t seg_name_flags(struct diag_seg *sg, int32_t id, const char *n)
{
	size_t old = sg->cnf;

	if (id < 0)
		return name_flags(n);
	if ((size_t)id >= sg->cnf) {
		if (grow_array((void **)&sg->nf, &sg->cnf, (size_t)id, 1, 1024))
			return name_flags(n);
		memset(sg->nf + old, 0, sg->cnf - old);
	}
	if (!sg->nf[id])
		sg->nf[id] = name_flags(n);
	return sg->nf[id];
}

int diag_seg__add_gpu(struct diag_seg *sg, const struct corr_gpu *g, const struct corr_launch *l)
{
	struct srec *r;
	int32_t id = -1;
	uint8_t nf;

	sg->cnt.gpu_records++;
	if (sg->nr >= sg->o.capacity) {
		sg->cnt.dropped++;
		return -ENOSPC;
	}
	if (grow_array((void **)&sg->r, &sg->cr, sg->nr, sizeof(*sg->r), 1024))
		return -ENOMEM;
	if (g->name) {
		id = names_intern_gpu(sg->names, g);
		if (id < 0)
			id = -1;
	}
	nf = seg_name_flags(sg, id, g->name);
	r = &sg->r[sg->nr++];
	r->launch = l ? l->ts_ns : g->start_ns;
	r->start = g->start_ns;
	r->end = g->end_ns > g->start_ns ? g->end_ns : g->start_ns;
	r->pid = l ? l->pid : g->pid;
	r->tid = l ? l->tid : 0;
	r->name = id;
	r->kind = (uint8_t)g->kind;
	if (nf & NF_MEMCPY)
		r->kind = CORR_KIND_MEMCPY;
	r->d2h =
	    r->kind == CORR_KIND_MEMCPY && (g->copy_kind == CUDA_MEMCPY_DTOH || (nf & NF_DTOH));
	/* graph ids are often not recorded: a kernel of a graph launch is a graph kernel */
	r->graph = g->graph_id != 0 || (l && l->api && strstr(l->api, "GraphLaunch"));
	r->comm = g->kind == CORR_KIND_KERNEL && (nf & NF_COMM);
	r->nolaunch = !l && (g->flags & CORR_GPU_F_NO_LAUNCH);
	r->corr = g->corr_id;
	return 0;
}

/*
 * Where "name key=value ..." metadata starts: at the first ' ' or '|'
 * followed by a lower-case key and '=' (Python function names have spaces
 * of their own).
 */
static size_t meta_start(const char *s)
{
	for (const char *p = s; *p; p++) {
		const char *q = p + 1;

		if (*p != ' ' && *p != '|')
			continue;
		while ((*q >= 'a' && *q <= 'z') || *q == '_')
			q++;
		if (q > p + 1 && *q == '=')
			return (size_t)(p - s);
	}
	return strlen(s);
}

/* "name key=value ..." metadata: tokens=, batch=, kv=, phase=, rank= */
static void parse_meta(struct diag_seg *sg, const char *s, struct smark *m)
{
	const char *p = s[meta_start(s)] ? s + meta_start(s) : NULL;

	while (p && *p) {
		char key[16], val[32];
		char *end;
		long long v;

		while (*p == ' ' || *p == '|' || *p == ',')
			p++;
		if (sscanf(p, "%15[a-z_]=%31[^ |,]", key, val) == 2) {
			if (!strcmp(key, "phase")) {
				if (diag_phase_parse(val, &m->phase))
					sg->cnt.bad_metadata++;
			} else {
				errno = 0;
				v = strtoll(val, &end, 10);
				if (errno || *end || v < 0) {
					sg->cnt.bad_metadata++;
				} else if (!strcmp(key, "tokens")) {
					m->tokens = v;
				} else if (!strcmp(key, "batch")) {
					m->batch = v;
				} else if (!strcmp(key, "kv")) {
					m->kv = v;
				} else if (!strcmp(key, "rank")) {
					if (v > 65535)
						sg->cnt.bad_metadata++;
					else
						m->rank = (int32_t)v;
				}
			}
		}
		p = strpbrk(p, " |,");
	}
}

static int push_marker(struct diag_seg *sg, const struct smark *m)
{
	if (grow_array((void **)&sg->m, &sg->cm, sg->nm, sizeof(*sg->m), 1024))
		return -ENOMEM;
	sg->m[sg->nm++] = *m;
	return 0;
}

int diag_seg__add_marker(struct diag_seg *sg, const struct corr_marker *m)
{
	/* the end saturated: a forged duration does not wrap around */
	struct smark k = {.ts = m->ts_ns,
			  .end =
			      m->dur_ns > UINT64_MAX - m->ts_ns ? UINT64_MAX : m->ts_ns + m->dur_ns,
			  .pid = m->pid,
			  .tid = m->tid,
			  .tokens = -1,
			  .batch = -1,
			  .kv = -1,
			  .rank = -1};
	char fixed[1024];
	const char *name;
	size_t n;

	sg->cnt.markers++;
	if (!m->name)
		return -EINVAL;
	/* a marker's name leaves in step records: well-formed UTF-8 (jsonw.h) */
	name = jw_utf8_clean(m->name, fixed, sizeof(fixed));
	n = meta_start(name);
	k.name = names_intern(sg->names, name, n);
	if (k.name < 0)
		return k.name;
	for (int i = 0; i < sg->n_pat && !sg->o.auto_only; i++)
		if (strstr(name, sg->pat[i]))
			k.step = true;
	if (k.step) {
		sg->cnt.step_markers++;
		parse_meta(sg, name, &k);
	}
	return push_marker(sg, &k);
}

int diag_seg__usdt_begin(struct diag_seg *sg, uint32_t pid, uint32_t tid, uint64_t ts_ns,
			 int64_t tokens, int64_t batch, int64_t kv_tokens, enum diag_phase phase)
{
	int i;

	for (i = 0; i < sg->nuo; i++)
		if (sg->uo[i].pid == pid && sg->uo[i].tid == tid)
			break;
	if (i == sg->nuo) {
		if (sg->nuo == (int)(sizeof(sg->uo) / sizeof(sg->uo[0])))
			return -ENOSPC;
		sg->nuo++;
	}
	sg->uo[i] = (struct usdt_open){pid, tid, ts_ns, tokens, batch, kv_tokens, phase};
	return 0;
}

int diag_seg__usdt_end(struct diag_seg *sg, uint32_t pid, uint32_t tid, uint64_t ts_ns)
{
	for (int i = 0; i < sg->nuo; i++) {
		struct smark k;

		if (sg->uo[i].pid != pid || sg->uo[i].tid != tid)
			continue;
		k = (struct smark){.ts = sg->uo[i].ts,
				   .end = ts_ns,
				   .pid = pid,
				   .tid = tid,
				   .name = names_intern(sg->names, "usdt", 4),
				   .step = true,
				   .usdt = true,
				   .tokens = sg->uo[i].tokens,
				   .batch = sg->uo[i].batch,
				   .kv = sg->uo[i].kv,
				   .rank = -1,
				   .phase = sg->uo[i].phase};
		sg->uo[i] = sg->uo[--sg->nuo];
		if (ts_ns < k.ts)
			return -EINVAL;
		sg->cnt.step_markers++;
		return push_marker(sg, &k);
	}
	return -ENOENT;
}

int diag_seg__add_cpu(struct diag_seg *sg, const struct diag_cpu_event *e)
{
	sg->cnt.cpu_events++;
	sg->cpu_seen = true;
	if (e->kind == DIAG_CPU_NET)
		sg->net_seen = true;
	if (sg->nc >= sg->o.capacity) {
		sg->cnt.dropped++;
		return -ENOSPC;
	}
	if (grow_array((void **)&sg->c, &sg->cc, sg->nc, sizeof(*sg->c), 1024))
		return -ENOMEM;
	sg->c[sg->nc++].e = *e;
	return 0;
}

/* ------------------------------------------------------------ cutting --- */

/* a thread's entry (pidtab.h, keyed by tid): a time of its steps or markers */
struct tidt {
	struct pid_slot k;
	uint64_t t;
};

struct cut {
	uint64_t start, end;
	uint32_t tid;
	const struct smark *m; /* marker steps */
	const char *source;
};

static int cmp_rec(const void *a, const void *b)
{
	const struct srec *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->launch != y->launch)
		return x->launch < y->launch ? -1 : 1;
	/* launched together (estimates between the same two launches): in call order */
	return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* the first of a pid's n records (sorted by launch) launched at or after t */
static size_t rec_lower(const struct srec *r, size_t n, uint64_t t)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].launch < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* an event's end, saturated (a forged duration does not wrap around) */
static uint64_t cpu_end(const struct diag_cpu_event *e)
{
	return e->dur_ns > UINT64_MAX - e->ts_ns ? UINT64_MAX : e->ts_ns + e->dur_ns;
}

/*
 * CPU events in lookup order (cut_all sorts them, measure() searches): by
 * pid; then a process's network windows (group 0) by start; then each
 * thread's (group tid + 1) off-CPU intervals (class 0), slow syscalls
 * (class 1) and GPU code loads (class 2) by end. One thread is off the CPU
 * once at a time, in one syscall and in one code load at a time, so a class
 * of one thread is disjoint intervals, in the order of their starts too.
 */
struct ckey {
	uint32_t pid;
	uint8_t cls;
	uint64_t grp, t;
};

static struct ckey cpu_key(const struct diag_cpu_event *e)
{
	uint8_t cls = e->kind == DIAG_CPU_CODE_LOAD ? 2 : e->kind == DIAG_CPU_SYSCALL;

	if (e->kind == DIAG_CPU_NET)
		return (struct ckey){e->pid, 0, 0, e->ts_ns};
	return (struct ckey){e->pid, cls, (uint64_t)e->tid + 1, cpu_end(e)};
}

static int cmp_ckey(const struct ckey *x, const struct ckey *y)
{
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->grp != y->grp)
		return x->grp < y->grp ? -1 : 1;
	if (x->cls != y->cls)
		return x->cls < y->cls ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

static int cmp_cpu(const void *a, const void *b)
{
	struct ckey x = cpu_key(&((const struct scpu *)a)->e),
		    y = cpu_key(&((const struct scpu *)b)->e);

	return cmp_ckey(&x, &y);
}

/* whether e is of (pid, grp, cls) */
static bool cpu_in(const struct diag_cpu_event *e, uint32_t pid, uint64_t grp, uint8_t cls)
{
	struct ckey k = cpu_key(e);

	return k.pid == pid && k.grp == grp && k.cls == cls;
}

/* the first held CPU event whose key is at least (pid, grp, cls, t) */
static size_t cpu_lower(const struct diag_seg *sg, uint32_t pid, uint64_t grp, uint8_t cls,
			uint64_t t)
{
	struct ckey want = {pid, cls, grp, t};
	size_t lo = 0, hi = sg->nc;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		struct ckey k = cpu_key(&sg->c[mid].e);

		if (cmp_ckey(&k, &want) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * A class of one thread is disjoint intervals as the kernel reports them;
 * a forged recording's may overlap, and measure() would miss some (it
 * stops at the first that starts after a step) and scan others for every
 * step. Each starts where the one before it (by end) ended, and is
 * counted; live and genuine recordings are untouched. sg->c is sorted.
 */
static void cpu_disjoint(struct diag_seg *sg)
{
	for (size_t i = 1; i < sg->nc; i++) {
		struct diag_cpu_event *e = &sg->c[i].e;
		const struct diag_cpu_event *p = &sg->c[i - 1].e;
		struct ckey a = cpu_key(p), b = cpu_key(e);
		uint64_t end;

		if (!b.grp || a.pid != b.pid || a.grp != b.grp || a.cls != b.cls ||
		    e->ts_ns >= cpu_end(p))
			continue;
		end = cpu_end(e); /* at least p's: the class is sorted by end */
		e->ts_ns = cpu_end(p);
		e->dur_ns = end - e->ts_ns;
		sg->cnt.cpu_overlaps++;
	}
}

static int cmp_mark(const void *a, const void *b)
{
	const struct smark *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	/* outer first at equal start */
	return x->end > y->end ? -1 : x->end < y->end;
}

static int cmp_mark_name(const void *a, const void *b)
{
	const struct smark *const *x = a, *const *y = b;

	if ((*x)->name != (*y)->name)
		return (*x)->name < (*y)->name ? -1 : 1;
	return (*x)->ts < (*y)->ts ? -1 : (*x)->ts > (*y)->ts;
}

/* distinct preempting processes tallied per step (measure) */
#define PREEMPTORS 8

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* a kernel of a step: its name and time (measure(): the top kernels) */
struct ktime {
	int32_t name;
	uint64_t ns, cnt; /* the step's kernels of the name: total time, count */
};

/* a name id's group in a step's struct ktime array, when stamp is the step's */
struct kslot {
	uint32_t stamp, idx;
};

static int cmp_ktime(const void *a, const void *b)
{
	const struct ktime *x = a, *y = b;

	return (x->name > y->name) - (x->name < y->name);
}

static int cmp_iv(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/*
 * Marker steps: step markers of the pid, the innermost of nested ones per
 * thread. The markers are sorted by start, the outer first at one start,
 * so a marker is an outer one when a later step marker of its thread ends
 * within it: one pass from the last, with each thread's least end so far
 * (a scan forward from each marker took time quadratic in the markers
 * where many overlap). Their order is kept.
 */
static int marker_cuts(struct smark *m, size_t n, struct cut *out, size_t *nout)
{
	struct pidtab least; /* struct tidt by thread: the least end of its later step markers */
	size_t k = n;

	pidtab_init(&least, sizeof(struct tidt));
	for (size_t i = n; i-- > 0;) {
		struct tidt *t;

		if (!m[i].step)
			continue;
		t = pidtab_find(&least, m[i].tid);
		if (t && t->t <= m[i].end)
			continue;
		if (!t && !(t = pidtab_add(&least, m[i].tid))) {
			pidtab_free(&least);
			return -ENOMEM;
		}
		t->t = m[i].end;
		out[--k] =
		    (struct cut){m[i].ts, m[i].end, m[i].tid, &m[i], m[i].usdt ? "usdt" : "marker"};
	}
	pidtab_free(&least);
	memmove(out, out + k, (n - k) * sizeof(*out));
	*nout = n - k;
	return 0;
}

/*
 * A record of the launching thread's cycles: its own, and those whose launch
 * record the shim sampled out (always-on mode keeps INFERTRACE_SHIM_LAUNCH_RATE
 * launches per thread per second). Those come with no thread and their GPU
 * start for a launch time; without them a step was the span of its few
 * sampled launches (4 of 100 kernels at 5 k kernels/s, bench/shim.sh).
 */
static bool of_launcher(const struct srec *x, uint32_t best)
{
	return x->tid == best || x->nolaunch;
}

/* a process's launch gaps so far, and sorted: the median at each gap */
struct gwin {
	struct gring ring;
	uint64_t srt[GAP_WIN];
};

static void gring_push(struct gring *r, uint64_t gap)
{
	if (r->n < GAP_WIN) {
		r->g[r->n++] = gap;
	} else {
		r->g[r->head] = gap;
		r->head = (r->head + 1) % GAP_WIN;
	}
}

/* the first of n sorted values not below v */
static size_t u64_lower(const uint64_t *a, size_t n, uint64_t v)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (a[mid] < v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void gwin_load(struct gwin *w, const struct gstate *g)
{
	w->ring = g ? g->ring : (struct gring){0};
	memcpy(w->srt, w->ring.g, w->ring.n * sizeof(w->srt[0]));
	qsort(w->srt, w->ring.n, sizeof(w->srt[0]), cmp_u64);
}

static void gwin_push(struct gwin *w, uint64_t gap)
{
	size_t n = w->ring.n, i;

	if (n == GAP_WIN) { /* the oldest leaves the sorted copy */
		i = u64_lower(w->srt, n, w->ring.g[w->ring.head]);
		n--;
		memmove(&w->srt[i], &w->srt[i + 1], (n - i) * sizeof(w->srt[0]));
	}
	i = u64_lower(w->srt, n, gap);
	memmove(&w->srt[i + 1], &w->srt[i], (n - i) * sizeof(w->srt[0]));
	w->srt[i] = gap;
	gring_push(&w->ring, gap);
}

/* a gap over this cuts: GAP_CUT_X times the median of those before, GAP_CUT_MIN_NS at least */
static uint64_t gwin_limit(const struct gwin *w)
{
	uint64_t med = w->ring.n >= GAP_WARM ? w->srt[w->ring.n / 2] : 0;

	if (med > UINT64_MAX / GAP_CUT_X)
		return UINT64_MAX;
	return med * GAP_CUT_X > GAP_CUT_MIN_NS ? med * GAP_CUT_X : GAP_CUT_MIN_NS;
}

/* automatic cycles of the launching thread; *launcher in: that of the process's last cut */
static size_t auto_cuts(struct diag_seg *sg, struct pstate *ps, struct srec *r, size_t n,
			struct cut *out, uint32_t *launcher)
{
	uint32_t best = 0;
	size_t bestn = 0, k = 0, nd2h = 0;
	uint64_t prev = 0;
	bool open = false;
	struct cut cur = {0};

	/* the launching thread: most records; and the copies back of each (of_launcher) */
	{
		struct {
			uint32_t tid;
			size_t n, nd2h;
		} t[64];
		int nt = 0, bj = 0;
		size_t nl_d2h = 0, nl = 0; /* records whose launch was sampled out, copies back */

		for (size_t i = 0; i < n; i++) {
			int j;

			if (!r[i].tid) {
				nl += r[i].nolaunch;
				nl_d2h += r[i].nolaunch && r[i].d2h;
				continue;
			}
			for (j = 0; j < nt && t[j].tid != r[i].tid; j++)
				;
			if (j == nt) {
				if (nt == 64)
					continue; /* threads beyond 64 never launch the most */
				t[nt].tid = r[i].tid;
				t[nt].nd2h = 0;
				t[nt++].n = 0;
			}
			t[j].nd2h += r[i].d2h;
			if (++t[j].n > bestn) {
				bestn = t[j].n;
				best = t[j].tid;
				bj = j;
			}
		}
		if (!best && *launcher && nl) {
			/*
			 * every launch held was sampled out: the launching
			 * thread is the one of the cuts before (its records
			 * without a launch are its own, of_launcher())
			 */
			best = *launcher;
			nd2h = nl_d2h;
		} else {
			nd2h = best ? t[bj].nd2h + nl_d2h : 0;
		}
	}
	*launcher = best;
	ps->by_gaps = best && !nd2h;
	if (!best)
		return 0;
	if (nd2h) {
		for (size_t i = 0; i < n; i++) {
			if (!of_launcher(&r[i], best))
				continue;
			if (!open) {
				cur = (struct cut){r[i].launch, r[i].end, best, NULL, "auto"};
				open = true;
			}
			if (r[i].end > cur.end)
				cur.end = r[i].end;
			if (r[i].d2h) {
				/* the copy that hands the sampled tokens back ends the step */
				cur.end = r[i].end;
				out[k++] = cur;
				open = false;
			}
		}
		return k;
	}
	/* no copies back: cut where the launch spacing jumps (GAP_CUT_X) */
	{
		const struct gstate *g = pidtab_find(&sg->gs, r[0].pid); /* NULL: none before */
		struct gwin w;

		gwin_load(&w, g);
		prev = g ? g->last : 0;
		for (size_t i = 0; i < n; i++) {
			if (!of_launcher(&r[i], best))
				continue;
			if (prev) {
				uint64_t gap = r[i].launch > prev ? r[i].launch - prev : 0;

				if (open && gap > gwin_limit(&w)) {
					out[k++] = cur;
					open = false;
				}
				gwin_push(&w, gap);
			}
			if (!open) {
				cur = (struct cut){r[i].launch, r[i].end, best, NULL, "auto"};
				open = true;
			}
			if (r[i].end > cur.end)
				cur.end = r[i].end;
			prev = r[i].launch;
		}
		if (open)
			out[k++] = cur;
	}
	return k;
}

/*
 * The recurring marker that brackets the automatic cycles: every cycle
 * inside exactly one of its spans (1% slack for the copy's end), no span
 * holding two, at most 2x as many spans as cycles; the tightest wins.
 */
static size_t anchor_cuts(struct smark *m, size_t nm, uint32_t tid, const struct cut *cyc,
			  size_t nc, struct cut *out)
{
	struct smark **v;
	size_t nv = 0, k = 0;
	int32_t best = -1;
	uint64_t best_total = UINT64_MAX;

	if (!nc)
		return 0;
	v = malloc(sizeof(*v) * (nm + 1));
	if (!v)
		return 0;
	for (size_t i = 0; i < nm; i++)
		if (m[i].tid == tid)
			v[nv++] = &m[i];
	qsort(v, nv, sizeof(*v), cmp_mark_name);
	for (size_t a = 0, b; a < nv; a = b) {
		size_t cnt, c = 0;
		uint64_t total = 0;
		bool ok = true;

		for (b = a; b < nv && v[b]->name == v[a]->name; b++)
			;
		cnt = b - a;
		if (cnt < nc || cnt > 2 * nc + 2)
			continue;
		/* spans sorted by start; walk the cycles alongside */
		for (size_t s = a; s < b && ok; s++) {
			uint64_t slack = 0;
			int held = 0;

			total += v[s]->end - v[s]->ts;
			if (s + 1 < b && v[s + 1]->ts < v[s]->end)
				ok = false; /* overlapping spans: recursion, not a step */
			while (c < nc && cyc[c].start < v[s]->ts) {
				ok = false; /* a cycle outside every span */
				c++;
			}
			while (c < nc && cyc[c].start <= v[s]->end) {
				slack = (cyc[c].end - cyc[c].start) / 100;
				if (cyc[c].end > v[s]->end + slack)
					ok = false;
				held++;
				c++;
			}
			if (held > 1)
				ok = false;
		}
		if (!ok || c < nc)
			continue;
		if (total < best_total) {
			best_total = total;
			best = v[a]->name;
		}
	}
	if (best >= 0)
		for (size_t i = 0; i < nv; i++)
			if (v[i]->name == best)
				out[k++] = (struct cut){v[i]->ts, v[i]->end, tid, v[i], "anchor"};
	free(v);
	return k;
}

/*
 * Whether time t is still the step's: until its end (inclusive), or until
 * the next step of its thread starts (exclusive), if that comes first.
 */
static bool in_step(const struct cut *ct, uint64_t next, uint64_t t)
{
	return next <= ct->end ? t < next : t <= ct->end;
}

/*
 * Measure one step from the records launched inside it, and its thread's
 * CPU side. next: the start of the next step of its thread (UINT64_MAX:
 * none). What comes after the next step started is the next step's: an
 * engine that launches a step's work while the previous step's copy back is
 * still in flight overlaps them, and each counted that work; steps that
 * all start at one instant, or end in the far future (a forged recording),
 * each held every record, and the cut took time quadratic in the steps.
 */
static size_t measure(struct diag_seg *sg, const struct cut *ct, uint64_t next, struct srec *r,
		      size_t n, struct diag_step *s, uint64_t *ivbuf, uint64_t *l2s,
		      struct ktime *kt)
{
	size_t niv = 0, nl = 0, nid = 0, first = rec_lower(r, n, ct->start), i, seen;
	uint64_t busy = 0, cs = 0, ce = 0, lo = ct->start, hi = ct->end, last;
	uint64_t until = next < ct->end ? next : ct->end; /* where its CPU side ends */
	int64_t comm = 0;
	uint32_t stamp = ++sg->kstamp;

	if (!stamp) { /* wrapped: no slot may carry a stamp of an old step */
		memset(sg->ks, 0, sg->cks * sizeof(*sg->ks));
		stamp = sg->kstamp = 1;
	}
	s->kernels = s->graph_kernels = s->memcpys = 0;
	/* the pid's records are sorted by launch (cut_all): those launched in the step */
	for (i = first; i < n && in_step(ct, next, r[i].launch); i++) {
		const struct srec *x = &r[i];

		if (x->kind == CORR_KIND_KERNEL) {
			s->kernels++;
			s->graph_kernels += x->graph;
			if (x->comm)
				comm += (int64_t)(x->end - x->start);
			if (x->name >= 0) {
				struct kslot *k = &sg->ks[x->name];

				if (k->stamp != stamp) {
					*k = (struct kslot){stamp, (uint32_t)nid};
					kt[nid++] = (struct ktime){x->name, 0, 0};
				}
				kt[k->idx].ns += x->end - x->start;
				kt[k->idx].cnt++;
			}
		} else if (x->kind == CORR_KIND_MEMCPY) {
			s->memcpys++;
		}
		if (x->tid && !x->graph && x->start >= x->launch)
			l2s[nl++] = x->start - x->launch;
		if (x->end > lo && x->start < hi) {
			ivbuf[2 * niv] = x->start > lo ? x->start : lo;
			ivbuf[2 * niv + 1] = x->end < hi ? x->end : hi;
			niv++;
		}
	}
	s->comm_ns = comm;
	seen = i - first;
	corr_sort(ivbuf, niv, 2 * sizeof(uint64_t), cmp_iv);
	s->idle_gaps = 0;
	s->idle_max_ns = 0;
	last = lo; /* end of the previous busy run (or the step start) */
	for (size_t i = 0; i <= niv; i++) {
		bool have = i > 0;
		uint64_t a = i < niv ? ivbuf[2 * i] : hi, b = i < niv ? ivbuf[2 * i + 1] : hi;

		if (i < niv && have && a <= ce) {
			if (b > ce)
				ce = b;
			continue;
		}
		if (have) {
			busy += ce - cs;
			last = ce;
		}
		if (a > last && a - last >= GAP_MIN_NS) {
			s->idle_gaps++;
			if ((int64_t)(a - last) > s->idle_max_ns)
				s->idle_max_ns = (int64_t)(a - last);
		}
		cs = a;
		ce = b;
	}
	s->gpu_busy_ns = (int64_t)busy;
	s->idle_ns = (int64_t)(ct->end - ct->start) - (int64_t)busy;
	if (s->idle_ns < 0)
		s->idle_ns = 0;
	if (nl) {
		qsort(l2s, nl, sizeof(*l2s), cmp_u64);
		s->l2s_p50_ns = (int64_t)l2s[nl / 2];
		s->l2s_p90_ns = (int64_t)l2s[nl * 9 / 10];
		s->l2s_p99_ns = (int64_t)l2s[nl * 99 / 100];
	}
	/*
	 * top kernels: grouped by name as they come (sg->ks; sorting a step's
	 * kernels by name was a fifth of a cut at 133 k kernels/s), the groups
	 * in name order, so that equal totals rank as before
	 */
	corr_sort(kt, nid, sizeof(*kt), cmp_ktime);
	s->n_top = 0;
	for (size_t a = 0; a < nid; a++) {
		uint64_t tot = kt[a].ns, cnt = kt[a].cnt;
		uint32_t pos;

		pos = s->n_top;
		if (pos == DIAG_TOP_MAX) {
			if (tot <= s->top[DIAG_TOP_MAX - 1].total_ns)
				continue;
			pos = DIAG_TOP_MAX - 1;
		} else {
			s->n_top++;
		}
		while (pos > 0 && s->top[pos - 1].total_ns < tot) {
			s->top[pos] = s->top[pos - 1];
			pos--;
		}
		s->top[pos] = (struct diag_kernel){names_str(sg->names, kt[a].name), cnt, tot};
	}
	/*
	 * the launching thread's CPU side (live); network bytes of the whole
	 * process (an I/O or NCCL proxy thread moves them), each window of
	 * bytes to the step it began in
	 */
	if (sg->net_seen)
		s->net_bytes = 0;
	/*
	 * who took the CPU: the process whose preemptions cost the launcher the
	 * most run-queue wait in the step (the first PREEMPTORS seen are
	 * tallied), not the last one, which on a busy node is any passer-by
	 */
	struct {
		uint32_t pid;
		uint64_t ns;
	} by[PREEMPTORS] = {0};
	size_t nby = 0;

	/* the process's network windows that began in the step */
	for (i = cpu_lower(sg, s->pid, 0, 0, ct->start);
	     i < sg->nc && cpu_in(&sg->c[i].e, s->pid, 0, 0) && sg->c[i].e.ts_ns < until; i++) {
		s->net_bytes += (int64_t)sg->c[i].e.bytes;
		seen++;
	}
	/*
	 * the launching thread's off-CPU intervals (class 0), slow syscalls (1)
	 * and GPU code loads (2) that overlap the step: from the first that ends in or after it,
	 * until one starts after it (a class of one thread is disjoint
	 * intervals, so the rest start later still)
	 */
	uint64_t grp = (uint64_t)ct->tid + 1;

	/* none for a step the next one starts with: an interval across it is the next one's */
	bool nothing = next == ct->start && next <= ct->end;

	for (uint8_t cls = 0; cls < 3 && !nothing; cls++)
		for (i = cpu_lower(sg, s->pid, grp, cls, ct->start);
		     i < sg->nc && cpu_in(&sg->c[i].e, s->pid, grp, cls) &&
		     in_step(ct, next, sg->c[i].e.ts_ns);
		     i++) {
			const struct diag_cpu_event *e = &sg->c[i].e;
			uint64_t end = cpu_end(e);
			uint64_t a = e->ts_ns > ct->start ? e->ts_ns : ct->start;
			uint64_t b = end < until ? end : until;

			switch (e->kind) {
			case DIAG_CPU_OFFCPU:
				s->offcpu_ns =
				    (s->offcpu_ns < 0 ? 0 : s->offcpu_ns) + (int64_t)(b - a);
				break;
			case DIAG_CPU_RUNQ:
				s->runq_ns = (s->runq_ns < 0 ? 0 : s->runq_ns) + (int64_t)(b - a);
				if (e->other_pid) {
					size_t k = 0;

					while (k < nby && by[k].pid != e->other_pid)
						k++;
					if (k == nby && nby < PREEMPTORS)
						by[nby++].pid = e->other_pid;
					if (k < nby)
						by[k].ns += b - a;
				}
				break;
			case DIAG_CPU_SYSCALL:
				s->slow_syscalls =
				    (s->slow_syscalls < 0 ? 0 : s->slow_syscalls) + 1;
				s->slow_syscall_ns =
				    (s->slow_syscall_ns < 0 ? 0 : s->slow_syscall_ns) +
				    (int64_t)(b - a);
				break;
			case DIAG_CPU_CODE_LOAD:
				s->code_loads = (s->code_loads < 0 ? 0 : s->code_loads) + 1;
				s->code_load_ns =
				    (s->code_load_ns < 0 ? 0 : s->code_load_ns) + (int64_t)(b - a);
				break;
			default:
				break;
			}
		}
	size_t best = 0;

	for (size_t k = 1; k < nby; k++)
		if (by[k].ns > by[best].ns)
			best = k;
	if (nby)
		s->preempt_pid = by[best].pid;
	/* the launcher was traced live but never left the CPU: zeros, not unknown */
	if (sg->cpu_seen) {
		if (s->offcpu_ns < 0)
			s->offcpu_ns = 0;
		if (s->runq_ns < 0)
			s->runq_ns = 0;
	}
	return seen;
}

/*
 * Phase without metadata: CUDA-graph replay is how engines run decode
 * (fixed shapes); a process that uses graphs but ran a step eagerly was
 * prefilling (or mixed). Without graphs, a step whose kernels take much
 * longer on average than the process's typical step is a prefill.
 */
static void classify_phases(struct diag_step *st, size_t n)
{
	bool graphs = false;
	double *avg = malloc(sizeof(*avg) * (n + 1)), med = 0;
	size_t na = 0;

	for (size_t i = 0; i < n; i++) {
		if (st[i].kernels > 0 && st[i].graph_kernels * 10 >= st[i].kernels * 3)
			graphs = true;
		if (avg && st[i].kernels > 0)
			avg[na++] = (double)st[i].gpu_busy_ns / st[i].kernels;
	}
	if (avg && na) {
		for (size_t i = 1; i < na; i++)
			for (size_t j = i; j > 0 && avg[j - 1] > avg[j]; j--) {
				double t = avg[j];

				avg[j] = avg[j - 1];
				avg[j - 1] = t;
			}
		med = avg[na / 2];
	}
	free(avg);
	for (size_t i = 0; i < n; i++) {
		struct diag_step *s = &st[i];

		if (s->phase != DIAG_PHASE_UNKNOWN || s->kernels <= 0)
			continue;
		if (graphs)
			s->phase = s->graph_kernels * 10 >= s->kernels * 3 ? DIAG_PHASE_DECODE
				   : s->graph_kernels			   ? DIAG_PHASE_MIXED
									   : DIAG_PHASE_PREFILL;
		else if (med > 0 && (double)s->gpu_busy_ns / s->kernels > 2 * med)
			s->phase = DIAG_PHASE_PREFILL;
	}
}

static struct pstate *pstate_find(struct diag_seg *sg, uint32_t pid)
{
	return pidtab_find(&sg->ps, pid);
}

static struct pstate *pstate_get(struct diag_seg *sg, uint32_t pid)
{
	struct pstate *ps = pstate_find(sg, pid);

	return ps ? ps : pidtab_add(&sg->ps, pid);
}

/* steps ending at or before this were emitted (0: none yet, or unknown pid) */
static uint64_t done_until(struct diag_seg *sg, uint32_t pid)
{
	const struct pstate *ps = pstate_find(sg, pid);

	return ps ? ps->done_until : 0;
}

/* an item of pid stays held after this cut: its process's entry must stay */
static void held(struct diag_seg *sg, uint32_t pid)
{
	struct pstate *ps = pstate_find(sg, pid);

	if (ps)
		ps->held_gen = sg->gen;
}

int diag_seg__process_exit(struct diag_seg *sg, uint32_t pid)
{
	/* an entry also before its first cut: the next cut then knows it exited */
	struct pstate *ps = pstate_get(sg, pid);

	/* an open USDT step of the process never ends: free its slot */
	for (int i = 0; i < sg->nuo;)
		if (sg->uo[i].pid == pid)
			sg->uo[i] = sg->uo[--sg->nuo];
		else
			i++;
	if (!ps)
		return -ENOMEM;
	if (ps->exited)
		return 0;
	if (grow_array((void **)&sg->gone, &sg->cgone, sg->ngone, sizeof(*sg->gone), 1024))
		return -ENOMEM;
	ps->exited = true;
	sg->gone[sg->ngone++] = pid;
	return 0;
}

/* entries of exited processes that the last cut left nothing of */
static void prune_exited(struct diag_seg *sg)
{
	size_t k = 0;

	for (size_t i = 0; i < sg->ngone; i++) {
		struct pstate *ps = pstate_find(sg, sg->gone[i]);

		if (!ps)
			continue;
		if (ps->held_gen == sg->gen) {
			sg->gone[k++] = sg->gone[i];
			continue;
		}
		{
			struct gstate *g = pidtab_find(&sg->gs, sg->gone[i]);

			if (g)
				pidtab_del(&sg->gs, g);
		}
		pidtab_del(&sg->ps, ps);
		sg->cnt.procs_pruned++;
	}
	sg->ngone = k;
}

/*
 * Steps of different threads of one process may overlap (step markers on
 * several threads), and each counts what they share. Once the steps of a
 * cut have looked at OVERLAP_DEPTH times the records and network windows
 * held (never in a genuine recording: steps of one thread look at each
 * once; a forged one: thousands of threads' step markers over one span), a
 * step also ends where the next step of any thread starts (counted,
 * diag_status.steps_cut_short): the cut stays linear.
 */
#define OVERLAP_DEPTH 64

/* for each cut (in start order), the start of the next cut of its thread (UINT64_MAX: none) */
static int next_starts(const struct cut *c, size_t n, uint64_t *next)
{
	struct pidtab later; /* struct tidt by thread: the start of its cut after this one */
	int err = 0;

	pidtab_init(&later, sizeof(struct tidt));
	for (size_t i = n; i-- > 0;) {
		struct tidt *t = pidtab_find(&later, c[i].tid);

		next[i] = t ? t->t : UINT64_MAX;
		if (!t && !(t = pidtab_add(&later, c[i].tid))) {
			err = -ENOMEM;
			break;
		}
		t->t = c[i].start;
	}
	pidtab_free(&later);
	return err;
}

struct jl {
	uint32_t rel; /* correlation id from the process's reference */
	uint64_t ts;
};

static int cmp_jl(const void *a, const void *b)
{
	const struct jl *x = a, *y = b;

	return (x->rel > y->rel) - (x->rel < y->rel);
}

/* the first of j[0, nj) (sorted by rel) above rel, searched outward from hint */
static size_t jl_above(const struct jl *j, size_t nj, uint32_t rel, size_t hint)
{
	size_t lo, hi, b = 1;

	/*
	 * Records come in launch order, which is call order: the answer is at
	 * or next to the last one. Doubling steps away from it, then halving:
	 * a plain binary search per record was most of a cut at 133 k
	 * kernels/s (its branches are not predictable).
	 */
	if (hint < nj && j[hint].rel <= rel) {
		lo = hint + 1;
		while (lo + b - 1 < nj && j[lo + b - 1].rel <= rel) {
			lo += b;
			b *= 2;
		}
		hi = lo + b - 1 < nj ? lo + b - 1 : nj;
	} else {
		hi = hint < nj ? hint : nj;
		while (hi >= b && j[hi - b].rel > rel) {
			hi -= b;
			b *= 2;
		}
		lo = hi >= b ? hi - b + 1 : 0;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (j[mid].rel <= rel)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * A record whose launch was sampled out (nolaunch) has no launch time: its
 * GPU start lags the launch by up to a step where the CPU runs ahead of the
 * GPU, and its step would be the next one. A process numbers its calls in
 * order, so the launch came after the joined launch of the next lower
 * correlation id and before that of the next higher one, and not after the
 * GPU started it: the GPU start, or just before the higher launch where
 * that is earlier, and just after the lower one at the earliest. Done at
 * each cut, as joined records arrive. Ids wrap (32 bits): they are taken
 * from the process's first record minus 2^30, a window no process fills in
 * the hold time. True when a launch time changed (r is to be sorted again).
 */
static bool estimate_launches(struct diag_seg *sg, struct srec *r, size_t n)
{
	uint32_t ref = n ? r[0].corr - (1u << 30) : 0;
	size_t nj = 0, lo = 0;
	struct jl *j;
	bool moved = false, any = false;

	for (size_t i = 0; i < n; i++) {
		any |= r[i].nolaunch;
		if (!r[i].tid)
			continue;
		if (grow_array((void **)&sg->jl, &sg->cjl, nj, sizeof(*sg->jl), 1024))
			return false;
		sg->jl[nj++] = (struct jl){r[i].corr - ref, r[i].launch};
	}
	if (!any || !nj)
		return false;
	j = sg->jl;
	corr_sort(j, nj, sizeof(*j), cmp_jl);
	for (size_t i = 0; i < n; i++) {
		uint32_t rel = r[i].corr - ref;
		uint64_t est = r[i].start;

		if (!r[i].nolaunch)
			continue;
		lo = jl_above(j, nj, rel, lo);
		/* strictly between the two launches */
		if (lo < nj && j[lo].ts && j[lo].ts - 1 < est)
			est = j[lo].ts - 1;
		if (lo > 0 && j[lo - 1].rel < rel && j[lo - 1].ts + 1 > est)
			est = j[lo - 1].ts + 1;
		if (est != r[i].launch) {
			r[i].launch = est;
			moved = true;
		}
	}
	return moved;
}

/*
 * r[0, nold) and add[0, nadd) are each in cmp_rec order: merge add in,
 * into r[0, nold + nadd), from the end; ties to r's record, as a stable
 * sort of the whole would.
 */
static void merge_in(struct srec *r, size_t nold, const struct srec *add, size_t nadd)
{
	size_t i = nold, j = nadd, k = nold + nadd;

	while (j) {
		if (i && cmp_rec(&r[i - 1], &add[j - 1]) > 0)
			r[--k] = r[--i];
		else
			r[--k] = add[--j];
	}
}

/*
 * Into cmp_rec order, where r[0, from) is in order and the rest nearly so:
 * records arrive about in launch order, but a joined record's launch is
 * its GPU start less the lag behind the CPU, and estimate_launches() moves
 * the sampled-out ones back. The records not below the last one kept stay
 * where they are, in order; the others are taken out, sorted, and merged
 * back. Two passes and a sort of the few: sorting all that is held at each
 * cut was most of the cut at 133 k kernels/s (bench/cut.sh).
 */
static void sort_near(struct diag_seg *sg, struct srec *r, size_t n, size_t from)
{
	size_t k = from, m = 0, last = from;

	for (size_t i = from; i < n; i++) { /* how many are out of order */
		if (last && cmp_rec(&r[last - 1], &r[i]) > 0)
			m++;
		else
			last = i + 1;
	}
	if (!m)
		return;
	if (grow_array((void **)&sg->rtmp, &sg->crtmp, m - 1, sizeof(*sg->rtmp), 1024)) {
		corr_sort(r, n, sizeof(*r), cmp_rec);
		return;
	}
	m = 0;
	for (size_t i = from; i < n; i++) {
		if (k && cmp_rec(&r[k - 1], &r[i]) > 0)
			sg->rtmp[m++] = r[i];
		else
			r[k++] = r[i];
	}
	corr_sort(sg->rtmp, m, sizeof(*sg->rtmp), cmp_rec);
	merge_in(r, k, sg->rtmp, m);
}

/* a group slot for every name id interned so far (measure()) */
static int ks_room(struct diag_seg *sg)
{
	size_t names = names_count(sg->names), had = sg->cks;

	if (!names)
		return 0;
	if (grow_array((void **)&sg->ks, &sg->cks, names - 1, sizeof(*sg->ks), 1024))
		return -ENOMEM;
	if (sg->cks > had) /* new slots carry no step's stamp */
		memset(sg->ks + had, 0, (sg->cks - had) * sizeof(*sg->ks));
	return 0;
}

/* cut the steps of one pid ending at or before `upto`; returns the last end cut */
static int cut_pid(struct diag_seg *sg, uint32_t pid, struct srec *r, size_t n, struct smark *m,
		   size_t nm, uint64_t upto)
{
	struct cut *cuts = NULL, *cyc = NULL;
	struct diag_step *st = NULL;
	uint64_t *iv = NULL, *l2s = NULL;
	struct ktime *kt = NULL;
	size_t nc = 0, ncyc;
	uint32_t launcher = 0;
	struct pstate *ps = pstate_get(sg, pid);
	uint64_t *next = NULL, nx, keep_from = UINT64_MAX;
	size_t seen = 0; /* records and network windows the steps measured so far looked at */
	int err = 0;

	if (!ps)
		return -ENOMEM;
	cuts = malloc(sizeof(*cuts) * (n + nm + 1)); /* written before read: no need to zero */
	cyc = malloc(sizeof(*cyc) * (n + 1));
	iv = malloc(sizeof(*iv) * 2 * (n + 1));
	l2s = malloc(sizeof(*l2s) * (n + 1));
	kt = malloc(sizeof(*kt) * (n + 1));
	if (!cuts || !cyc || !iv || !l2s || !kt || ks_room(sg)) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (estimate_launches(sg, r, n))
		sort_near(sg, r, n, 0);
	err = marker_cuts(m, nm, cuts, &nc);
	if (err)
		goto cleanup;
	if (!nc) {
		launcher = ps->launcher;
		ncyc = auto_cuts(sg, ps, r, n, cyc, &launcher);
		if (launcher)
			ps->launcher = launcher;
		if (!sg->o.no_anchor)
			nc = anchor_cuts(m, nm, launcher, cyc, ncyc, cuts);
		if (!nc) {
			memcpy(cuts, cyc, ncyc * sizeof(*cuts));
			nc = ncyc;
		}
	}
	st = calloc(nc + 1, sizeof(*st));
	next = malloc(sizeof(*next) * (nc + 1));
	if (!st || !next) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = next_starts(cuts, nc, next);
	if (err)
		goto cleanup;
	size_t ns = 0;

	for (size_t i = 0; i < nc; i++) {
		struct diag_step *s = &st[ns];

		if (sg->o.stop && *sg->o.stop) {
			err = -EINTR; /* the steps measured so far still go out */
			break;
		}
		if (cuts[i].end > upto) {
			/* cuts are in start order: the first left is the earliest */
			if (cuts[i].start < keep_from)
				keep_from = cuts[i].start;
			continue;
		}
		if (cuts[i].end <= ps->done_until)
			continue;
		diag_step_init(s);
		s->pid = pid;
		s->tid = cuts[i].tid;
		s->start_ns = cuts[i].start;
		s->dur_ns = cuts[i].end - cuts[i].start;
		s->source = cuts[i].source;
		if (cuts[i].m) {
			s->marker = names_str(sg->names, cuts[i].m->name);
			s->tokens = cuts[i].m->tokens;
			s->batch_size = cuts[i].m->batch;
			s->kv_tokens = cuts[i].m->kv;
			s->rank = cuts[i].m->rank;
			s->phase = cuts[i].m->phase;
		}
		nx = next[i];
		if (seen > OVERLAP_DEPTH * (n + sg->nc + 1) && i + 1 < nc &&
		    cuts[i + 1].start < nx) {
			nx = cuts[i + 1].start;
			sg->cnt.cut_short++;
		}
		seen += measure(sg, &cuts[i], nx, r, n, s, iv, l2s, kt);
		ns++;
	}
	ps->keep_from = keep_from == UINT64_MAX ? 0 : keep_from;
	classify_phases(st, ns);
	for (size_t i = 0; i < ns; i++) {
		st[i].seq = ps->seq++;
		sg->cnt.steps++;
		if (!strcmp(st[i].source, "marker"))
			sg->cnt.steps_marker++;
		else if (!strcmp(st[i].source, "usdt"))
			sg->cnt.steps_usdt++;
		else if (!strcmp(st[i].source, "anchor"))
			sg->cnt.steps_anchor++;
		else
			sg->cnt.steps_auto++;
		if (st[i].start_ns + st[i].dur_ns > ps->done_until)
			ps->done_until = st[i].start_ns + st[i].dur_ns;
		if (grow_array((void **)&sg->out, &sg->cout, sg->nout, sizeof(*sg->out), 1024)) {
			err = -ENOMEM;
			goto cleanup;
		}
		sg->out[sg->nout++] = st[i];
	}
cleanup:
	free(next);
	free(st);
	free(cuts);
	free(cyc);
	free(iv);
	free(l2s);
	free(kt);
	return err;
}

static int cmp_step_start(const void *a, const void *b)
{
	const struct diag_step *x = a, *y = b;

	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/*
 * Steps leave in start order across processes, not process by process: the
 * ranks of one model are processes, and comparing them (diag_det's peers)
 * needs each round's steps together.
 */
static void send_steps(struct diag_seg *sg)
{
	if (sg->nout > 1)
		qsort(sg->out, sg->nout, sizeof(*sg->out), cmp_step_start);
	for (size_t i = 0; i < sg->nout && sg->o.step; i++)
		sg->o.step(sg->o.step_ctx, &sg->out[i]);
	sg->nout = 0;
}

/* the end of pid's records from r[i] on (sorted by pid): doubling, then halving */
static size_t pid_end(const struct srec *r, size_t n, size_t i, uint32_t pid)
{
	size_t lo = i, hi, b = 1;

	while (lo + b - 1 < n && r[lo + b - 1].pid == pid) {
		lo += b;
		b *= 2;
	}
	hi = lo + b - 1 < n ? lo + b - 1 : n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].pid == pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* into cmp_rec order: what the last cut kept is in order, what came since nearly */
static void sort_recs(struct diag_seg *sg)
{
	size_t old = sg->nr_sorted <= sg->nr ? sg->nr_sorted : 0;

	/* no pointer arithmetic on an array not allocated yet */
	if (sg->nr > 1 && old < sg->nr)
		sort_near(sg, sg->r, sg->nr, old);
}

static int cut_all(struct diag_seg *sg, uint64_t upto)
{
	size_t i = 0, j = 0, keep_r = 0, keep_m = 0, keep_c = 0;
	uint64_t du_pid = 0;	      /* done_until() of the record's pid */
	uint64_t kf_pid = 0;	      /* and its keep_from (UINT64_MAX: none) */
	bool held_pid = false;	      /* held() was called for that pid */
	uint32_t ln_pid = 0;	      /* its launching thread */
	struct gstate *gs_pid = NULL; /* its launch gaps, when cut by them */
	int err = 0;

	sort_recs(sg);
	sg->nr_sorted = sg->nr; /* the cut below keeps what it keeps in order */
	if (sg->nm > 1)
		corr_sort(sg->m, sg->nm, sizeof(*sg->m), cmp_mark);
	/* each step then finds its CPU events by binary search (measure()) */
	if (sg->nc > 1)
		corr_sort(sg->c, sg->nc, sizeof(*sg->c), cmp_cpu);
	cpu_disjoint(sg);
	while (i < sg->nr || j < sg->nm) {
		uint32_t pid;
		size_t ie = i, je = j;

		if (i < sg->nr && (j >= sg->nm || sg->r[i].pid <= sg->m[j].pid))
			pid = sg->r[i].pid;
		else
			pid = sg->m[j].pid;
		ie = pid_end(sg->r, sg->nr, i, pid);
		while (je < sg->nm && sg->m[je].pid == pid)
			je++;
		if (sg->o.stop && *sg->o.stop) {
			send_steps(sg);
			return -EINTR;
		}
		/* no pointer arithmetic on an array not allocated yet (NULL + 0) */
		err = cut_pid(sg, pid, sg->r ? sg->r + i : NULL, ie - i, sg->m ? sg->m + j : NULL,
			      je - j, upto);
		if (err) {
			send_steps(sg);
			return err;
		}
		i = ie;
		j = je;
	}
	send_steps(sg);
	/* keep what a later cut may still need */
	sg->gen++;
	for (i = 0; i < sg->nr; i++) {
		uint32_t pid = sg->r[i].pid;

		if (!i || sg->r[i - 1].pid != pid) { /* sorted by pid: look it up once */
			const struct pstate *ps = pstate_find(sg, pid);

			du_pid = ps ? ps->done_until : 0;
			kf_pid = ps && ps->keep_from ? ps->keep_from : UINT64_MAX;
			ln_pid = ps ? ps->launcher : 0;
			gs_pid = NULL;
			if (upto != UINT64_MAX && ps && ps->by_gaps) {
				gs_pid = pidtab_find(&sg->gs, pid);
				if (!gs_pid) /* NULL: no memory; its next cut knows no gaps before
					      */
					gs_pid = pidtab_add(&sg->gs, pid);
			}
			held_pid = false;
		}
		/*
		 * a step's records were launched after the previous step's last
		 * launch, not after its end: an engine that launches the next
		 * step while this one's copy back runs overlaps them. Before,
		 * the step after the last one a cut sent lost what it launched
		 * before that one ended (live only, once per interval).
		 */
		if (sg->r[i].launch > du_pid || sg->r[i].launch >= kf_pid) {
			if (!held_pid)
				held(sg, pid);
			held_pid = true;
			sg->r[keep_r++] = sg->r[i];
			continue;
		}
		if (upto == UINT64_MAX && !du_pid)
			sg->cnt.outside++;
		/* left behind, in launch order: its gap is one of those before the next cut's */
		if (gs_pid && of_launcher(&sg->r[i], ln_pid) && sg->r[i].launch >= gs_pid->last) {
			if (gs_pid->last)
				gring_push(&gs_pid->ring, sg->r[i].launch - gs_pid->last);
			gs_pid->last = sg->r[i].launch;
		}
	}
	for (i = 0; i < sg->nm; i++) {
		if (sg->m[i].end > done_until(sg, sg->m[i].pid)) {
			held(sg, sg->m[i].pid);
			sg->m[keep_m++] = sg->m[i];
		}
	}
	/*
	 * A CPU event waits for the step that covers it while its process
	 * holds launches, markers or an open USDT step. Else no step will: the
	 * records a step around it would be cut from came within hold_ns, so
	 * it goes once it ended before the cut. Before, those of a process
	 * that never had a step (a tool, a test, a churn of short CUDA
	 * processes, a launch storm without GPU records) stayed until the
	 * capacity refused every process's records (issue 18: the agent's heap
	 * grew 2 MiB per 1,000 short-lived processes).
	 */
	for (int u = 0; u < sg->nuo; u++) {
		struct pstate *ps = pstate_get(sg, sg->uo[u].pid);

		if (ps)
			ps->held_gen = sg->gen;
	}
	for (i = 0; i < sg->nc; i++) {
		const struct diag_cpu_event *e = &sg->c[i].e;
		const struct pstate *ps;

		if (e->ts_ns + e->dur_ns <= done_until(sg, e->pid))
			continue;
		ps = pstate_find(sg, e->pid);
		if (upto != UINT64_MAX && e->ts_ns + e->dur_ns <= upto &&
		    !(ps && ps->held_gen == sg->gen)) {
			sg->cnt.cpu_outside++;
			continue;
		}
		sg->c[keep_c++] = sg->c[i];
	}
	for (i = 0; i < keep_c; i++)
		held(sg, sg->c[i].e.pid);
	if (upto == UINT64_MAX) {
		/* the last cut: what no step took is dropped, and counted */
		sg->cnt.outside += keep_r;
		sg->cnt.cpu_outside += keep_c;
		keep_r = keep_m = keep_c = 0;
		sg->gen++; /* nothing is held any more */
	}
	sg->nr = keep_r;
	sg->nr_sorted = keep_r;
	sg->nm = keep_m;
	sg->nc = keep_c;
	prune_exited(sg);
	return 0;
}

int diag_seg__advance(struct diag_seg *sg, uint64_t now_ns)
{
	if (now_ns < sg->o.hold_ns)
		return 0;
	return cut_all(sg, now_ns - sg->o.hold_ns);
}

int diag_seg__flush(struct diag_seg *sg)
{
	int err = cut_all(sg, UINT64_MAX);

	if (!err && sg->cnt.bad_metadata)
		slog(sg, CORR_LOG_WARN, "diag: %llu step markers with malformed key=value metadata",
		     (unsigned long long)sg->cnt.bad_metadata);
	return err;
}
