/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * control_proto.h - the control protocol between agentctl (or anything
 * else) and the agent's control socket, and the request format of the
 * `<prefix>.control` Kafka topic. docs/architecture.md, "Control socket",
 * describes it for users; this file is the one definition both sides build.
 *
 * Framing (Unix SOCK_STREAM): every message is a 4-byte big-endian length N
 * followed by N bytes. Requests are one JSON object (N <= CTL_MAX_REQUEST);
 * every request gets exactly one reply, a JSON object with "ok". An export,
 * summary or anomalies reply is followed by one more frame: the exported
 * file's bytes, the summary's text, or the records as JSON lines.
 *
 * Requests (unknown keys are refused, so typos are not silently ignored):
 *   {"cmd":"ping"}
 *   {"cmd":"status"}
 *   {"cmd":"deep_dive","instance":NAME[,"duration_s":SECS][,"off":true]}
 *   {"cmd":"export","format":"perfetto"[,"instance":NAME]}
 *   {"cmd":"spill_foreign","action":"send"|"discard"}
 *   {"cmd":"summary"[,"reset":true]}
 *   {"cmd":"anomalies"[,"instance":NAME][,"last":N][,"after":SEEN]}
 * Any request may carry "id" (integer or string), echoed in its reply.
 *
 * Pure functions, no I/O except the blocking client helpers at the end:
 * the parser is what tests/fuzz/fuzz_control.c fuzzes.
 */
#ifndef INFERTRACE_CONTROL_PROTO_H
#define INFERTRACE_CONTROL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define CTL_SOCK_DEFAULT "/run/infertrace/agent.sock"
#define CTL_HDR_LEN 4
#define CTL_MAX_REQUEST (64 * 1024) /* larger requests: "too_large", connection closed */
#define CTL_MAX_REPLY (512u << 20)  /* an export is bounded by the recorder budget */
#define CTL_INSTANCE_MAX 127	    /* INSTANCE_LEN - 1 in agent/core/state.h (must match) */
#define CTL_ID_MAX 64
#define CTL_LAST_MAX 256 /* anomalies: RECENT_MAX in agent/pipeline/pipeline.h (must match) */

enum ctl_cmd {
	CTL_PING = 0,
	CTL_STATUS,
	CTL_DEEP_DIVE,
	CTL_EXPORT,
	CTL_SPILL_FOREIGN,
	CTL_SUMMARY,
	CTL_ANOMALIES,
	CTL_CMD_COUNT,
};

struct ctl_request {
	enum ctl_cmd cmd;
	char instance[CTL_INSTANCE_MAX + 1]; /* "" when absent */
	double duration_s;		     /* deep_dive: 0 = the agent's default */
	bool off;			     /* deep_dive: end it now */
	bool send;			     /* spill_foreign: send (true) or discard */
	bool reset;			     /* summary: the digest starts anew after this one */
	uint32_t last;			     /* anomalies: the newest N (0: every one kept) */
	int64_t after;			     /* anomalies: only those after the SEEN-th (-1: all) */
	json_t *id;			     /* echoed in the reply; owned, NULL when absent */
};

/* name of a command as it appears in requests and counters */
const char *ctl_cmd_name(enum ctl_cmd cmd);

/*
 * Parse and validate one request payload (without its length header).
 * Returns 0 with *req filled (call ctl_request_release() after), or -EINVAL
 * with a short reason in err (never NULL-terminated beyond err_sz) and
 * *req zeroed except for an id that could be read (for the error reply).
 */
int ctl_parse_request(const char *buf, size_t len, struct ctl_request *req, char *err,
		      size_t err_sz);
void ctl_request_release(struct ctl_request *req);

/* length header */
static inline void ctl_put_len(unsigned char hdr[CTL_HDR_LEN], uint32_t n)
{
	hdr[0] = n >> 24;
	hdr[1] = n >> 16;
	hdr[2] = n >> 8;
	hdr[3] = n;
}

static inline uint32_t ctl_get_len(const unsigned char hdr[CTL_HDR_LEN])
{
	return (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
}

/*
 * Client helpers (agentctl): blocking, with a timeout for each read.
 * ctl_send() writes one frame. ctl_recv() reads one frame of at most max
 * bytes into a malloc'ed, NUL-terminated buffer (*out, caller frees).
 * Both return 0 or -errno (-ETIMEDOUT, -EMSGSIZE, -ECONNRESET at EOF).
 */
int ctl_send(int fd, const void *buf, size_t len);
int ctl_recv(int fd, char **out, size_t *len, size_t max, int timeout_ms);

#endif /* INFERTRACE_CONTROL_PROTO_H */
