// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * collective.c - see collective.h. The JSON writers here and the field
 * lists of docs/events.md ("Collectives") must match.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "grow.h"
#include "internal.h"
#include "jsonw.h"

/* ------------------------------------------------------------ tables -- */

static const char *const op_names[CORR_COLL_OP_COUNT] = {
    [CORR_COLL_UNKNOWN] = "unknown",	 [CORR_COLL_ALLREDUCE] = "allreduce",
    [CORR_COLL_ALLGATHER] = "allgather", [CORR_COLL_REDUCESCATTER] = "reducescatter",
    [CORR_COLL_BROADCAST] = "broadcast", [CORR_COLL_REDUCE] = "reduce",
    [CORR_COLL_ALLTOALL] = "alltoall",	 [CORR_COLL_SEND] = "send",
    [CORR_COLL_RECV] = "recv",		 [CORR_COLL_SENDRECV] = "sendrecv",
};

const char *corr_coll_op_name(enum corr_coll_op op)
{
	return (unsigned)op < CORR_COLL_OP_COUNT ? op_names[op] : "unknown";
}

/* lower case, '_', '-', ':' and spaces dropped, into dst (NUL-terminated) */
static size_t fold(const char *s, size_t n, char *dst, size_t dsz)
{
	size_t o = 0;

	for (size_t i = 0; i < n && s[i] && o + 1 < dsz; i++) {
		char c = s[i];

		if (c == '_' || c == '-' || c == ':' || c == ' ')
			continue;
		dst[o++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
	}
	dst[o] = '\0';
	return o;
}

static bool starts(const char *s, const char *p)
{
	return !strncmp(s, p, strlen(p));
}

enum corr_coll_op corr_coll_op_parse(const char *s, size_t n)
{
	char f[64];

	if (!s)
		return CORR_COLL_UNKNOWN;
	fold(s, n, f, sizeof(f));
	/* PyTorch's variants: _allgather_base, all_gather_into_tensor, reduce_scatter_tensor, ...
	 */
	if (starts(f, "allreduce"))
		return CORR_COLL_ALLREDUCE;
	if (starts(f, "allgather"))
		return CORR_COLL_ALLGATHER;
	if (starts(f, "reducescatter"))
		return CORR_COLL_REDUCESCATTER;
	if (starts(f, "broadcast"))
		return CORR_COLL_BROADCAST;
	if (starts(f, "alltoall"))
		return CORR_COLL_ALLTOALL;
	if (starts(f, "sendrecv"))
		return CORR_COLL_SENDRECV;
	if (!strcmp(f, "reduce"))
		return CORR_COLL_REDUCE;
	if (!strcmp(f, "send"))
		return CORR_COLL_SEND;
	if (!strcmp(f, "recv"))
		return CORR_COLL_RECV;
	return CORR_COLL_UNKNOWN;
}

/* ncclDataType_t, nccl.h of NCCL 2.28.9: the names are NCCL's own short ones (kernel names) */
static const struct {
	const char *name;
	uint32_t size;
} nccl_types[CORR_NCCL_NUM_TYPES] = {
    {"int8", 1},    {"uint8", 1},    {"int32", 4},	{"uint32", 4},
    {"int64", 8},   {"uint64", 8},   {"float16", 2},	{"float32", 4},
    {"float64", 8}, {"bfloat16", 2}, {"float8e4m3", 1}, {"float8e5m2", 1},
};

const char *corr_nccl_type_name(int32_t dt)
{
	return dt >= 0 && dt < CORR_NCCL_NUM_TYPES ? nccl_types[dt].name : NULL;
}

uint32_t corr_nccl_type_size(int32_t dt)
{
	return dt >= 0 && dt < CORR_NCCL_NUM_TYPES ? nccl_types[dt].size : 0;
}

/*
 * folded spellings: NCCL >= 2.19 kernel names (i8 ... f8e5m2), older ones
 * (C type names), PyTorch's ScalarType names (record_param_comms "dtype")
 * and C++ type names (record_shapes "Input type")
 */
static const struct {
	const char *alias;
	int8_t dt;
} type_alias[] = {
    {"int8", 0},	  {"i8", 0},	       {"int8t", 0},	   {"char", 0},
    {"signedchar", 0},	  {"uint8", 1},	       {"u8", 1},	   {"uint8t", 1},
    {"byte", 1},	  {"unsignedchar", 1}, {"bool", 1},	   {"int32", 2},
    {"i32", 2},		  {"int32t", 2},       {"int", 2},	   {"uint32", 3},
    {"u32", 3},		  {"uint32t", 3},      {"unsignedint", 3}, {"int64", 4},
    {"i64", 4},		  {"int64t", 4},       {"long", 4},	   {"longint", 4},
    {"uint64", 5},	  {"u64", 5},	       {"uint64t", 5},	   {"unsignedlong", 5},
    {"float16", 6},	  {"f16", 6},	       {"half", 6},	   {"c10half", 6},
    {"float32", 7},	  {"f32", 7},	       {"float", 7},	   {"float64", 8},
    {"f64", 8},		  {"double", 8},       {"bfloat16", 9},	   {"bf16", 9},
    {"nvbfloat16", 9},	  {"c10bfloat16", 9},  {"float8e4m3", 10}, {"f8e4m3", 10},
    {"float8e4m3fn", 10}, {"nvfp8e4m3", 10},   {"float8e5m2", 11}, {"f8e5m2", 11},
    {"nvfp8e5m2", 11},
};

int32_t corr_nccl_type_parse(const char *s, size_t n)
{
	char f[64];

	if (!s)
		return CORR_COLL_NONE;
	fold(s, n, f, sizeof(f));
	for (size_t i = 0; i < sizeof(type_alias) / sizeof(type_alias[0]); i++)
		if (!strcmp(f, type_alias[i].alias))
			return type_alias[i].dt;
	return CORR_COLL_NONE;
}

/* ncclRedOp_t, nccl.h of NCCL 2.28.9 */
static const char *const redop_names[CORR_NCCL_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

const char *corr_nccl_redop_name(int32_t op)
{
	if (op < 0)
		return NULL;
	/* from ncclNumOps on: made by ncclRedOpCreatePreMulSum, the only constructor */
	return op < CORR_NCCL_NUM_OPS ? redop_names[op] : "premulsum";
}

int32_t corr_nccl_redop_parse(const char *s, size_t n)
{
	char f[32];

	if (!s)
		return CORR_COLL_NONE;
	fold(s, n, f, sizeof(f));
	for (int32_t i = 0; i < CORR_NCCL_NUM_OPS; i++)
		if (!strcmp(f, redop_names[i]))
			return i;
	/* kernel names of NCCL >= 2.19 spell the pre-multiplied sum "PreMulSum", avg "SumPostDiv"
	 */
	if (!strcmp(f, "premulsum"))
		return CORR_NCCL_NUM_OPS;
	if (!strcmp(f, "sumpostdiv"))
		return 4;
	return CORR_COLL_NONE;
}

uint64_t corr_coll_hash(const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 offset basis and prime */

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

void corr_coll_check(struct corr_collective *c, struct corr_coll_counters *n)
{
	uint32_t sz = corr_nccl_type_size(c->datatype);

	if (c->flags & CORR_COLL_F_COUNT_UNKNOWN)
		c->count = 0;
	if (sz) {
		c->flags &= ~CORR_COLL_F_DTYPE_UNKNOWN;
		c->bytes = c->count > UINT64_MAX / sz ? UINT64_MAX : c->count * sz;
	} else {
		c->flags |= CORR_COLL_F_DTYPE_UNKNOWN;
		c->bytes = 0;
	}
	if (!n)
		return;
	n->collectives++;
	if (!sz)
		n->dtype_unknown++;
	if (c->flags & CORR_COLL_F_COMM_UNKNOWN)
		n->comm_unknown++;
	if (c->op == CORR_COLL_UNKNOWN || (unsigned)c->op >= CORR_COLL_OP_COUNT)
		n->op_unknown++;
	if (c->kernel || c->gpu_end_ns)
		n->joined++;
}

/* -------------------------------------------------------------- JSON -- */

static void jw_opt_int(struct jsonw *w, const char *key, int64_t v, bool known)
{
	if (known)
		jw_int(w, key, v);
	else
		jw_null(w, key);
}

static void jw_opt_str(struct jsonw *w, const char *key, const char *s)
{
	if (s)
		jw_str(w, key, s);
	else
		jw_null(w, key);
}

static bool op_has_root(enum corr_coll_op op)
{
	return op == CORR_COLL_BROADCAST || op == CORR_COLL_REDUCE;
}

static bool op_has_peer(enum corr_coll_op op)
{
	return op == CORR_COLL_SEND || op == CORR_COLL_RECV;
}

int corr_coll_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		      const struct corr_collective *c)
{
	bool joined = c->gpu_end_ns != 0 || c->kernel;
	struct jsonw w;
	long n;

	jw_init(&w, buf, sz);
	jw_common(&w, "collective", cm ? cm->host : NULL, cm ? cm->instance : NULL, c->pid, c->tid,
		  c->enqueue_ns ? c->enqueue_ns : c->gpu_start_ns);
	jw_hex(&w, "comm", c->comm_hash);
	jw_bool(&w, "comm_known", !(c->flags & CORR_COLL_F_COMM_UNKNOWN));
	jw_opt_int(&w, "rank", c->rank, c->rank >= 0);
	jw_opt_int(&w, "nranks", c->nranks, c->nranks > 0);
	jw_uint(&w, "seq", c->seq);
	jw_str(&w, "op", corr_coll_op_name(c->op));
	jw_opt_int(&w, "count", (int64_t)c->count, !(c->flags & CORR_COLL_F_COUNT_UNKNOWN));
	jw_opt_str(&w, "datatype", corr_nccl_type_name(c->datatype));
	jw_opt_int(&w, "datatype_id", c->datatype, c->datatype != CORR_COLL_NONE);
	jw_opt_int(&w, "bytes", (int64_t)c->bytes, !(c->flags & CORR_COLL_F_COUNT_UNKNOWN));
	jw_opt_str(&w, "redop", corr_nccl_redop_name(c->redop));
	jw_opt_int(&w, "root", c->root, op_has_root(c->op) && c->root >= 0);
	jw_opt_int(&w, "peer", c->root, op_has_peer(c->op) && c->root >= 0);
	jw_hex(&w, "stream", c->stream);
	jw_opt_int(&w, "enqueue_ns", (int64_t)c->enqueue_ns, c->enqueue_ns != 0);
	jw_uint(&w, "group", c->group_id);
	jw_bool(&w, "joined", joined);
	jw_opt_int(&w, "gpu_start_ns", (int64_t)c->gpu_start_ns, joined);
	jw_opt_int(&w, "gpu_end_ns", (int64_t)c->gpu_end_ns, joined);
	jw_opt_int(&w, "gpu_dur_ns",
		   (int64_t)(c->gpu_end_ns > c->gpu_start_ns ? c->gpu_end_ns - c->gpu_start_ns : 0),
		   joined);
	jw_opt_int(&w, "device", c->device, joined);
	jw_opt_str(&w, "kernel", c->kernel);
	jw_opt_str(&w, "algorithm", c->algo);
	jw_opt_str(&w, "protocol", c->proto);
	jw_bool(&w, "from_kernel_name", c->flags & CORR_COLL_F_OP_FROM_KERNEL);
	n = jw_end(&w);
	return n < 0 ? -ENOSPC : (int)n;
}

static const char *const end_names[] = {
    [CORR_WAIT_COMPLETE] = "complete",
    [CORR_WAIT_TIMEOUT] = "timeout",
    [CORR_WAIT_FLUSH] = "flush",
    [CORR_WAIT_EVICTED] = "evicted",
};

/* a nested object written in place after w's text */
static void rank_obj(struct jsonw *w, const struct corr_wait_rank *r)
{
	struct jsonw o;
	long n;

	if (w->overflow)
		return;
	jw_init(&o, w->buf + w->len, w->cap - w->len);
	jw_int(&o, "rank", r->rank);
	jw_uint(&o, "pid", r->pid);
	jw_uint(&o, "tid", r->tid);
	jw_uint(&o, "arrival_ns", r->arrival_ns);
	jw_str(&o, "arrival", r->from_kernel ? "kernel" : "enqueue");
	jw_uint(&o, "wait_ns", r->wait_ns);
	n = jw_end(&o);
	if (n < 0)
		w->overflow = 1;
	else
		w->len += (size_t)n;
}

int corr_wait_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
		      const struct corr_wait *cw)
{
	const struct corr_wait_rank *last = cw->n_arrived ? &cw->ranks[cw->n_arrived - 1] : NULL;
	struct jsonw w;
	char num[24];
	long n;

	jw_init(&w, buf, sz);
	jw_common(&w, "collective_wait", cm ? cm->host : NULL, cm ? cm->instance : NULL,
		  last ? (int64_t)last->pid : JW_OMIT, last ? (int64_t)last->tid : JW_OMIT,
		  cw->n_arrived ? cw->ranks[0].arrival_ns : 0);
	jw_hex(&w, "comm", cw->comm_hash);
	jw_uint(&w, "seq", cw->seq);
	jw_str(&w, "op", corr_coll_op_name(cw->op));
	jw_opt_int(&w, "nranks", cw->nranks, cw->nranks > 0);
	jw_str(&w, "end", (unsigned)cw->end < 4 ? end_names[cw->end] : "unknown");
	jw_opt_int(&w, "expected", cw->n_expected, cw->n_expected > 0);
	jw_uint(&w, "arrived", cw->n_arrived);
	jw_opt_int(&w, "last_rank", cw->last_rank, cw->last_rank >= 0);
	jw_opt_int(&w, "last_arrival_ns", (int64_t)cw->last_arrival_ns, cw->n_arrived > 0);
	jw_uint(&w, "late_ns", cw->late_ns);
	jw_uint(&w, "wait_max_ns", cw->wait_max_ns);
	jw_uint(&w, "wait_total_ns", cw->wait_total_ns);
	jw_bool(&w, "op_mismatch", cw->op_mismatch);
	jw_key(&w, "ranks");
	jw_raw(&w, "[", 1);
	for (uint32_t i = 0; i < cw->n_arrived; i++) {
		if (i)
			jw_raw(&w, ",", 1);
		rank_obj(&w, &cw->ranks[i]);
	}
	jw_raw(&w, "]", 1);
	jw_key(&w, "missing_ranks");
	jw_raw(&w, "[", 1);
	for (uint32_t i = 0; i < cw->n_missing; i++) {
		int k = snprintf(num, sizeof(num), "%s%d", i ? "," : "", cw->missing[i]);

		jw_raw(&w, num, (size_t)k);
	}
	jw_raw(&w, "]", 1);
	n = jw_end(&w);
	return n < 0 ? -ENOSPC : (int)n;
}

/* "0-2,5" from ascending ranks */
static int rank_list(char *buf, size_t sz, const int32_t *r, uint32_t n)
{
	size_t o = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < n;) {
		uint32_t j = i;
		int k;

		while (j + 1 < n && r[j + 1] == r[j] + 1)
			j++;
		if (j > i)
			k = snprintf(buf + o, sz - o, "%s%d-%d", o ? "," : "", r[i], r[j]);
		else
			k = snprintf(buf + o, sz - o, "%s%d", o ? "," : "", r[i]);
		if (k < 0 || (size_t)k >= sz - o)
			return -ENOSPC;
		o += (size_t)k;
		i = j + 1;
	}
	return 0;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

int corr_wait_evidence(char *buf, size_t sz, const struct corr_wait *cw)
{
	int32_t others[CORR_WAIT_MAX_RANKS];
	char list[512], miss[512];
	uint32_t no = 0;
	int k;

	if (!sz)
		return -ENOSPC;
	for (uint32_t i = 0; i + 1 < cw->n_arrived && no < CORR_WAIT_MAX_RANKS; i++)
		others[no++] = cw->ranks[i].rank;
	qsort(others, no, sizeof(others[0]), cmp_i32);
	if (rank_list(list, sizeof(list), others, no) ||
	    rank_list(miss, sizeof(miss), cw->missing, cw->n_missing))
		return -ENOSPC;
	if (!cw->n_arrived)
		k = snprintf(buf, sz, "no rank arrived at %s #%llu (comm %08llx…)",
			     corr_coll_op_name(cw->op), (unsigned long long)cw->seq,
			     (unsigned long long)(cw->comm_hash >> 32));
	else if (!no)
		k = snprintf(buf, sz, "rank %d arrived alone at %s #%llu (comm %08llx…)",
			     cw->last_rank, corr_coll_op_name(cw->op), (unsigned long long)cw->seq,
			     (unsigned long long)(cw->comm_hash >> 32));
	else
		k = snprintf(buf, sz,
			     "rank %d arrived %.2f ms late at %s #%llu (comm %08llx…); rank%s %s "
			     "spent %.2f ms waiting",
			     cw->last_rank, cw->late_ns / 1e6, corr_coll_op_name(cw->op),
			     (unsigned long long)cw->seq, (unsigned long long)(cw->comm_hash >> 32),
			     no > 1 ? "s" : "", list, cw->wait_total_ns / 1e6);
	if (k >= 0 && (size_t)k < sz && cw->n_missing)
		k += snprintf(buf + k, sz - (size_t)k, "; rank%s %s never arrived",
			      cw->n_missing > 1 ? "s" : "", miss);
	return k < 0 || (size_t)k >= sz ? -ENOSPC : 0;
}

/* ---------------------------------------------------- the wait tracker -- */

struct wentry {
	uint64_t comm, seq;
	uint64_t first_ns; /* earliest arrival */
	int32_t nranks;
	enum corr_coll_op op;
	bool op_mismatch;
	bool used;
	uint32_t n;
	int32_t hnext;	      /* bucket chain, or the free list */
	int32_t older, newer; /* insertion order */
	struct corr_wait_rank r[CORR_WAIT_MAX_RANKS];
};

struct wcomm {
	uint64_t comm;
	uint32_t n;
	int32_t ranks[CORR_WAIT_MAX_RANKS]; /* ascending */
};

struct corr_waits {
	struct corr_waits_opts o;
	struct wentry *e;
	int32_t *bucket;
	uint32_t nbucket; /* power of two */
	int32_t free_head;
	int32_t oldest, newest;
	uint32_t pending;
	struct wcomm *comms;
	uint32_t ncomms;
	struct corr_waits_counters cnt;
};

struct corr_waits *corr_waits__new(const struct corr_waits_opts *opts)
{
	struct corr_waits *w;

	if (!opts || opts->sz < offsetof(struct corr_waits_opts, emit_ctx) + sizeof(void *) ||
	    !opts->emit) {
		errno = EINVAL;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->o = *opts;
	w->o.sz = sizeof(w->o);
	if (!w->o.capacity)
		w->o.capacity = 1024;
	if (w->o.capacity > (1u << 20))
		w->o.capacity = 1u << 20;
	if (!w->o.comm_capacity)
		w->o.comm_capacity = 256;
	if (!w->o.timeout_ns)
		w->o.timeout_ns = 10ULL * 1000 * 1000 * 1000;
	w->nbucket = corr_pow2((uint64_t)w->o.capacity * 2);
	w->e = calloc(w->o.capacity, sizeof(*w->e));
	w->bucket = malloc(w->nbucket * sizeof(*w->bucket));
	w->comms = calloc(w->o.comm_capacity, sizeof(*w->comms));
	if (!w->e || !w->bucket || !w->comms) {
		corr_waits__free(w);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < w->nbucket; i++)
		w->bucket[i] = -1;
	for (uint32_t i = 0; i < w->o.capacity; i++)
		w->e[i].hnext = i + 1 < w->o.capacity ? (int32_t)i + 1 : -1;
	w->free_head = 0;
	w->oldest = w->newest = -1;
	return w;
}

void corr_waits__free(struct corr_waits *w)
{
	if (!w)
		return;
	free(w->e);
	free(w->bucket);
	free(w->comms);
	free(w);
}

static uint32_t wbucket(const struct corr_waits *w, uint64_t comm, uint64_t seq)
{
	return (uint32_t)(corr_hash64(comm ^ corr_hash64(seq)) & (w->nbucket - 1));
}

static struct wcomm *comm_find(struct corr_waits *w, uint64_t comm)
{
	for (uint32_t i = 0; i < w->ncomms; i++)
		if (w->comms[i].comm == comm)
			return &w->comms[i];
	return NULL;
}

int corr_waits__expect(struct corr_waits *w, uint64_t comm_hash, const int32_t *ranks, uint32_t n)
{
	struct wcomm *c;

	if (!w || (n && !ranks) || n > CORR_WAIT_MAX_RANKS)
		return -EINVAL;
	c = comm_find(w, comm_hash);
	if (!c) {
		if (w->ncomms >= w->o.comm_capacity) {
			w->cnt.comms_dropped++;
			return -ENOSPC;
		}
		c = &w->comms[w->ncomms++];
		c->comm = comm_hash;
	}
	c->n = 0;
	for (uint32_t i = 0; i < n; i++) {
		bool dup = false;

		for (uint32_t j = 0; j < c->n; j++)
			dup |= c->ranks[j] == ranks[i];
		if (!dup && ranks[i] >= 0)
			c->ranks[c->n++] = ranks[i];
	}
	qsort(c->ranks, c->n, sizeof(c->ranks[0]), cmp_i32);
	return 0;
}

/* the expected ranks of an entry into exp (ascending); their number, 0 when unknown */
static uint32_t expected(struct corr_waits *w, const struct wentry *e, int32_t *exp)
{
	const struct wcomm *c = comm_find(w, e->comm);

	if (c && c->n) {
		memcpy(exp, c->ranks, c->n * sizeof(exp[0]));
		return c->n;
	}
	if (e->nranks <= 0 || e->nranks > CORR_WAIT_MAX_RANKS)
		return 0;
	for (int32_t i = 0; i < e->nranks; i++)
		exp[i] = i;
	return (uint32_t)e->nranks;
}

static bool has_rank(const struct wentry *e, int32_t rank)
{
	for (uint32_t i = 0; i < e->n; i++)
		if (e->r[i].rank == rank)
			return true;
	return false;
}

static void unlink_entry(struct corr_waits *w, int32_t idx)
{
	struct wentry *e = &w->e[idx];
	int32_t *pp = &w->bucket[wbucket(w, e->comm, e->seq)];

	while (*pp != idx)
		pp = &w->e[*pp].hnext;
	*pp = e->hnext;
	if (e->older >= 0)
		w->e[e->older].newer = e->newer;
	else
		w->oldest = e->newer;
	if (e->newer >= 0)
		w->e[e->newer].older = e->older;
	else
		w->newest = e->older;
	e->used = false;
	e->hnext = w->free_head;
	w->free_head = idx;
	w->pending--;
}

/* emit the result of an entry and free it */
static void finish(struct corr_waits *w, int32_t idx, enum corr_wait_end end)
{
	struct wentry *e = &w->e[idx];
	int32_t exp[CORR_WAIT_MAX_RANKS], missing[CORR_WAIT_MAX_RANKS];
	struct corr_wait res = {
	    .comm_hash = e->comm,
	    .seq = e->seq,
	    .op = e->op,
	    .nranks = e->nranks,
	    .end = end,
	    .n_arrived = e->n,
	    .ranks = e->r,
	    .missing = missing,
	    .last_rank = CORR_COLL_NONE,
	    .op_mismatch = e->op_mismatch,
	};

	res.n_expected = expected(w, e, exp);
	for (uint32_t i = 0; i < res.n_expected; i++)
		if (!has_rank(e, exp[i]))
			missing[res.n_missing++] = exp[i];
	/* arrival order (insertion sort: at most 64, nearly sorted) */
	for (uint32_t i = 1; i < e->n; i++) {
		struct corr_wait_rank t = e->r[i];
		uint32_t j = i;

		while (j && e->r[j - 1].arrival_ns > t.arrival_ns) {
			e->r[j] = e->r[j - 1];
			j--;
		}
		e->r[j] = t;
	}
	if (e->n) {
		const struct corr_wait_rank *last = &e->r[e->n - 1];

		res.last_rank = last->rank;
		res.last_arrival_ns = last->arrival_ns;
		res.wait_max_ns = last->arrival_ns - e->r[0].arrival_ns;
		if (e->n > 1)
			res.late_ns = last->arrival_ns - e->r[e->n - 2].arrival_ns;
		for (uint32_t i = 0; i < e->n; i++) {
			e->r[i].wait_ns = last->arrival_ns - e->r[i].arrival_ns;
			res.wait_total_ns += e->r[i].wait_ns;
		}
	}
	if (end == CORR_WAIT_COMPLETE && !res.n_missing)
		w->cnt.complete++;
	else
		w->cnt.incomplete++;
	if (end == CORR_WAIT_EVICTED)
		w->cnt.evicted++;
	w->o.emit(w->o.emit_ctx, &res);
	unlink_entry(w, idx);
}

static int32_t lookup(struct corr_waits *w, uint64_t comm, uint64_t seq)
{
	for (int32_t i = w->bucket[wbucket(w, comm, seq)]; i >= 0; i = w->e[i].hnext)
		if (w->e[i].comm == comm && w->e[i].seq == seq)
			return i;
	return -1;
}

static int32_t insert(struct corr_waits *w, const struct corr_collective *c, uint64_t t)
{
	uint32_t b = wbucket(w, c->comm_hash, c->seq);
	struct wentry *e;
	int32_t idx;

	if (w->free_head < 0)
		finish(w, w->oldest, CORR_WAIT_EVICTED);
	idx = w->free_head;
	e = &w->e[idx];
	w->free_head = e->hnext;
	e->comm = c->comm_hash;
	e->seq = c->seq;
	e->first_ns = t;
	e->nranks = c->nranks;
	e->op = c->op;
	e->op_mismatch = false;
	e->used = true;
	e->n = 0;
	e->hnext = w->bucket[b];
	w->bucket[b] = idx;
	e->older = w->newest;
	e->newer = -1;
	if (w->newest >= 0)
		w->e[w->newest].newer = idx;
	else
		w->oldest = idx;
	w->newest = idx;
	w->pending++;
	return idx;
}

int corr_waits__add(struct corr_waits *w, const struct corr_collective *c)
{
	int32_t exp[CORR_WAIT_MAX_RANKS];
	bool from_kernel = c->gpu_start_ns != 0;
	uint64_t t = from_kernel ? c->gpu_start_ns : c->enqueue_ns;
	struct wentry *e;
	uint32_t ne, got = 0;
	int32_t idx;

	if (!w || !c)
		return -EINVAL;
	w->cnt.arrivals++;
	if (c->rank < 0) {
		w->cnt.no_rank++;
		return 0;
	}
	idx = lookup(w, c->comm_hash, c->seq);
	if (idx < 0)
		idx = insert(w, c, t);
	e = &w->e[idx];
	if (has_rank(e, c->rank)) {
		w->cnt.duplicates++;
		return 0;
	}
	if (e->n >= CORR_WAIT_MAX_RANKS) {
		w->cnt.too_many_ranks++;
		return 0;
	}
	e->r[e->n++] = (struct corr_wait_rank){
	    .rank = c->rank,
	    .pid = c->pid,
	    .tid = c->tid,
	    .arrival_ns = t,
	    .from_kernel = from_kernel,
	};
	if (t < e->first_ns)
		e->first_ns = t;
	if (e->nranks <= 0)
		e->nranks = c->nranks;
	if (e->op != c->op)
		e->op_mismatch = true;
	ne = expected(w, e, exp);
	if (!ne)
		return 0;
	for (uint32_t i = 0; i < ne; i++)
		got += has_rank(e, exp[i]);
	if (got == ne)
		finish(w, idx, CORR_WAIT_COMPLETE);
	return 0;
}

int corr_waits__advance(struct corr_waits *w, uint64_t now_ns)
{
	int32_t i, next;

	if (!w)
		return -EINVAL;
	for (i = w->oldest; i >= 0; i = next) {
		next = w->e[i].newer;
		if (w->e[i].first_ns + w->o.timeout_ns < now_ns)
			finish(w, i, CORR_WAIT_TIMEOUT);
	}
	return 0;
}

int corr_waits__flush(struct corr_waits *w)
{
	if (!w)
		return -EINVAL;
	while (w->oldest >= 0)
		finish(w, w->oldest, CORR_WAIT_FLUSH);
	return 0;
}

const struct corr_waits_counters *corr_waits__counters(const struct corr_waits *w)
{
	return &w->cnt;
}

uint32_t corr_waits__pending(const struct corr_waits *w)
{
	return w->pending;
}

/* ------------------------------------------------ per-interval summary -- */

struct corr_coll_agg {
	struct corr_coll_row *rows; /* grown as rows come, up to cap */
	size_t n, alloc;
	uint32_t cap;
	uint64_t dropped;
};

struct corr_coll_agg *corr_coll_agg__new(uint32_t capacity)
{
	struct corr_coll_agg *a = calloc(1, sizeof(*a));

	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->cap = capacity ? capacity : 256;
	return a;
}

void corr_coll_agg__free(struct corr_coll_agg *a)
{
	if (!a)
		return;
	free(a->rows);
	free(a);
}

static struct corr_coll_row *agg_row(struct corr_coll_agg *a, uint32_t pid, uint64_t comm,
				     enum corr_coll_op op, int32_t rank, int32_t nranks)
{
	struct corr_coll_row *r;

	for (size_t i = 0; i < a->n; i++) {
		r = &a->rows[i];
		if (r->pid == pid && r->comm_hash == comm && r->op == op && r->rank == rank)
			return r;
	}
	if (a->n >= a->cap ||
	    grow_array((void **)&a->rows, &a->alloc, a->n, sizeof(*a->rows), 16)) {
		a->dropped++;
		return NULL;
	}
	r = &a->rows[a->n++];
	*r = (struct corr_coll_row){
	    .pid = pid, .comm_hash = comm, .op = op, .rank = rank, .nranks = nranks};
	return r;
}

int corr_coll_agg__add(struct corr_coll_agg *a, const struct corr_collective *c)
{
	struct corr_coll_row *r;

	if (!a || !c)
		return -EINVAL;
	r = agg_row(a, c->pid, c->comm_hash, c->op, c->rank, c->nranks);
	if (!r)
		return -ENOSPC;
	r->calls++;
	r->bytes += c->bytes;
	if (c->gpu_end_ns) {
		r->joined++;
		r->gpu_ns += c->gpu_end_ns > c->gpu_start_ns ? c->gpu_end_ns - c->gpu_start_ns : 0;
	}
	return 0;
}

int corr_coll_agg__add_wait(struct corr_coll_agg *a, const struct corr_wait *w)
{
	int err = 0;

	if (!a || !w)
		return -EINVAL;
	for (uint32_t i = 0; i < w->n_arrived; i++) {
		const struct corr_wait_rank *k = &w->ranks[i];
		struct corr_coll_row *r =
		    agg_row(a, k->pid, w->comm_hash, w->op, k->rank, w->nranks);

		if (!r) {
			err = -ENOSPC;
			continue;
		}
		r->waits++;
		r->wait_ns += k->wait_ns;
		if (i + 1 == w->n_arrived && w->n_arrived > 1) {
			r->last++;
			r->late_ns += w->late_ns;
		}
	}
	return err;
}

int corr_coll_agg__cut(struct corr_coll_agg *a, corr_coll_row_fn fn, void *ctx)
{
	if (!a || !fn)
		return -EINVAL;
	for (size_t i = 0; i < a->n; i++)
		fn(ctx, &a->rows[i]);
	a->n = 0;
	return 0;
}

uint64_t corr_coll_agg__dropped(const struct corr_coll_agg *a)
{
	return a->dropped;
}

int corr_coll_row_to_json(char *buf, size_t sz, const struct corr_json_common *cm,
			  const struct corr_coll_row *r, uint64_t t0_ns, uint64_t t1_ns)
{
	struct jsonw w;
	long n;

	jw_init(&w, buf, sz);
	jw_common(&w, "collective_summary", cm ? cm->host : NULL, cm ? cm->instance : NULL,
		  r->pid ? (int64_t)r->pid : JW_OMIT, JW_OMIT, t0_ns);
	jw_uint(&w, "interval_start_ns", t0_ns);
	jw_uint(&w, "interval_end_ns", t1_ns);
	jw_hex(&w, "comm", r->comm_hash);
	jw_str(&w, "op", corr_coll_op_name(r->op));
	jw_opt_int(&w, "rank", r->rank, r->rank >= 0);
	jw_opt_int(&w, "nranks", r->nranks, r->nranks > 0);
	jw_uint(&w, "calls", r->calls);
	jw_uint(&w, "bytes", r->bytes);
	jw_uint(&w, "joined", r->joined);
	jw_uint(&w, "gpu_ns", r->gpu_ns);
	jw_uint(&w, "waits", r->waits);
	jw_uint(&w, "wait_ns", r->wait_ns);
	jw_uint(&w, "last", r->last);
	jw_uint(&w, "late_ns", r->late_ns);
	n = jw_end(&w);
	return n < 0 ? -ENOSPC : (int)n;
}

/* --------------------------------------------------- NCCL kernel names -- */

enum ktok { K_OP, K_ALGO, K_PROTO, K_REDOP, K_TYPE };

/*
 * The tokens of NCCL's kernel names, longest spelling first where one is a
 * prefix of another. NCCL >= 2.19 (src/device/generate.py):
 * ncclDevKernel_<Coll>_<RedOp>_<Type>_<Algo>_<Proto> for reductions,
 * ncclDevKernel_<Coll>_<Algo>_<Proto> otherwise, ncclDevKernel_SendRecv;
 * before: ncclKernel_<Coll>_<Algo>_<Proto>_<RedOp>_<C type>.
 */
static const struct {
	const char *s;
	uint8_t kind;
	int8_t v;
} ktoks[] = {
    {"AllReduce", K_OP, CORR_COLL_ALLREDUCE},
    {"AllGather", K_OP, CORR_COLL_ALLGATHER},
    {"ReduceScatter", K_OP, CORR_COLL_REDUCESCATTER},
    {"Broadcast", K_OP, CORR_COLL_BROADCAST},
    {"Reduce", K_OP, CORR_COLL_REDUCE},
    {"SendRecv", K_OP, CORR_COLL_SENDRECV},
    {"AllToAll", K_OP, CORR_COLL_ALLTOALL},
    {"COLLNET_DIRECT", K_ALGO, 0},
    {"COLLNET_CHAIN", K_ALGO, 1},
    {"NVLS_TREE", K_ALGO, 2},
    {"NVLS", K_ALGO, 3},
    {"RING", K_ALGO, 4},
    {"TREE", K_ALGO, 5},
    {"PAT", K_ALGO, 6},
    {"LL128", K_PROTO, 0},
    {"LL", K_PROTO, 1},
    {"SIMPLE", K_PROTO, 2},
    {"PreMulSum", K_REDOP, CORR_NCCL_NUM_OPS},
    {"SumPostDiv", K_REDOP, 4},
    {"Sum", K_REDOP, 0},
    {"Prod", K_REDOP, 1},
    {"MinMax", K_REDOP, CORR_COLL_NONE}, /* one kernel for min and max: not told */
    {"Max", K_REDOP, 2},
    {"Min", K_REDOP, 3},
    {"Avg", K_REDOP, 4},
    {"__nv_bfloat16", K_TYPE, 9},
    {"__nv_fp8_e4m3", K_TYPE, 10},
    {"__nv_fp8_e5m2", K_TYPE, 11},
    {"uint8_t", K_TYPE, 1},
    {"int8_t", K_TYPE, 0},
    {"uint32_t", K_TYPE, 3},
    {"int32_t", K_TYPE, 2},
    {"uint64_t", K_TYPE, 5},
    {"int64_t", K_TYPE, 4},
    {"half", K_TYPE, 6},
    {"float", K_TYPE, 7},
    {"double", K_TYPE, 8},
    {"f8e4m3", K_TYPE, 10},
    {"f8e5m2", K_TYPE, 11},
    {"bf16", K_TYPE, 9},
    {"f16", K_TYPE, 6},
    {"f32", K_TYPE, 7},
    {"f64", K_TYPE, 8},
    {"i8", K_TYPE, 0},
    {"u8", K_TYPE, 1},
    {"i32", K_TYPE, 2},
    {"u32", K_TYPE, 3},
    {"i64", K_TYPE, 4},
    {"u64", K_TYPE, 5},
};

static const char *const algo_names[] = {"COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS",
					 "RING",	   "TREE",	    "PAT"};
static const char *const proto_names[] = {"LL128", "LL", "SIMPLE"};

static bool op_reduces(enum corr_coll_op op)
{
	return op == CORR_COLL_ALLREDUCE || op == CORR_COLL_REDUCE || op == CORR_COLL_REDUCESCATTER;
}

bool corr_coll_from_kernel(const char *name, struct corr_collective *c)
{
	const char *p, *end;
	int32_t redop = CORR_COLL_NONE, dt = CORR_COLL_NONE;
	enum corr_coll_op op = CORR_COLL_UNKNOWN;
	const char *algo = NULL, *proto = NULL;

	if (!name)
		return false;
	/* plain, or Itanium-mangled (_Z<len>ncclDevKernel_...): the part after the prefix */
	p = name;
	end = name + strlen(name);
	if (p[0] == '_' && p[1] == 'Z') {
		char *q;
		unsigned long len = strtoul(p + 2, &q, 10);

		if (q == p + 2 || len > (size_t)(end - q))
			return false;
		p = q;
		end = q + len; /* the mangled length covers the identifier */
	}
	if ((size_t)(end - p) > 14 && !strncmp(p, "ncclDevKernel_", 14))
		p += 14;
	else if ((size_t)(end - p) > 11 && !strncmp(p, "ncclKernel_", 11))
		p += 11;
	else
		return false;
	if (name[0] != '_')
		end = p + strcspn(p, "(");
	while (p < end) {
		size_t i, n = 0;

		for (i = 0; i < sizeof(ktoks) / sizeof(ktoks[0]); i++) {
			n = strlen(ktoks[i].s);
			if ((size_t)(end - p) >= n && !memcmp(p, ktoks[i].s, n) &&
			    (p + n == end || p[n] == '_'))
				break;
		}
		if (i == sizeof(ktoks) / sizeof(ktoks[0])) {
			/* an unknown token: skip it */
			const char *u = memchr(p, '_', (size_t)(end - p));

			p = u ? u + 1 : end;
			continue;
		}
		switch (ktoks[i].kind) {
		case K_OP:
			op = (enum corr_coll_op)ktoks[i].v;
			break;
		case K_ALGO:
			algo = algo_names[ktoks[i].v];
			break;
		case K_PROTO:
			proto = proto_names[ktoks[i].v];
			break;
		case K_REDOP:
			redop = ktoks[i].v;
			break;
		case K_TYPE:
			dt = ktoks[i].v;
			break;
		}
		p += n;
		if (p < end && *p == '_')
			p++;
	}
	/* an NCCL kernel this table does not know (a newer NCCL): op unknown, counted */
	c->op = op;
	/* non-reducing kernels carry NCCL's placeholder Sum / int8_t in the old names */
	c->redop = op_reduces(op) ? redop : CORR_COLL_NONE;
	c->datatype = op_reduces(op) ? dt : CORR_COLL_NONE;
	c->algo = algo;
	c->proto = proto;
	c->flags |= CORR_COLL_F_OP_FROM_KERNEL;
	return true;
}
