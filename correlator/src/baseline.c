// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * baseline.c - how long a step of a given workload takes: an empirical
 * roofline learned online (docs/diagnosis.md, "The baseline").
 *
 * Two layers, because neither alone is good enough:
 *  - workload cells (tokens x KV tokens, about 5% and 10% wide) hold the
 *    recent durations of accepted steps; their median follows the bends a
 *    line cannot (overlap, CUDA graph buckets, attention kernel variants);
 *  - a global line dur = c0 + c1 * tokens + c2 * kv fit by least absolute
 *    deviations on a reservoir of recent steps, refitted periodically. It
 *    predicts cells never seen, and scales a neighbour cell's median to a
 *    new cell, which is what keeps a heavier batch from being an anomaly.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "diag_internal.h"
#include "internal.h"

/* tokens: exact up to 32 (small decode batches differ a lot), then 5% cells */
static uint32_t bucket_t(double t)
{
	if (t < 0)
		return 0xffff;
	if (t <= 32)
		return (uint32_t)t;
	return 32 + (uint32_t)(log(t / 32.0) / log(1.05));
}

static uint32_t bucket_kv(double kv)
{
	if (kv <= 0)
		return 0xffff;
	return (uint32_t)(log(kv) / log(1.1));
}

uint64_t dm_bin_key(double t, double kv)
{
	/*
	 * the last workload's key, per thread: a step asks for its cell 3-6
	 * times (model, bounds, grid, learning), each two logarithms
	 */
	static _Thread_local double last_t = NAN, last_kv = NAN;
	static _Thread_local uint64_t last_key;

	if (t != last_t || kv != last_kv) {
		last_key = ((uint64_t)bucket_t(t) << 32) | bucket_kv(kv);
		last_t = t;
		last_kv = kv;
	}
	return last_key;
}

int dm_init(struct dmodel *m)
{
	memset(m, 0, sizeof(*m));
	m->ext_lo[0] = m->ext_lo[1] = INT32_MAX;
	m->ext_hi[0] = m->ext_hi[1] = -1;
	m->cap = 64;
	m->bins = malloc(sizeof(*m->bins) * m->cap);
	if (!m->bins)
		return -ENOMEM;
	for (uint32_t i = 0; i < m->cap; i++)
		m->bins[i].key = BIN_EMPTY;
	return 0;
}

void dm_free(struct dmodel *m)
{
	free(m->bins);
	m->bins = NULL;
	m->cap = m->used = 0;
}

struct dbin *dm_find(const struct dmodel *m, uint64_t key)
{
	uint32_t mask = m->cap - 1, i = (uint32_t)corr_hash64(key) & mask;

	for (;; i = (i + 1) & mask) {
		if (m->bins[i].key == key)
			return &m->bins[i];
		if (m->bins[i].key == BIN_EMPTY)
			return NULL;
	}
}

static struct dbin *slot_for(struct dbin *tab, uint32_t cap, uint64_t key)
{
	uint32_t mask = cap - 1, i = (uint32_t)corr_hash64(key) & mask;

	while (tab[i].key != BIN_EMPTY && tab[i].key != key)
		i = (i + 1) & mask;
	return &tab[i];
}

static int grow(struct dmodel *m)
{
	uint32_t ncap = m->cap * 2;
	struct dbin *nt;

	if (ncap > (1u << 20))
		return -ENOSPC;
	nt = malloc(sizeof(*nt) * ncap);
	if (!nt)
		return -ENOMEM;
	for (uint32_t i = 0; i < ncap; i++)
		nt[i].key = BIN_EMPTY;
	for (uint32_t i = 0; i < m->cap; i++)
		if (m->bins[i].key != BIN_EMPTY)
			*slot_for(nt, ncap, m->bins[i].key) = m->bins[i];
	free(m->bins);
	m->bins = nt;
	m->cap = ncap;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Memory is bounded per key, whatever the number of workloads: at
 * BIN_SLOTS_MAX slots the table keeps the half of its cells that ran most
 * recently instead of growing (a cell that has not run for a while is stale,
 * learned again from its next step anyway).
 */
static int prune(struct dmodel *m)
{
	uint64_t *age = malloc(sizeof(*age) * (m->used ? m->used : 1)), cut;
	struct dbin *nt = malloc(sizeof(*nt) * m->cap);
	uint32_t n = 0, keep;

	if (!age || !nt) {
		free(age);
		free(nt);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < m->cap; i++)
		if (m->bins[i].key != BIN_EMPTY)
			age[n++] = m->bins[i].last;
	qsort(age, n, sizeof(*age), cmp_u64);
	cut = n ? age[n / 2] : 0;
	for (uint32_t i = 0; i < m->cap; i++)
		nt[i].key = BIN_EMPTY;
	keep = n - n / 2;
	m->used = 0;
	for (uint32_t i = 0; i < m->cap && m->used < keep; i++)
		if (m->bins[i].key != BIN_EMPTY && m->bins[i].last >= cut) {
			*slot_for(nt, m->cap, m->bins[i].key) = m->bins[i];
			m->used++;
		}
	free(age);
	free(m->bins);
	m->bins = nt;
	return 0;
}

/* a new cell: the extent of the buckets in use (unknown coordinates aside) */
static void extent_add(struct dmodel *m, uint64_t key)
{
	int32_t c[2] = {(int32_t)(key >> 32), (int32_t)(uint32_t)key};

	for (int a = 0; a < 2; a++) {
		if (c[a] == 0xffff)
			continue;
		if (c[a] < m->ext_lo[a])
			m->ext_lo[a] = c[a];
		if (c[a] > m->ext_hi[a])
			m->ext_hi[a] = c[a];
	}
}

/* room for one more cell: grow the table, or at its bound forget the oldest half */
static int make_room(struct dmodel *m)
{
	if ((m->used + 1) * 4 <= m->cap * 3)
		return 0;
	return m->cap >= BIN_SLOTS_MAX ? prune(m) : grow(m);
}

float dm_bin_median(const struct dbin *b)
{
	if (!b->cnt)
		return 0;
	if (b->cnt & 1)
		return b->sorted[b->cnt / 2];
	return 0.5f * (b->sorted[b->cnt / 2 - 1] + b->sorted[b->cnt / 2]);
}

/* replace `old` (when the ring is full) by `v` in the sorted copy */
static void sorted_update(struct dbin *b, bool full, float old, float v)
{
	int n = b->cnt, i;

	if (full) {
		for (i = 0; i < n && b->sorted[i] != old; i++)
			;
		if (i == n)
			i = n - 1; /* cannot happen; stay in bounds */
		memmove(&b->sorted[i], &b->sorted[i + 1], sizeof(float) * (size_t)(n - 1 - i));
		n--;
	}
	for (i = n; i > 0 && b->sorted[i - 1] > v; i--)
		b->sorted[i] = b->sorted[i - 1];
	b->sorted[i] = v;
}

int dm_add(struct dmodel *m, double t, double kv, double dur)
{
	uint64_t key = dm_bin_key(t, kv);
	struct dbin *b;
	bool full;
	float old = 0;
	int err;

	b = slot_for(m->bins, m->cap, key);
	if (b->key == BIN_EMPTY) {
		/* a new cell: room first (the table may grow or be pruned) */
		err = make_room(m);
		if (err)
			return err;
		b = slot_for(m->bins, m->cap, key);
		memset(b, 0, sizeof(*b));
		b->key = key;
		m->used++;
		extent_add(m, key);
	} else if (m->stale && m->now - b->last > m->stale) {
		/* the workload is back after a long time: learn it again */
		uint32_t n = b->n;

		memset(b, 0, sizeof(*b));
		b->key = key;
		b->n = n;
	}
	b->last = m->now;
	full = b->cnt == BIN_RING;
	if (full) {
		old = b->ring[b->pos];
		/* the mean workload follows the ring; sums of dropped samples leave */
		b->sum_t -= b->sum_t / BIN_RING;
		b->sum_kv -= b->sum_kv / BIN_RING;
	}
	b->ring[b->pos] = (float)dur;
	b->pos = (uint8_t)((b->pos + 1) % BIN_RING);
	sorted_update(b, full, old, (float)dur);
	if (!full)
		b->cnt++;
	b->sum_t += t > 0 ? t : 0;
	b->sum_kv += kv > 0 ? kv : 0;
	b->n++;
	return 0;
}

int dm_put_bin(struct dmodel *m, uint64_t key, double med, uint32_t cnt, double mean_t,
	       double mean_kv)
{
	struct dbin *b;
	int err;

	if (!cnt || cnt > BIN_RING || key == BIN_EMPTY)
		return -EINVAL;
	if (!dm_find(m, key)) {
		err = make_room(m);
		if (err)
			return err;
	}
	b = slot_for(m->bins, m->cap, key);
	if (b->key == BIN_EMPTY)
		m->used++;
	extent_add(m, key);
	memset(b, 0, sizeof(*b));
	b->key = key;
	for (uint32_t i = 0; i < cnt; i++)
		b->ring[i] = b->sorted[i] = (float)med;
	b->cnt = (uint8_t)cnt;
	b->pos = (uint8_t)(cnt % BIN_RING);
	b->n = cnt;
	b->sum_t = mean_t * cnt;
	b->sum_kv = mean_kv * cnt;
	return 0;
}

void dm_lin_sample(struct dmodel *m, double t, double kv, double dur)
{
	struct dlin *l = &m->lin;

	l->t[l->pos] = (float)(t > 0 ? t : 0);
	l->kv[l->pos] = (float)(kv > 0 ? kv : 0);
	l->dur[l->pos] = (float)dur;
	l->pos = (l->pos + 1) % RES_CAP;
	if (l->n < RES_CAP)
		l->n++;
}

double dm_lin_pred(const struct dlin *l, double t, double kv)
{
	double p = l->c[0] + l->c[1] * (t > 0 ? t : 0) + l->c[2] * (kv > 0 ? kv : 0);

	return p > l->floor ? p : l->floor;
}

/* solve the 3x3 system a x = b by Gaussian elimination with pivoting */
static int solve3(double a[3][3], double b[3], double x[3])
{
	for (int c = 0; c < 3; c++) {
		int p = c;

		for (int r = c + 1; r < 3; r++)
			if (fabs(a[r][c]) > fabs(a[p][c]))
				p = r;
		if (fabs(a[p][c]) < 1e-30)
			return -EDOM;
		if (p != c) {
			for (int k = 0; k < 3; k++) {
				double tmp = a[c][k];

				a[c][k] = a[p][k];
				a[p][k] = tmp;
			}
			double tb = b[c];

			b[c] = b[p];
			b[p] = tb;
		}
		for (int r = c + 1; r < 3; r++) {
			double f = a[r][c] / a[c][c];

			for (int k = c; k < 3; k++)
				a[r][k] -= f * a[c][k];
			b[r] -= f * b[c];
		}
	}
	for (int r = 2; r >= 0; r--) {
		double s = b[r];

		for (int k = r + 1; k < 3; k++)
			s -= a[r][k] * x[k];
		x[r] = s / a[r][r];
	}
	return 0;
}

/*
 * The k-th smallest of x[0..n) (k < n), by quickselect: x is reordered so
 * that x[0..k) are at most x[k] and x(k..n) at least. The value is the one
 * a sort would put at k, without sorting the rest.
 */
static double kth(double *x, uint32_t n, uint32_t k)
{
	uint32_t lo = 0, hi = n; /* x[k] is in [lo, hi) */

	while (hi - lo > 1) {
		double pv = x[lo + (hi - lo) / 2], tmp;
		/* three ways: [lo, lt) under the pivot, [lt, i) equal, [gt, hi) over */
		uint32_t lt = lo, i = lo, gt = hi;

		while (i < gt) {
			if (x[i] < pv) {
				tmp = x[lt];
				x[lt++] = x[i];
				x[i++] = tmp;
			} else if (x[i] > pv) {
				tmp = x[--gt];
				x[gt] = x[i];
				x[i] = tmp;
			} else {
				i++;
			}
		}
		if (k < lt)
			hi = lt;
		else if (k >= gt)
			lo = gt;
		else
			return pv;
	}
	return x[k];
}

/*
 * Least absolute deviations by iteratively reweighted least squares: robust
 * to the slow steps still in the reservoir (a median line, not a mean one).
 * Features are scaled to their maxima so the ridge term means the same for
 * tokens and KV tokens; a column that is always 0 gets its coefficient 0.
 * The ridge is relative to the weights (durations are in ns, the weights
 * about 1 / (dur * |r|)): an absolute term would shrink the slopes.
 */
static int lad_fit(const struct dlin *l, const double sc[3], const bool use[3], double c[3])
{
	/* per sample, once: the scaled features, the duration and its 0.1% (the least |r|) */
	double f1[RES_CAP], f2[RES_CAP], du[RES_CAP], rmin[RES_CAP];
	uint32_t n = l->n;

	for (uint32_t i = 0; i < n; i++) {
		f1[i] = use[1] && sc[1] ? l->t[i] / sc[1] : 0;
		f2[i] = use[2] && sc[2] ? l->kv[i] / sc[2] : 0;
		du[i] = l->dur[i];
		rmin[i] = 1e-3 * du[i] + 1;
	}
	c[0] = c[1] = c[2] = 0;
	for (int it = 0; it < 8; it++) {
		double a[3][3] = {{0}}, b[3] = {0}, x[3] = {0};

		for (uint32_t i = 0; i < n; i++) {
			double r = it ? du[i] - (c[0] + c[1] * f1[i] + c[2] * f2[i]) : 1,
			       ar = fabs(r);
			/* relative deviations: a 1 ms miss matters more on a 10 ms step */
			double w = 1.0 / (du[i] * (it ? (ar > rmin[i] ? ar : rmin[i]) : 1.0));
			double w1 = w * f1[i], w2 = w * f2[i];

			/* the normal equations of the features (1, f1, f2), weighted by w */
			a[0][0] += w;
			a[0][1] += w1;
			a[0][2] += w2;
			a[1][1] += w1 * f1[i];
			a[1][2] += w1 * f2[i];
			a[2][1] += w2 * f1[i];
			a[2][2] += w2 * f2[i];
			b[0] += w * du[i];
			b[1] += w1 * du[i];
			b[2] += w2 * du[i];
		}
		a[1][0] = a[0][1];
		a[2][0] = a[0][2];
		/* ridge: keeps an unused or collinear column from blowing up */
		for (int p = 1; p < 3; p++)
			a[p][p] += 1e-6 * a[0][0] * (use[p] ? 1 : 1e6);
		if (solve3(a, b, x))
			return -EDOM;
		memcpy(c, x, sizeof(x));
	}
	return 0;
}

/*
 * The roofline is monotone: more tokens or more KV tokens never make a step
 * faster. Tokens and KV tokens rise together in most streams, and a free fit
 * trades one against the other (a negative slope that extrapolates wildly);
 * a column whose slope comes out negative is dropped and the rest refitted.
 */
int dm_lin_fit(struct dlin *l)
{
	double sc[3] = {1, 0, 0}, c[3], quickest = 0;
	bool use[3] = {true, true, true};
	double *u;
	uint32_t n = l->n;
	int err;

	if (n < 8)
		return -EAGAIN;
	for (uint32_t i = 0; i < n; i++) {
		if (l->t[i] > sc[1])
			sc[1] = l->t[i];
		if (l->kv[i] > sc[2])
			sc[2] = l->kv[i];
		if (!i || l->dur[i] < quickest)
			quickest = l->dur[i];
	}
	for (;;) {
		int worst = 0;

		err = lad_fit(l, sc, use, c);
		if (err)
			return err;
		for (int p = 1; p < 3; p++)
			if (use[p] && c[p] < 0 && (!worst || c[p] < c[worst]))
				worst = p;
		if (!worst)
			break;
		use[worst] = false;
	}
	for (int p = 1; p < 3; p++)
		if (!use[p])
			c[p] = 0;
	/*
	 * the line never predicts less than the quickest step it was fitted
	 * on: a convex tail (attention) gives it a negative intercept, and a
	 * small novel workload would be judged against a few milliseconds
	 */
	l->floor = quickest;
	l->c[0] = c[0];
	l->c[1] = sc[1] ? c[1] / sc[1] : 0;
	l->c[2] = sc[2] ? c[2] / sc[2] : 0;
	u = malloc(sizeof(*u) * n);
	if (!u)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		double p = dm_lin_pred(l, l->t[i], l->kv[i]);

		u[i] = p > 0 ? l->dur[i] / p - 1 : 0;
	}
	/* the 99th percentile, then the median among the values under it */
	l->q99 = kth(u, n, (uint32_t)(n * 0.99));
	l->q50 = kth(u, (uint32_t)(n * 0.99), n / 2);
	free(u);
	l->ok = true;
	return 0;
}

/*
 * Neighbour cells, nearest first: along KV tokens (which grow step by step
 * as requests decode), along tokens, and diagonally (prefill steps, where
 * both are the prompt length). A neighbour's median is scaled to this
 * workload by the roofline's ratio between the two workloads.
 */
#define NB_NEAR 6 /* the first six are one cell away */
static const int8_t nb_off[][2] = {
    {0, -1},  {0, 1},  {-1, 0}, {1, 0}, {-1, -1}, {1, 1}, {0, -2},  {0, 2},
    {-1, 1},  {1, -1}, {-2, 0}, {2, 0}, {-1, -2}, {1, 2}, {-2, -1}, {2, 1},
    {-2, -2}, {2, 2},  {0, -3}, {0, 3}, {-3, 0},  {3, 0}, {-3, -3}, {3, 3},
};

static bool bin_fresh(const struct dmodel *m, const struct dbin *b)
{
	return !m->stale || m->now - b->last <= m->stale;
}

/* a measurement: enough durations, and recent */
static bool bin_ready(const struct dmodel *m, const struct dbin *b)
{
	return b->cnt >= BIN_MIN && bin_fresh(m, b);
}

double dm_predict(const struct dmodel *m, double t, double kv, int *src, bool *novel)
{
	uint64_t key = dm_bin_key(t, kv);
	const struct dbin *b = dm_find(m, key), *young;
	int bt = (int)(key >> 32), bk = (int)(uint32_t)key;

	if (b && b->cnt >= BIN_MIN) {
		*src = 0;
		*novel = !bin_fresh(m, b);
		return dm_bin_median(b);
	}
	/*
	 * the workload's own cell before it has BIN_MIN durations: a step or
	 * three of this very workload, just now. Better than a guess, not a
	 * measurement yet: it is used, novel, where no fresh cell is near.
	 */
	young = !ABL_YOUNG && b && b->cnt && bin_fresh(m, b) ? b : NULL;
	for (unsigned i = 0; i < sizeof(nb_off) / sizeof(nb_off[0]); i++) {
		int nt = bt + nb_off[i][0], nk = bk + nb_off[i][1];

		if ((nb_off[i][0] && bt == 0xffff) || (nb_off[i][1] && bk == 0xffff) || nt < 0 ||
		    nk < 0)
			continue;
		b = dm_find(m, ((uint64_t)(uint32_t)nt << 32) | (uint32_t)nk);
		if (b && b->cnt >= BIN_MIN) {
			double med = dm_bin_median(b), ratio = 1;

			if (m->lin.ok) {
				double pt = dm_lin_pred(&m->lin, t, kv);
				double pn =
				    dm_lin_pred(&m->lin, b->sum_t / b->cnt, b->sum_kv / b->cnt);

				if (pt > 0 && pn > 0)
					ratio = fmin(fmax(pt / pn, 0.5), 2.0);
			}
			*src = 1;
			*novel = i >= NB_NEAR || !bin_fresh(m, b);
			if (*novel && young)
				break;
			return med * ratio;
		}
	}
	if (young) {
		*src = 0;
		*novel = true;
		return dm_bin_median(young);
	}
	if (m->lin.ok) {
		double p = dm_lin_pred(&m->lin, t, kv) * (1 + m->lin.q50);

		*src = 2;
		*novel = true;
		return p > 0 ? p : 0;
	}
	*novel = true;
	return 0;
}

/*
 * The grid model (DIAG_MODEL_GRID, docs/diagnosis.md "The grid model"): a
 * workload whose own cell is not measured is judged against the cells that
 * bracket it, a lighter and a heavier one, interpolated, where both lie
 * within GRID_REACH cells. Two directions, each an interpolation of two
 * cells at their mean workloads:
 *  - along KV tokens, the tokens cell held (a decode batch whose requests
 *    grew longer);
 *  - along tokens, with the KV tokens per token held where tokens are the
 *    batch (a decode step: the grid is then batch x KV per request, in which
 *    c0 + c1 batch + c2 batch kv_per_request, attention over every request's
 *    context, is bilinear, so interpolation along each axis is exact), the
 *    KV tokens held otherwise (a mixed step's prefill tokens).
 * Both found: their mean. Fresh cells first; where no two fresh ones
 * bracket it, the nearest cells stale or not (an earlier job mix: the caller
 * gives them the stale cell's limit). Neither: 0, and the caller falls back
 * to the nearest cell scaled by the line. The search costs no memory and
 * stops at the extent of the buckets any cell ever had (dmodel.ext_lo/hi):
 * without that, a workload at the edge of the known ones (KV tokens growing
 * step by step) probed every empty cell within reach, and bench_detect ran
 * at 0.76-0.99 M steps/s beside main's 0.97-1.23. GRID_REACH cells are x21
 * in KV tokens, 32 batch sizes up to 32 and x4.8 beyond: the best F1 on
 * seeds 1-10 of the blind protocol among 8, 16, 24, 32 and 48, all within
 * 0.0004 of it.
 */
#define GRID_REACH 32

/* log of the middle of a tokens bucket (bucket_t's inverse) */
static double bucket_t_logmid(int b)
{
	return b < 32 ? log(b) : log(32.0) + (b - 32 + 0.5) * log(1.05);
}

/* y at x on the segment from (x0, y0) to (x1, y1), clamped to its ends */
static double lerp(double x, double x0, double y0, double x1, double y1)
{
	double f = x1 > x0 ? (x - x0) / (x1 - x0) : 0.5;

	return y0 + fmin(fmax(f, 0), 1) * (y1 - y0);
}

/* the nearest measured cell on one side of a workload: fresh, and stale or not */
struct side {
	const struct dbin *fresh, *any;
};

static void side_look(const struct dmodel *m, uint64_t key, struct side *sd)
{
	const struct dbin *b = dm_find(m, key);

	if (!b || b->cnt < BIN_MIN)
		return;
	if (!sd->any)
		sd->any = b;
	if (bin_fresh(m, b))
		sd->fresh = b;
}

/*
 * The nearest measured cells from (bt, bk) in direction d: along tokens
 * (axis 0; the KV tokens per token held when per_tok, lkv_t being
 * log(kv / t)) or along KV tokens (axis 1). One pass finds the fresh one
 * and the nearest one, stale or not.
 */
static void grid_side(const struct dmodel *m, int bt, int bk, double lkv_t, int axis, int d,
		      struct side *sd)
{
	for (int i = 1; i <= GRID_REACH && !sd->fresh; i++) {
		int nt = bt + (axis ? 0 : d * i), nk = bk + (axis ? d * i : 0), c = axis ? nk : nt;

		/* no cell beyond the extent: the rest of the way is empty */
		if (d < 0 ? c < m->ext_lo[axis] : c > m->ext_hi[axis])
			break;
		if (c < m->ext_lo[axis] || c > m->ext_hi[axis])
			continue;
		/* KV tokens per token held: the KV bucket of kv * t' / t (bucket_kv) */
		if (!axis && bk != 0xffff && lkv_t > -1e300)
			nk = nt ? (int)((lkv_t + bucket_t_logmid(nt)) / log(1.1)) : 0xffff;
		if (nk >= 0)
			side_look(m, ((uint64_t)(uint32_t)nt << 32) | (uint32_t)nk, sd);
	}
}

/* two cells' medians interpolated at x, their mean workloads on the axis */
static double grid_lerp(const struct dbin *lo, const struct dbin *hi, int axis, double x)
{
	double xl = (axis ? lo->sum_kv : lo->sum_t) / lo->cnt;
	double xh = (axis ? hi->sum_kv : hi->sum_t) / hi->cnt;

	return lerp(x, xl, dm_bin_median(lo), xh, dm_bin_median(hi));
}

double dm_interp(const struct dmodel *m, double t, double kv, bool per_tok, bool *stale)
{
	uint64_t key = dm_bin_key(t, kv);
	int bt = (int)(key >> 32), bk = (int)(uint32_t)key, nf = 0, na = 0;
	double lkv_t = per_tok && t > 0 && kv > 0 ? log(kv / t) : -1e308, fresh = 0, any = 0;

	for (int axis = 0; axis < 2; axis++) {
		struct side lo = {0}, hi = {0};
		double x = axis ? kv : t;

		if ((axis ? bk : bt) == 0xffff)
			continue;
		grid_side(m, bt, bk, lkv_t, axis, -1, &lo);
		if (!lo.any)
			continue;
		grid_side(m, bt, bk, lkv_t, axis, 1, &hi);
		if (lo.fresh && hi.fresh) {
			fresh += grid_lerp(lo.fresh, hi.fresh, axis, x);
			nf++;
		}
		if (hi.any) {
			any += grid_lerp(lo.any, hi.any, axis, x);
			na++;
		}
	}
	*stale = !nf;
	return nf ? fresh / nf : na ? any / na : 0;
}

/*
 * The roofline is monotone: a step never takes longer than a step of a
 * workload at least as heavy in both coordinates, nor less than one at most
 * as heavy. dir > 0: the smallest median of the fresh cells that dominate
 * (t, kv), an upper bound on a novel workload's median, often far tighter
 * than the line's guess (a small decode batch next to a slightly larger one
 * the line extrapolates badly); dir < 0: the largest median of the fresh
 * cells it dominates, a lower bound. Only cells up to BOUND_CELLS - 1 away
 * in each coordinate are looked at (16 requests, or x2.2 tokens beyond 32;
 * KV tokens x4.6): a constant cost per novel step, where a scan of every
 * cell grows with the workload mix (seed 7 of the eval: GPU-slowdown recall
 * 0.9930 against 0.9933 for the scan). 0 when no cell bounds it.
 */
#define BOUND_CELLS 17
static int imin(int a, int b)
{
	return a < b ? a : b;
}

/* b, if a measurement, into best: the least median (d > 0) or the greatest (d < 0) */
static void bound_take(const struct dmodel *m, const struct dbin *b, int d, double *best)
{
	double med;

	if (!b || !bin_ready(m, b))
		return;
	med = dm_bin_median(b);
	if (!*best || (d > 0 ? med < *best : med > *best))
		*best = med;
}

/* c within n buckets of b in direction d (b itself included), and not negative */
static bool in_reach(int c, int b, int n, int d)
{
	return d > 0 ? c >= b && c < b + n : c <= b && c > b - n && c >= 0;
}

double dm_bound(const struct dmodel *m, double t, double kv, int dir)
{
	uint64_t key = dm_bin_key(t, kv);
	int bt = (int)(key >> 32), bk = (int)(uint32_t)key, d = dir > 0 ? 1 : -1;
	/* an unknown coordinate only compares with unknown */
	int nt = bt == 0xffff ? 1 : BOUND_CELLS, nk = bk == 0xffff ? 1 : BOUND_CELLS;
	double best = 0;

	/* no cell beyond the extent of the buckets in use: stop there */
	if (bt != 0xffff)
		nt = imin(nt, d > 0 ? m->ext_hi[0] - bt + 1 : bt - m->ext_lo[0] + 1);
	if (bk != 0xffff)
		nk = imin(nk, d > 0 ? m->ext_hi[1] - bk + 1 : bk - m->ext_lo[1] + 1);
	if (nt <= 0 || nk <= 0)
		return 0;
	/*
	 * the cells in reach, the workload's own aside: one lookup each, or,
	 * where the table is small beside the reach, one pass over the table
	 * (the same cells, the same extreme)
	 */
	if (m->cap < 4u * (uint32_t)(nt * nk)) {
		for (uint32_t i = 0; i < m->cap; i++) {
			const struct dbin *b = &m->bins[i];
			int ct = (int)(b->key >> 32), ck = (int)(uint32_t)b->key;

			if (b->key != BIN_EMPTY && b->key != key && in_reach(ct, bt, nt, d) &&
			    in_reach(ck, bk, nk, d))
				bound_take(m, b, d, &best);
		}
		return best;
	}
	for (int i = 0; i < nt && bt + d * i >= 0; i++)
		for (int j = !i; j < nk && bk + d * j >= 0; j++)
			bound_take(m,
				   dm_find(m, ((uint64_t)(uint32_t)(bt + d * i) << 32) |
						  (uint32_t)(bk + d * j)),
				   d, &best);
	return best;
}

/* ------------------------------------------------------------ kernels -- */

static uint64_t dk_hash(const char *name)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *p = name; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ULL;
	return corr_hash64(h);
}

/* its slot in tab (cap a power of two): its own, or the free one where it goes */
static uint32_t dk_slot(const struct dkern *tab, uint32_t cap, const char *name, uint64_t h)
{
	uint32_t mask = cap - 1, i = (uint32_t)h & mask;

	while (tab[i].name && strcmp(tab[i].name, name))
		i = (i + 1) & mask;
	return i;
}

struct dkern *dk_get(struct dkerns *k, const char *name, bool create, int pos)
{
	bool hint = pos >= 0 && pos < DIAG_TOP_MAX;
	uint64_t h;
	uint32_t i;

	if (hint) {
		i = k->last[pos];
		if (i < k->cap && k->tab[i].name && !strcmp(k->tab[i].name, name))
			return &k->tab[i];
	}
	h = dk_hash(name);
	if (k->cap) {
		i = dk_slot(k->tab, k->cap, name, h);
		if (k->tab[i].name) {
			if (hint)
				k->last[pos] = i;
			return &k->tab[i];
		}
	}
	if (!create)
		return NULL;
	if ((k->used + 1) * 4 > k->cap * 3) {
		uint32_t ncap = k->cap ? k->cap * 2 : 64;
		struct dkern *nt;

		if (ncap > (1u << 16))
			return NULL; /* bounded: kernels beyond 48k names are not tracked */
		nt = calloc(ncap, sizeof(*nt));
		if (!nt)
			return NULL;
		for (uint32_t j = 0; j < k->cap; j++)
			if (k->tab[j].name)
				nt[dk_slot(nt, ncap, k->tab[j].name, dk_hash(k->tab[j].name))] =
				    k->tab[j];
		free(k->tab);
		k->tab = nt;
		k->cap = ncap;
	}
	i = dk_slot(k->tab, k->cap, name, h);
	k->tab[i].name = strdup(name);
	if (!k->tab[i].name)
		return NULL;
	k->tab[i].log_ns = 0;
	k->tab[i].steps = 0;
	k->used++;
	if (hint)
		k->last[pos] = i;
	return &k->tab[i];
}

void dk_free(struct dkerns *k)
{
	for (uint32_t i = 0; i < k->cap; i++)
		free(k->tab[i].name);
	free(k->tab);
	memset(k, 0, sizeof(*k));
}
