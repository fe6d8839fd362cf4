// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * names.c - numbers and ids as names for records: syscalls (the table the
 * Makefile generates from this architecture's unistd_64.h), TCP states and
 * thread names. Used by the sources that decode and aggregate.
 */
#include <stdio.h>
#include <string.h>

#include "state.h"
#include "syscall_names.h"

const char *syscall_name(unsigned nr)
{
	if (nr < sizeof(syscall_names) / sizeof(syscall_names[0]) && syscall_names[nr])
		return syscall_names[nr];
	return NULL;
}

const char *tcp_state_name(unsigned state)
{
	static const char *const names[] = {
		[1] = "ESTABLISHED", [2] = "SYN_SENT",	 [3] = "SYN_RECV",   [4] = "FIN_WAIT1",
		[5] = "FIN_WAIT2",   [6] = "TIME_WAIT",	 [7] = "CLOSE",	     [8] = "CLOSE_WAIT",
		[9] = "LAST_ACK",    [10] = "LISTEN",	 [11] = "CLOSING",   [12] = "NEW_SYN_RECV",
	};

	return state < sizeof(names) / sizeof(names[0]) && names[state] ? names[state] : "UNKNOWN";
}

const char *thread_comm(uint32_t pid, uint32_t tid, char *buf, size_t sz)
{
	char path[64];
	FILE *f;

	buf[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/task/%u/comm", pid, tid);
	f = fopen(path, "re");
	if (f) {
		if (fgets(buf, sz, f))
			buf[strcspn(buf, "\n")] = '\0';
		fclose(f);
	}
	return buf;
}
