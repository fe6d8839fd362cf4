// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * names.c - numbers and ids as names for records: syscalls (the table the
 * Makefile generates from this architecture's unistd_64.h), TCP states and
 * thread names, event types (stats and metrics). Used by the sources that
 * decode and aggregate, and by control.
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
	    [1] = "ESTABLISHED", [2] = "SYN_SENT",  [3] = "SYN_RECV", [4] = "FIN_WAIT1",
	    [5] = "FIN_WAIT2",	 [6] = "TIME_WAIT", [7] = "CLOSE",    [8] = "CLOSE_WAIT",
	    [9] = "LAST_ACK",	 [10] = "LISTEN",   [11] = "CLOSING", [12] = "NEW_SYN_RECV",
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

static const char *const type_names[EV_TYPE_MAX] = {
    [EV_CUDA_LAUNCH] = "cuda_launch", [EV_CUDA_SYNC] = "cuda_sync",
    [EV_OFFCPU] = "offcpu",	      [EV_RUNQ] = "runq",
    [EV_SYSCALL] = "syscall",	      [EV_TCP_RETRANS] = "tcp_retransmit",
    [EV_PROC_EXEC] = "proc_exec",     [EV_PROC_EXIT] = "proc_exit",
    [EV_LIB_MAP] = "lib_map",	      [EV_STEP_MARK] = "step_mark",
    [EV_NET_IO] = "net_io",	      [EV_NCCL_CALL] = "nccl_call",
    [EV_NCCL_COMM] = "nccl_comm",     [EV_NCCL_WAKE] = "nccl_wake",
    [EV_GPU_KERNEL] = "gpu_kernel",   [EV_GPU_MEMCPY] = "gpu_memcpy",
    [EV_GPU_MEMSET] = "gpu_memset",   [EV_GPU_LAUNCH_CB] = "gpu_launch_cb",
    [EV_SHIM_STATUS] = "shim_status", [EV_PY_STACK] = "py_stack",
};

const char *event_type_name(int t)
{
	return t >= 0 && t < EV_TYPE_MAX ? type_names[t] : NULL;
}
