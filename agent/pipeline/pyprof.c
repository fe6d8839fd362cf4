// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * pyprof.c - --summary's "GPU time by the Python calls that launched it":
 * the join (join.c) hands over each GPU record it gave a launch_python
 * field, that field's JSON array and the record's GPU time; the same
 * stacks come again and again (a model's forward launches the same kernels
 * each step), so they are kept once each, by their bytes, with their time
 * and count. At exit the distinct stacks are parsed once and merged into a
 * call tree (outermost call at the root, one node per function: its
 * function, file and first line), printed with the time of each call and
 * what it called, a text flame graph: live (main.c) and in a replay
 * (agent/sources/replay.c), the same for both.
 *
 * Bounded: at most PP_STACKS distinct stacks and PP_BYTES of their JSON,
 * kept by the correlator's string table (corr_strtab); records of stacks
 * beyond them are counted and printed as such, not lost.
 *
 * Everything runs on the event loop thread.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "pipeline.h"
#include "correlator.h"

#define PP_STACKS 3072	    /* distinct stacks kept */
#define PP_BYTES (8u << 20) /* bytes of their JSON kept */
#define PP_FOLD_PERMILLE 10 /* a call under 1% of the GPU time is folded into its caller's line */
#define PP_LINES 48	    /* lines printed at most, the tree's widest calls first */
#define PP_DEPTH 12	    /* levels of calls printed (a chain of single calls is one) */

struct pyprof {
	struct corr_strtab *stacks; /* the distinct stacks' JSON, by id */
	struct pp_acc {
		uint64_t ns, n;
	} * acc; /* by stack id, PP_STACKS */
	uint64_t total_ns, total_n;
	uint64_t lost_ns, lost_n; /* records whose stack found no room */
};

struct pyprof *pyprof_new(void)
{
	struct pyprof *pp = calloc(1, sizeof(*pp));

	if (!pp)
		return NULL;
	pp->stacks = corr_strtab_new(PP_STACKS, PP_BYTES);
	pp->acc = calloc(PP_STACKS, sizeof(*pp->acc));
	if (!pp->stacks || !pp->acc) {
		pyprof_free(pp);
		errno = ENOMEM;
		return NULL;
	}
	return pp;
}

void pyprof_free(struct pyprof *pp)
{
	if (!pp)
		return;
	corr_strtab_free(pp->stacks);
	free(pp->acc);
	free(pp);
}

void pyprof_add(struct pyprof *pp, const char *json, size_t len, uint64_t gpu_ns)
{
	int32_t id;

	if (!pp || !len)
		return;
	pp->total_ns += gpu_ns;
	pp->total_n++;
	id = corr_strtab_id(pp->stacks, json, len, 0);
	if (id < 0) {
		pp->lost_ns += gpu_ns;
		pp->lost_n++;
		return;
	}
	pp->acc[id].ns += gpu_ns;
	pp->acc[id].n++;
}

/* ------------------------------------------------------------- the tree -- */

struct pp_node {
	const char *func, *file; /* owned by the parsed stacks */
	json_int_t first_line;
	uint32_t child, next; /* first child, next sibling; 0: none (0 is the root) */
	uint32_t nchild;
	uint64_t ns, n;		  /* records whose stack holds this call */
	uint64_t self_ns, self_n; /* those launched by this call itself (innermost) */
};

struct pp_tree {
	struct pp_node *node;
	uint32_t nnode, cap;
	json_t **parsed;
	uint32_t nparsed;
	uint64_t total_ns;
	int lines;
	bool cut; /* lines or depth ran out */
};

static const char *str_of(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_int_t line_of(json_t *o)
{
	json_t *v = json_object_get(o, "first_line");

	if (!json_is_integer(v))
		v = json_object_get(o, "line");
	return json_is_integer(v) ? json_integer_value(v) : -1;
}

static bool same(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* the child of parent for this frame, made when new; 0 when out of memory */
static uint32_t child_of(struct pp_tree *t, uint32_t parent, json_t *frame)
{
	const char *func = str_of(frame, "function"), *file = str_of(frame, "file");
	json_int_t line = line_of(frame);
	struct pp_node *c;
	uint32_t i;

	for (i = t->node[parent].child; i; i = t->node[i].next)
		if (t->node[i].first_line == line && same(t->node[i].func, func) &&
		    same(t->node[i].file, file))
			return i;
	if (t->nnode == t->cap) {
		uint32_t cap = t->cap * 2;
		struct pp_node *n = realloc(t->node, cap * sizeof(*n));

		if (!n)
			return 0;
		t->node = n;
		t->cap = cap;
	}
	i = t->nnode++;
	c = &t->node[i];
	*c = (struct pp_node){.func = func ? func : "?", .file = file, .first_line = line};
	c->next = t->node[parent].child;
	t->node[parent].child = i;
	t->node[parent].nchild++;
	return i;
}

/* a stack (innermost frame first) into the tree, outermost call at the root */
static void tree_add(struct pp_tree *t, json_t *stack, uint64_t ns, uint64_t n)
{
	uint32_t at = 0;

	t->node[0].ns += ns;
	t->node[0].n += n;
	for (size_t k = json_array_size(stack); k-- > 0;) {
		json_t *f = json_array_get(stack, k);
		uint32_t c;

		if (!json_is_object(f) || !(c = child_of(t, at, f)))
			break;
		at = c;
		t->node[at].ns += ns;
		t->node[at].n += n;
	}
	t->node[at].self_ns += ns;
	t->node[at].self_n += n;
}

static void frame_text(const struct pp_node *c, char *out, size_t sz)
{
	py_frame_text(out, sz, c->func, c->file, c->first_line);
}

static void put_line(struct pp_tree *t, FILE *out, uint64_t ns, uint64_t n, int depth,
		     const char *text)
{
	fprintf(out, "  %10.3f ms %5.1f%% %8llu  %*s%s\n", (double)ns / 1e6,
		t->total_ns ? 100.0 * (double)ns / (double)t->total_ns : 0.0, (unsigned long long)n,
		2 * depth, "", text);
	t->lines++;
}

static int by_ns_desc(const void *pa, const void *pb, void *ctx)
{
	const struct pp_node *a = (const struct pp_node *)ctx + *(const uint32_t *)pa;
	const struct pp_node *b = (const struct pp_node *)ctx + *(const uint32_t *)pb;
	int c;

	if (a->ns != b->ns)
		return a->ns < b->ns ? 1 : -1;
	if (a->n != b->n)
		return a->n < b->n ? 1 : -1;
	c = strcmp(a->func, b->func); /* ties: the same order every run */
	if (c)
		return c;
	c = strcmp(a->file ? a->file : "", b->file ? b->file : "");
	return c ? c : (a->first_line > b->first_line) - (a->first_line < b->first_line);
}

static bool folded(const struct pp_tree *t, uint64_t ns)
{
	return ns * 1000 < t->total_ns * PP_FOLD_PERMILLE;
}

/*
 * One line for the call at i and the chain of single calls under it (a call
 * that launched nothing itself and made one call: the line names the first
 * and the last, and how many), then its calls, widest first; narrow ones
 * and what does not fit in PP_LINES or PP_DEPTH are summed on one line
 */
static void print_node(struct pp_tree *t, FILE *out, uint32_t i, int depth)
{
	char first[320], last[320], text[700];
	uint32_t start = i, k = 1, nk = 0, *kids;
	uint64_t other_ns = 0, other_n = 0, other_calls = 0;
	bool other_cut = false;
	const char *own = "";

	while (!t->node[i].self_n && t->node[i].nchild == 1) {
		i = t->node[i].child;
		k++;
	}
	frame_text(&t->node[start], first, sizeof(first));
	frame_text(&t->node[i], last, sizeof(last));
	if (k == 1)
		snprintf(text, sizeof(text), "%s", first);
	else if (k == 2)
		snprintf(text, sizeof(text), "%s > %s", first, last);
	else
		snprintf(text, sizeof(text), "%s > ... > %s (%u calls)", first, last, k);
	put_line(t, out, t->node[start].ns, t->node[start].n, depth, text);
	if (!t->node[i].nchild)
		return;
	kids = malloc(t->node[i].nchild * sizeof(*kids));
	if (!kids)
		return;
	for (uint32_t c = t->node[i].child; c; c = t->node[c].next)
		kids[nk++] = c;
	qsort_r(kids, nk, sizeof(*kids), by_ns_desc, t->node);
	for (uint32_t j = 0; j < nk; j++) {
		const struct pp_node *c = &t->node[kids[j]];

		if (folded(t, c->ns) || depth + 1 >= PP_DEPTH || t->lines >= PP_LINES) {
			if (!folded(t, c->ns))
				t->cut = other_cut = true;
			other_ns += c->ns;
			other_n += c->n;
			other_calls++;
			continue;
		}
		print_node(t, out, kids[j], depth + 1);
	}
	free(kids);
	if (t->node[i].self_n && !folded(t, t->node[i].self_ns)) {
		snprintf(text, sizeof(text), "(launched by %s itself)", t->node[i].func);
		put_line(t, out, t->node[i].self_ns, t->node[i].self_n, depth + 1, text);
	} else if (t->node[i].self_n && !other_calls) {
		snprintf(text, sizeof(text), "(launched by %s itself, under 1%%)", t->node[i].func);
		put_line(t, out, t->node[i].self_ns, t->node[i].self_n, depth + 1, text);
	} else if (t->node[i].self_n) {
		other_ns += t->node[i].self_ns;
		other_n += t->node[i].self_n;
		own = " and its own launches";
	}
	if (other_calls) {
		snprintf(text, sizeof(text), "(%llu more call%s%s%s)",
			 (unsigned long long)other_calls, other_calls == 1 ? "" : "s", own,
			 other_cut		     ? ": past the lines shown"
			 : other_calls == 1 && !*own ? ", under 1%"
						     : ", under 1% each");
		put_line(t, out, other_ns, other_n, depth + 1, text);
	}
}

void pyprof_print(const struct pyprof *pp, FILE *out)
{
	struct pp_tree t = {.cap = 1024};
	uint32_t kids = 0, bad = 0;

	if (!pp || !pp->total_n)
		return;
	t.node = calloc(t.cap, sizeof(*t.node));
	t.parsed = calloc(corr_strtab_count(pp->stacks) + 1, sizeof(*t.parsed));
	if (!t.node || !t.parsed) {
		fprintf(out, "\nGPU time by Python call: out of memory\n");
		goto cleanup;
	}
	t.nnode = 1;
	t.total_ns = pp->total_ns;
	for (uint32_t i = 0; i < corr_strtab_count(pp->stacks); i++) {
		size_t len;
		const char *text = corr_strtab_str(pp->stacks, (int32_t)i, &len);
		json_t *stack = json_loadb(text, len, 0, NULL);

		if (!json_is_array(stack)) { /* cannot be: the agent wrote it */
			json_decref(stack);
			bad++;
			continue;
		}
		t.parsed[t.nparsed++] = stack;
		tree_add(&t, stack, pp->acc[i].ns, pp->acc[i].n);
	}
	fprintf(out,
		"\nGPU time by the Python calls that launched it (%llu GPU records with "
		"launch_python, %.3f ms of GPU time)\n",
		(unsigned long long)pp->total_n, (double)pp->total_ns / 1e6);
	fprintf(out, "  %13s %6s %8s  %s\n", "GPU time", "share", "records",
		"call (outermost first; a chain of single calls on one line)");
	for (uint32_t c = t.node[0].child; c; c = t.node[c].next)
		kids++;
	if (kids == 1 && !t.node[0].self_n) {
		print_node(&t, out, t.node[0].child, 0);
	} else {
		t.node[0].func = "(all records)";
		t.node[0].first_line = -1;
		print_node(&t, out, 0, 0);
	}
	if (t.cut)
		fprintf(out,
			"  (more calls over 1%% than %d lines or %d levels show: the "
			"launch_python fields have them all)\n",
			PP_LINES, PP_DEPTH);
	if (pp->lost_n)
		fprintf(out, "  %10.3f ms %6s %8llu  (stacks past the %u kept: not in the tree)\n",
			(double)pp->lost_ns / 1e6, "", (unsigned long long)pp->lost_n, PP_STACKS);
	if (bad)
		fprintf(out, "  (%u stacks could not be read back)\n", bad);
cleanup:
	for (uint32_t i = 0; i < t.nparsed; i++)
		json_decref(t.parsed[i]);
	free(t.parsed);
	free(t.node);
}
