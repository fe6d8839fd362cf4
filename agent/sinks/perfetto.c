// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * perfetto.c - the agent's records as a Chrome trace JSON document, the
 * format ui.perfetto.dev and chrome://tracing open (the "Trace Event
 * Format"; Perfetto's importer: src/trace_processor/importers/json/).
 *
 *   CPU side   pid = the process, tid = the thread (real ids); one track per
 *              thread: launches (cuda_launch, 1 us: the uprobe sees the API
 *              entry only; args.python: the Python frames that made it,
 *              from python_stack, or from a GPU record's launch_python
 *              when the slice comes from that), synchronisations, off-CPU
 *              intervals, run-queue waits, slow syscalls (complete events
 *              "X"), markers and anomalies (instant events "i", or "X" when
 *              they carry dur_ns).
 *   GPU side   one process per device (pid GPU_PID_BASE + device, named
 *              "GPU N"), one thread per (context, stream) (tid GPU_TID_BASE +
 *              n, named "stream S"): kernels, copies, memsets.
 *   Flows      for every GPU record joined to its launch: "s" inside the
 *              launch slice, "f" (binding point "e": the enclosing slice)
 *              inside the GPU slice, same id; a graph launch starts one flow
 *              per kernel it replayed. A launch that only a kernel record
 *              knows (sentinel window, replay) gets its slice from there.
 *   Names      "M" metadata: process_name, thread_name, process_sort_index
 *              (CPU processes first, then GPUs).
 *
 * Nesting: Perfetto drops a slice that overlaps another on its track
 * without nesting in it, and a flow bound to it with it. So slices are
 * kept until perfetto_write(), sorted per track, and laid out in lanes:
 * a slice goes to the first lane where it starts after the lane's open
 * slices end or fits inside the innermost one; lane 0 is the thread itself,
 * further lanes are extra threads "<name> (overlap N)". Real data rarely
 * needs a second lane (a GPU stream runs one kernel at a time); a 1 us
 * launch slice that a syscall outlasts does.
 *
 * Synthetic ids stay above pid_max (at most 2^22), so they never collide
 * with a real pid or tid. Times are CLOCK_MONOTONIC like the records, in us
 * with ns precision ("displayTimeUnit": "ns").
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "perfetto.h"
#include "util.h"

#define GPU_PID_BASE 0x40000000u
#define GPU_TID_BASE 0x50000000u
#define LANE_TID_BASE 0x60000000u
#define LAUNCH_DUR_NS 1000

struct pf_proc {
	uint32_t pid;
	char name[192];
	bool gpu;
};

/* a thread (CPU) or a stream (GPU): what its slices are drawn on */
struct pf_track {
	uint32_t pid, tid;
	uint32_t device, context, stream; /* GPU streams */
	bool gpu;
	char name[64];
	uint32_t n_lanes;
	uint32_t *lane_tid; /* lane_tid[0] == tid */
	uint64_t **stack;   /* per lane: ends of the open slices */
	uint32_t *depth;
	size_t *cap;
};

struct pf_slice {
	uint32_t track;
	uint32_t lane;
	uint64_t ts, dur;
	const char *cat; /* static string */
	char *name;
	char *args; /* JSON object text or NULL */
	bool instant;
	uint64_t flow_in; /* 0: none */
	uint64_t *flows_out;
	uint32_t n_out;
	size_t cap_out;
};

struct launch_key {
	uint32_t pid, tid;
	uint64_t ts; /* 0: empty slot */
	uint32_t slice;
};

struct perfetto {
	FILE *ev; /* process and global instants, written as they come */
	char *ev_buf;
	size_t ev_len;
	size_t n_ev;
	struct pf_proc *procs;
	size_t n_procs, cap_procs;
	struct pf_track *tracks;
	size_t n_tracks, cap_tracks;
	uint32_t last_track; /* lookup cache */
	struct pf_slice *slices;
	size_t n_slices, cap_slices;
	struct launch_key *launches;
	size_t n_launches, cap_launches;
	uint64_t next_flow;
	uint32_t next_lane_tid, next_gpu_tid;
	struct perfetto_stats st;
	int err;
};

struct perfetto *perfetto_new(void)
{
	struct perfetto *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->ev = open_memstream(&p->ev_buf, &p->ev_len);
	if (!p->ev) {
		free(p);
		return NULL;
	}
	p->next_flow = 1;
	p->next_lane_tid = LANE_TID_BASE;
	p->next_gpu_tid = GPU_TID_BASE;
	return p;
}

void perfetto_free(struct perfetto *p)
{
	if (!p)
		return;
	if (p->ev)
		fclose(p->ev);
	free(p->ev_buf);
	for (size_t i = 0; i < p->n_tracks; i++) {
		struct pf_track *t = &p->tracks[i];

		for (uint32_t l = 0; l < t->n_lanes; l++)
			free(t->stack[l]);
		free(t->stack);
		free(t->lane_tid);
		free(t->depth);
		free(t->cap);
	}
	for (size_t i = 0; i < p->n_slices; i++) {
		free(p->slices[i].name);
		free(p->slices[i].args);
		free(p->slices[i].flows_out);
	}
	free(p->tracks);
	free(p->slices);
	free(p->procs);
	free(p->launches);
	free(p);
}

void perfetto_get_stats(const struct perfetto *p, struct perfetto_stats *out)
{
	*out = p->st;
}

/* JSON string body with escapes (no quotes) */
static void put_esc(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
}

static void put_us(FILE *f, uint64_t ns)
{
	fprintf(f, "%" PRIu64 ".%03" PRIu64, ns / 1000, ns % 1000);
}

static void set_proc(struct perfetto *p, uint32_t pid, const char *name, bool gpu)
{
	for (size_t i = 0; i < p->n_procs; i++)
		if (p->procs[i].pid == pid)
			return;
	if (grow_array((void **)&p->procs, &p->cap_procs, p->n_procs, sizeof(*p->procs), 16)) {
		p->err = -ENOMEM;
		return;
	}
	p->procs[p->n_procs] = (struct pf_proc){.pid = pid, .gpu = gpu};
	snprintf(p->procs[p->n_procs].name, sizeof(p->procs[0].name), "%s", name);
	p->n_procs++;
}

static int track_new(struct perfetto *p, const struct pf_track *proto)
{
	if (grow_array((void **)&p->tracks, &p->cap_tracks, p->n_tracks, sizeof(*p->tracks), 16)) {
		p->err = -ENOMEM;
		return -1;
	}
	p->tracks[p->n_tracks] = *proto;
	p->last_track = (uint32_t)p->n_tracks;
	return (int)p->n_tracks++;
}

/* the track of a CPU thread; names it from the first record with a comm */
static int cpu_track(struct perfetto *p, const char *inst, const char *comm, uint32_t pid,
		     uint32_t tid)
{
	struct pf_track t = {.pid = pid, .tid = tid};
	char name[192];
	struct pf_track *c = p->n_tracks ? &p->tracks[p->last_track] : NULL;
	int idx = -1;

	if (c && !c->gpu && c->pid == pid && c->tid == tid) {
		idx = (int)p->last_track;
	} else {
		for (size_t i = 0; i < p->n_tracks; i++)
			if (!p->tracks[i].gpu && p->tracks[i].pid == pid &&
			    p->tracks[i].tid == tid) {
				idx = (int)i;
				p->last_track = (uint32_t)i;
				break;
			}
	}
	if (idx < 0) {
		snprintf(name, sizeof(name), "%s (pid %u)", inst ? inst : "process", pid);
		set_proc(p, pid, name, false);
		idx = track_new(p, &t);
		if (idx < 0)
			return -1;
	}
	if (comm && *comm && !p->tracks[idx].name[0])
		snprintf(p->tracks[idx].name, sizeof(p->tracks[idx].name), "%s", comm);
	return idx;
}

static int gpu_track(struct perfetto *p, uint32_t device, uint32_t context, uint32_t stream)
{
	struct pf_track t = {.gpu = true, .device = device, .context = context, .stream = stream};
	char name[64];

	for (size_t i = 0; i < p->n_tracks; i++) {
		struct pf_track *c = &p->tracks[i];

		if (c->gpu && c->device == device && c->context == context && c->stream == stream)
			return (int)i;
	}
	snprintf(name, sizeof(name), "GPU %u", device);
	set_proc(p, GPU_PID_BASE + device, name, true);
	t.pid = GPU_PID_BASE + device;
	t.tid = p->next_gpu_tid++;
	snprintf(t.name, sizeof(t.name), "stream %u%s", stream, context > 1 ? " ctx " : "");
	if (context > 1)
		snprintf(t.name + strlen(t.name), sizeof(t.name) - strlen(t.name), "%u", context);
	return track_new(p, &t);
}

static int slice_new(struct perfetto *p, int track, uint64_t ts, uint64_t dur, const char *name,
		     const char *cat, const json_t *args)
{
	struct pf_slice *s;

	if (track < 0)
		return -1;
	if (grow_array((void **)&p->slices, &p->cap_slices, p->n_slices, sizeof(*p->slices), 16)) {
		p->err = -ENOMEM;
		return -1;
	}
	s = &p->slices[p->n_slices];
	memset(s, 0, sizeof(*s));
	s->track = (uint32_t)track;
	s->ts = ts;
	s->dur = dur;
	s->cat = cat;
	s->name = strdup(name);
	s->args = args && json_object_size(args) ? json_dumps(args, JSON_COMPACT) : NULL;
	if (!s->name) {
		p->err = -ENOMEM;
		return -1;
	}
	p->st.events++;
	return (int)p->n_slices++;
}

static int add_flow_out(struct perfetto *p, int slice, uint64_t id)
{
	struct pf_slice *s = &p->slices[slice];

	if (grow_array((void **)&s->flows_out, &s->cap_out, s->n_out, sizeof(*s->flows_out), 2))
		return p->err = -ENOMEM;
	s->flows_out[s->n_out++] = id;
	return 0;
}

static size_t launch_hash(uint32_t pid, uint32_t tid, uint64_t ts, size_t cap)
{
	uint64_t h = ts * 0x9e3779b97f4a7c15ull ^ ((uint64_t)pid << 32 | tid);

	h ^= h >> 29;
	return (size_t)(h * 0xbf58476d1ce4e5b9ull >> 7) & (cap - 1);
}

/* the slice of a launch seen before, else -1 (and *slot is where it goes) */
static int launch_find(struct perfetto *p, uint32_t pid, uint32_t tid, uint64_t ts, size_t *slot)
{
	size_t i;

	if (p->n_launches * 2 >= p->cap_launches) {
		size_t nc = p->cap_launches ? p->cap_launches * 2 : 1024;
		struct launch_key *nt = calloc(nc, sizeof(*nt));

		if (!nt) {
			p->err = -ENOMEM;
			return -1;
		}
		for (size_t j = 0; j < p->cap_launches; j++) {
			struct launch_key *o = &p->launches[j];

			if (!o->ts)
				continue;
			for (i = launch_hash(o->pid, o->tid, o->ts, nc); nt[i].ts;
			     i = (i + 1) & (nc - 1))
				;
			nt[i] = *o;
		}
		free(p->launches);
		p->launches = nt;
		p->cap_launches = nc;
	}
	for (i = launch_hash(pid, tid, ts, p->cap_launches); p->launches[i].ts;
	     i = (i + 1) & (p->cap_launches - 1))
		if (p->launches[i].ts == ts && p->launches[i].pid == pid &&
		    p->launches[i].tid == tid)
			return (int)p->launches[i].slice;
	*slot = i;
	return -1;
}

static uint64_t u64_of(const json_t *rec, const char *key, bool *ok)
{
	const json_t *v = json_object_get(rec, key);

	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		if (ok)
			*ok = false;
		return 0;
	}
	return (uint64_t)json_integer_value(v);
}

static const char *str_of(const json_t *rec, const char *key)
{
	return json_string_value(json_object_get(rec, key));
}

/*
 * A launch's Python frames (cuda_launch.python_stack, or a GPU record's
 * launch_python: key) as one line for its slice's args, innermost first:
 * "Attention.forward (model.py:43) <- Model.forward (model.py:51)"; NULL
 * without them
 */
static json_t *python_line(const json_t *rec, const char *key)
{
	const json_t *st = json_object_get(rec, key), *f;
	char buf[2048];
	size_t o = 0, i;

	if (!json_is_array(st) || !json_array_size(st))
		return NULL;
	json_array_foreach(st, i, f)
	{
		json_int_t line = json_integer_value(json_object_get(f, "line"));
		int n = 0;

		if (line <= 0) /* a recording without call lines (Kineto): where it starts */
			line = json_integer_value(json_object_get(f, "first_line"));
		if (i)
			n = snprintf(buf + o, sizeof(buf) - o, " <- ");
		if (n >= 0 && (size_t)n < sizeof(buf) - o)
			n += py_frame_text(buf + o + n, sizeof(buf) - o - (size_t)n,
					   str_of(f, "function"), str_of(f, "file"), line);
		if (n < 0 || (size_t)n >= sizeof(buf) - o)
			break; /* what fits: the innermost frames */
		o += (size_t)n;
	}
	return o ? json_stringn(buf, o) : NULL;
}

/* the launch's slice on its thread, made on first sight */
static int launch_slice(struct perfetto *p, const json_t *rec, uint32_t pid, uint32_t tid,
			uint64_t ts, const char *api, const json_t *args)
{
	size_t slot = 0;
	int idx;

	if (!ts)
		ts = 1; /* 0 marks empty slots */
	idx = launch_find(p, pid, tid, ts, &slot);
	if (idx >= 0 || p->err)
		return idx;
	idx = slice_new(p, cpu_track(p, str_of(rec, "instance"), str_of(rec, "comm"), pid, tid), ts,
			LAUNCH_DUR_NS, api ? api : "launch", "launch", args);
	if (idx < 0)
		return -1;
	p->launches[slot] = (struct launch_key){pid, tid, ts, (uint32_t)idx};
	p->n_launches++;
	return idx;
}

static int add_gpu(struct perfetto *p, const json_t *rec, const char *type)
{
	bool ok = true;
	uint64_t start = u64_of(rec, "start_ns", &ok), end = u64_of(rec, "end_ns", &ok);
	uint32_t device = (uint32_t)u64_of(rec, "device", &ok);
	uint32_t stream = (uint32_t)u64_of(rec, "stream", &ok);
	uint32_t context = (uint32_t)u64_of(rec, "context", NULL);
	uint32_t pid, tid;
	uint64_t lts, dur;
	const char *name = str_of(rec, "demangled");
	int gs, ls;
	char buf[96];
	json_t *args;

	if (!ok)
		return -EINVAL;
	if (!name || !*name)
		name = str_of(rec, "name");
	if (strcmp(type, "kernel") || !name || !*name) {
		if (!strcmp(type, "memcpy"))
			snprintf(buf, sizeof(buf), "memcpy kind %" PRIu64 " (%" PRIu64 " B)",
				 u64_of(rec, "copy_kind", NULL), u64_of(rec, "bytes", NULL));
		else if (!strcmp(type, "memset"))
			snprintf(buf, sizeof(buf), "memset (%" PRIu64 " B)",
				 u64_of(rec, "bytes", NULL));
		else
			snprintf(buf, sizeof(buf), "kernel");
		name = buf;
	}
	dur = end > start ? end - start : 0;
	if (dur < 2)
		dur = 2; /* room for the flow's binding point */
	args = json_pack("{s:O*,s:O*,s:O*,s:O*,s:O*,s:O*,s:O*}", "correlation_id",
			 json_object_get(rec, "correlation_id"), "graph_id",
			 json_object_get(rec, "graph_id"), "grid", json_object_get(rec, "grid"),
			 "block", json_object_get(rec, "block"), "bytes",
			 json_object_get(rec, "bytes"), "instance",
			 json_object_get(rec, "instance"), "pid", json_object_get(rec, "pid"));
	/* the category must outlive the record: a static string */
	gs = slice_new(p, gpu_track(p, device, context, stream), start, dur, name,
		       !strcmp(type, "kernel")	 ? "kernel"
		       : !strcmp(type, "memcpy") ? "memcpy"
						 : "memset",
		       args);
	json_decref(args);
	if (gs < 0)
		return p->err;

	ok = true;
	pid = (uint32_t)u64_of(rec, "pid", &ok);
	tid = (uint32_t)u64_of(rec, "tid", &ok);
	lts = u64_of(rec, "launch_ts_ns", &ok);
	if (!ok || !json_is_true(json_object_get(rec, "matched")) || !pid || !tid)
		return 0;
	args = json_pack("{s:O*,s:o*}", "correlation_id", json_object_get(rec, "correlation_id"),
			 "python", python_line(rec, "launch_python"));
	ls = launch_slice(p, rec, pid, tid, lts, str_of(rec, "launch_api"), args);
	json_decref(args);
	if (ls < 0)
		return p->err;
	if (add_flow_out(p, ls, p->next_flow))
		return p->err;
	p->slices[gs].flow_in = p->next_flow++;
	p->st.flows++;
	return 0;
}

/* records about an interval of a thread: type, category */
static const struct {
	const char *type, *cat;
} cpu_slices[] = {
    {"cuda_sync", "sync"}, {"cuda_code_load", "code_load"}, {"offcpu", "offcpu"},
    {"runq", "runq"},	   {"syscall", "syscall"},
};

/* per-interval summaries and bookkeeping: nothing to draw */
static const char *const ignored_types[] = {
    "thread",  "net",		"stats",       "gpu_summary",
    "process", "replay_status", "shim_status", "diag_status",
};

/* an instant without a thread: on its process, or global */
static void loose_instant(struct perfetto *p, uint32_t pid, uint64_t ts, const char *name,
			  const json_t *rec)
{
	char *s = json_dumps(rec, JSON_COMPACT);

	if (p->n_ev)
		fputs(",\n", p->ev);
	fprintf(p->ev, "{\"ph\":\"i\",\"s\":\"%c\",\"pid\":%u,\"tid\":%u,\"ts\":", pid ? 'p' : 'g',
		pid, pid);
	put_us(p->ev, ts);
	fputs(",\"name\":\"", p->ev);
	put_esc(p->ev, name);
	fprintf(p->ev, "\",\"cat\":\"marker\",\"args\":%s}", s ? s : "{}");
	free(s);
	p->n_ev++;
	p->st.events++;
}

int perfetto_add(struct perfetto *p, const json_t *rec)
{
	const char *type = str_of(rec, "type"), *inst, *comm;
	bool ok = true, has_tid;
	uint64_t ts, dur;
	uint32_t pid, tid;
	char name[160];
	json_t *args;
	int tr, s;

	p->st.records++;
	if (!json_is_object(rec) || !type) {
		p->st.bad++;
		return -EINVAL;
	}
	for (size_t i = 0; i < sizeof(ignored_types) / sizeof(ignored_types[0]); i++)
		if (!strcmp(type, ignored_types[i])) {
			p->st.ignored++;
			return 0;
		}
	if (!strcmp(type, "kernel") || !strcmp(type, "memcpy") || !strcmp(type, "memset")) {
		if (add_gpu(p, rec, type) == -EINVAL) {
			p->st.bad++;
			return -EINVAL;
		}
		return p->err;
	}
	ts = u64_of(rec, "ts_ns", &ok);
	if (!ok) {
		p->st.bad++;
		return -EINVAL;
	}
	pid = (uint32_t)u64_of(rec, "pid", NULL);
	tid = (uint32_t)u64_of(rec, "tid", NULL);
	has_tid = json_is_integer(json_object_get(rec, "tid")) && tid;
	inst = str_of(rec, "instance");
	comm = str_of(rec, "comm");

	if (!strcmp(type, "cuda_launch") && pid && has_tid) {
		args = json_pack(
		    "{s:O*,s:O*,s:O*,s:O*,s:O*,s:o*}", "stream", json_object_get(rec, "stream"),
		    "func", json_object_get(rec, "func"), "grid", json_object_get(rec, "grid"),
		    "block", json_object_get(rec, "block"), "graph_exec",
		    json_object_get(rec, "graph_exec"), "python", python_line(rec, "python_stack"));
		launch_slice(p, rec, pid, tid, ts, str_of(rec, "api"), args);
		json_decref(args);
		return p->err;
	}
	for (size_t i = 0; i < sizeof(cpu_slices) / sizeof(cpu_slices[0]); i++) {
		if (strcmp(type, cpu_slices[i].type) || !pid || !has_tid)
			continue;
		dur = u64_of(rec, "dur_ns", NULL);
		if (!strcmp(type, "offcpu"))
			snprintf(name, sizeof(name), "off-CPU (%s)",
				 str_of(rec, "cause") ? str_of(rec, "cause") : "?");
		else if (!strcmp(type, "syscall"))
			snprintf(name, sizeof(name), "syscall %s",
				 str_of(rec, "name") ? str_of(rec, "name") : "?");
		else if (!strcmp(type, "runq"))
			snprintf(name, sizeof(name), "run-queue wait");
		else
			snprintf(name, sizeof(name), "%s",
				 str_of(rec, "api") ? str_of(rec, "api") : type);
		args = json_pack("{s:O*,s:O*,s:O*,s:O*,s:O*}", "by_comm",
				 json_object_get(rec, "by_comm"), "by_tid",
				 json_object_get(rec, "by_tid"), "by_pid",
				 json_object_get(rec, "by_pid"), "ret", json_object_get(rec, "ret"),
				 "stream", json_object_get(rec, "stream"));
		slice_new(p, cpu_track(p, inst, comm, pid, tid), ts, dur ? dur : 1, name,
			  cpu_slices[i].cat, args);
		json_decref(args);
		return p->err;
	}
	/* markers, anomalies, steps, deep-dive and recorder marks */
	if (!pid || !has_tid) {
		if (pid)
			cpu_track(p, inst, comm, pid, pid); /* names the process */
		loose_instant(p, pid, ts, type, rec);
		return p->err;
	}
	dur = u64_of(rec, "dur_ns", NULL);
	tr = cpu_track(p, inst, comm, pid, tid);
	if (!strcmp(type, "step"))
		snprintf(name, sizeof(name), "step %" PRIu64 " %s", u64_of(rec, "seq", NULL),
			 str_of(rec, "phase") ? str_of(rec, "phase") : "");
	else
		snprintf(name, sizeof(name), "%s", type);
	s = slice_new(p, tr, ts, dur, name, "marker", rec);
	if (s >= 0)
		p->slices[s].instant = !dur;
	return p->err;
}

int perfetto_add_json(struct perfetto *p, const char *json, size_t len)
{
	json_t *rec = json_loadb(json, len, 0, NULL);
	int err;

	if (!rec) {
		p->st.records++;
		p->st.bad++;
		return -EINVAL;
	}
	err = perfetto_add(p, rec);
	json_decref(rec);
	return err;
}

/* ------------------------------------------------------------ layout -- */

static struct perfetto *sort_ctx; /* qsort has no context argument */

static int cmp_slice(const void *x, const void *y)
{
	const struct pf_slice *a = &sort_ctx->slices[*(const uint32_t *)x];
	const struct pf_slice *b = &sort_ctx->slices[*(const uint32_t *)y];

	if (a->track != b->track)
		return a->track < b->track ? -1 : 1;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	/* at one start the longer one is the parent */
	return a->dur > b->dur ? -1 : a->dur < b->dur;
}

static int lane_push(struct pf_track *t, uint32_t l, uint64_t end)
{
	if (grow_array((void **)&t->stack[l], &t->cap[l], t->depth[l], sizeof(*t->stack[l]), 8))
		return -ENOMEM;
	t->stack[l][t->depth[l]++] = end;
	return 0;
}

static int lane_add(struct perfetto *p, struct pf_track *t)
{
	uint32_t n = t->n_lanes + 1;
	uint32_t *tids = realloc(t->lane_tid, n * sizeof(*tids));
	uint64_t **st;
	uint32_t *d;
	size_t *c;

	if (!tids)
		return -ENOMEM;
	t->lane_tid = tids;
	st = realloc(t->stack, n * sizeof(*st));
	if (!st)
		return -ENOMEM;
	t->stack = st;
	d = realloc(t->depth, n * sizeof(*d));
	if (!d)
		return -ENOMEM;
	t->depth = d;
	c = realloc(t->cap, n * sizeof(*c));
	if (!c)
		return -ENOMEM;
	t->cap = c;
	t->lane_tid[t->n_lanes] = t->n_lanes ? p->next_lane_tid++ : t->tid;
	t->stack[t->n_lanes] = NULL;
	t->depth[t->n_lanes] = 0;
	t->cap[t->n_lanes] = 0;
	t->n_lanes = n;
	return 0;
}

/* the first lane where [ts, ts+dur] nests or follows; a new one if none */
static int place(struct perfetto *p, struct pf_slice *s)
{
	struct pf_track *t = &p->tracks[s->track];
	uint64_t end = s->ts + s->dur;
	uint32_t l;

	for (l = 0; l < t->n_lanes; l++) {
		while (t->depth[l] && t->stack[l][t->depth[l] - 1] <= s->ts)
			t->depth[l]--;
		if (!t->depth[l] || end <= t->stack[l][t->depth[l] - 1])
			break;
	}
	if (l == t->n_lanes && lane_add(p, t))
		return -ENOMEM;
	s->lane = l;
	return lane_push(t, l, end);
}

static int layout(struct perfetto *p)
{
	uint32_t *order = malloc((p->n_slices ? p->n_slices : 1) * sizeof(*order));
	int err = 0;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < p->n_slices; i++)
		order[i] = (uint32_t)i;
	sort_ctx = p;
	qsort(order, p->n_slices, sizeof(*order), cmp_slice);
	for (size_t i = 0; i < p->n_tracks && !err; i++)
		err = lane_add(p, &p->tracks[i]); /* lane 0: the thread itself */
	for (size_t i = 0; i < p->n_slices && !err; i++)
		err = place(p, &p->slices[order[i]]);
	free(order);
	return err;
}

static int cmp_proc(const void *x, const void *y)
{
	const struct pf_proc *a = x, *b = y;

	if (a->gpu != b->gpu)
		return a->gpu - b->gpu;
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

static void put_flow(FILE *f, char ph, uint64_t id, uint32_t pid, uint32_t tid, uint64_t ts)
{
	fprintf(f, ",\n{\"ph\":\"%c\",\"id\":%" PRIu64 ",\"pid\":%u,\"tid\":%u,\"ts\":", ph, id,
		pid, tid);
	put_us(f, ts);
	fprintf(f, ",\"name\":\"launch\",\"cat\":\"launch\"%s}", ph == 'f' ? ",\"bp\":\"e\"" : "");
}

int perfetto_write(struct perfetto *p, FILE *f)
{
	const char *sep = "";
	int err;

	if (p->err)
		return p->err;
	if (fflush(p->ev))
		return -ENOMEM;
	err = layout(p);
	if (err)
		return err;
	if (p->n_procs)
		qsort(p->procs, p->n_procs, sizeof(*p->procs), cmp_proc);
	fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"infertrace-"
	      "agent " AGENT_VERSION "\"},\n\"traceEvents\":[\n",
	      f);
	for (size_t i = 0; i < p->n_procs; i++) {
		fprintf(f,
			"%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%u,\"tid\":0,"
			"\"args\":{\"name\":\"",
			sep, p->procs[i].pid);
		put_esc(f, p->procs[i].name);
		fprintf(f,
			"\"}},\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%u,"
			"\"tid\":0,\"args\":{\"sort_index\":%zu}}",
			p->procs[i].pid, i);
		sep = ",\n";
	}
	for (size_t i = 0; i < p->n_tracks; i++) {
		struct pf_track *t = &p->tracks[i];

		for (uint32_t l = 0; l < t->n_lanes; l++) {
			char name[96];

			if (t->name[0])
				snprintf(name, sizeof(name), "%s", t->name);
			else
				snprintf(name, sizeof(name), "thread %u", t->tid);
			if (l)
				snprintf(name + strlen(name), sizeof(name) - strlen(name),
					 " (overlap %u)", l);
			fprintf(f,
				"%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%u,\"tid\":%u,"
				"\"args\":{\"name\":\"",
				sep, t->pid, t->lane_tid[l]);
			put_esc(f, name);
			fputs("\"}}", f);
			sep = ",\n";
		}
	}
	for (size_t i = 0; i < p->n_slices; i++) {
		struct pf_slice *s = &p->slices[i];
		struct pf_track *t = &p->tracks[s->track];
		uint32_t tid = t->lane_tid[s->lane];

		fprintf(f, "%s{\"ph\":\"%s\",\"pid\":%u,\"tid\":%u,\"ts\":", sep,
			s->instant ? "i\",\"s\":\"t" : "X", t->pid, tid);
		put_us(f, s->ts);
		if (!s->instant) {
			fputs(",\"dur\":", f);
			put_us(f, s->dur);
		}
		fputs(",\"name\":\"", f);
		put_esc(f, s->name);
		fprintf(f, "\",\"cat\":\"%s\"", s->cat);
		if (s->args)
			fprintf(f, ",\"args\":%s", s->args);
		fputc('}', f);
		sep = ",\n";
		/* inside the slice, where the importer binds a flow to it */
		for (uint32_t k = 0; k < s->n_out; k++)
			put_flow(f, 's', s->flows_out[k], t->pid, tid, s->ts + s->dur / 2);
		if (s->flow_in)
			put_flow(f, 'f', s->flow_in, t->pid, tid, s->ts + s->dur / 2);
	}
	p->st.events += 2 * p->st.flows;
	if (p->ev_len) {
		fputs(sep, f);
		fwrite(p->ev_buf, 1, p->ev_len, f);
	}
	fputs("\n]}\n", f);
	return ferror(f) ? -EIO : 0;
}

/* ------------------------------------------------------- replay sink -- */

struct pf_sink {
	struct sink s;
	struct perfetto *p;
	char *path;
};

static int pf_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		    size_t len)
{
	struct pf_sink *ps = s->priv;

	(void)cls;
	(void)key;
	perfetto_add_json(ps->p, json, len); /* records it cannot draw are counted, not errors */
	s->written++;
	return 0;
}

static int pf_flush(struct sink *s, int timeout_ms)
{
	(void)s;
	(void)timeout_ms;
	return 0;
}

static void pf_close(struct sink *s)
{
	struct pf_sink *ps;
	struct perfetto_stats st;
	FILE *f;
	int err;

	if (!s)
		return;
	ps = s->priv;
	f = fopen(ps->path, "we");
	if (!f) {
		pr_err("--perfetto %s: %s", ps->path, strerror(errno));
	} else {
		err = perfetto_write(ps->p, f);
		if (fclose(f) && !err)
			err = -errno;
		perfetto_get_stats(ps->p, &st);
		if (err)
			pr_err("--perfetto %s: %s", ps->path, strerror(-err));
		else
			pr_info("perfetto: %s: %" PRIu64 " events, %" PRIu64 " flows from %" PRIu64
				" records",
				ps->path, st.events, st.flows, st.records);
	}
	perfetto_free(ps->p);
	free(ps->path);
	free(ps);
}

struct sink *sink_perfetto_open(const char *path)
{
	struct pf_sink *ps = calloc(1, sizeof(*ps));
	FILE *f;

	if (!ps)
		return NULL;
	/* fail now, not after a long replay */
	f = fopen(path, "we");
	if (!f)
		goto fail;
	fclose(f);
	ps->p = perfetto_new();
	ps->path = strdup(path);
	if (!ps->p || !ps->path)
		goto fail;
	ps->s = (struct sink){.name = "perfetto",
			      .write = pf_write,
			      .flush = pf_flush,
			      .close = pf_close,
			      .priv = ps};
	return &ps->s;

fail : {
	int err = errno;

	perfetto_free(ps->p);
	free(ps->path);
	free(ps);
	errno = err;
	return NULL;
}
}
