// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * agent.c - the shared state's read side: options, host, and the traced
 * processes' identity (instance, rank). Discovery (agent/sources/discovery.c)
 * fills the process table; every stage below it reads it through these
 * lookups, so none of them calls back up into discovery.
 */
#include <stdio.h>

#include "state.h"

/*
 * The process table is looked up for every record (its instance and rank):
 * by pid through a chained hash of slot indexes, never by a scan, so a
 * table holding many processes costs no more per record than a small one
 * (issue 18, finding 18).
 */
static unsigned proc_bucket(uint32_t pid)
{
	return (pid * 2654435761u) & (PROC_BUCKETS - 1);
}

void proc_index_add(struct agent *a, struct proc *p)
{
	int idx = (int)(p - a->procs);
	unsigned b = proc_bucket(p->pid);

	a->proc_next[idx] = a->proc_head[b];
	a->proc_head[b] = idx + 1;
}

void proc_index_del(struct agent *a, struct proc *p)
{
	int idx = (int)(p - a->procs);
	int32_t *link = &a->proc_head[proc_bucket(p->pid)];

	while (*link && *link != idx + 1)
		link = &a->proc_next[*link - 1];
	if (*link)
		*link = a->proc_next[idx];
	a->proc_next[idx] = 0;
}

struct proc *proc_find_live(struct agent *a, uint32_t pid)
{
	for (int32_t i = a->proc_head[proc_bucket(pid)]; i; i = a->proc_next[i - 1]) {
		struct proc *p = &a->procs[i - 1];

		if (p->used && p->pid == pid && p->start_time != PROC_GONE)
			return p;
	}
	return NULL;
}

struct proc *proc_find(struct agent *a, uint32_t pid)
{
	struct proc *gone = NULL;

	for (int32_t i = a->proc_head[proc_bucket(pid)]; i; i = a->proc_next[i - 1]) {
		struct proc *p = &a->procs[i - 1];

		if (!p->used || p->pid != pid)
			continue;
		if (p->start_time != PROC_GONE)
			return p;
		gone = gone ? gone : p;
	}
	return gone;
}

const struct agent_opts *agent_opts(struct agent *a)
{
	return &a->opts;
}

const char *agent_host(struct agent *a)
{
	return a->host;
}

void agent_set_default_instance(struct agent *a, const char *name)
{
	snprintf(a->default_instance, sizeof(a->default_instance), "%s", name);
}

const char *agent_instance_of(struct agent *a, uint32_t pid)
{
	struct proc *p;

	if (a->opts.instance)
		return a->opts.instance;
	if (pid) {
		p = proc_find(a, pid);
		if (p && p->instance[0])
			return p->instance;
	}
	return a->default_instance[0] ? a->default_instance : a->host;
}

int32_t agent_rank_of(struct agent *a, uint32_t pid)
{
	struct proc *p = pid ? proc_find(a, pid) : NULL;

	return p ? p->rank : -1;
}
