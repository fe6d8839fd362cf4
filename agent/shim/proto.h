/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * proto.h - the shim channel: what flows between libinfertrace_cupti.so (in
 * each CUDA process) and the agent's receiver (agent/sources/shim_rx.c). Both sides
 * include this file; docs/architecture.md ("The CUPTI shim and its channel") describes the design.
 *
 * Transport: one SOCK_SEQPACKET Unix connection per CUDA process to the
 * agent's listening socket (default SHIM_SOCK_DEFAULT, env SHIM_ENV_SOCKET).
 *
 * shim -> agent: each message is one or more records of bpf/events.h laid
 * back to back, each starting with struct event_hdr whose size field gives
 * the record's length. A message never exceeds SHIM_MSG_MAX bytes. The first
 * message on a connection is an EV_SHIM_STATUS record (the hello): the agent
 * drops every record of a connection until a hello with its own
 * INFERTRACE_ABI_VERSION arrived, and closes a connection whose hello speaks
 * another version.
 *
 * agent -> shim: struct shim_ctl_msg messages on the same connection.
 *
 * Any process that can open the socket is a peer: the agent bounds what one
 * connection may cost it (records, bytes and /proc scans per second, 4
 * connections per process, a hello within 5 s) and counts what it refuses;
 * docs/operations.md, "The shim channel: limits".
 */
#ifndef INFERTRACE_SHIM_PROTO_H
#define INFERTRACE_SHIM_PROTO_H

#include "events.h"

#define SHIM_SOCK_DEFAULT "/run/infertrace/shim.sock"
#define SHIM_ENV_SOCKET "INFERTRACE_SHIM_SOCKET"
/* the agent gives the socket (0660) to this group: workloads join it, not group 0 */
#define SHIM_GROUP_DEFAULT "infertrace"

/* upper bound of one message in either direction */
#define SHIM_MSG_MAX 16384

#define SHIM_CTL_MAGIC 0x43535449u /* "ITSC" little endian */
#define SHIM_CTL_VERSION 1
#define SHIM_CTL_SET_MODE 1 /* mode: enum agent_mode */

/*
 * Control message, 16 bytes.
 *
 *  0        4         6       8        12       16
 *  +--------+---------+-------+--------+--------+
 *  | magic  | version |  op   |  arg   |  pad   |
 *  +--------+---------+-------+--------+--------+
 */
struct shim_ctl_msg {
	__u32 magic;
	__u16 version;
	__u16 op;
	__u32 arg;
	__u32 pad;
};
_Static_assert(sizeof(struct shim_ctl_msg) == 16, "shim_ctl_msg ABI");

#endif /* INFERTRACE_SHIM_PROTO_H */
