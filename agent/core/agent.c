// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * agent.c - the shared state's read side: options, host, and the traced
 * processes' identity (instance, rank). Discovery (agent/sources/discovery.c)
 * fills the process table; every stage below it reads it through these
 * lookups, so none of them calls back up into discovery.
 */
#include <stdio.h>

#include "state.h"

struct proc *proc_find_live(struct agent *a, uint32_t pid)
{
	for (int i = 0; i < a->n_procs; i++)
		if (a->procs[i].used && a->procs[i].pid == pid &&
		    a->procs[i].start_time != PROC_GONE)
			return &a->procs[i];
	return NULL;
}

struct proc *proc_find(struct agent *a, uint32_t pid)
{
	struct proc *p = proc_find_live(a, pid);

	if (p)
		return p;
	for (int i = 0; i < a->n_procs; i++)
		if (a->procs[i].used && a->procs[i].pid == pid)
			return &a->procs[i];
	return NULL;
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
