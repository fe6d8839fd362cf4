// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * proc.bpf.c - process lifecycle for discovery (agent/sources/discovery.c).
 *
 * A CUDA library is loaded long after exec (python imports torch late), so
 * exec alone cannot find CUDA processes: the hook that matters is the
 * executable mapping of a file named libcud* (libcudart, libcuda) or libncc*
 * (libnccl), seen at
 * mmap's entry before the mapping exists; the agent then reads
 * /proc/PID/maps. A traced process has every executable mapping reported,
 * whatever the file's name: an engine library it dlopen()s may carry the
 * step probes (agent/sources/usdt.c). exec and exit are reported only for traced
 * processes.
 */
#include "lib/common.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define PROT_EXEC 0x4

static __always_inline struct process_event *proc_reserve(__u32 type, __u32 tgid, __u32 tid)
{
	struct process_event *e = reserve(&rb_misc, sizeof(*e), type);

	if (!e)
		return NULL;
	fill_hdr(&e->hdr, type, sizeof(*e), tgid, tid, bpf_ktime_get_ns());
	__builtin_memset(e->comm, 0, sizeof(e->comm));
	__builtin_memset(e->name, 0, sizeof(e->name));
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	e->code = 0;
	e->pad = 0;
	return e;
}

#define NR_MMAP 9 /* x86-64 */

static __always_inline int handle_mmap_file(struct file *file)
{
	__u64 id = bpf_get_current_pid_tgid();
	const unsigned char *dname;
	char name[8] = {};
	struct process_event *e;

	if (!file || (id >> 32) == cfg.self_pid)
		return 0;
	dname = BPF_CORE_READ(file, f_path.dentry, d_name.name);
	/*
	 * "libcud": libcudart.so*, libcuda.so*; "libncc": libnccl.so* (it links
	 * the CUDA runtime statically); any file for a traced process
	 */
	if (!traced(id >> 32) && (bpf_probe_read_kernel_str(name, sizeof(name), dname) < 7 ||
				  name[0] != 'l' || name[1] != 'i' || name[2] != 'b' ||
				  !((name[3] == 'c' && name[4] == 'u' && name[5] == 'd') ||
				    (name[3] == 'n' && name[4] == 'c' && name[5] == 'c'))))
		return 0;
	e = proc_reserve(EV_LIB_MAP, id >> 32, (__u32)id);
	if (!e)
		return 0;
	bpf_probe_read_kernel_str(e->name, sizeof(e->name), dname);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/*
 * mmap(addr, len, prot, flags, fd, off) with PROT_EXEC: the dynamic loader
 * mapping a library's text. The file comes from the caller's fd table.
 * (security_mmap_file would be the natural hook, but fentry and kprobes are
 * missing on kernels built without ftrace/kprobes; raw_syscalls is always
 * there and the program returns after one compare for other syscalls.)
 */
static __always_inline int handle_sys_enter(struct pt_regs *regs, long nr)
{
	struct task_struct *task;
	struct file **fds;
	struct file *file = NULL;
	unsigned int max_fds;
	long prot, fd;

	if (nr != NR_MMAP)
		return 0;
	prot = BPF_CORE_READ(regs, dx);
	fd = BPF_CORE_READ(regs, r8);
	if (!(prot & PROT_EXEC) || fd < 0)
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	max_fds = BPF_CORE_READ(task, files, fdt, max_fds);
	if (fd >= max_fds)
		return 0;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	return handle_mmap_file(file);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_mmap_enter, struct pt_regs *regs, long id)
{
	return handle_sys_enter(regs, id);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(on_mmap_enter_raw, struct pt_regs *regs, long id)
{
	return handle_sys_enter(regs, id);
}

static __always_inline int handle_exec(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct process_event *e;

	if (!traced(id >> 32))
		return 0;
	e = proc_reserve(EV_PROC_EXEC, id >> 32, (__u32)id);
	if (e)
		bpf_ringbuf_submit(e, 0);
	return 0;
}

/* after exec the old image and its mappings are gone: the agent re-reads maps */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	return handle_exec();
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(on_exec_raw)
{
	return handle_exec();
}

static __always_inline int handle_exit(struct task_struct *task)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct process_event *e;

	/* the leader's exit ends the process for discovery's purposes */
	if ((id >> 32) != (__u32)id || !traced(id >> 32))
		return 0;
	e = proc_reserve(EV_PROC_EXIT, id >> 32, (__u32)id);
	if (!e)
		return 0;
	e->code = BPF_CORE_READ(task, exit_code) >> 8;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task)
{
	return handle_exit(task);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(on_exit_raw, struct task_struct *task)
{
	return handle_exit(task);
}
