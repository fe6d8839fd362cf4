// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nsys.c - Nsight Systems SQLite exports.
 *
 * CUPTI_ACTIVITY_KIND_RUNTIME / DRIVER rows are launches (any API row with a
 * correlation id: the join decides which own GPU work), KERNEL / MEMCPY /
 * MEMSET rows are GPU records. Names are ids into StringIds. Nsight packs
 * process and thread into globalTid: pid = (globalTid >> 24) & 0xFFFFFF,
 * tid = globalTid & 0xFFFFFF (checked against PROCESSES in the tests);
 * globalPid uses the same pid bits. Tables may be absent; columns differ
 * between Nsight releases, so optional columns are probed first.
 * Launches are fed before GPU records, so nothing waits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "internal.h"

/*
 * StringIds as (id, string) pairs sorted by id: memory follows the rows the
 * file holds, not its largest id (one id of 60,000,000 cost a 480 MB dense
 * array), and no max(id) + 1 can overflow.
 */
struct strent {
	int64_t id;
	size_t ord; /* row order: the first row of an id wins, as before */
	char *s;
};

struct strtab {
	struct strent *e;
	size_t n, cap;
};

static bool has_table(sqlite3 *db, const char *t)
{
	sqlite3_stmt *st = NULL;
	bool ok = false;

	if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", -1,
			       &st, NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, t, -1, SQLITE_STATIC);
		ok = sqlite3_step(st) == SQLITE_ROW;
	}
	sqlite3_finalize(st);
	return ok;
}

static bool has_col(sqlite3 *db, const char *t, const char *col)
{
	char q[256];
	sqlite3_stmt *st = NULL;
	bool ok = false;

	snprintf(q, sizeof(q), "PRAGMA table_info(%s)", t);
	if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
		return false;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *n = (const char *)sqlite3_column_text(st, 1);

		if (n && !strcmp(n, col)) {
			ok = true;
			break;
		}
	}
	sqlite3_finalize(st);
	return ok;
}

static int cmp_strent(const void *a, const void *b)
{
	const struct strent *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->ord < y->ord ? -1 : x->ord > y->ord;
}

/* a query that failed or was interrupted: finalized, logged unless stopped */
static int query_failed(struct replay_ctx *rc, sqlite3 *db, sqlite3_stmt *st, const char *table)
{
	int err = replay_stopped(rc) ? -EINTR : -EINVAL;

	if (err == -EINVAL)
		replay_log(rc, CORR_LOG_ERROR, "nsys: %s: %s", table, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return err;
}

/* the end of a table's rows: err from a row, else the step's own result (r) */
static int query_end(struct replay_ctx *rc, sqlite3 *db, sqlite3_stmt *st, const char *table, int r,
		     int err)
{
	if (!err && r != SQLITE_DONE)
		return query_failed(rc, db, st, table);
	sqlite3_finalize(st);
	return err;
}

static int load_strings(struct replay_ctx *rc, sqlite3 *db, struct strtab *tab)
{
	sqlite3_stmt *st = NULL;
	int rc_sql, err = 0;
	size_t k = 0;

	if (!has_table(db, "StringIds"))
		return 0;
	if (sqlite3_prepare_v2(db, "SELECT id, value FROM StringIds", -1, &st, NULL) != SQLITE_OK)
		goto sql_err;
	while ((rc_sql = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);
		const char *v = (const char *)sqlite3_column_text(st, 1);

		if (id < 0 || !v)
			continue;
		if (tab->n == tab->cap) {
			size_t nc = tab->cap ? tab->cap * 2 : 1024;
			struct strent *ne = realloc(tab->e, nc * sizeof(*ne));

			if (!ne) {
				err = -ENOMEM;
				break;
			}
			tab->e = ne;
			tab->cap = nc;
		}
		tab->e[tab->n].s = strdup(v);
		if (!tab->e[tab->n].s) {
			err = -ENOMEM;
			break;
		}
		tab->e[tab->n].id = id;
		tab->e[tab->n].ord = tab->n;
		tab->n++;
	}
	if (!err && rc_sql != SQLITE_DONE)
		goto sql_err;
	sqlite3_finalize(st);
	if (err || tab->n < 2)
		return err;
	qsort(tab->e, tab->n, sizeof(*tab->e), cmp_strent);
	/* one entry per id: the first row's */
	for (size_t i = 0; i < tab->n; i++) {
		if (k && tab->e[k - 1].id == tab->e[i].id) {
			free(tab->e[i].s);
			continue;
		}
		tab->e[k++] = tab->e[i];
	}
	tab->n = k;
	return 0;
sql_err:
	return query_failed(rc, db, st, "StringIds");
}

static const char *str_of(const struct strtab *tab, sqlite3_stmt *st, int col)
{
	size_t lo = 0, hi = tab->n;
	int64_t id;

	if (sqlite3_column_type(st, col) == SQLITE_TEXT)
		return (const char *)sqlite3_column_text(st, col);
	if (sqlite3_column_type(st, col) != SQLITE_INTEGER)
		return NULL;
	id = sqlite3_column_int64(st, col);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (tab->e[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < tab->n && tab->e[lo].id == id ? tab->e[lo].s : NULL;
}

static int read_api(struct replay_ctx *rc, sqlite3 *db, const struct strtab *tab, const char *table)
{
	char q[256];
	sqlite3_stmt *st = NULL;
	int r, err = 0;

	if (!has_table(db, table))
		return 0;
	snprintf(q, sizeof(q),
		 "SELECT start, globalTid, correlationId, nameId FROM %s "
		 "WHERE correlationId IS NOT NULL ORDER BY start",
		 table);
	if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
		goto sql_err;
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t gtid = (uint64_t)sqlite3_column_int64(st, 1);

		if ((rc->st->events & 4095) == 0 && replay_stopped(rc)) {
			err = -EINTR;
			break;
		}
		const char *name = str_of(tab, st, 3);

		rc->st->events++;
		rc->st->launches++;
		err = corr__add_launch(rc->c, (uint32_t)((gtid >> 24) & 0xFFFFFF),
				       (uint32_t)(gtid & 0xFFFFFF),
				       (uint64_t)sqlite3_column_int64(st, 0),
				       (uint32_t)sqlite3_column_int64(st, 2), 0, name);
		if (err)
			break;
	}
	return query_end(rc, db, st, table, r, err);
sql_err:
	return query_failed(rc, db, st, table);
}

static int read_gpu(struct replay_ctx *rc, sqlite3 *db, const struct strtab *tab, const char *table,
		    enum corr_kind kind)
{
	char q[768];
	sqlite3_stmt *st = NULL;
	int r, err = 0;
	const char *name_col = "NULL";
	const char *kcols = "0,0,0,0,0,0";
	const char *extra1 = "0", *extra2 = "0";

	if (!has_table(db, table))
		return 0;
	if (kind == CORR_KIND_KERNEL) {
		/* mangled as recorded when Nsight kept it, else its demangled form */
		if (has_col(db, table, "mangledName"))
			name_col = "coalesce(mangledName, demangledName)";
		else if (has_col(db, table, "demangledName"))
			name_col = "demangledName";
		kcols = "gridX,gridY,gridZ,blockX,blockY,blockZ";
	} else {
		extra1 = has_col(db, table, "bytes") ? "bytes" : "0";
		extra2 = has_col(db, table, "copyKind") ? "copyKind" : "0";
	}
	snprintf(q, sizeof(q),
		 "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, "
		 "%s, %s, %s, %s, %s, %s FROM %s ORDER BY start",
		 name_col, kcols, extra1, extra2,
		 has_col(db, table, "graphNodeId") ? "graphNodeId" : "0",
		 has_col(db, table, "graphId") ? "graphId" : "0", table);
	if (sqlite3_prepare_v2(db, q, -1, &st, NULL) != SQLITE_OK)
		goto sql_err;
	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		struct corr_gpu g = {
		    .kind = kind,
		    .start_ns = (uint64_t)sqlite3_column_int64(st, 0),
		    .end_ns = (uint64_t)sqlite3_column_int64(st, 1),
		    .device = (uint32_t)sqlite3_column_int64(st, 2),
		    .context = (uint32_t)sqlite3_column_int64(st, 3),
		    .stream = (uint32_t)sqlite3_column_int64(st, 4),
		    .corr_id = (uint32_t)sqlite3_column_int64(st, 5),
		    .pid = (uint32_t)(((uint64_t)sqlite3_column_int64(st, 6) >> 24) & 0xFFFFFF),
		    .name = str_of(tab, st, 7),
		    .grid = {(uint32_t)sqlite3_column_int64(st, 8),
			     (uint32_t)sqlite3_column_int64(st, 9),
			     (uint32_t)sqlite3_column_int64(st, 10)},
		    .block = {(uint32_t)sqlite3_column_int64(st, 11),
			      (uint32_t)sqlite3_column_int64(st, 12),
			      (uint32_t)sqlite3_column_int64(st, 13)},
		    .bytes = (uint64_t)sqlite3_column_int64(st, 14),
		    .copy_kind = (uint32_t)sqlite3_column_int64(st, 15),
		    .graph_node_id = (uint64_t)sqlite3_column_int64(st, 16),
		    .graph_id = (uint32_t)sqlite3_column_int64(st, 17),
		};

		if ((rc->st->events & 4095) == 0 && replay_stopped(rc)) {
			err = -EINTR;
			break;
		}
		if (kind == CORR_KIND_MEMSET)
			g.copy_kind = 0;
		rc->st->events++;
		rc->st->gpu_records++;
		err = corr__add_gpu(rc->c, &g);
		if (err)
			break;
	}
	return query_end(rc, db, st, table, r, err);
sql_err:
	return query_failed(rc, db, st, table);
}

/* SQLite runs a query's sort before its first row: a stop must reach it */
static int on_progress(void *ctx)
{
	return replay_stopped(ctx);
}

int nsys_read(struct replay_ctx *rc, const char *path, const char *buf, size_t len)
{
	struct strtab tab = {0};
	const char *name = path ? path : "buffer";
	sqlite3 *db = NULL;
	int err;

	if (buf) {
		/* read from a pipe: SQLite reads it from memory, read-only */
		if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
		    sqlite3_deserialize(db, "main", (unsigned char *)buf, (sqlite3_int64)len,
					(sqlite3_int64)len,
					SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
			replay_log(rc, CORR_LOG_ERROR, "nsys: %s: %s", name,
				   db ? sqlite3_errmsg(db) : "cannot open");
			err = -EIO;
			goto cleanup;
		}
	} else if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		replay_log(rc, CORR_LOG_ERROR, "nsys: %s: %s", path,
			   db ? sqlite3_errmsg(db) : "cannot open");
		err = -EIO;
		goto cleanup;
	}
	sqlite3_progress_handler(db, 10000, on_progress, rc);
	/* a damaged file opens fine; the first read of the schema tells */
	if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
		replay_log(rc, CORR_LOG_ERROR, "nsys: %s: not a readable SQLite database: %s", name,
			   sqlite3_errmsg(db));
		err = -EINVAL;
		goto cleanup;
	}
	err = load_strings(rc, db, &tab);
	if (err)
		goto cleanup;
	if (!has_table(db, "CUPTI_ACTIVITY_KIND_KERNEL") &&
	    !has_table(db, "CUPTI_ACTIVITY_KIND_MEMCPY") &&
	    !has_table(db, "CUPTI_ACTIVITY_KIND_MEMSET"))
		replay_log(rc, CORR_LOG_WARN, "nsys: %s holds no CUDA activity tables", name);
	err = read_api(rc, db, &tab, "CUPTI_ACTIVITY_KIND_RUNTIME");
	if (!err)
		err = read_api(rc, db, &tab, "CUPTI_ACTIVITY_KIND_DRIVER");
	if (!err)
		err = read_gpu(rc, db, &tab, "CUPTI_ACTIVITY_KIND_KERNEL", CORR_KIND_KERNEL);
	if (!err)
		err = read_gpu(rc, db, &tab, "CUPTI_ACTIVITY_KIND_MEMCPY", CORR_KIND_MEMCPY);
	if (!err)
		err = read_gpu(rc, db, &tab, "CUPTI_ACTIVITY_KIND_MEMSET", CORR_KIND_MEMSET);
cleanup:
	/* a query the stop interrupted may look like a missing table */
	if (!err && replay_stopped(rc))
		err = -EINTR;
	for (size_t i = 0; i < tab.n; i++)
		free(tab.e[i].s);
	free(tab.e);
	sqlite3_close(db);
	return err;
}
