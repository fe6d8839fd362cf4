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

struct strtab {
	char **s;
	int64_t n;
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

/*
 * sql (a query of table) with row(ctx, st) for each row, until one fails.
 * Returns 0, row()'s error, or -EINVAL logged with SQLite's reason.
 */
static int each_row(struct replay_ctx *rc, sqlite3 *db, const char *table, const char *sql,
		    int (*row)(void *ctx, sqlite3_stmt *st), void *ctx)
{
	sqlite3_stmt *st = NULL;
	int r, err = 0;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto sql_err;
	while ((r = sqlite3_step(st)) == SQLITE_ROW && !(err = row(ctx, st)))
		;
	if (!err && r != SQLITE_DONE)
		goto sql_err;
	sqlite3_finalize(st);
	return err;
sql_err:
	replay_log(rc, CORR_LOG_ERROR, "nsys: %s: %s", table, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return -EINVAL;
}

/* StringIds: id, value */
static int string_row(void *ctx, sqlite3_stmt *st)
{
	struct strtab *tab = ctx;
	int64_t id = sqlite3_column_int64(st, 0);
	const char *v = (const char *)sqlite3_column_text(st, 1);

	if (id >= 0 && id < tab->n && v && !tab->s[id]) {
		tab->s[id] = strdup(v);
		if (!tab->s[id])
			return -ENOMEM;
	}
	return 0;
}

static int load_strings(struct replay_ctx *rc, sqlite3 *db, struct strtab *tab)
{
	sqlite3_stmt *st = NULL;

	if (!has_table(db, "StringIds"))
		return 0;
	if (sqlite3_prepare_v2(db, "SELECT max(id) FROM StringIds", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW)
		goto sql_err;
	tab->n = sqlite3_column_int64(st, 0) + 1;
	sqlite3_finalize(st);
	st = NULL;
	if (tab->n <= 0 || tab->n > (1 << 26)) {
		replay_log(rc, CORR_LOG_ERROR, "nsys: StringIds: implausible max id %lld",
			   (long long)tab->n - 1);
		return -EINVAL;
	}
	tab->s = calloc((size_t)tab->n, sizeof(*tab->s));
	if (!tab->s)
		return -ENOMEM;
	return each_row(rc, db, "StringIds", "SELECT id, value FROM StringIds", string_row, tab);
sql_err:
	replay_log(rc, CORR_LOG_ERROR, "nsys: StringIds: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return -EINVAL;
}

static const char *str_of(const struct strtab *tab, sqlite3_stmt *st, int col)
{
	int64_t id;

	if (sqlite3_column_type(st, col) == SQLITE_TEXT)
		return (const char *)sqlite3_column_text(st, col);
	if (sqlite3_column_type(st, col) != SQLITE_INTEGER)
		return NULL;
	id = sqlite3_column_int64(st, col);
	return id >= 0 && id < tab->n ? tab->s[id] : NULL;
}

/* the rows of read_api() and read_gpu() */
struct rows {
	struct replay_ctx *rc;
	const struct strtab *tab;
	enum corr_kind kind;
};

/* start, globalTid, correlationId, nameId */
static int api_row(void *ctx, sqlite3_stmt *st)
{
	struct rows *x = ctx;
	uint64_t gtid = (uint64_t)sqlite3_column_int64(st, 1);
	const char *name = str_of(x->tab, st, 3);

	x->rc->st->events++;
	x->rc->st->launches++;
	return corr__add_launch(x->rc->c, (uint32_t)((gtid >> 24) & 0xFFFFFF),
				(uint32_t)(gtid & 0xFFFFFF), (uint64_t)sqlite3_column_int64(st, 0),
				(uint32_t)sqlite3_column_int64(st, 2), 0, name);
}

static int read_api(struct replay_ctx *rc, sqlite3 *db, const struct strtab *tab, const char *table)
{
	struct rows x = {rc, tab, 0};
	char q[256];

	if (!has_table(db, table))
		return 0;
	snprintf(q, sizeof(q),
		 "SELECT start, globalTid, correlationId, nameId FROM %s "
		 "WHERE correlationId IS NOT NULL ORDER BY start",
		 table);
	return each_row(rc, db, table, q, api_row, &x);
}

/* a row of read_gpu()'s query: start, end, ids, globalPid, name, grid, block, bytes... */
static int gpu_row(void *ctx, sqlite3_stmt *st)
{
	struct rows *x = ctx;
	struct corr_gpu g = {
	    .kind = x->kind,
	    .start_ns = (uint64_t)sqlite3_column_int64(st, 0),
	    .end_ns = (uint64_t)sqlite3_column_int64(st, 1),
	    .device = (uint32_t)sqlite3_column_int64(st, 2),
	    .context = (uint32_t)sqlite3_column_int64(st, 3),
	    .stream = (uint32_t)sqlite3_column_int64(st, 4),
	    .corr_id = (uint32_t)sqlite3_column_int64(st, 5),
	    .pid = (uint32_t)(((uint64_t)sqlite3_column_int64(st, 6) >> 24) & 0xFFFFFF),
	    .name = str_of(x->tab, st, 7),
	    .grid = {(uint32_t)sqlite3_column_int64(st, 8), (uint32_t)sqlite3_column_int64(st, 9),
		     (uint32_t)sqlite3_column_int64(st, 10)},
	    .block = {(uint32_t)sqlite3_column_int64(st, 11),
		      (uint32_t)sqlite3_column_int64(st, 12),
		      (uint32_t)sqlite3_column_int64(st, 13)},
	    .bytes = (uint64_t)sqlite3_column_int64(st, 14),
	    .copy_kind = (uint32_t)sqlite3_column_int64(st, 15),
	    .graph_node_id = (uint64_t)sqlite3_column_int64(st, 16),
	    .graph_id = (uint32_t)sqlite3_column_int64(st, 17),
	};

	if (x->kind == CORR_KIND_MEMSET)
		g.copy_kind = 0;
	x->rc->st->events++;
	x->rc->st->gpu_records++;
	return corr__add_gpu(x->rc->c, &g);
}

static int read_gpu(struct replay_ctx *rc, sqlite3 *db, const struct strtab *tab,
		    const char *table, enum corr_kind kind)
{
	struct rows x = { rc, tab, kind };
	char q[768];
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
		 name_col, kcols, extra1, extra2, has_col(db, table, "graphNodeId") ? "graphNodeId" : "0",
		 has_col(db, table, "graphId") ? "graphId" : "0", table);
	return each_row(rc, db, table, q, gpu_row, &x);
}

int nsys_read(struct replay_ctx *rc, const char *path)
{
	struct strtab tab = { 0 };
	sqlite3 *db = NULL;
	int err;

	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
		replay_log(rc, CORR_LOG_ERROR, "nsys: %s: %s", path,
			   db ? sqlite3_errmsg(db) : "cannot open");
		err = -EIO;
		goto cleanup;
	}
	/* a damaged file opens fine; the first read of the schema tells */
	if (sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) != SQLITE_OK) {
		replay_log(rc, CORR_LOG_ERROR, "nsys: %s: not a readable SQLite database: %s", path,
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
		replay_log(rc, CORR_LOG_WARN, "nsys: %s holds no CUDA activity tables", path);
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
	for (int64_t i = 0; i < tab.n; i++)
		free(tab.s[i]);
	free(tab.s);
	sqlite3_close(db);
	return err;
}
