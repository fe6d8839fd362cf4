// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bare_uprobe.bpf.c - the benchmark's floor: the cheapest useful uprobe, one
 * counter increment per hit and nothing else. What it adds to a call is what
 * the kernel's uprobe machinery costs by itself (trap, dispatch, BPF entry,
 * single-step or emulation, return); bench/run.sh compares the agent's
 * programs (bpf/cuda.bpf.c) against it.
 *
 * Deliberately NOT part of the agent's BPF object: the Makefile compiles it
 * on its own (block "bench: bare uprobe") and build/bench/bare_uprobe
 * (bench/bare_uprobe.c) loads it from the file.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

/* hits since load; one global in .bss, read by the loader at exit */
__u64 hits = 0;

SEC("uprobe")
int on_hit(void *ctx)
{
	__sync_fetch_and_add(&hits, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
