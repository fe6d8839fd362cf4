// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * pyspans.c - a recording's Python function spans, asked for the Python
 * stack that enclosed a launch (correlator.h, corr_pyspans__*).
 *
 * PyTorch's profiler (with_stack=True) writes each Python call it saw as a
 * Kineto event of cat "python_function", named "path/file.py(LINE): name"
 * (LINE: where the function starts), on the thread that ran it, with a
 * start and a duration; C functions appear as "<built-in ...>". The
 * launches of that thread (cuda_runtime events) lie inside the spans of
 * the Python calls that made them. So the frames of a launch are the
 * Python spans of its (pid, tid) that enclose its time, innermost first.
 *
 * Per thread the spans are kept sorted by start (parents before their
 * children at the same start) with each span's parent: the nearest earlier
 * span that still encloses it. PyTorch writes them in that order, so a span
 * is added in O(1) amortised; one added out of order marks the thread for
 * one sort at the next question. A question is a binary search and a walk
 * up the parents. Memory: 24 bytes a span and each distinct name once (in
 * the correlator's name table, names.c, with its file and function),
 * bounded by the recording's own size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "correlator.h"
#include "grow.h"
#include "internal.h"

#define PS_NAMES_MAX (1u << 30) /* names.c grows its tables with use */

/*
 * A name of the table (names.c) as a span's name, parsed once: its file and
 * function interned there too. Names that are files or functions only stay
 * PS_UNPARSED until a span is named so.
 */
enum { PS_UNPARSED, PS_PYTHON, PS_OTHER /* a built-in, an annotation: no frame */ };

struct ps_name {
	int32_t file, func;
	int64_t line;
	uint8_t state;
};

struct ps_span {
	uint64_t start, end;
	uint32_t name;
	int32_t parent; /* index in the thread's spans; -1: none */
};

struct ps_thread {
	uint32_t pid, tid;
	struct ps_span *s;
	size_t n, cap;
	bool unsorted; /* a span came out of order: sort and link at the next question */
};

struct corr_pyspans {
	struct ps_thread *t;
	size_t nt, ct, last;   /* last: the thread asked or added last */
	struct names *strs;    /* span names, and their files and functions */
	struct ps_name *names; /* by id in strs, nn of them (every id so far) */
	size_t nn, cn;
	struct corr_pyspans_counts cnt;
};

struct corr_pyspans *corr_pyspans__new(void)
{
	struct corr_pyspans *ps = calloc(1, sizeof(*ps));

	if (!ps)
		return NULL;
	ps->strs = names_new(PS_NAMES_MAX);
	if (!ps->strs) {
		free(ps);
		errno = ENOMEM;
		return NULL;
	}
	return ps;
}

void corr_pyspans__free(struct corr_pyspans *ps)
{
	if (!ps)
		return;
	for (size_t i = 0; i < ps->nt; i++)
		free(ps->t[i].s);
	free(ps->t);
	free(ps->names);
	names_free(ps->strs);
	free(ps);
}

/*
 * "path/file.py(123): name" into its parts: the first "(digits): " with a
 * file before it and a name after it; false for anything else (a built-in,
 * an annotation): not a Python frame
 */
static bool parse(const char *s, size_t n, size_t *file_len, int64_t *line, size_t *func_at)
{
	/* ")" has a file, "(" and a digit before it at least: no read before s */
	for (const char *p = s + 3; p + 3 < s + n; p++) {
		const char *open = p - 1;
		int64_t v = 0;

		if (p[0] != ')' || p[1] != ':' || p[2] != ' ')
			continue;
		while (open > s && *open >= '0' && *open <= '9')
			open--;
		if (open == s || *open != '(' || open == p - 1 || p - open > 10)
			continue;
		for (const char *d = open + 1; d < p; d++)
			v = v * 10 + (*d - '0');
		*file_len = (size_t)(open - s);
		*line = v;
		*func_at = (size_t)(p + 3 - s);
		return true;
	}
	return false;
}

/* ps->names to every id of the table, the new ones PS_UNPARSED; -ENOMEM */
static int names_cover(struct corr_pyspans *ps)
{
	size_t count = names_count(ps->strs);

	if (count > ps->nn &&
	    grow_array((void **)&ps->names, &ps->cn, count - 1, sizeof(*ps->names), 256))
		return -ENOMEM;
	for (; ps->nn < count; ps->nn++)
		ps->names[ps->nn] = (struct ps_name){.file = -1, .func = -1, .state = PS_UNPARSED};
	return 0;
}

/* the name's id, interned and parsed once; -ENOMEM, or -EINVAL when it is no Python frame */
static long name_of(struct corr_pyspans *ps, const char *s, size_t n)
{
	int32_t id = names_intern(ps->strs, s, n), file, func;
	size_t file_len, func_at;
	int64_t line;

	if (id < 0 || names_cover(ps))
		return -ENOMEM;
	if (ps->names[id].state == PS_UNPARSED) {
		if (!parse(s, n, &file_len, &line, &func_at)) {
			ps->names[id].state = PS_OTHER;
		} else {
			file = names_intern(ps->strs, s, file_len);
			func = names_intern(ps->strs, s + func_at, n - func_at);
			if (file < 0 || func < 0 || names_cover(ps))
				return -ENOMEM; /* left unparsed: asked again next time */
			ps->names[id] = (struct ps_name){
			    .file = file, .func = func, .line = line, .state = PS_PYTHON};
		}
	}
	return ps->names[id].state == PS_PYTHON ? id : -EINVAL;
}

static struct ps_thread *thread_of(struct corr_pyspans *ps, uint32_t pid, uint32_t tid, bool add)
{
	struct ps_thread *t;

	if (ps->last < ps->nt && ps->t[ps->last].pid == pid && ps->t[ps->last].tid == tid)
		return &ps->t[ps->last];
	for (size_t i = 0; i < ps->nt; i++)
		if (ps->t[i].pid == pid && ps->t[i].tid == tid) {
			ps->last = i;
			return &ps->t[i];
		}
	if (!add || grow_array((void **)&ps->t, &ps->ct, ps->nt, sizeof(*ps->t), 8))
		return NULL;
	t = &ps->t[ps->nt];
	*t = (struct ps_thread){.pid = pid, .tid = tid};
	ps->last = ps->nt++;
	return t;
}

/* span i's parent: the nearest earlier span that still encloses its start */
static void span_link(struct ps_thread *t, size_t i)
{
	int32_t p = (int32_t)i - 1;

	while (p >= 0 && t->s[p].end <= t->s[i].start)
		p = t->s[p].parent;
	t->s[i].parent = p;
}

static int by_start(const void *a, const void *b)
{
	const struct ps_span *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->end > y->end ? -1 : x->end < y->end; /* the enclosing one first */
}

int corr_pyspans__add(struct corr_pyspans *ps, uint32_t pid, uint32_t tid, uint64_t start,
		      uint64_t dur, const char *name, size_t len)
{
	struct ps_thread *t;
	struct ps_span *last;
	long nm;

	if (!ps)
		return -EINVAL;
	nm = name_of(ps, name, len);
	if (nm == -EINVAL) {
		ps->cnt.not_python++; /* a built-in or an annotation: a C call, no frame */
		return 0;
	}
	if (nm < 0 || !(t = thread_of(ps, pid, tid, true)) || t->n >= INT32_MAX ||
	    grow_array((void **)&t->s, &t->cap, t->n, sizeof(*t->s), 1024)) {
		ps->cnt.dropped++;
		return -ENOMEM;
	}
	last = t->n ? &t->s[t->n - 1] : NULL;
	t->s[t->n] = (struct ps_span){
	    .start = start, .end = start + dur > start ? start + dur : start, .name = (uint32_t)nm};
	/* in order (what PyTorch writes): linked now; else at the next question */
	if (last && (start < last->start || (start == last->start && t->s[t->n].end > last->end)))
		t->unsorted = true;
	else if (!t->unsorted)
		span_link(t, t->n);
	t->n++;
	ps->cnt.spans++;
	return 0;
}

size_t corr_pyspans__stack(struct corr_pyspans *ps, uint32_t pid, uint32_t tid, uint64_t ts,
			   struct corr_py_frame *out, size_t max)
{
	struct ps_thread *t = ps ? thread_of(ps, pid, tid, false) : NULL;
	size_t lo = 0, hi, n = 0;
	int32_t i;

	if (!t || !t->n)
		return 0;
	if (t->unsorted) {
		qsort(t->s, t->n, sizeof(*t->s), by_start);
		for (size_t k = 0; k < t->n; k++)
			span_link(t, k);
		t->unsorted = false;
		ps->cnt.sorts++;
	}
	/* the last span that starts at or before ts */
	hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->s[mid].start <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* up its parents: those still open at ts enclose it, innermost first */
	for (i = (int32_t)lo - 1; i >= 0 && n < max; i = t->s[i].parent) {
		const struct ps_name *nm = &ps->names[t->s[i].name];

		if (t->s[i].end <= ts)
			continue;
		out[n++] = (struct corr_py_frame){.function = names_str(ps->strs, nm->func),
						  .file = names_str(ps->strs, nm->file),
						  .first_line = nm->line,
						  .line = -1};
	}
	if (i >= 0 && n == max)
		ps->cnt.truncated++;
	return n;
}

void corr_pyspans__counts(const struct corr_pyspans *ps, struct corr_pyspans_counts *out)
{
	*out = ps->cnt;
}
