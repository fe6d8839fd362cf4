// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * deepdive.c - deep capture for one instance, for a bounded time, while the
 * rest of the node stays in sentinel mode. Nothing is restarted or
 * re-attached: the BPF side already decides per process (is_deep() in
 * bpf/lib/common.bpf.h: PROC_F_DEEP in traced_procs, looked up only while
 * runtime_cfg.deep_procs > 0), and the CUPTI shims switch capture on a
 * message (shim_rx_set_mode()).
 *
 * The table of deep-dives is the truth; deepdive_sync() makes traced_procs
 * agree with it: it flags every live process whose instance has a
 * deep-dive, unflags the others, keeps runtime_cfg.deep_procs equal to the
 * number flagged, and tells each switched process's shim. It runs at once
 * on start/stop and on every loop iteration, so processes of the instance
 * that appear (or exec) meanwhile are switched within 100 ms, and an
 * expired deep-dive ends within 100 ms of its deadline.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"
#include "pipeline.h"

#define MAX_DEEP_DIVES 64
#define SHIM_REPUSH_NS 1000000000ull /* shims that connect later learn the mode within 1 s */

struct dive {
	char instance[INSTANCE_LEN];
	char source[16];
	uint64_t start_ns, until_ns;
};

struct flagged {
	uint32_t pid;
	uint32_t instance_id;
};

struct deepdive {
	struct dive dives[MAX_DEEP_DIVES];
	int n;
	struct flagged pids[MAX_PROCS];
	int n_pids;
	uint64_t last_push_ns;
	uint32_t cache_pid; /* deepdive_pid_deep() cache, 0: empty */
	bool cache_deep;
	uint64_t started, extended, stopped, expired, refused;
	uint64_t procs_flagged, procs_unflagged, map_errors, shim_told, shim_absent;
};

int deepdive_init(struct agent *a)
{
	struct deepdive *dd = calloc(1, sizeof(*dd));

	if (!dd)
		return -ENOMEM;
	a->dd = dd;
	return 0;
}

static struct deepdive *dd_of(struct agent *a)
{
	return a->dd;
}

static struct dive *dive_find(struct deepdive *dd, const char *name)
{
	for (int i = 0; i < dd->n; i++)
		if (!strcmp(dd->dives[i].instance, name))
			return &dd->dives[i];
	return NULL;
}

static int flagged_find(struct deepdive *dd, uint32_t pid)
{
	for (int i = 0; i < dd->n_pids; i++)
		if (dd->pids[i].pid == pid)
			return i;
	return -1;
}

static int set_proc_flags(struct agent *a, struct proc *p, uint32_t flags)
{
	return a->cap.proc_flags ? a->cap.proc_flags(a, p->pid, p->instance_id, flags) : -ENODEV;
}

static int set_shim_mode(struct agent *a, uint32_t pid, enum agent_mode m)
{
	return a->cap.shim_mode ? a->cap.shim_mode(a, pid, m) : -ENOTCONN;
}

static void tell_shim(struct agent *a, struct deepdive *dd, uint32_t pid, enum agent_mode m)
{
	int err = set_shim_mode(a, pid, m);

	if (!err)
		dd->shim_told++;
	else
		dd->shim_absent++; /* no shim in that process (yet), or GPU capture off */
}

/* make traced_procs agree with the table; returns processes switched */
static int deepdive_sync(struct agent *a, struct deepdive *dd)
{
	int before = dd->n_pids, changed = 0;

	if (!dd->n && !dd->n_pids)
		return 0;
	/* processes gone (or reused pids): discovery removed their entries */
	for (int i = 0; i < dd->n_pids;) {
		struct proc *p = proc_find_live(a, dd->pids[i].pid);

		if (p && p->instance_id == dd->pids[i].instance_id) {
			i++;
			continue;
		}
		dd->pids[i] = dd->pids[--dd->n_pids];
	}
	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];
		bool want, have;
		int idx, err;

		if (!p->used || p->start_time == PROC_GONE)
			continue;
		want = dive_find(dd, agent_instance_of(a, p->pid)) != NULL;
		idx = flagged_find(dd, p->pid);
		have = idx >= 0;
		if (want == have)
			continue;
		/*
		 * its NCCL calls change path (the slots, rb_cuda): what the
		 * slots hold goes first, then the rings keep the order
		 */
		if (!changed && a->cap.nccl_flush)
			a->cap.nccl_flush(a);
		err = set_proc_flags(a, p, want ? PROC_F_DEEP : 0);
		if (err) {
			dd->map_errors++;
			pr_warn("deep-dive: pid %u: traced_procs update failed: %s", p->pid,
				strerror(-err));
			continue;
		}
		if (want) {
			dd->pids[dd->n_pids++] = (struct flagged){p->pid, p->instance_id};
			dd->procs_flagged++;
		} else {
			dd->pids[idx] = dd->pids[--dd->n_pids];
			dd->procs_unflagged++;
		}
		tell_shim(a, dd, p->pid, want ? MODE_DEEP : MODE_SENTINEL);
		changed++;
	}
	dd->cache_pid = 0;
	if (dd->n_pids != before && a->cap.runtime_cfg)
		a->cap.runtime_cfg(a); /* reads deepdive_proc_count() */
	if (dd->n_pids != before && a->cap.launch_probes)
		a->cap.launch_probes(
		    a); /* per-launch uprobes on or off (at once, not at the tick) */
	return changed;
}

static int count_procs(struct agent *a, struct deepdive *dd, const char *name)
{
	int n = 0;

	for (int i = 0; i < dd->n_pids; i++)
		n += !strcmp(agent_instance_of(a, dd->pids[i].pid), name);
	return n;
}

static void emit_record(struct agent *a, struct deepdive *dd, const struct dive *d,
			const char *action)
{
	json_t *r = rec_new(a, "deep_dive", 0, 0, now_ns());
	uint64_t now = now_ns();

	if (!r)
		return;
	json_object_set_new(r, "instance", rec_string(d->instance));
	json_object_set_new(r, "action", json_string(action));
	json_object_set_new(r, "source", json_string(d->source));
	json_object_set_new(r, "until_ns", json_integer((json_int_t)d->until_ns));
	json_object_set_new(r, "remaining_ns",
			    json_integer((json_int_t)(d->until_ns > now ? d->until_ns - now : 0)));
	json_object_set_new(r, "processes", json_integer(count_procs(a, dd, d->instance)));
	rec_send_obj(a, REC_STATS, r); /* the policy's own record: stats go everywhere */
}

static void fill_info(struct agent *a, struct deepdive *dd, const struct dive *d, json_t *info)
{
	uint64_t now = now_ns();

	if (!info)
		return;
	json_object_set_new(info, "instance", rec_string(d->instance));
	json_object_set_new(info, "until_ns", json_integer((json_int_t)d->until_ns));
	json_object_set_new(info, "remaining_s",
			    json_real(d->until_ns > now ? (d->until_ns - now) / 1e9 : 0));
	json_object_set_new(info, "processes", json_integer(count_procs(a, dd, d->instance)));
	json_object_set_new(info, "source", json_string(d->source));
}

int deepdive_start(struct agent *a, const char *name, double duration_s, const char *source,
		   json_t *info)
{
	struct deepdive *dd = dd_of(a);
	double max = a->opts.deep_dive_max_s;
	uint64_t now = now_ns(), until;
	struct dive *d;

	if (!dd)
		return -ENOTSUP;
	if (!name || !*name || strlen(name) >= INSTANCE_LEN)
		return -EINVAL;
	if (a->opts.mode == MODE_DEEP) {
		dd->refused++;
		return -EALREADY;
	}
	if (duration_s <= 0)
		duration_s = DEEP_DIVE_DEFAULT_S;
	if (max > 0 && duration_s > max)
		duration_s = max;
	until = now + (uint64_t)(duration_s * 1e9);
	d = dive_find(dd, name);
	if (d) {
		if (until > d->until_ns)
			d->until_ns = until;
		snprintf(d->source, sizeof(d->source), "%s", source);
		dd->extended++;
		pr_info("deep-dive %s extended: %.1f s left (%s)", name, (d->until_ns - now) / 1e9,
			source);
		emit_record(a, dd, d, "extend");
		fill_info(a, dd, d, info);
		return 0;
	}
	if (dd->n == MAX_DEEP_DIVES) {
		dd->refused++;
		return -ENOSPC;
	}
	/*
	 * the seconds before the trigger first, then the deep detail; the
	 * dive's time starts after the window went out (formatting a window
	 * of kernel-kept launches can take a few hundred ms)
	 */
	recorder_flush(a, name, "deep_dive");
	now = now_ns();
	until = now + (uint64_t)(duration_s * 1e9);
	d = &dd->dives[dd->n++];
	memset(d, 0, sizeof(*d));
	snprintf(d->instance, sizeof(d->instance), "%s", name);
	snprintf(d->source, sizeof(d->source), "%s", source);
	d->start_ns = now;
	d->until_ns = until;
	dd->started++;
	deepdive_sync(a, dd);
	/* and after the switch: attaching the per-launch uprobes takes a while */
	d->start_ns = now_ns();
	d->until_ns = d->start_ns + (uint64_t)(duration_s * 1e9);
	pr_info("deep-dive %s started for %.1f s (%s): %d processes", name, duration_s, source,
		count_procs(a, dd, name));
	emit_record(a, dd, d, "start");
	fill_info(a, dd, d, info);
	return 0;
}

static void dive_end(struct agent *a, struct deepdive *dd, int idx, const char *action)
{
	struct dive d = dd->dives[idx];

	dd->dives[idx] = dd->dives[--dd->n];
	deepdive_sync(a, dd);
	pr_info("deep-dive %s ended (%s)", d.instance, action);
	emit_record(a, dd, &d, action);
}

int deepdive_stop(struct agent *a, const char *name, json_t *info)
{
	struct deepdive *dd = dd_of(a);
	struct dive *d;

	if (!dd)
		return -ENOTSUP;
	d = dive_find(dd, name);
	if (!d)
		return -ENOENT;
	if (info) {
		json_object_set_new(info, "instance", rec_string(name));
		json_object_set_new(info, "ran_s", json_real((now_ns() - d->start_ns) / 1e9));
	}
	dd->stopped++;
	dive_end(a, dd, (int)(d - dd->dives), "stop");
	return 0;
}

void deepdive_tick(struct agent *a)
{
	struct deepdive *dd = dd_of(a);
	uint64_t now = now_ns();

	if (!dd)
		return;
	for (int i = 0; i < dd->n;) {
		if (now >= dd->dives[i].until_ns) {
			dd->expired++;
			dive_end(a, dd, i, "expire");
			continue;
		}
		i++;
	}
	deepdive_sync(a, dd);
	/* shims that connected after the switch start in sentinel: tell them again */
	if (dd->n_pids && now - dd->last_push_ns >= SHIM_REPUSH_NS) {
		dd->last_push_ns = now;
		for (int i = 0; i < dd->n_pids; i++)
			set_shim_mode(a, dd->pids[i].pid, MODE_DEEP);
	}
}

bool deepdive_pid_deep(struct agent *a, uint32_t pid)
{
	struct deepdive *dd = dd_of(a);

	if (a->opts.mode == MODE_DEEP)
		return true;
	if (!dd || !dd->n_pids)
		return false;
	if (pid && pid == dd->cache_pid)
		return dd->cache_deep;
	dd->cache_pid = pid;
	dd->cache_deep = flagged_find(dd, pid) >= 0;
	return dd->cache_deep;
}

bool deepdive_instance_deep(struct agent *a, const char *instance)
{
	struct deepdive *dd = dd_of(a);

	if (a->opts.mode == MODE_DEEP)
		return true;
	return dd && instance && dive_find(dd, instance);
}

uint32_t deepdive_proc_count(struct agent *a)
{
	struct deepdive *dd = dd_of(a);

	return dd ? (uint32_t)dd->n_pids : 0;
}

json_t *deepdive_list(struct agent *a)
{
	struct deepdive *dd = dd_of(a);
	json_t *arr = json_array();

	if (!dd || !arr)
		return arr;
	for (int i = 0; i < dd->n; i++) {
		json_t *o = json_object();

		fill_info(a, dd, &dd->dives[i], o);
		json_array_append_new(arr, o);
	}
	return arr;
}

void deepdive_stats(struct agent *a, json_t *obj)
{
	struct deepdive *dd = dd_of(a);

	if (!dd)
		return;
	json_object_set_new(
	    obj, "deep_dive",
	    json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "active", dd->n,
		      "processes", dd->n_pids, "started", (json_int_t)dd->started, "extended",
		      (json_int_t)dd->extended, "stopped", (json_int_t)dd->stopped, "expired",
		      (json_int_t)dd->expired, "refused", (json_int_t)dd->refused, "procs_flagged",
		      (json_int_t)dd->procs_flagged, "procs_unflagged",
		      (json_int_t)dd->procs_unflagged, "map_errors", (json_int_t)dd->map_errors,
		      "shim_told", (json_int_t)dd->shim_told, "shim_absent",
		      (json_int_t)dd->shim_absent));
}

void deepdive_free(struct agent *a)
{
	struct deepdive *dd = dd_of(a);

	if (!dd)
		return;
	/* the shims outlive the agent: put them back to sentinel capture */
	while (dd->n)
		dive_end(a, dd, dd->n - 1, "shutdown");
	free(dd);
	a->dd = NULL;
}
