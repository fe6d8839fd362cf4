/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * maps.bpf.h - maps and configuration shared by every <family>.bpf.c.
 *
 * Every .bpf.c includes this file and all of them are linked into one object
 * by `bpftool gen object`; the definitions are __weak so that the linker keeps
 * one copy of each. Sizes marked "agent" are set by agent/sources/loader.c with
 * bpf_map__set_max_entries() before load.
 */
#ifndef INFERTRACE_MAPS_BPF_H
#define INFERTRACE_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "events.h"

/* load-time settings (agent writes .rodata between open and load) */
const volatile struct agent_cfg cfg __weak = {};

/* settings that change at run time: mode, thresholds, stack rate */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct runtime_cfg);
} runtime_cfg SEC(".maps") __weak;

/* processes to trace, tgid -> instance; written by agent/sources/discovery.c */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* agent */
	__type(key, __u32);
	__type(value, struct traced_proc);
} traced_procs SEC(".maps") __weak;

/* per traced thread aggregates and working state, tid -> stats */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* agent */
	__type(key, __u32);
	__type(value, struct thread_stats);
} thread_stats SEC(".maps") __weak;

/* per traced thread and syscall number */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536); /* agent */
	__type(key, struct syscall_key);
	__type(value, struct syscall_stats);
} syscall_stats SEC(".maps") __weak;

/* per network device (node wide); per-CPU so busy NICs add no contention */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct netdev_key);
	__type(value, struct netdev_stats);
} netdev_stats SEC(".maps") __weak;

/* records emitted and reservations that failed, per event type */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EV_TYPE_MAX);
	__type(key, __u32);
	__type(value, __u64);
} event_counts SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EV_TYPE_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drop_counts SEC(".maps") __weak;

/*
 * Rings sharded by purpose so that a burst of launches cannot starve the
 * scheduler and process events (and one producer class per ring keeps the
 * reserve path uncontended). Sizes: agent.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} rb_cuda SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} rb_sched SEC(".maps") __weak;

/* syscalls, network and process lifecycle */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} rb_misc SEC(".maps") __weak;

/* the flight recorder's kernel half (struct flight_launch); sizes: agent */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct flight_launch);
} flight SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slot_cursor);
} flight_cur SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} flight_stacks SEC(".maps") __weak;

/* sentinel's NCCL calls (struct nccl_slot), the same way; sizes: agent */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct nccl_slot);
} nccl_slots SEC(".maps") __weak;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct slot_cursor);
} nccl_cur SEC(".maps") __weak;

/* zeroed template used to create map values too large for the stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_stats);
} zero_thread SEC(".maps") __weak;

#endif /* INFERTRACE_MAPS_BPF_H */
