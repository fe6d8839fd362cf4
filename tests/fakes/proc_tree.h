/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * proc_tree.h - a synthetic /proc for tests of the receiver's tid scan
 * (agent/sources/shim_rx.c): tests/unit/test_shim_nspid.c and
 * tests/unit/test_shim_limits.c. Include after <cmocka.h>.
 */
#ifndef INFERTRACE_TEST_PROC_TREE_H
#define INFERTRACE_TEST_PROC_TREE_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/*
 * ROOT/PID/task/HOST/status of a thread "worker" with host id HOST; tail is
 * the rest of the text (an NSpid: line, or not).
 */
static inline void proc_tree_put_status(const char *root, uint32_t pid, uint32_t host,
					const char *tail)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%u", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%u/task", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%u/task/%u", root, pid, host);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%u/task/%u/status", root, pid, host);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "Name:\tworker\nPid:\t%u\n%s", host, tail);
	fclose(f);
}

#endif /* INFERTRACE_TEST_PROC_TREE_H */
