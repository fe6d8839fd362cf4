// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * kineto.c - PyTorch profiler (Kineto) Chrome traces.
 *
 * A pull scanner instead of a DOM: the traces run to hundreds of MB, a DOM
 * costs several times the file in memory, and timestamps must keep their
 * exact decimal text (Kineto writes µs with up to 3 fraction digits on
 * epoch-sized values, beyond what a double holds to the ns). Every read is
 * bounds-checked; errors name the byte offset.
 *
 * Events used (ph "X"): cat cuda_runtime / cuda_driver = launches,
 * kernel / gpu_memcpy / gpu_memset = GPU records (pid = device there),
 * python_function / user_annotation = markers, python_function also spans
 * for the launches' Python frames (corr_replay_opts.pyspans, pyspans.c).
 * Everything else is skipped.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "internal.h"
#include "utf8.h"

#define MAX_DEPTH 256
#define NAME_MAX_LEN 4096

struct scan {
	const char *base, *p, *end;
	const char *err;
	size_t err_off;
};

struct span {
	const char *s;
	size_t n;
};

static int fail(struct scan *sc, const char *what)
{
	if (!sc->err) {
		sc->err = what;
		sc->err_off = (size_t)(sc->p - sc->base);
	}
	return -EINVAL;
}

static inline void ws(struct scan *sc)
{
	while (sc->p < sc->end &&
	       (*sc->p == ' ' || *sc->p == '\n' || *sc->p == '\r' || *sc->p == '\t'))
		sc->p++;
}

static inline int expect(struct scan *sc, char ch)
{
	ws(sc);
	if (sc->p >= sc->end)
		return fail(sc, "unexpected end of input");
	if (*sc->p != ch)
		return fail(sc, ch == ':'   ? "expected ':'"
				: ch == '{' ? "expected '{'"
					    : "unexpected character");
	sc->p++;
	return 0;
}

/* string body after the opening quote; raw span (escapes not decoded) */
static int str_raw(struct scan *sc, struct span *out, bool *escaped)
{
	const char *s = sc->p;

	*escaped = false;
	for (;;) {
		const char *q = memchr(sc->p, '"', sc->end - sc->p);
		const char *b;

		if (!q)
			return fail(sc, "unterminated string (truncated input?)");
		/* count backslashes before the quote: odd means escaped */
		b = q;
		while (b > s && b[-1] == '\\')
			b--;
		if ((q - b) % 2 == 0) {
			if (memchr(s, '\\', q - s))
				*escaped = true;
			out->s = s;
			out->n = q - s;
			sc->p = q + 1;
			return 0;
		}
		sc->p = q + 1;
	}
}

static int str(struct scan *sc, struct span *out, bool *escaped)
{
	ws(sc);
	if (sc->p >= sc->end)
		return fail(sc, "unexpected end of input");
	if (*sc->p != '"')
		return fail(sc, "expected a string");
	sc->p++;
	return str_raw(sc, out, escaped);
}

/* decode JSON escapes into dst (NUL-terminated, cut to dsz) */
static void unescape(const struct span *in, char *dst, size_t dsz)
{
	size_t o = 0;

	for (size_t i = 0; i < in->n && o + 4 < dsz; i++) {
		char ch = in->s[i];

		if (ch != '\\' || i + 1 >= in->n) {
			dst[o++] = ch;
			continue;
		}
		ch = in->s[++i];
		switch (ch) {
		case 'n':
			dst[o++] = '\n';
			break;
		case 't':
			dst[o++] = '\t';
			break;
		case 'r':
			dst[o++] = '\r';
			break;
		case 'b':
			dst[o++] = '\b';
			break;
		case 'f':
			dst[o++] = '\f';
			break;
		case 'u': {
			unsigned v = 0;

			for (int k = 0; k < 4 && i + 1 < in->n; k++) {
				char h = in->s[++i];

				v = v * 16 + (unsigned)(h >= 'a'   ? h - 'a' + 10
							: h >= 'A' ? h - 'A' + 10
								   : h - '0');
			}
			/* BMP to UTF-8; surrogate halves pass through as-is */
			o += (size_t)utf8_put(v, dst + o);
			break;
		}
		default:
			dst[o++] = ch;
			break;
		}
	}
	dst[o] = '\0';
}

static int number(struct scan *sc, struct span *out)
{
	const char *s;

	ws(sc);
	s = sc->p;
	while (sc->p < sc->end && (strchr("0123456789+-.eE", *sc->p) && *sc->p))
		sc->p++;
	if (sc->p == s)
		return fail(sc, "expected a number");
	if (sc->p >= sc->end)
		return fail(sc, "unexpected end of input in a number");
	out->s = s;
	out->n = sc->p - s;
	return 0;
}

/* skip any value, iteratively (depth-bounded, no recursion on hostile input) */
static int skip(struct scan *sc)
{
	int depth = 0;
	struct span sp;
	bool esc;

	for (;;) {
		ws(sc);
		if (sc->p >= sc->end)
			return fail(sc, "unexpected end of input");
		switch (*sc->p) {
		case '{':
		case '[':
			if (++depth > MAX_DEPTH)
				return fail(sc, "nesting too deep");
			sc->p++;
			continue;
		case '}':
		case ']':
			if (!depth)
				return fail(sc, "unexpected closing bracket");
			depth--;
			sc->p++;
			break;
		case '"':
			sc->p++;
			if (str_raw(sc, &sp, &esc))
				return -EINVAL;
			ws(sc);
			if (depth && sc->p < sc->end && *sc->p == ':') {
				sc->p++; /* a key: its value follows */
				continue;
			}
			break;
		case ',':
			if (!depth)
				return fail(sc, "unexpected ','");
			sc->p++;
			continue;
		case 't':
		case 'f':
		case 'n': {
			const char *w = *sc->p == 't' ? "true" : *sc->p == 'f' ? "false" : "null";
			size_t n = strlen(w);

			if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, w, n))
				return fail(sc, "invalid literal");
			sc->p += n;
			break;
		}
		default:
			if (number(sc, &sp))
				return -EINVAL;
			break;
		}
		if (!depth)
			return 0;
	}
}

/* ',' or the closing ch; *done set at the closing */
/* after an opening bracket: whitespace, then the closing one at once (an empty container)? */
static bool empty_close(struct scan *sc, char close)
{
	ws(sc);
	if (sc->p < sc->end && *sc->p == close) {
		sc->p++;
		return true;
	}
	return false;
}

static int next_or_close(struct scan *sc, char close, bool *done)
{
	ws(sc);
	if (sc->p >= sc->end)
		return fail(sc, "unexpected end of input (truncated?)");
	if (*sc->p == ',') {
		sc->p++;
		*done = false;
		return 0;
	}
	if (*sc->p == close) {
		sc->p++;
		*done = true;
		return 0;
	}
	return fail(sc, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

static uint64_t span_u64(const struct span *s)
{
	uint64_t v = 0;

	for (size_t i = 0; i < s->n && s->s[i] >= '0' && s->s[i] <= '9'; i++)
		v = v * 10 + (uint64_t)(s->s[i] - '0');
	return v;
}

/* a number, or a string holding one ("pid": "Spans" gives 0); negative -> 0 */
static int num_or_str(struct scan *sc, uint64_t *out)
{
	struct span sp;
	bool esc;

	ws(sc);
	if (sc->p < sc->end && *sc->p == '"') {
		if (str(sc, &sp, &esc))
			return -EINVAL;
	} else if (sc->p < sc->end && (*sc->p == 'n' || *sc->p == 't' || *sc->p == 'f')) {
		*out = 0;
		return skip(sc);
	} else if (number(sc, &sp)) {
		return -EINVAL;
	}
	*out = span_u64(&sp);
	return 0;
}

/*
 * At a value: an array is opened (0; *empty when it was [] and is closed
 * already), anything else skipped (1); -EINVAL on bad input
 */
static int array_open(struct scan *sc, bool *empty)
{
	ws(sc);
	if (sc->p >= sc->end || *sc->p != '[')
		return skip(sc) ? -EINVAL : 1;
	sc->p++;
	*empty = empty_close(sc, ']');
	return 0;
}

static int u32x3(struct scan *sc, uint32_t v[3])
{
	bool done = false, empty;
	int i = 0, err = array_open(sc, &empty);

	if (err || empty)
		return err < 0 ? err : 0;
	while (!done) {
		uint64_t x;

		if (num_or_str(sc, &x))
			return -EINVAL;
		if (i < 3)
			v[i++] = (uint32_t)x;
		if (next_or_close(sc, ']', &done))
			return -EINVAL;
	}
	return 0;
}

static inline bool is(const struct span *s, const char *lit, size_t n)
{
	return s->n == n && !memcmp(s->s, lit, n);
}
#define IS(sp, lit) is(sp, lit, sizeof(lit) - 1)

/* communication arguments (record_param_comms, and kernel events of newer PyTorch) */
enum { CA_COLL, CA_DTYPE, CA_PG_NAME, CA_PG_DESC, CA_PG_RANKS, CA_STR_COUNT };
enum { CA_GROUP_SIZE, CA_IN_NELEMS, CA_OUT_NELEMS, CA_RANK, CA_NUM_COUNT };

struct kev {
	struct span ph, cat, name;
	bool name_esc;
	uint64_t pid, tid, ts, dur;
	bool has_ts;
	uint64_t corr, device, stream, context, graph_id, graph_node, bytes, cbid, copy_kind;
	bool has_corr;
	uint32_t grid[3], block[3];
	bool has_comm; /* any of the communication arguments */
	struct span cs[CA_STR_COUNT];
	int64_t cn[CA_NUM_COUNT];
	int64_t in_elems;    /* "Input Dims": elements of the first input, -1 unknown */
	struct span in_type; /* "Input type": the first input's */
};

/* an array whose first element first() reads, the rest skipped; anything else skipped */
static int array_first(struct scan *sc, int (*first)(struct scan *sc, void *ctx), void *ctx)
{
	bool done = false, at_first = true, empty;
	int err = array_open(sc, &empty);

	if (err || empty)
		return err < 0 ? err : 0;
	while (!done) {
		if (at_first ? first(sc, ctx) : skip(sc))
			return -EINVAL;
		at_first = false;
		if (next_or_close(sc, ']', &done))
			return -EINVAL;
	}
	return 0;
}

/* a shape [d0, d1, ...] into its product (int64_t *ctx); -1 when empty or odd */
static int shape_elems(struct scan *sc, void *ctx)
{
	int64_t *out = ctx, prod = 1;
	bool done = false, empty;
	int n = 0, err = array_open(sc, &empty);

	if (err || empty) /* [] is a scalar or a list: not told */
		return err < 0 ? err : 0;
	while (!done) {
		struct span d;

		ws(sc);
		if (sc->p < sc->end && (*sc->p < '0' || *sc->p > '9')) {
			/* nested shapes, a null, a string: not told */
			if (skip(sc))
				return -EINVAL;
			prod = -1;
		} else if (number(sc, &d)) {
			return -EINVAL;
		} else if (d.n > 12 || prod > (INT64_C(1) << 40)) {
			prod = -1; /* not a plausible shape */
		} else if (prod >= 0) {
			prod *= (int64_t)span_u64(&d);
		}
		n++;
		if (next_or_close(sc, ']', &done))
			return -EINVAL;
	}
	*out = n ? prod : -1;
	return 0;
}

/* a string into *ctx (a span); anything else skipped */
static int first_str(struct scan *sc, void *ctx)
{
	bool esc;

	ws(sc);
	if (sc->p < sc->end && *sc->p == '"')
		return str(sc, ctx, &esc);
	return skip(sc);
}

/* "Input Dims": [[d0, d1, ...], ...]: elements of the first input, -1 unknown */
static int input_dims(struct scan *sc, int64_t *out)
{
	*out = -1;
	return array_first(sc, shape_elems, out);
}

/* "Input type": ["float", ...]: the first input's */
static int input_type(struct scan *sc, struct span *out)
{
	return array_first(sc, first_str, out);
}

/* a string, or the text of a number ("Process Group ID": 0) */
static int str_or_num(struct scan *sc, struct span *out)
{
	bool esc;

	ws(sc);
	if (sc->p < sc->end && *sc->p == '"')
		return str(sc, out, &esc);
	if (sc->p < sc->end && (*sc->p == '-' || (*sc->p >= '0' && *sc->p <= '9')))
		return number(sc, out);
	out->s = NULL;
	out->n = 0;
	return skip(sc);
}

/* a signed integer number; anything else (null, a string, a fraction) -1 */
static int signed_num(struct scan *sc, int64_t *out)
{
	struct span sp;
	bool neg;

	*out = -1;
	ws(sc);
	if (sc->p >= sc->end || !(*sc->p == '-' || (*sc->p >= '0' && *sc->p <= '9')))
		return skip(sc);
	if (number(sc, &sp))
		return -EINVAL;
	neg = sp.s[0] == '-';
	if (neg) {
		sp.s++;
		sp.n--;
	}
	if (sp.n > 18 || memchr(sp.s, '.', sp.n) || memchr(sp.s, 'e', sp.n))
		return 0; /* out of range or not an integer: unknown */
	*out = neg ? -(int64_t)span_u64(&sp) : (int64_t)span_u64(&sp);
	return 0;
}

/* a communication argument: its slot, or -1 */
static int comm_arg(const struct span *k, bool *num)
{
	static const struct {
		const char *key;
		bool num;
		int slot;
	} keys[] = {
	    {"Collective name", false, CA_COLL},
	    {"dtype", false, CA_DTYPE},
	    {"Process Group Name", false, CA_PG_NAME},
	    {"Process Group ID", false, CA_PG_NAME},
	    {"Process Group Description", false, CA_PG_DESC},
	    {"Process Group Ranks", false, CA_PG_RANKS},
	    {"Group size", true, CA_GROUP_SIZE},
	    {"In msg nelems", true, CA_IN_NELEMS},
	    {"Out msg nelems", true, CA_OUT_NELEMS},
	    {"Rank", true, CA_RANK},
	};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (is(k, keys[i].key, strlen(keys[i].key))) {
			*num = keys[i].num;
			return keys[i].slot;
		}
	return -1;
}

static int parse_args(struct scan *sc, struct kev *e)
{
	bool done = false, esc, num;
	struct span k;
	int slot;

	if (expect(sc, '{'))
		return -EINVAL;
	if (empty_close(sc, '}'))
		return 0;
	while (!done) {
		uint64_t *dst = NULL;

		if (str(sc, &k, &esc) || expect(sc, ':'))
			return -EINVAL;
		if (IS(&k, "correlation")) {
			dst = &e->corr;
			e->has_corr = true;
		} else if (IS(&k, "device"))
			dst = &e->device;
		else if (IS(&k, "stream"))
			dst = &e->stream;
		else if (IS(&k, "context"))
			dst = &e->context;
		else if (IS(&k, "graph id") || IS(&k, "graphId") || IS(&k, "graph_id"))
			dst = &e->graph_id;
		else if (IS(&k, "graph node id") || IS(&k, "graphNodeId") ||
			 IS(&k, "graph_node_id"))
			dst = &e->graph_node;
		else if (IS(&k, "bytes"))
			dst = &e->bytes;
		else if (IS(&k, "cbid"))
			dst = &e->cbid;
		else if (IS(&k, "copyKind") || IS(&k, "copy kind"))
			dst = &e->copy_kind;
		if (dst) {
			if (num_or_str(sc, dst))
				return -EINVAL;
		} else if (IS(&k, "grid")) {
			if (u32x3(sc, e->grid))
				return -EINVAL;
		} else if (IS(&k, "block")) {
			if (u32x3(sc, e->block))
				return -EINVAL;
		} else if (IS(&k, "Input Dims")) {
			if (input_dims(sc, &e->in_elems))
				return -EINVAL;
		} else if (IS(&k, "Input type")) {
			if (input_type(sc, &e->in_type))
				return -EINVAL;
		} else if ((slot = comm_arg(&k, &num)) >= 0) {
			if (num ? signed_num(sc, &e->cn[slot]) : str_or_num(sc, &e->cs[slot]))
				return -EINVAL;
			e->has_comm = true;
		} else if (skip(sc)) {
			return -EINVAL;
		}
		if (next_or_close(sc, '}', &done))
			return -EINVAL;
	}
	return 0;
}

static int parse_event(struct scan *sc, struct kev *e)
{
	bool done = false, esc;
	struct span k, v;

	memset(e, 0, sizeof(*e));
	for (int i = 0; i < CA_NUM_COUNT; i++)
		e->cn[i] = -1;
	e->in_elems = -1;
	if (expect(sc, '{'))
		return -EINVAL;
	if (empty_close(sc, '}'))
		return 0;
	while (!done) {
		if (str(sc, &k, &esc) || expect(sc, ':'))
			return -EINVAL;
		if (IS(&k, "ph")) {
			if (str(sc, &e->ph, &esc))
				return -EINVAL;
		} else if (IS(&k, "cat")) {
			if (str(sc, &e->cat, &esc))
				return -EINVAL;
		} else if (IS(&k, "name")) {
			ws(sc);
			if (sc->p < sc->end && *sc->p == '"') {
				if (str(sc, &e->name, &e->name_esc))
					return -EINVAL;
			} else if (skip(sc)) {
				return -EINVAL;
			}
		} else if (IS(&k, "pid")) {
			if (num_or_str(sc, &e->pid))
				return -EINVAL;
		} else if (IS(&k, "tid")) {
			if (num_or_str(sc, &e->tid))
				return -EINVAL;
		} else if (IS(&k, "ts") || IS(&k, "dur")) {
			bool ts = k.n == 2;

			ws(sc);
			if (sc->p < sc->end && *sc->p == '"') {
				if (str(sc, &v, &esc))
					return -EINVAL;
			} else if (number(sc, &v)) {
				return -EINVAL;
			}
			if (corr_us_text_to_ns(v.s, v.n, ts ? &e->ts : &e->dur))
				return fail(sc, "bad timestamp");
			if (ts)
				e->has_ts = true;
		} else if (IS(&k, "args")) {
			ws(sc);
			if (sc->p < sc->end && *sc->p == '{') {
				if (parse_args(sc, e))
					return -EINVAL;
			} else if (skip(sc)) {
				return -EINVAL;
			}
		} else if (skip(sc)) {
			return -EINVAL;
		}
		if (next_or_close(sc, '}', &done))
			return -EINVAL;
	}
	return 0;
}

static const char *ev_name(const struct kev *e, char *buf, size_t sz)
{
	if (!e->name.s) {
		/* no string name: "" as before, without memcpy() from NULL */
		buf[0] = '\0';
	} else if (e->name_esc) {
		unescape(&e->name, buf, sz);
	} else {
		size_t n = e->name.n < sz - 1 ? e->name.n : sz - 1;

		memcpy(buf, e->name.s, n);
		buf[n] = '\0';
	}
	return buf;
}

#define COMM_STR_LEN 256

/*
 * the communication op of an event (a cpu_op, or a kernel's arguments when
 * corr_id is set) to the caller's callback, strings unescaped
 */
static void comm_op(struct replay_ctx *rc, const struct kev *e, uint32_t corr_id, char *namebuf)
{
	char(*txt)[COMM_STR_LEN] = (char(*)[COMM_STR_LEN])(namebuf + NAME_MAX_LEN);
	const char *str[CA_STR_COUNT];
	struct corr_comm_op op;

	rc->st->comm_ops++;
	if (!rc->ro || !rc->ro->comm)
		return;
	for (int i = 0; i < CA_STR_COUNT; i++) {
		str[i] = NULL;
		if (e->cs[i].s) {
			unescape(&e->cs[i], txt[i], COMM_STR_LEN);
			str[i] = txt[i];
		}
	}
	/* no message arguments (older PyTorch): the first input tensor's shape and type */
	if (!str[CA_DTYPE] && e->in_type.s && e->in_elems >= 0) {
		struct span t = e->in_type;

		unescape(&t, txt[CA_DTYPE], COMM_STR_LEN);
		str[CA_DTYPE] = txt[CA_DTYPE];
	}
	op = (struct corr_comm_op){
	    .pid = corr_id ? 0 : (uint32_t)e->pid,
	    .tid = corr_id ? 0 : (uint32_t)e->tid,
	    .ts_ns = e->ts,
	    .dur_ns = e->dur,
	    .corr_id = corr_id,
	    .event = ev_name(e, namebuf, NAME_MAX_LEN),
	    .coll = str[CA_COLL],
	    .dtype = str[CA_DTYPE],
	    .pg_name = str[CA_PG_NAME],
	    .pg_desc = str[CA_PG_DESC],
	    .pg_ranks = str[CA_PG_RANKS],
	    .group_size = e->cn[CA_GROUP_SIZE],
	    .in_nelems = e->cn[CA_IN_NELEMS] >= 0 ? e->cn[CA_IN_NELEMS] : e->in_elems,
	    .out_nelems = e->cn[CA_OUT_NELEMS],
	    .rank = e->cn[CA_RANK],
	};
	rc->ro->comm(rc->ro->comm_ctx, &op);
}

static int dispatch(struct replay_ctx *rc, const struct kev *e, char *namebuf)
{
	struct corr_gpu g;

	rc->st->events++;
	if (!IS(&e->ph, "X") || !e->cat.n) {
		rc->st->skipped++;
		return 0;
	}
	if (IS(&e->cat, "cuda_runtime") || IS(&e->cat, "cuda_driver")) {
		if (!e->has_corr) {
			rc->st->skipped++;
			return 0;
		}
		rc->st->launches++;
		return corr__add_launch(rc->c, (uint32_t)e->pid, (uint32_t)e->tid, e->ts,
					(uint32_t)e->corr, (uint32_t)e->cbid,
					ev_name(e, namebuf, NAME_MAX_LEN));
	}
	if (IS(&e->cat, "kernel") || IS(&e->cat, "gpu_memcpy") || IS(&e->cat, "gpu_memset")) {
		memset(&g, 0, sizeof(g));
		g.kind = IS(&e->cat, "kernel")	     ? CORR_KIND_KERNEL
			 : IS(&e->cat, "gpu_memcpy") ? CORR_KIND_MEMCPY
						     : CORR_KIND_MEMSET;
		g.pid = 0; /* Kineto's pid here is the device */
		g.corr_id = (uint32_t)e->corr;
		g.device = (uint32_t)e->device;
		g.context = (uint32_t)e->context;
		g.stream = (uint32_t)(e->stream ? e->stream : e->tid);
		g.graph_id = (uint32_t)e->graph_id;
		g.graph_node_id = e->graph_node;
		g.start_ns = e->ts;
		g.end_ns = e->ts + e->dur;
		memcpy(g.grid, e->grid, sizeof(g.grid));
		memcpy(g.block, e->block, sizeof(g.block));
		g.bytes = e->bytes;
		g.copy_kind = (uint32_t)e->copy_kind;
		/* a kernel's own communication arguments go first: its join may emit it now */
		if (e->has_comm && g.corr_id && g.kind == CORR_KIND_KERNEL)
			comm_op(rc, e, g.corr_id, namebuf);
		g.name = ev_name(e, namebuf, NAME_MAX_LEN);
		rc->st->gpu_records++;
		return corr__add_gpu(rc->c, &g);
	}
	if (IS(&e->cat, "cpu_op") && (IS(&e->name, "record_param_comms") ||
				      (e->name.n > 5 && !memcmp(e->name.s, "nccl:", 5)))) {
		comm_op(rc, e, 0, namebuf);
		return 0;
	}
	if (IS(&e->cat, "python_function") || IS(&e->cat, "user_annotation")) {
		/* PyTorch's nccl:<collective> annotation: a communication op, and a marker */
		if (e->name.n > 5 && !memcmp(e->name.s, "nccl:", 5))
			comm_op(rc, e, 0, namebuf);
		rc->st->markers++;
		if (rc->ro && rc->ro->pyspans && IS(&e->cat, "python_function")) {
			const char *nm = ev_name(e, namebuf, NAME_MAX_LEN);

			corr_pyspans__add(rc->ro->pyspans, (uint32_t)e->pid, (uint32_t)e->tid,
					  e->ts, e->dur, nm, strlen(nm));
		}
		if (rc->ro && rc->ro->marker) {
			char cat[32];
			struct corr_marker m = {
			    .pid = (uint32_t)e->pid,
			    .tid = (uint32_t)e->tid,
			    .ts_ns = e->ts,
			    .dur_ns = e->dur,
			    .cat = cat,
			    .name = ev_name(e, namebuf, NAME_MAX_LEN),
			};

			memcpy(cat, e->cat.s, e->cat.n < sizeof(cat) ? e->cat.n : sizeof(cat) - 1);
			cat[e->cat.n < sizeof(cat) ? e->cat.n : sizeof(cat) - 1] = '\0';
			rc->ro->marker(rc->ro->marker_ctx, &m);
		}
		return 0;
	}
	rc->st->skipped++;
	return 0;
}

static int events_array(struct scan *sc, struct replay_ctx *rc, char *namebuf)
{
	uint32_t n = 0;
	bool done = false;
	struct kev e;
	int err;

	if (expect(sc, '['))
		return -EINVAL;
	if (empty_close(sc, ']'))
		return 0;
	while (!done) {
		/* a stop request is seen within a few thousand events */
		if ((n++ & 4095) == 0 && replay_stopped(rc))
			return -EINTR;
		ws(sc);
		if (sc->p < sc->end && *sc->p != '{') {
			if (skip(sc)) /* not an event object: tolerate and count */
				return -EINVAL;
			rc->st->skipped++;
		} else {
			if (parse_event(sc, &e))
				return -EINVAL;
			err = dispatch(rc, &e, namebuf);
			if (err)
				return err;
		}
		if (next_or_close(sc, ']', &done))
			return -EINVAL;
	}
	return 0;
}

/* "distributedInfo": {"rank": 0, "world_size": 4, ...}: the rank of this trace */
static int dist_info(struct scan *sc, struct replay_ctx *rc)
{
	bool done = false, esc, rank = false, world = false;
	int64_t v;
	struct span k;

	ws(sc);
	if (sc->p >= sc->end || *sc->p != '{')
		return skip(sc);
	sc->p++;
	if (empty_close(sc, '}'))
		return 0;
	while (!done) {
		if (str(sc, &k, &esc) || expect(sc, ':'))
			return -EINVAL;
		if (IS(&k, "rank") || IS(&k, "world_size")) {
			if (signed_num(sc, &v))
				return -EINVAL;
			if (v >= 0 && v <= INT32_MAX) {
				if (k.n == 4) {
					rc->st->dist_rank = (uint32_t)v;
					rank = true;
				} else {
					rc->st->dist_world = (uint32_t)v;
					world = true;
				}
			}
		} else if (skip(sc)) {
			return -EINVAL;
		}
		if (next_or_close(sc, '}', &done))
			return -EINVAL;
	}
	rc->st->dist_known = rank && world && rc->st->dist_rank < rc->st->dist_world;
	return 0;
}

int kineto_read(struct replay_ctx *rc, const char *buf, size_t len)
{
	struct scan sc = {.base = buf, .p = buf + corr_bom_len(buf, len), .end = buf + len};
	/* the event name, then the communication op's strings (comm_op()) */
	char *namebuf = malloc(NAME_MAX_LEN + CA_STR_COUNT * COMM_STR_LEN);
	bool done = false, esc, seen = false;
	struct span k;
	int err = -EINVAL;

	if (!namebuf)
		return -ENOMEM;
	ws(&sc);
	if (sc.p < sc.end && *sc.p == '[') {
		/* the bare-array form of the Chrome trace format */
		err = events_array(&sc, rc, namebuf);
		seen = true;
		goto tail;
	}
	if (expect(&sc, '{'))
		goto out;
	done = empty_close(&sc, '}');
	/*
	 * Every byte counts, also after traceEvents: a trace cut or corrupted
	 * there (the metadata Kineto writes last) is an error, not ok.
	 */
	while (!done) {
		if (str(&sc, &k, &esc) || expect(&sc, ':'))
			goto out;
		if (IS(&k, "traceEvents")) {
			err = events_array(&sc, rc, namebuf);
			if (err)
				goto out;
			err = -EINVAL;
			seen = true;
		} else if (IS(&k, "distributedInfo")) {
			if (dist_info(&sc, rc))
				goto out;
		} else if (skip(&sc)) {
			goto out;
		}
		if (next_or_close(&sc, '}', &done))
			goto out;
	}
	err = 0;
	if (!seen) {
		err = -EINVAL;
		fail(&sc, "no traceEvents array");
	}
tail:
	/* nothing but white space after the document */
	if (!err) {
		ws(&sc);
		if (sc.p < sc.end) {
			err = -EINVAL;
			fail(&sc, "data after the end of the trace (corrupt or concatenated?)");
		}
	}
out:
	if (err == -EINVAL && sc.err)
		replay_log(rc, CORR_LOG_ERROR, "Kineto trace: byte offset %zu: %s", sc.err_off,
			   sc.err);
	free(namebuf);
	return err;
}

int corr_us_text_to_ns(const char *s, size_t len, uint64_t *out)
{
	uint64_t ip = 0, frac = 0;
	int fdig = 0, exp = 0, esign = 1;
	bool neg = false, any = false, round_up = false;
	size_t i = 0;

	if (i < len && (s[i] == '-' || s[i] == '+'))
		neg = s[i++] == '-';
	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++, any = true) {
		if (ip > UINT64_MAX / 100)
			return -ERANGE;
		ip = ip * 10 + (uint64_t)(s[i] - '0');
	}
	if (i < len && s[i] == '.') {
		for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, any = true) {
			/* keep 9 fraction digits (ps precision) before rounding */
			if (fdig < 9) {
				frac = frac * 10 + (uint64_t)(s[i] - '0');
				fdig++;
			} else if (fdig == 9 && s[i] >= '5') {
				round_up = true;
				fdig++;
			}
		}
	}
	if (!any)
		return -EINVAL;
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < len && (s[i] == '-' || s[i] == '+'))
			esign = s[i++] == '-' ? -1 : 1;
		/* saturate: "1e99999999999" must not overflow the int */
		for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			if (exp <= 30)
				exp = exp * 10 + (s[i] - '0');
		if (exp > 30)
			return -ERANGE;
	}
	if (i != len)
		return -EINVAL;
	if (fdig > 9)
		fdig = 9;
	if (round_up)
		frac++;
	/* value = (ip + frac / 10^fdig) * 10^(esign*exp) µs; want ns = * 1000 */
	{
		int shift = 3 + esign * exp; /* power of ten applied to ip */
		uint64_t ns = ip, fpart = frac;
		int fd = fdig;

		while (shift > 0) {
			if (ns > UINT64_MAX / 10)
				return -ERANGE;
			ns *= 10;
			if (fd > 0) {
				/* move one fraction digit into the integer */
				uint64_t p = 1;

				for (int k = 1; k < fd; k++)
					p *= 10;
				ns += fpart / p;
				fpart %= p;
				fd--;
			}
			shift--;
		}
		/* round on what fraction is left (half up) */
		if (fd > 0) {
			uint64_t p = 1;

			for (int k = 0; k < fd; k++)
				p *= 10;
			if (fpart * 2 >= p)
				ns++;
		}
		while (shift < 0) {
			uint64_t r = ns % 10;

			ns /= 10;
			if (shift == -1 && r >= 5)
				ns++;
			shift++;
		}
		*out = neg ? 0 : ns; /* negative times mean "unknown" in traces */
	}
	return 0;
}
