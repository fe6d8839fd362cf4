// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * control.c - the agent's control socket (--control-socket, default
 * /run/infertrace/agent.sock): agentctl's requests (status, deep_dive,
 * export, summary, anomalies, spill_foreign, ping) in the framing of
 * control_proto.h.
 *
 * Never blocks the event loop: the listening socket and every connection
 * are nonblocking and served by the server core (core/server.h: one private
 * epoll fd, which the loop watches). Per connection: a fixed input buffer of
 * one maximal request, one reply in flight (further requests wait in the
 * input buffer), an idle timeout. At most CTL_MAX_CONNS connections; more
 * are accepted, told "busy" and closed at once.
 *
 * An export converts the recorder's window (copied first: the recorder
 * moves on) in slices of at most EXPORT_SLICE_NS per loop turn, kicked by
 * an eventfd in the private epoll set, so the rings are served between
 * slices however large the window.
 *
 * Who may talk: the socket file is connectable by anyone (mode 0666) so
 * that a refused peer gets a reply that says why; the kernel-reported peer
 * credentials (SO_PEERCRED, SO_PEERGROUPS) decide: uid 0, or a member of
 * --control-group. Everything refused or malformed is counted ("control"
 * in the stats record).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "perfetto.h"
#include "sink_kafka.h"
#include "spill.h"
#include "control_proto.h"
#include "server.h"
#include "util.h"

#define CTL_MAX_CONNS 16
#define CTL_IDLE_NS (30ull * 1000000000ull)
#define CTL_IN_CAP (CTL_HDR_LEN + CTL_MAX_REQUEST)
#define EXPORT_SLICE_NS 10000000ull /* conversion work per loop turn */

struct export_job {
	char *snap; /* recorder_snapshot(): [u32 len][JSON]... */
	size_t len, off;
	struct perfetto *p;
	json_t *id;
	char instance[CTL_INSTANCE_MAX + 1];
};

/* what the control socket keeps per server slot (buffers and deadline: struct srv_conn) */
struct conn {
	struct control *ctl;
	unsigned int slot;
	uid_t uid;
	pid_t pid;
	bool eof, closing;	/* close once the reply is out */
	struct export_job *job; /* an export being converted */
};

struct control {
	struct agent *a;
	struct srv *srv;
	int kick;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	bool have_gid;
	gid_t gid;
	struct conn conns[CTL_MAX_CONNS];
	uint64_t accepted, refused_peer, refused_limit, requests, by_cmd[CTL_CMD_COUNT];
	uint64_t malformed, oversized, failed, timeouts, write_errors, bytes_out;
};

static struct control *ctl_of(struct agent *a)
{
	return a->ops ? a->ops->ctl : NULL;
}

/* the server core's side of c: fd, buffers, deadline */
static struct srv_conn *sc(struct conn *c)
{
	return srv_conn(c->ctl->srv, c->slot);
}

/* ----------------------------------------------------------- replies -- */

static int queue_frames(struct conn *c, const char *a, size_t alen, const char *b, size_t blen)
{
	size_t total = CTL_HDR_LEN + alen + (b ? CTL_HDR_LEN + blen : 0);
	char *out = malloc(total);

	if (!out)
		return -ENOMEM;
	ctl_put_len((unsigned char *)out, (uint32_t)alen);
	memcpy(out + CTL_HDR_LEN, a, alen);
	if (b) {
		ctl_put_len((unsigned char *)out + CTL_HDR_LEN + alen, (uint32_t)blen);
		memcpy(out + 2 * CTL_HDR_LEN + alen, b, blen);
	}
	srv_queue(c->ctl->srv, c->slot, out, total);
	return 0;
}

/* reply (stolen) + optional id + optional data frame */
static void reply(struct conn *c, json_t *r, json_t *id, const char *data, size_t dlen)
{
	char *s;

	if (!r)
		r = json_pack("{s:b,s:s}", "ok", 0, "error", "internal");
	if (id)
		json_object_set(r, "id", id);
	s = json_dumps(r, JSON_COMPACT);
	json_decref(r);
	if (!s || queue_frames(c, s, strlen(s), data, dlen))
		c->closing = true; /* out of memory: drop the connection */
	free(s);
}

static void reply_error(struct conn *c, json_t *id, const char *code, const char *msg)
{
	reply(c, json_pack("{s:b,s:s,s:s}", "ok", 0, "error", code, "message", msg), id, NULL, 0);
}

/* ------------------------------------------------------------ status -- */

static json_t *procs_json(struct agent *a)
{
	json_t *arr = json_array();

	for (int i = 0; i < a->n_procs; i++) {
		struct proc *p = &a->procs[i];

		if (!p->used || p->start_time == PROC_GONE)
			continue;
		json_array_append_new(
		    arr, json_pack("{s:i,s:s,s:s,s:o,s:s,s:i}", "pid", (int)p->pid, "comm", p->comm,
				   "instance", agent_instance_of(a, p->pid), "rank",
				   p->rank < 0 ? json_null() : json_integer(p->rank), "mode",
				   deepdive_pid_deep(a, p->pid) ? "deep" : "sentinel", "libraries",
				   p->n_libs));
	}
	return arr;
}

/* one entry per instance: its processes and mode */
static json_t *instances_json(struct agent *a, json_t *procs, json_t *dives)
{
	json_t *out = json_object(), *arr = json_array(), *p, *d;
	const char *key;
	size_t i;

	json_array_foreach(procs, i, p)
	{
		const char *name = json_string_value(json_object_get(p, "instance"));
		json_t *inst = json_object_get(out, name);

		if (!inst) {
			inst = json_pack("{s:s,s:s,s:[]}", "name", name, "mode",
					 a->opts.mode == MODE_DEEP ? "deep" : "sentinel", "pids");
			json_object_set_new(out, name, inst);
		}
		json_array_append(json_object_get(inst, "pids"), json_object_get(p, "pid"));
	}
	json_array_foreach(dives, i, d)
	{
		const char *name = json_string_value(json_object_get(d, "instance"));
		json_t *inst = json_object_get(out, name);

		if (!inst) {
			inst = json_pack("{s:s,s:[]}", "name", name, "pids");
			json_object_set_new(out, name, inst);
		}
		json_object_set_new(inst, "mode", json_string("deep"));
		json_object_set(inst, "deep_remaining_s", json_object_get(d, "remaining_s"));
	}
	json_object_foreach(out, key, p) json_array_append(arr, p);
	json_decref(out);
	return arr;
}

json_t *control_status(struct agent *a)
{
	json_t *r = json_object(), *procs = procs_json(a), *dives = deepdive_list(a);
	json_t *sinks = json_array(), *stats = json_object();

	json_object_set_new(r, "version", json_string(AGENT_VERSION));
	json_object_set_new(r, "host", json_string(a->host));
	json_object_set_new(r, "agent_pid", json_integer(getpid()));
	json_object_set_new(r, "mode",
			    json_string(a->opts.mode == MODE_DEEP ? "deep" : "sentinel"));
	json_object_set_new(r, "uptime_s", json_real((now_ns() - a->start_ns) / 1e9));
	json_object_set_new(r, "interval_s", json_real(a->opts.interval_s));
	json_object_set_new(r, "bpf_loaded", json_boolean(loader_loaded(a)));
	json_object_set_new(r, "instances", instances_json(a, procs, dives));
	json_object_set_new(r, "processes", procs);
	json_object_set_new(r, "deep_dives", dives);
	for (int i = 0; i < a->n_sinks; i++)
		json_array_append_new(sinks, json_pack("{s:s,s:I,s:I}", "name", a->sinks[i]->name,
						       "written", (json_int_t)a->sinks[i]->written,
						       "errors", (json_int_t)a->sinks[i]->errors));
	json_object_set_new(r, "sinks", sinks);
	/* the latest interval's counters, as the stats record has them */
	if (a->ops->last_stats)
		json_object_set(r, "last_stats", a->ops->last_stats);
	if (a->ops->rates)
		json_object_set(r, "event_rates", a->ops->rates);
	ops_add_objects(a, stats);
	json_object_update(r, stats);
	json_decref(stats);
	return r;
}

/* ------------------------------------------------------------ export -- */

static void job_free(struct export_job *j)
{
	if (!j)
		return;
	free(j->snap);
	perfetto_free(j->p);
	json_decref(j->id);
	free(j);
}

static void kick(struct control *ctl)
{
	uint64_t one = 1;

	(void)!write(ctl->kick, &one, sizeof(one));
}

static void do_export(struct agent *a, struct control *ctl, struct conn *c,
		      const struct ctl_request *req)
{
	struct export_job *j;
	uint64_t records;
	int err;

	if (!recorder_enabled(a)) {
		reply_error(c, req->id, "recorder_off",
			    "the flight recorder is off (--recorder-seconds 0)");
		return;
	}
	j = calloc(1, sizeof(*j));
	if (!j || !(j->p = perfetto_new())) {
		job_free(j);
		reply_error(c, req->id, "internal", "out of memory");
		return;
	}
	err = recorder_snapshot(a, req->instance[0] ? req->instance : NULL, &j->snap, &j->len,
				&records);
	if (err) {
		job_free(j);
		reply_error(c, req->id, "internal", strerror(-err));
		return;
	}
	j->id = json_incref(req->id);
	snprintf(j->instance, sizeof(j->instance), "%s", req->instance);
	c->job = j;
	kick(ctl);
}

/* convert for at most budget_ns; true when the reply is queued */
static bool job_step(struct conn *c, uint64_t budget_ns)
{
	struct export_job *j = c->job;
	uint64_t t0 = now_ns();
	struct perfetto_stats st;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	int err, n = 0;

	while (j->off + 4 <= j->len) {
		uint32_t rl;

		memcpy(&rl, j->snap + j->off, 4);
		perfetto_add_json(j->p, j->snap + j->off + 4, rl);
		j->off += 4 + rl;
		if (++n % 256 == 0 && now_ns() - t0 > budget_ns)
			return false;
	}
	f = open_memstream(&buf, &len);
	err = f ? perfetto_write(j->p, f) : -ENOMEM;
	if (f && fclose(f) && !err)
		err = -ENOMEM;
	perfetto_get_stats(j->p, &st);
	c->job = NULL;
	if (err || len > CTL_MAX_REPLY)
		reply_error(c, j->id, "internal", err ? strerror(-err) : "export too large");
	else
		reply(c,
		      json_pack("{s:b,s:s,s:I,s:I,s:I,s:I,s:s?}", "ok", 1, "format", "chrome-json",
				"bytes", (json_int_t)len, "records", (json_int_t)st.records,
				"events", (json_int_t)st.events, "flows", (json_int_t)st.flows,
				"instance", j->instance[0] ? j->instance : NULL),
		      j->id, buf, len);
	free(buf);
	job_free(j);
	return true;
}

/* ----------------------------------------------------------- dispatch -- */

/* the Kafka spill's segments of another owner: sent with this run's settings, or deleted */
static void spill_foreign(struct agent *a, struct control *ctl, struct conn *c,
			  const struct ctl_request *req)
{
	const char *action = req->send ? "send" : "discard";
	struct spill_foreign_done done;
	int err = kafka_sink_spill_foreign(a, req->send, &done);

	if (err == -ENOENT) {
		ctl->failed++;
		reply_error(c, req->id, "no_spill", "this agent has no Kafka sink, so no spill");
		return;
	}
	if (err) {
		ctl->failed++;
		reply_error(c, req->id, "failed", strerror(-err));
		return;
	}
	pr_info("control: spill-foreign %s by pid %d (uid %u)", action, (int)c->pid,
		(unsigned)c->uid);
	reply(c,
	      json_pack("{s:b,s:s,s:I,s:I}", "ok", 1, "action", action, "segments",
			(json_int_t)done.segments, "records",
			(json_int_t)(req->send ? done.adopted : done.discarded)),
	      req->id, NULL, 0);
}

/* every section of the digest (term_safe_out(): names as '?' where they hold control bytes) */
static void summary_sections(void *ctx, FILE *f)
{
	struct agent *a = ctx;

	aggregate_print_summary(a, f);
	telem_print_summary(a, f);
	python_print_summary(a, f);
	gpusum_print(a->gpusum, f);
	pyprof_print(a->pyprof, f);
	diag_print_summary(a->diag, f);
}

/*
 * --summary's sections, in the order they are printed at exit, since the
 * start or the last reset; with reset, every section's digest then starts
 * anew (records, the stats record and /metrics go on untouched). The text
 * of the exit, of --summary-every and of the control socket's "summary".
 * The GPU records and the GPU time by Python call are collected only with
 * --summary (nothing printed without). -ENOMEM: the empty GPU digests could
 * not be made, nothing was reset (the text is written all the same).
 */
int control_summary(struct agent *a, FILE *out, bool reset)
{
	struct gpusum *gs = NULL;
	struct pyprof *pp = NULL;
	int err = 0;

	/* the empty digests first: a reset that cannot be made changes nothing */
	if (reset && ((a->gpusum && !(gs = gpusum_new())) || (a->pyprof && !(pp = pyprof_new())))) {
		gpusum_free(gs);
		reset = false;
		err = -ENOMEM;
	}
	term_safe_out(out, summary_sections, a);
	if (!reset)
		return err;
	aggregate_summary_reset(a);
	telem_summary_reset(a);
	python_summary_reset(a);
	diag_summary_reset(a->diag);
	if (gs) {
		gpusum_free(a->gpusum);
		a->gpusum = gs;
	}
	if (pp) {
		pyprof_free(a->pyprof);
		a->pyprof = pp;
	}
	a->summary_ns = now_ns();
	return 0;
}

/*
 * --summary's text while the agent runs (control_summary(), as at exit):
 * since the start or the last reset; with "reset", the digest starts anew
 * after it. Without --summary the sections collected only with it are
 * named on a line of their own.
 */
static void summary(struct agent *a, struct control *ctl, struct conn *c,
		    const struct ctl_request *req)
{
	char *buf = NULL;
	size_t len = 0;
	uint64_t since = a->summary_ns, now = now_ns();
	FILE *f = open_memstream(&buf, &len);
	bool reset;

	if (!f) {
		ctl->failed++;
		reply_error(c, req->id, "internal", "out of memory");
		return;
	}
	reset = !control_summary(a, f, req->reset) && req->reset;
	if (!a->opts.summary)
		fprintf(f, "\n(the GPU records and the GPU time by Python call are collected "
			   "only when the agent runs with --summary)\n");
	if (reset)
		pr_info("control: summary reset by pid %d (uid %u)", (int)c->pid, (unsigned)c->uid);
	else if (req->reset)
		pr_warn("control: summary reset by pid %d: no memory for empty GPU digests, "
			"nothing reset",
			(int)c->pid);
	if (fclose(f) || len > CTL_MAX_REPLY) {
		ctl->failed++;
		reply_error(c, req->id, "internal", buf ? "summary too large" : "out of memory");
	} else {
		reply(c,
		      json_pack("{s:b,s:I,s:f,s:f,s:b,s:b}", "ok", 1, "bytes", (json_int_t)len,
				"uptime_s", (now - a->start_ns) / 1e9, "since_s",
				(now - since) / 1e9, "reset", reset, "collected_all",
				a->opts.summary),
		      req->id, buf, len);
	}
	free(buf);
}

_Static_assert(CTL_LAST_MAX == RECENT_MAX, "\"last\" is bounded by the ring");
_Static_assert(CTL_INSTANCE_MAX + 1 == INSTANCE_LEN, "instance names: one bound");

/*
 * The last anomaly records (recent.c) of one instance or all, oldest first,
 * as JSON lines in the data frame, each as the sinks got it: what the
 * detector said lately, without a reader of the sinks. With the agent's
 * CLOCK_MONOTONIC now, so that agentctl can say how long ago, and when
 * this run of the agent started, so that a follower sees a restart.
 */
static void anomalies(struct agent *a, struct control *ctl, struct conn *c,
		      const struct ctl_request *req)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_t *r = f ? recent_write(a, req->instance, req->last, req->after, f) : NULL;

	if (f && fclose(f)) {
		json_decref(r);
		r = NULL;
	}
	if (!r) {
		ctl->failed++;
		reply_error(c, req->id, "internal", "out of memory");
		free(buf);
		return;
	}
	json_object_set_new(r, "ok", json_true());
	json_object_set_new(r, "bytes", json_integer((json_int_t)len));
	json_object_set_new(r, "now_ns", json_integer((json_int_t)now_ns()));
	/* a follower's "after" counts in this run of the agent */
	json_object_set_new(r, "started_ns", json_integer((json_int_t)a->start_ns));
	reply(c, r, req->id, buf, len);
	free(buf);
}

static void handle(struct agent *a, struct control *ctl, struct conn *c, const char *buf,
		   size_t len)
{
	struct ctl_request req;
	char why[160];
	json_t *r;
	int err;

	ctl->requests++;
	if (ctl_parse_request(buf, len, &req, why, sizeof(why))) {
		ctl->malformed++;
		pr_debug("control: pid %d: malformed request: %s", (int)c->pid, why);
		reply_error(c, req.id, "bad_request", why);
		ctl_request_release(&req);
		return;
	}
	ctl->by_cmd[req.cmd]++;
	switch (req.cmd) {
	case CTL_PING:
		reply(c, json_pack("{s:b,s:s}", "ok", 1, "version", AGENT_VERSION), req.id, NULL,
		      0);
		break;
	case CTL_STATUS:
		r = control_status(a);
		json_object_set_new(r, "ok", json_true());
		reply(c, r, req.id, NULL, 0);
		break;
	case CTL_DEEP_DIVE:
		r = json_object();
		if (req.off)
			err = deepdive_stop(a, req.instance, r);
		else
			err = deepdive_start(a, req.instance, req.duration_s, "socket", r);
		if (err) {
			json_decref(r);
			ctl->failed++;
			if (err == -ENOENT)
				reply_error(c, req.id, "not_found",
					    "no deep-dive runs for this instance");
			else if (err == -EALREADY)
				reply_error(c, req.id, "already_deep",
					    "the agent runs with --mode deep: every instance is "
					    "deep already");
			else if (err == -ENOSPC)
				reply_error(c, req.id, "too_many", "too many deep-dives at once");
			else
				reply_error(c, req.id, "failed", strerror(-err));
			break;
		}
		json_object_set_new(r, "ok", json_true());
		json_object_set_new(r, "action", json_string(req.off ? "stop" : "start"));
		pr_info("control: deep-dive %s %s by pid %d (uid %u)", req.instance,
			req.off ? "off" : "on", (int)c->pid, (unsigned)c->uid);
		reply(c, r, req.id, NULL, 0);
		break;
	case CTL_EXPORT:
		do_export(a, ctl, c, &req);
		break;
	case CTL_SPILL_FOREIGN:
		spill_foreign(a, ctl, c, &req);
		break;
	case CTL_SUMMARY:
		summary(a, ctl, c, &req);
		break;
	case CTL_ANOMALIES:
		anomalies(a, ctl, c, &req);
		break;
	default:
		reply_error(c, req.id, "bad_request", "unknown cmd");
		break;
	}
	ctl_request_release(&req);
}

/* ------------------------------------------------------- connections -- */

static void conn_close(struct control *ctl, struct conn *c)
{
	srv_close(ctl->srv, c->slot);
}

/* the server core closes a slot: what the control socket holds for it */
static void on_close(void *ctx, unsigned int slot)
{
	struct control *ctl = ctx;
	struct conn *c = &ctl->conns[slot];

	job_free(c->job);
	*c = (struct conn){.ctl = ctl, .slot = slot};
}

static void conn_interest(struct control *ctl, struct conn *c)
{
	/* one reply at a time: no reading while one is queued */
	srv_interest(ctl->srv, c->slot,
		     sc(c)->out ? EPOLLOUT : (c->eof || c->closing || c->job ? 0 : EPOLLIN));
}

/* requests complete in the input buffer, one at a time */
static void conn_process(struct agent *a, struct control *ctl, struct conn *c)
{
	struct srv_conn *s = sc(c);

	while (!s->out && !c->job && !c->closing && s->in_len >= CTL_HDR_LEN) {
		uint32_t n = ctl_get_len(s->in);

		if (!n || n > CTL_MAX_REQUEST) {
			/* the stream cannot be resynchronised: say why and hang up */
			ctl->requests++;
			ctl->oversized++;
			reply_error(c, NULL, n ? "too_large" : "bad_request",
				    n ? "request larger than 65536 bytes" : "empty request");
			c->closing = true;
			break;
		}
		if (s->in_len < CTL_HDR_LEN + n)
			break;
		handle(a, ctl, c, (const char *)s->in + CTL_HDR_LEN, n);
		s->in_len -= CTL_HDR_LEN + n;
		memmove(s->in, s->in + CTL_HDR_LEN + n, s->in_len);
	}
}

static void conn_write(struct control *ctl, struct conn *c)
{
	int err = srv_send(ctl->srv, c->slot, &ctl->bytes_out);

	if (err && err != -EAGAIN) {
		ctl->write_errors++;
		c->closing = true;
	}
}

static void conn_read(struct control *ctl, struct conn *c)
{
	while (sc(c)->in_len < CTL_IN_CAP) {
		ssize_t n = srv_recv(ctl->srv, c->slot);

		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			c->eof = true;
			return;
		}
	}
}

static int conn_event(struct agent *a, struct control *ctl, struct conn *c, uint32_t events)
{
	if (events & EPOLLIN)
		conn_read(ctl, c);
	conn_process(a, ctl, c);
	conn_write(ctl, c);
	/* the reply is out: what else waits in the buffer */
	conn_process(a, ctl, c);
	conn_write(ctl, c);
	if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN))
		c->eof = true;
	if (!sc(c)->out && !c->job && (c->closing || c->eof)) {
		conn_close(ctl, c);
		return 0;
	}
	conn_interest(ctl, c);
	return 0;
}

static int on_event(void *ctx, struct srv *s, unsigned int slot, uint32_t events)
{
	struct control *ctl = ctx;

	(void)s;
	return conn_event(ctl->a, ctl, &ctl->conns[slot], events);
}

static bool peer_allowed(struct control *ctl, int fd, struct ucred *cr)
{
	socklen_t len = sizeof(*cr);
	gid_t groups[256];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len))
		return false;
	if (cr->uid == 0)
		return true;
	if (!ctl->have_gid)
		return false;
	if (cr->gid == ctl->gid)
		return true;
	len = sizeof(groups);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == ctl->gid)
			return true;
	return false;
}

/* a reply that says why, before the server core closes fd */
static int refuse(int fd, const char *code, const char *msg)
{
	char buf[512];
	int n = snprintf(buf + CTL_HDR_LEN, sizeof(buf) - CTL_HDR_LEN,
			 "{\"ok\":false,\"error\":\"%s\",\"message\":\"%s\"}", code, msg);

	if (n > 0 && (size_t)n < sizeof(buf) - CTL_HDR_LEN) {
		ctl_put_len((unsigned char *)buf, (uint32_t)n);
		/* best effort: a fresh socket has room for this */
		(void)!send(fd, buf, CTL_HDR_LEN + n, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
	return -1;
}

static int on_accept(void *ctx, struct srv *s, int fd, int slot)
{
	struct control *ctl = ctx;
	struct ucred cr = {};
	char msg[160];

	(void)s;
	if (!peer_allowed(ctl, fd, &cr)) {
		ctl->refused_peer++;
		snprintf(msg, sizeof(msg), "permission denied: uid %u is not root%s",
			 (unsigned)cr.uid, ctl->have_gid ? " nor in the control group" : "");
		pr_info("control: refused pid %d uid %u (not root%s)", (int)cr.pid,
			(unsigned)cr.uid, ctl->have_gid ? " nor in --control-group" : "");
		return refuse(fd, "permission_denied", msg);
	}
	if (slot == -ENOSPC) {
		ctl->refused_limit++;
		return refuse(fd, "busy", "too many control connections");
	}
	if (slot < 0)
		return refuse(fd, "internal", "out of memory");
	ctl->conns[slot] = (struct conn){.ctl = ctl, .slot = slot, .uid = cr.uid, .pid = cr.pid};
	ctl->accepted++;
	return 0;
}

/* one slice of every export; the eventfd stays set while work remains */
static void run_jobs(void *ctx, struct srv *s)
{
	struct control *ctl = ctx;
	uint64_t v;
	bool more = false;

	(void)!read(ctl->kick, &v, sizeof(v));
	for (int i = 0; i < CTL_MAX_CONNS; i++) {
		struct conn *c = &ctl->conns[i];

		if (srv_conn(s, i)->fd < 0 || !c->job)
			continue;
		srv_touch(s, i);
		if (!job_step(c, EXPORT_SLICE_NS)) {
			more = true;
			continue;
		}
		conn_event(ctl->a, ctl, c, 0);
	}
	if (more)
		kick(ctl);
}

static void on_ready(struct agent *a, void *ctx)
{
	struct control *ctl = ctx;

	(void)a;
	srv_serve(ctl->srv);
}

void control_tick(struct agent *a)
{
	struct control *ctl = ctl_of(a);

	if (!ctl)
		return;
	ctl->timeouts += srv_expire(ctl->srv, CTL_IDLE_NS);
}

int control_init(struct agent *a)
{
	const char *path = a->opts.control_socket ? a->opts.control_socket : CTL_SOCK_DEFAULT;
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	/* the default socket is a convenience (tracing goes on without it): warn */
	enum log_level lvl = a->opts.control_socket ? LOG_ERROR : LOG_WARN;
	struct srv_opts so = {
	    .sz = sizeof(so),
	    .max_conns = CTL_MAX_CONNS,
	    .accepts = 64, /* bounded: a flood of connections cannot hold the loop */
	    .max_events = 16,
	    .in_cap = CTL_IN_CAP,
	    .idle_deadline = true,
	    .on_accept = on_accept,
	    .on_event = on_event,
	    .on_close = on_close,
	    .on_wake = run_jobs,
	};
	struct control *ctl;
	int err, lfd = -1;

	if (!strcmp(path, "none"))
		return 0;
	ctl = calloc(1, sizeof(*ctl));
	if (!ctl)
		return -ENOMEM;
	ctl->a = a;
	ctl->kick = -1;
	so.ctx = ctl;
	if (a->opts.control_group) {
		struct group *g = getgrnam(a->opts.control_group);

		if (!g) {
			agent_log(lvl, "--control-group %s: no such group", a->opts.control_group);
			err = -ENOENT;
			goto fail;
		}
		ctl->gid = g->gr_gid;
		ctl->have_gid = true;
	}
	if (strlen(path) >= sizeof(sun.sun_path)) {
		agent_log(lvl, "--control-socket %s: path too long", path);
		err = -ENAMETOOLONG;
		goto fail;
	}
	snprintf(ctl->path, sizeof(ctl->path), "%s", path);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	err = mkdir_parents(path, 0755);
	if (err) {
		agent_log(lvl, "control socket %s: cannot create its directory: %s", path,
			  strerror(-err));
		goto fail;
	}
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	ctl->kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (lfd < 0 || ctl->kick < 0) {
		err = -errno;
		agent_log(lvl, "control socket: %s", strerror(-err));
		goto fail;
	}
	/* a stale file from a previous run (a live agent would be a conflict: checked) */
	if (!connect(lfd, (struct sockaddr *)&sun, sizeof(sun))) {
		agent_log(lvl, "control socket %s: another agent is listening there", path);
		err = -EADDRINUSE;
		goto fail;
	}
	close(lfd);
	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	unlink(path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sun, sizeof(sun)) || chmod(path, 0666) ||
	    listen(lfd, 16) || !(ctl->srv = srv_new(lfd, &so)) || srv_watch(ctl->srv, ctl->kick)) {
		err = -errno;
		agent_log(lvl, "control socket %s: %s", path, strerror(-err));
		goto fail;
	}
	err = agent_watch_fd(a, srv_fd(ctl->srv), on_ready, ctl);
	if (err) {
		agent_log(lvl, "control socket: event loop: %s", strerror(-err));
		goto fail;
	}
	a->ops->ctl = ctl;
	pr_info("control socket %s (root%s%s)", path, ctl->have_gid ? " and group " : "",
		ctl->have_gid ? a->opts.control_group : "");
	return 0;

fail:
	if (lfd >= 0) {
		if (ctl->srv)
			srv_free(ctl->srv); /* closes lfd */
		else
			close(lfd);
		if (err != -EADDRINUSE && ctl->path[0])
			unlink(ctl->path);
	}
	if (ctl->kick >= 0)
		close(ctl->kick);
	free(ctl);
	if (!a->opts.control_socket && err != -ENOMEM) {
		pr_warn("no control socket: agentctl cannot reach this agent (use "
			"--control-socket PATH)");
		return 0;
	}
	return err;
}

void control_stats(struct agent *a, json_t *obj)
{
	struct control *ctl = ctl_of(a);
	json_t *by_cmd;
	int active;

	if (!ctl)
		return;
	active = (int)srv_active(ctl->srv);
	by_cmd = json_object();
	for (int i = 0; i < CTL_CMD_COUNT; i++)
		json_object_set_new(by_cmd, ctl_cmd_name((enum ctl_cmd)i),
				    json_integer((json_int_t)ctl->by_cmd[i]));
	json_object_set_new(
	    obj, "control",
	    json_pack("{s:i,s:I,s:I,s:I,s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:I}", "connections", active,
		      "accepted", (json_int_t)ctl->accepted, "refused_peer",
		      (json_int_t)ctl->refused_peer, "refused_limit",
		      (json_int_t)ctl->refused_limit, "requests", (json_int_t)ctl->requests,
		      "by_cmd", by_cmd, "malformed", (json_int_t)ctl->malformed, "oversized",
		      (json_int_t)ctl->oversized, "failed", (json_int_t)ctl->failed, "timeouts",
		      (json_int_t)ctl->timeouts, "write_errors", (json_int_t)ctl->write_errors,
		      "bytes_out", (json_int_t)ctl->bytes_out));
}

void control_free(struct agent *a)
{
	struct control *ctl = ctl_of(a);

	if (!ctl)
		return;
	agent_unwatch_fd(a, srv_fd(ctl->srv));
	srv_free(ctl->srv); /* every connection, the listening socket */
	close(ctl->kick);
	unlink(ctl->path);
	free(ctl);
	a->ops->ctl = NULL;
}
