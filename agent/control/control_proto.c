// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * control_proto.c - parse and validate control requests (control_proto.h),
 * and the blocking framing helpers agentctl uses. The agent's socket side
 * (agent/control/control.c) and the Kafka control topic (agent/control/control_kafka.c)
 * both parse through ctl_parse_request(), which tests/fuzz/fuzz_control.c
 * fuzzes: whatever the bytes, it returns 0 or -EINVAL and leaks nothing.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "control_proto.h"
#include "util.h"

static const char *const cmd_names[CTL_CMD_COUNT] = {
    [CTL_PING] = "ping",
    [CTL_STATUS] = "status",
    [CTL_DEEP_DIVE] = "deep_dive",
    [CTL_EXPORT] = "export",
    [CTL_SPILL_FOREIGN] = "spill_foreign",
    [CTL_SUMMARY] = "summary",
    [CTL_ANOMALIES] = "anomalies",
};

const char *ctl_cmd_name(enum ctl_cmd cmd)
{
	return (unsigned)cmd < CTL_CMD_COUNT ? cmd_names[cmd] : "unknown";
}

/* the keys each command accepts besides "cmd" and "id" */
static bool key_allowed(enum ctl_cmd cmd, const char *key)
{
	switch (cmd) {
	case CTL_DEEP_DIVE:
		return !strcmp(key, "instance") || !strcmp(key, "duration_s") ||
		       !strcmp(key, "off");
	case CTL_EXPORT:
		return !strcmp(key, "format") || !strcmp(key, "instance");
	case CTL_SPILL_FOREIGN:
		return !strcmp(key, "action");
	case CTL_SUMMARY:
		return !strcmp(key, "reset");
	case CTL_ANOMALIES:
		return !strcmp(key, "instance") || !strcmp(key, "last") || !strcmp(key, "after");
	default:
		return false;
	}
}

/*
 * Instance names: any name a workload can give itself (INFERTRACE_INSTANCE:
 * spaces, quotes, UTF-8, control bytes), so that every instance `agentctl
 * status` lists can be asked for; the agent's log and texts print them
 * through term_safe(). Only the bound and NUL (a C string ends there;
 * jansson refuses \u0000 anyway) are refused.
 */
static bool instance_ok(const char *s, size_t n)
{
	return n && n <= CTL_INSTANCE_MAX && !memchr(s, '\0', n);
}

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(err, err_sz, __VA_ARGS__);                                                \
		goto fail;                                                                         \
	} while (0)

int ctl_parse_request(const char *buf, size_t len, struct ctl_request *req, char *err,
		      size_t err_sz)
{
	json_error_t jerr;
	json_t *root, *v, *id;
	const char *key, *s;
	int cmd = -1;

	memset(req, 0, sizeof(*req));
	if (err_sz)
		err[0] = '\0';
	if (!len || len > CTL_MAX_REQUEST) {
		snprintf(err, err_sz, "request of %zu bytes (1 to %d)", len, CTL_MAX_REQUEST);
		return -EINVAL;
	}
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, err_sz, "not JSON: %.80s at byte %d", jerr.text, jerr.position);
		return -EINVAL;
	}
	if (!json_is_object(root))
		FAIL("a request is a JSON object");
	id = json_object_get(root, "id");
	if (id) {
		if (json_is_integer(id) ||
		    (json_is_string(id) && json_string_length(id) <= CTL_ID_MAX))
			req->id = json_incref(id);
		else
			FAIL("\"id\" must be an integer or a string of at most %d bytes",
			     CTL_ID_MAX);
	}
	v = json_object_get(root, "cmd");
	if (!json_is_string(v))
		FAIL("\"cmd\" (a string) is missing");
	s = json_string_value(v);
	for (int i = 0; i < CTL_CMD_COUNT; i++)
		if (!strcmp(s, cmd_names[i]))
			cmd = i;
	if (cmd < 0)
		FAIL("unknown cmd (ping, status, deep_dive, export, spill_foreign, summary, "
		     "anomalies)");
	req->cmd = cmd;
	json_object_foreach(root, key, v)
	{
		if (strcmp(key, "cmd") && strcmp(key, "id") && !key_allowed(req->cmd, key))
			FAIL("unknown key for %s: %.40s", cmd_names[cmd], key);
	}
	v = json_object_get(root, "instance");
	if (v) {
		if (!json_is_string(v) || !instance_ok(json_string_value(v), json_string_length(v)))
			FAIL("\"instance\" must be a name of 1 to %d bytes", CTL_INSTANCE_MAX);
		memcpy(req->instance, json_string_value(v), json_string_length(v));
		req->instance[json_string_length(v)] = '\0';
	}
	switch (req->cmd) {
	case CTL_DEEP_DIVE:
		if (!req->instance[0])
			FAIL("deep_dive needs \"instance\"");
		v = json_object_get(root, "off");
		if (v && !json_is_boolean(v))
			FAIL("\"off\" must be true or false");
		req->off = json_is_true(v);
		v = json_object_get(root, "duration_s");
		if (v) {
			double d = json_number_value(v);

			if (!json_is_number(v) || !isfinite(d) || d <= 0 || d > 86400)
				FAIL("\"duration_s\" must be a number of seconds in (0, 86400]");
			req->duration_s = d;
		}
		break;
	case CTL_EXPORT:
		v = json_object_get(root, "format");
		if (!json_is_string(v) || strcmp(json_string_value(v), "perfetto"))
			FAIL("export needs \"format\": \"perfetto\"");
		break;
	case CTL_SPILL_FOREIGN:
		v = json_object_get(root, "action");
		if (!json_is_string(v) || (strcmp(json_string_value(v), "send") &&
					   strcmp(json_string_value(v), "discard")))
			FAIL("spill_foreign needs \"action\": \"send\" or \"discard\"");
		req->send = !strcmp(json_string_value(v), "send");
		break;
	case CTL_SUMMARY:
		v = json_object_get(root, "reset");
		if (v && !json_is_boolean(v))
			FAIL("\"reset\" must be true or false");
		req->reset = json_is_true(v);
		break;
	case CTL_ANOMALIES:
		v = json_object_get(root, "last");
		if (v) {
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > CTL_LAST_MAX)
				FAIL("\"last\" must be an integer from 1 to %d", CTL_LAST_MAX);
			req->last = (uint32_t)json_integer_value(v);
		}
		v = json_object_get(root, "after");
		req->after = -1;
		if (v) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				FAIL("\"after\" must be an integer >= 0 (a reply's \"seen\")");
			req->after = json_integer_value(v);
		}
		break;
	default:
		break;
	}
	json_decref(root);
	return 0;

fail:
	/* keep the id for the error reply, drop the rest */
	id = req->id;
	memset(req, 0, sizeof(*req));
	req->id = id;
	json_decref(root);
	return -EINVAL;
}

void ctl_request_release(struct ctl_request *req)
{
	if (!req)
		return;
	json_decref(req->id);
	req->id = NULL;
}

/* ------------------------------------------------------- client side -- */

static int read_all(int fd, void *buf, size_t len, int timeout_ms)
{
	char *p = buf;

	while (len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		ssize_t n;
		int r = poll(&pfd, 1, timeout_ms);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!r)
			return -ETIMEDOUT;
		n = recv(fd, p, len, 0);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -errno;
		}
		if (!n)
			return -ECONNRESET;
		p += n;
		len -= n;
	}
	return 0;
}

int ctl_send(int fd, const void *buf, size_t len)
{
	unsigned char hdr[CTL_HDR_LEN];
	int err;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	ctl_put_len(hdr, (uint32_t)len);
	err = write_all(fd, hdr, sizeof(hdr), -1);
	if (!err)
		err = write_all(fd, buf, len, -1);
	return err;
}

int ctl_recv(int fd, char **out, size_t *len, size_t max, int timeout_ms)
{
	unsigned char hdr[CTL_HDR_LEN];
	char *buf = NULL;
	uint32_t n;
	int err;

	*out = NULL;
	*len = 0;
	err = read_all(fd, hdr, sizeof(hdr), timeout_ms);
	if (err)
		return err;
	n = ctl_get_len(hdr);
	if (n > max)
		return -EMSGSIZE;
	buf = malloc((size_t)n + 1);
	if (!buf)
		return -ENOMEM;
	err = read_all(fd, buf, n, timeout_ms);
	if (err) {
		free(buf);
		return err;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}
