// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * recorder.c - the flight recorder: the last --recorder-seconds of detail
 * per instance, in memory, so that when a step is flagged anomalous (a
 * REC_ANOMALY record) or a deep-dive starts, the seconds before the trigger
 * are sent too.
 *
 * What it holds (docs/operations.md, "Flight recorder"): every record of
 * class REC_EVENT or REC_ANOMALY the agent produces, whether or not it was
 * sent. In sentinel mode that is the detail the agent produces anyway:
 * single events above the thresholds (off-CPU, run-queue,
 * syscalls, CUDA synchronisations, retransmits) - sent as before - and the
 * GPU activity records of the CUPTI shims (kernels and copies, joined with
 * the sampled launch callbacks) - which sentinel mode only summarises, so
 * they are kept here and sent only on a trigger. During a deep-dive or in
 * deep mode the instance's records are all sent and also kept, so that an
 * export covers them.
 *
 * The kernel half (bpf/events.h, struct flight_launch): in sentinel mode the
 * BPF side also writes every launch of a traced thread into per-CPU rings of
 * an mmap'able array map. The BPF source owns them (agent/sources/flight.c):
 * recorder_tick(), and every reader of a window first, asks it through
 * cap.flight_pull to hand what is new to recorder_kernel_launch(), which
 * keeps each as a binary entry (ENT_LAUNCH: no JSON work per launch); they
 * become cuda_launch JSON (cap.flight_json) only when a window is sent or
 * exported.
 *
 * Detail of the user-space sources that sentinel mode does not send (single
 * NCCL collectives, the shims' joined GPU records) is kept the same way,
 * through recorder_keep_fmt(): the source's own bytes and the function that
 * makes them JSON (ENT_FMT), so such a record costs a copy, not a JSON
 * record, unless its window is read.
 *
 * Layout: per instance a FIFO of 256 KiB chunks; a record is one entry
 * (16-byte header + its JSON text or binary launch, 8-byte aligned), appended with one
 * memcpy. Chunks leave whole: when their newest entry is older than the
 * window, or when a new chunk would exceed the global budget (the oldest
 * chunk of any instance goes first, counted in evicted_budget). So the
 * window holds at least --recorder-seconds unless the budget is reached.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "state.h"
#include "util.h"
#include "pipeline.h"

#define REC_CHUNK (256 * 1024)
#define REC_MAX_INST 64
/*
 * A window is sent in slices of this much loop time (recorder_tick() sends
 * the next one): 250k records of a busy shim take ~0.3 s to format and send,
 * and a loop held that long makes the shims' channel drop (each waits at most
 * 100 ms for the agent to read).
 */
#define REC_SLICE_NS (5 * 1000000ull)
#define REC_SLICE_CHECK 64 /* entries between two looks at the clock */
#define ENT_SENT 1u
#define ENT_LAUNCH 2u /* the payload is a struct flight_launch, not JSON */
#define ENT_FMT 4u    /* the payload is a struct fmt_ent: a formatter and its bytes */

/* a record kept in binary form, formatted only when a window is read */
struct fmt_ent {
	rec_fmt_fn fn;
	unsigned char blob[];
};
/* what an ENT_FMT entry is formatted into: a GPU record's names can be long */
#define FMT_JSON_MAX (64 * 1024)

struct ent_hdr {
	uint32_t len;	/* JSON bytes */
	uint32_t flags; /* ENT_SENT: already delivered to the sinks; ENT_LAUNCH */
	uint64_t t_ns;	/* when it was recorded (CLOCK_MONOTONIC) */
};

struct chunk {
	struct chunk *next;
	uint64_t seq; /* of the recorder's chunks, in allocation order */
	size_t cap, used;
	uint64_t n; /* entries */
	uint64_t first_ns, last_ns;
	unsigned char data[];
};

struct rinst {
	char name[INSTANCE_LEN];
	struct chunk *head, *tail;
	uint64_t records; /* entries held */
	uint64_t lost;	  /* entries evicted by the budget since the last flush */
	uint64_t last_use_ns;
	/*
	 * A window being sent (announced by its flight_recorder record, sent in
	 * slices): its unsent entries recorded in [send_since, send_end], from
	 * the entry at send_off of chunk send_seq (or the first chunk after it,
	 * when that one has gone) on.
	 */
	bool sending;
	uint64_t send_since, send_end, send_seq;
	size_t send_off;
	/*
	 * Where the last trigger's walk ended (chunk scan_seq, offset scan_off):
	 * every entry before is sent or announced, so the next trigger counts
	 * whole chunks there instead of walking them (a burst of anomalies
	 * walked 230k entries each, 13 ms, and held the loop past the shims'
	 * 100 ms wait).
	 */
	uint64_t scan_seq;
	size_t scan_off;
};

struct recorder {
	uint64_t window_ns;
	size_t budget, used;
	struct rinst inst[REC_MAX_INST];
	int n_inst;
	struct rinst *last;
	bool flushing;
	uint64_t kept, kept_unsent, kept_bytes;
	uint64_t evicted_age, evicted_budget, too_large, instances_evicted;
	uint64_t flushes, flushed;
	uint64_t chunk_seq;
	uint64_t slice_ns, slices;
	uint64_t sent_early; /* sent before their slice: the budget took their chunk */
	struct agent *agent; /* the one it records for */
	uint64_t fmt_errors; /* kept binary records that could not be made JSON */
	/* the kernel half: what became of the launches flight.c handed down */
	uint64_t k_since; /* of the pull under way: older launches are outside the window */
	uint64_t k_copied, k_old;
};

static size_t ent_size(size_t len)
{
	return sizeof(struct ent_hdr) + ((len + 7) & ~(size_t)7);
}

/* the options turn the recorder on (its kernel half has more conditions) */
static bool recorder_on(const struct agent_opts *o)
{
	return o->recorder_s > 0 && o->recorder_mib;
}

uint32_t recorder_kernel_per_cpu(struct agent *a)
{
	const struct agent_opts *o = &a->opts;

	if (!recorder_on(o) || !o->recorder_launches || o->replay || o->mode == MODE_DEEP)
		return 0;
	return pow2_clamp(o->recorder_launches, 16, 1u << 24);
}

bool recorder_kernel_enabled(struct agent *a)
{
	return recorder_kernel_per_cpu(a) != 0;
}

uint32_t recorder_kernel_cpus(void)
{
	int n = libbpf_num_possible_cpus();

	return n > 0 ? (uint32_t)n : 1;
}

int recorder_init(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	struct recorder *r;

	if (!recorder_on(o))
		return 0;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->window_ns = (uint64_t)(o->recorder_s * 1e9);
	r->budget = (size_t)o->recorder_mib << 20;
	r->slice_ns = REC_SLICE_NS;
	r->agent = a;
	a->rec = r;
	return 0; /* the kernel half: flight_start() (agent/sources/flight.c) */
}

bool recorder_enabled(struct agent *a)
{
	return a->rec;
}

static const char *ent_json(struct agent *a, const char *key, const struct ent_hdr *h, char *buf,
			    size_t cap, size_t *len);

/*
 * Send the entries of chunk c from the cursor of the window ri is sending:
 * 1 when the window is out (an entry recorded after its trigger), 0 at the
 * chunk's end, -1 when the slice that began at t0 is spent (*k: entries
 * looked at in the slice).
 */
static int send_chunk(struct recorder *r, struct rinst *ri, struct chunk *c, uint64_t t0,
		      uint64_t slice_ns, unsigned *k)
{
	static char jbuf[FMT_JSON_MAX > DECODE_LAUNCH_MAX ? FMT_JSON_MAX : DECODE_LAUNCH_MAX];

	ri->send_seq = c->seq;
	while (ri->send_off < c->used) {
		struct ent_hdr *h = (struct ent_hdr *)(c->data + ri->send_off);

		if (h->t_ns > ri->send_end)
			return 1; /* recorded after the trigger: the next window's */
		ri->send_off += ent_size(h->len);
		if (!(h->flags & ENT_SENT) && h->t_ns >= ri->send_since) {
			size_t len;
			const char *json =
			    ent_json(r->agent, ri->name, h, jbuf, sizeof(jbuf), &len);

			if (json)
				rec_send(r->agent, REC_EVENT, ri->name, json, len, true);
			h->flags |= ENT_SENT;
			r->flushed++;
		}
		if (++*k % REC_SLICE_CHECK == 0 && now_ns() - t0 >= slice_ns)
			return -1;
	}
	return 0;
}

/* send the window ri is sending until it is out (true) or the slice is spent */
static bool send_window(struct recorder *r, struct rinst *ri, uint64_t t0, uint64_t slice_ns)
{
	struct chunk *c = ri->head;
	unsigned k = 0;

	while (c && c->seq < ri->send_seq)
		c = c->next;
	if (c && c->seq != ri->send_seq)
		ri->send_off = 0;
	for (; c; c = c->next, ri->send_off = 0) {
		int st = send_chunk(r, ri, c, t0, slice_ns, &k);

		if (st < 0)
			return false;
		if (st > 0)
			break;
	}
	ri->sending = false;
	return true;
}

static void chunk_drop(struct recorder *r, struct rinst *ri)
{
	struct chunk *c = ri->head;

	/* the cursor is never before the first chunk: every drop passes here */
	if (ri->sending && c->seq == ri->send_seq) {
		/* its memory is needed: what the window announced in it goes now */
		uint64_t before = r->flushed;
		bool was = r->flushing;
		unsigned k = 0;

		r->flushing = true;
		if (send_chunk(r, ri, c, 0, UINT64_MAX, &k) > 0) {
			ri->sending = false;
		} else {
			ri->send_seq = c->next ? c->next->seq : r->chunk_seq;
			ri->send_off = 0;
		}
		r->flushing = was;
		r->sent_early += r->flushed - before;
	}
	ri->head = c->next;
	if (!ri->head)
		ri->tail = NULL;
	ri->records -= c->n;
	r->used -= sizeof(*c) + c->cap;
	free(c);
}

static void inst_clear(struct recorder *r, struct rinst *ri)
{
	while (ri->head)
		chunk_drop(r, ri);
}

/* drop the oldest chunk of any instance; false when nothing is held */
static bool evict_oldest(struct recorder *r)
{
	struct rinst *old = NULL;

	for (int i = 0; i < r->n_inst; i++) {
		struct rinst *ri = &r->inst[i];

		if (ri->head && (!old || ri->head->first_ns < old->head->first_ns))
			old = ri;
	}
	if (!old)
		return false;
	r->evicted_budget += old->head->n;
	old->lost += old->head->n;
	chunk_drop(r, old);
	return true;
}

static struct rinst *inst_get(struct recorder *r, const char *key, uint64_t now)
{
	struct rinst *ri = NULL, *lru = NULL;

	if (r->last && !strcmp(r->last->name, key))
		return r->last;
	for (int i = 0; i < r->n_inst; i++) {
		if (!strcmp(r->inst[i].name, key)) {
			ri = &r->inst[i];
			break;
		}
		if (!lru || r->inst[i].last_use_ns < lru->last_use_ns)
			lru = &r->inst[i];
	}
	if (!ri) {
		if (r->n_inst < REC_MAX_INST) {
			ri = &r->inst[r->n_inst++];
		} else {
			/* more instances than slots: the least recently active goes */
			ri = lru;
			inst_clear(r, ri);
			r->instances_evicted++;
		}
		memset(ri, 0, sizeof(*ri));
		snprintf(ri->name, sizeof(ri->name), "%s", key);
	}
	ri->last_use_ns = now;
	r->last = ri;
	return ri;
}

/* an entry of pre_len bytes of pre (may be 0), then len bytes of json */
static void append_parts(struct recorder *r, const char *key, const void *pre, size_t pre_len,
			 const char *json, size_t len, uint32_t flags)
{
	size_t need = ent_size(pre_len + len);
	uint64_t now = now_ns();
	struct ent_hdr h = {.len = (uint32_t)(pre_len + len), .flags = flags, .t_ns = now};
	struct rinst *ri;
	struct chunk *c;

	if (need > r->budget / 4 || pre_len + len > UINT32_MAX) {
		r->too_large++;
		return;
	}
	ri = inst_get(r, key && *key ? key : "", now);
	c = ri->tail;
	if (!c || c->cap - c->used < need) {
		size_t cap = need > REC_CHUNK ? need : REC_CHUNK;

		while (r->used + sizeof(*c) + cap > r->budget && evict_oldest(r))
			;
		if (r->used + sizeof(*c) + cap > r->budget) {
			r->too_large++;
			return;
		}
		c = malloc(sizeof(*c) + cap);
		if (!c) {
			r->too_large++;
			return;
		}
		c->next = NULL;
		c->seq = r->chunk_seq++;
		c->cap = cap;
		c->used = 0;
		c->n = 0;
		c->first_ns = now;
		if (ri->tail)
			ri->tail->next = c;
		else
			ri->head = c;
		ri->tail = c;
		r->used += sizeof(*c) + cap;
	}
	memcpy(c->data + c->used, &h, sizeof(h));
	if (pre_len)
		memcpy(c->data + c->used + sizeof(h), pre, pre_len);
	memcpy(c->data + c->used + sizeof(h) + pre_len, json, len);
	c->used += need;
	c->n++;
	c->last_ns = now;
	ri->records++;
	r->kept++;
	r->kept_bytes += pre_len + len;
	if (!(flags & ENT_SENT))
		r->kept_unsent++;
}

static void append(struct recorder *r, const char *key, const char *json, size_t len,
		   uint32_t flags)
{
	append_parts(r, key, NULL, 0, json, len, flags);
}

void recorder_tap(struct agent *a, enum rec_class cls, const char *key, const char *json,
		  size_t len)
{
	struct recorder *r = a->rec;

	if (!r || r->flushing || (cls != REC_EVENT && cls != REC_ANOMALY))
		return;
	if (!key)
		key = agent_host(a);
	append(r, key, json, len, ENT_SENT);
	if (cls == REC_ANOMALY)
		recorder_flush(a, key, "anomaly");
}

void recorder_keep(struct agent *a, const char *key, const char *json, size_t len)
{
	struct recorder *r = a->rec;

	if (r && !r->flushing)
		append(r, key ? key : agent_host(a), json, len, 0);
}

void recorder_keep_fmt(struct agent *a, const char *key, rec_fmt_fn fn, const void *blob,
		       size_t len)
{
	struct recorder *r = a->rec;
	struct fmt_ent e = {.fn = fn};

	if (!r || r->flushing)
		return;
	if (len > REC_FMT_BLOB_MAX) {
		r->too_large++;
		return;
	}
	/* the formatter, then the source's bytes: copied once, into the chunk */
	append_parts(r, key ? key : agent_host(a), &e, sizeof(e), blob, len, ENT_FMT);
}

/* ask the BPF source for the launches its rings hold since the last pull */
static void pull_kernel(struct agent *a, struct recorder *r)
{
	uint64_t now = now_ns();

	if (!a->cap.flight_pull)
		return;
	r->k_since = now > r->window_ns ? now - r->window_ns : 0;
	a->cap.flight_pull(a);
}

int recorder_kernel_launch(struct agent *a, const struct flight_launch *f, const char *instance)
{
	struct recorder *r = a->rec;

	if (!r)
		return -ENODEV;
	if (f->ev.hdr.ts_ns < r->k_since) {
		r->k_old++;
		return -ESTALE;
	}
	r->k_copied++;
	append(r, instance, (const char *)f, sizeof(*f), ENT_LAUNCH);
	return 0;
}

/*
 * The JSON text of an entry of instance key: the payload itself, a binary
 * launch made into the cuda_launch record deep mode would have sent (with
 * its stack, looked up now), or what a source's formatter makes of its
 * bytes. NULL when it cannot be formatted (counted).
 */
static const char *ent_json(struct agent *a, const char *key, const struct ent_hdr *h, char *buf,
			    size_t cap, size_t *len)
{
	struct flight_launch f;
	long n;

	if (h->flags & ENT_FMT) {
		const struct fmt_ent *e = (const void *)(h + 1);

		n = e->fn(a, key, e->blob, h->len - sizeof(*e), buf, cap);
		if (n < 0) {
			a->rec->fmt_errors++;
			return NULL;
		}
		*len = (size_t)n;
		return buf;
	}
	if (!(h->flags & ENT_LAUNCH)) {
		*len = h->len;
		return (const char *)(h + 1);
	}
	if (!a->cap.flight_json)
		return NULL; /* the BPF side is gone (shutdown) */
	memcpy(&f, h + 1, sizeof(f));
	/* the BPF source formats its own binary entries (agent/sources/flight.c) */
	n = a->cap.flight_json(a, &f, buf, cap);
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return buf;
}

/* walk the entries of ri inside the window */
#define for_each_entry(ri, c, off, h, since)                                                       \
	for (c = (ri)->head; c; c = c->next)                                                       \
		for (off = 0; off < c->used; off += ent_size(h->len))                              \
			if ((h = (struct ent_hdr *)(c->data + off))->t_ns >= (since))

static struct rinst *inst_find(struct recorder *r, const char *key)
{
	for (int i = 0; i < r->n_inst; i++)
		if (!strcmp(r->inst[i].name, key))
			return &r->inst[i];
	return NULL;
}

/* one slice of the windows being sent (all of them: slice_ns UINT64_MAX) */
static void send_slice(struct recorder *r, uint64_t slice_ns)
{
	uint64_t t0 = now_ns();

	if (r->flushing)
		return;
	r->flushing = true; /* what it sends is not recorded again */
	for (int i = 0; i < r->n_inst; i++)
		if (r->inst[i].sending) {
			r->slices++;
			if (!send_window(r, &r->inst[i], t0, slice_ns))
				break;
		}
	r->flushing = false;
}

bool recorder_sending(struct agent *a)
{
	struct recorder *r = a->rec;

	for (int i = 0; r && i < r->n_inst; i++)
		if (r->inst[i].sending)
			return true;
	return false;
}

void recorder_send_all(struct agent *a)
{
	if (a->rec)
		send_slice(a->rec, UINT64_MAX);
}

void recorder_set_slice(struct agent *a, uint64_t slice_ns)
{
	if (a->rec)
		a->rec->slice_ns = slice_ns;
}

int recorder_flush(struct agent *a, const char *key, const char *trigger)
{
	struct recorder *r = a->rec;
	uint64_t now, since, first = 0, n = 0, bytes = 0, old = 0, seq0 = 0;
	size_t off0 = 0;
	struct ent_hdr *h = NULL;
	struct rinst *ri;
	struct chunk *c;
	size_t off;
	json_t *m;

	if (!r || r->flushing || !key)
		return 0;
	pull_kernel(a, r);
	now = now_ns(); /* after the pull: the launches it kept are in the window */
	since = now > r->window_ns ? now - r->window_ns : 0;
	ri = inst_find(r, key);
	if (!ri)
		return 0; /* nothing was recorded for it here (a fleet-wide deep-dive) */
	{
		for (c = ri->head; c; c = c->next) {
			/* walked by an earlier trigger: each sent, or announced by it */
			if (c->seq < ri->scan_seq && c->first_ns >= since) {
				if (!first)
					first = c->first_ns;
				old += c->n;
				continue;
			}
			for (off = 0; off < c->used; off += ent_size(h->len)) {
				h = (struct ent_hdr *)(c->data + off);
				if (h->t_ns < since)
					continue;
				if (!first)
					first = h->t_ns;
				if ((h->flags & ENT_SENT) || c->seq < ri->scan_seq ||
				    (c->seq == ri->scan_seq && off < ri->scan_off)) {
					old++;
					continue;
				}
				if (!n++) {
					seq0 = c->seq; /* where the window's records begin */
					off0 = off;
				}
				bytes += h->len;
			}
		}
		if (ri->tail) { /* the next trigger walks from here */
			ri->scan_seq = ri->tail->seq;
			ri->scan_off = ri->tail->used;
		}
	}
	r->flushing = true;
	r->flushes++;
	m = rec_new(a, "flight_recorder", 0, 0, now);
	if (m) {
		json_object_set_new(m, "instance", rec_string(key));
		json_object_set_new(m, "trigger", json_string(trigger));
		json_object_set_new(m, "window_ns", json_integer((json_int_t)r->window_ns));
		json_object_set_new(m, "window_start_ns",
				    json_integer((json_int_t)(first ? first : now)));
		json_object_set_new(m, "window_end_ns", json_integer((json_int_t)now));
		json_object_set_new(m, "records", json_integer((json_int_t)n));
		json_object_set_new(m, "bytes", json_integer((json_int_t)bytes));
		json_object_set_new(m, "already_sent", json_integer((json_int_t)old));
		json_object_set_new(m, "evicted", json_integer((json_int_t)ri->lost));
	}
	/* a released window goes to every sink, remote ones included */
	rec_send_obj(a, REC_EVENT, m);
	r->flushing = false;
	ri->lost = 0;
	/*
	 * Its records follow, in slices: the first now, unless a window is
	 * being sent already (a burst of anomalies, each flagged in the same
	 * pass of the step judge, would hold the loop a slice each); a window
	 * still being sent grows to now.
	 */
	if (ri->sending) {
		ri->send_end = now;
	} else if (n) {
		bool first_slice = !recorder_sending(a);

		ri->sending = true;
		ri->send_since = since;
		ri->send_seq = seq0;
		ri->send_off = off0;
		ri->send_end = now;
		if (first_slice)
			send_slice(r, r->slice_ns);
	}
	return (int)n;
}

void recorder_tick(struct agent *a)
{
	struct recorder *r = a->rec;
	uint64_t now = now_ns();

	if (!r)
		return;
	pull_kernel(a, r);
	send_slice(r, r->slice_ns); /* then age eviction (which sends what a window still owes) */
	if (now < r->window_ns)
		return;
	for (int i = 0; i < r->n_inst; i++) {
		struct rinst *ri = &r->inst[i];

		while (ri->head && ri->head->last_ns < now - r->window_ns) {
			r->evicted_age += ri->head->n;
			chunk_drop(r, ri);
		}
	}
}

int recorder_foreach(struct agent *a, const char *instance,
		     int (*fn)(void *ctx, const char *json, size_t len), void *ctx)
{
	struct recorder *r = a->rec;
	uint64_t now = now_ns(), since;
	/* static: one thread, and a window is never read inside another read */
	static char jbuf[FMT_JSON_MAX > DECODE_LAUNCH_MAX ? FMT_JSON_MAX : DECODE_LAUNCH_MAX];
	struct ent_hdr *h = NULL;
	struct chunk *c;
	size_t off;
	int ret;

	if (!r)
		return 0;
	pull_kernel(a, r);
	since = now > r->window_ns ? now - r->window_ns : 0;
	for (int i = 0; i < r->n_inst; i++) {
		struct rinst *ri = &r->inst[i];

		if (instance && strcmp(ri->name, instance))
			continue;
		for_each_entry(ri, c, off, h, since)
		{
			size_t len;
			const char *json = ent_json(a, ri->name, h, jbuf, sizeof(jbuf), &len);

			if (!json)
				continue;
			ret = fn(ctx, json, len);
			if (ret)
				return ret;
		}
	}
	return 0;
}

struct snap {
	char *out;
	size_t pos, cap;
	uint64_t records;
};

static int snap_add(void *ctx, const char *json, size_t n)
{
	struct snap *sn = ctx;
	uint32_t n32 = (uint32_t)n;

	if (sn->pos + 4 + n > sn->cap) {
		size_t ncap = sn->cap ? sn->cap * 2 : 1 << 20;
		char *nb;

		while (ncap < sn->pos + 4 + n)
			ncap *= 2;
		nb = realloc(sn->out, ncap);
		if (!nb)
			return -ENOMEM;
		sn->out = nb;
		sn->cap = ncap;
	}
	memcpy(sn->out + sn->pos, &n32, 4);
	memcpy(sn->out + sn->pos + 4, json, n);
	sn->pos += 4 + n;
	sn->records++;
	return 0;
}

int recorder_snapshot(struct agent *a, const char *instance, char **buf, size_t *len,
		      uint64_t *records)
{
	struct snap sn = {};
	int err = recorder_foreach(a, instance, snap_add, &sn);

	if (err) {
		free(sn.out);
		sn = (struct snap){};
	}
	*buf = sn.out;
	*len = sn.pos;
	*records = sn.records;
	return err;
}

void recorder_stats(struct agent *a, json_t *obj)
{
	struct recorder *r = a->rec;
	uint64_t held = 0;
	int inst = 0, sending = 0;

	if (!r) {
		json_object_set_new(obj, "recorder", json_null());
		return;
	}
	for (int i = 0; i < r->n_inst; i++) {
		held += r->inst[i].records;
		inst += r->inst[i].head != NULL;
		sending += r->inst[i].sending;
	}
	json_object_set_new(
	    obj, "recorder",
	    json_pack("{s:f,s:I,s:I,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:I,s:I}",
		      "window_s", r->window_ns / 1e9, "budget_bytes", (json_int_t)r->budget,
		      "used_bytes", (json_int_t)r->used, "instances", inst, "records_held",
		      (json_int_t)held, "kept", (json_int_t)r->kept, "kept_unsent",
		      (json_int_t)r->kept_unsent, "kept_bytes", (json_int_t)r->kept_bytes,
		      "evicted_age", (json_int_t)r->evicted_age, "evicted_budget",
		      (json_int_t)r->evicted_budget, "too_large", (json_int_t)r->too_large,
		      "instances_evicted", (json_int_t)r->instances_evicted, "flushes",
		      (json_int_t)r->flushes, "flushed", (json_int_t)r->flushed, "fmt_errors",
		      (json_int_t)r->fmt_errors, "sending", sending, "slices",
		      (json_int_t)r->slices, "sent_early", (json_int_t)r->sent_early));
	if (a->cap.flight_counts) {
		struct flight_counts fc = {};
		json_t *k;

		a->cap.flight_counts(a, &fc);
		k = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "per_cpu",
			      (json_int_t)fc.per_cpu, "cpus", (json_int_t)fc.cpus, "written",
			      (json_int_t)fc.written, "copied", (json_int_t)r->k_copied, "pulls",
			      (json_int_t)fc.pulls, "overwritten", (json_int_t)fc.overwritten,
			      "older_than_window", (json_int_t)r->k_old, "stacks_missing",
			      (json_int_t)fc.no_stack);

		json_object_set_new(json_object_get(obj, "recorder"), "kernel_launches", k);
	}
}

void recorder_free(struct agent *a)
{
	struct recorder *r = a->rec;

	if (!r)
		return;
	for (int i = 0; i < r->n_inst; i++)
		inst_clear(r, &r->inst[i]);
	free(r);
	a->rec = NULL;
}
