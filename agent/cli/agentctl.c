// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * agentctl - talk to the infertrace agent of this node over its control
 * socket (agent/control/control.c, protocol in agent/control/control_proto.h), or to every
 * agent of a fleet through the <prefix>.control Kafka topic.
 *
 * One request, one reply; exit status 0 when the agent said ok, 1 when it
 * refused (the reply's message is printed), 2 for bad usage, 3 when the
 * agent could not be reached.
 */
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "numparse.h"
#include "util.h"
#include "control_proto.h"

#define AGENTCTL_VERSION "0.1.0"
#define MAX_KAFKA_PROPS 64

const char *argp_program_version = "agentctl " AGENTCTL_VERSION;
const char *argp_program_bug_address = "<https://github.com/infertrace/infertrace/issues>";

static const char doc[] =
    "agentctl: look at and steer the infertrace agent of this node.\n"
    "\n"
    "USAGE: agentctl [OPTION...] COMMAND\n"
    "\n"
    "COMMANDS:\n"
    "  status                 instances, processes, modes, event rates, drops,\n"
    "                         queue and spill fill, broker state (--json: the\n"
    "                         agent's reply)\n"
    "  deep-dive              full-detail capture for one instance for a while\n"
    "                         (--instance NAME [--duration SECS] [--off]); every\n"
    "                         event, user stacks and GPU kernel records are sent,\n"
    "                         and the flight recorder's last seconds go first\n"
    "  export                 write the flight recorder's window as a Perfetto /\n"
    "                         Chrome trace (--perfetto FILE [--instance NAME]);\n"
    "                         open it in ui.perfetto.dev\n"
    "  summary                what the agent has seen since it started, as\n"
    "                         --summary prints at exit: CUDA calls per thread,\n"
    "                         off-CPU time, slow syscalls, network, the GPUs,\n"
    "                         Python frames, steps and anomalies; with the\n"
    "                         agent's --summary also the GPU records and the\n"
    "                         GPU time by the Python calls that launched it.\n"
    "                         --reset: the digest starts anew after this one\n"
    "                         (the next summary, and the one at exit, cover\n"
    "                         only what came after)\n"
    "  anomalies              the agent's last anomaly and level_shift records,\n"
    "                         oldest first, each with its evidence: what the\n"
    "                         detector said lately, without a reader of the\n"
    "                         sinks (--instance NAME: one instance; --last N:\n"
    "                         the newest N, default 20, the agent keeps 256;\n"
    "                         --json: the records as JSON lines, as the sinks\n"
    "                         got them; --follow: then the new ones as they\n"
    "                         come, until Ctrl-C)\n"
    "  spill-foreign send|discard\n"
    "                         the Kafka spill's records written for another cluster\n"
    "                         or topic prefix, left alone at start: send them with\n"
    "                         this agent's settings, or delete them (the agent's\n"
    "                         --spill-foreign does the same at start)\n"
    "  ping                   is the agent there\n"
    "\n"
    "EXAMPLES:\n"
    "  agentctl status\n"
    "  agentctl status --json | jq '.event_rates'\n"
    "  agentctl deep-dive --instance vllm-llama-70b --duration 120\n"
    "  agentctl deep-dive --instance vllm-llama-70b --off\n"
    "  agentctl export --perfetto /tmp/last10s.json --instance vllm-llama-70b\n"
    "  agentctl summary | less\n"
    "  agentctl anomalies --instance vllm-llama-70b --last 5\n"
    "  agentctl anomalies --json --last 256 | jq -c 'select(.run == 1)'\n"
    "  agentctl anomalies --follow   # tail -f of what the detector says\n"
    "  # the last ten minutes only (warm-up and earlier incidents left out):\n"
    "  agentctl summary --reset >/dev/null; sleep 600; agentctl summary\n"
    "  agentctl spill-foreign discard\n"
    "  # fleet-wide: every agent consumes infertrace.control and switches the\n"
    "  # instance on whichever node serves it\n"
    "  agentctl deep-dive --instance vllm-llama-70b --kafka kafka-0:9092 \\\n"
    "      -X security.protocol=SASL_SSL -X sasl.mechanism=PLAIN ...\n"
    "\n"
    "The socket accepts root and the agent's --control-group. Exit status: 0 done,\n"
    "1 refused by the agent, 2 bad usage, 3 agent unreachable.\n"
    "\n"
    "OPTIONS:";

enum {
	OPT_SOCKET = 0x100,
	OPT_JSON,
	OPT_INSTANCE,
	OPT_DURATION,
	OPT_OFF,
	OPT_PERFETTO,
	OPT_KAFKA,
	OPT_KAFKA_PREFIX,
	OPT_TIMEOUT,
	OPT_RESET,
	OPT_LAST,
	OPT_FOLLOW,
};

static const struct argp_option options[] = {
    {"socket", OPT_SOCKET, "PATH", 0,
     "The agent's control socket (default /run/infertrace/agent.sock)"},
    {"timeout", OPT_TIMEOUT, "SECS", 0, "Wait at most SECS for a reply (default 10)"},
    {"json", OPT_JSON, NULL, 0,
     "status: print the agent's JSON reply; anomalies: the records as JSON lines"},
    {"instance", OPT_INSTANCE, "NAME", 0,
     "deep-dive, export, anomalies: the instance, named as status --json names it"},
    {"last", OPT_LAST, "N", 0, "anomalies: the newest N records (1 to 256, default 20)"},
    {"follow", OPT_FOLLOW, NULL, 0,
     "anomalies: then print new records as they come, until Ctrl-C (asked every second)"},
    {"duration", OPT_DURATION, "SECS", 0,
     "deep-dive: how long (default 60; the agent caps it at its --deep-dive-max)"},
    {"off", OPT_OFF, NULL, 0, "deep-dive: end the instance's deep-dive now"},
    {"perfetto", OPT_PERFETTO, "FILE", 0, "export: write the trace to FILE"},
    {"reset", OPT_RESET, NULL, 0,
     "summary: after printing it, start the agent's digest anew (for everyone asking "
     "it, and for its --summary at exit)"},
    {"kafka", OPT_KAFKA, "BROKERS", 0,
     "deep-dive: publish to the control topic on these brokers instead of the local "
     "socket; every agent of the fleet consumes it"},
    {"kafka-topic-prefix", OPT_KAFKA_PREFIX, "PREFIX", 0,
     "The agents' --kafka-topic-prefix (default infertrace: topic infertrace.control)"},
    {"kafka-property", 'X', "KEY=VALUE", 0,
     "librdkafka property for --kafka (repeatable): TLS, SASL, ..., as the agents take "
     "them"},
    {},
};

struct opts {
	const char *cmd;
	const char *action; /* spill-foreign: send or discard */
	const char *socket;
	double timeout_s;
	bool json;
	bool reset;    /* summary --reset */
	uint32_t last; /* anomalies --last */
	bool follow;   /* anomalies --follow */
	bool quiet;    /* call(): no message when the agent is out of reach (--follow) */
	/* the name as given, for the request; shown: its control bytes as '?' */
	const char *instance;
	char instance_shown[CTL_INSTANCE_MAX + 1];
	double duration_s;
	bool off;
	const char *perfetto;
	const char *kafka;
	const char *prefix;
	const char *props[MAX_KAFKA_PROPS];
	int n_props;
};

/* s in buf, control bytes as '?' (term_safe()): a workload's names, for a padded column or a text
 */
static const char *clean_to(char *buf, size_t n, const char *s)
{
	snprintf(buf, n, "%s", s);
	term_safe(buf);
	return buf;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	struct opts *o = state->input;

	switch (key) {
	case OPT_SOCKET:
		if (!*arg || strlen(arg) >= sizeof(((struct sockaddr_un *)0)->sun_path))
			argp_error(state, "--socket takes a path shorter than 108 bytes");
		o->socket = arg;
		break;
	case OPT_TIMEOUT:
		if (parse_double(arg, 0.1, 3600, &o->timeout_s))
			argp_error(state, "--timeout takes seconds from 0.1 to 3600, not '%s'",
				   arg);
		break;
	case OPT_JSON:
		o->json = true;
		break;
	case OPT_INSTANCE: {
		/* any name a workload can give itself, as the agent holds it (JSON: UTF-8) */
		json_t *t = json_string(arg);

		json_decref(t);
		if (!*arg || strlen(arg) > CTL_INSTANCE_MAX)
			argp_error(state, "--instance takes a name of 1 to %d bytes",
				   CTL_INSTANCE_MAX);
		if (!t)
			argp_error(state, "--instance: the name is not valid UTF-8");
		o->instance = arg;
		clean_to(o->instance_shown, sizeof(o->instance_shown), arg);
		break;
	}
	case OPT_DURATION:
		if (parse_double(arg, 0.001, 86400, &o->duration_s))
			argp_error(state, "--duration takes seconds (up to 86400), not '%s'", arg);
		break;
	case OPT_OFF:
		o->off = true;
		break;
	case OPT_RESET:
		o->reset = true;
		break;
	case OPT_FOLLOW:
		o->follow = true;
		break;
	case OPT_LAST: {
		long n;

		if (parse_long(arg, 1, CTL_LAST_MAX, &n))
			argp_error(state, "--last takes a number from 1 to %d, not '%s'",
				   CTL_LAST_MAX, arg);
		o->last = (uint32_t)n;
		break;
	}
	case OPT_PERFETTO:
		o->perfetto = arg;
		break;
	case OPT_KAFKA:
		o->kafka = arg;
		break;
	case OPT_KAFKA_PREFIX:
		o->prefix = arg;
		break;
	case 'X':
		if (!strchr(arg, '=') || arg[0] == '=')
			argp_error(state, "-X takes KEY=VALUE, not '%s'", arg);
		if (o->n_props == MAX_KAFKA_PROPS)
			argp_error(state, "at most %d -X options", MAX_KAFKA_PROPS);
		o->props[o->n_props++] = arg;
		break;
	case ARGP_KEY_ARG:
		if (o->cmd && !strcmp(o->cmd, "spill-foreign") && !o->action) {
			if (strcmp(arg, "send") && strcmp(arg, "discard"))
				argp_error(state, "spill-foreign takes send or discard, not '%s'",
					   arg);
			o->action = arg;
			break;
		}
		if (o->cmd)
			argp_error(state, "one command at a time ('%s' after '%s')", arg, o->cmd);
		if (strcmp(arg, "status") && strcmp(arg, "deep-dive") && strcmp(arg, "export") &&
		    strcmp(arg, "ping") && strcmp(arg, "spill-foreign") && strcmp(arg, "summary") &&
		    strcmp(arg, "anomalies"))
			argp_error(state,
				   "unknown command '%s' (status, deep-dive, export, summary, "
				   "anomalies, spill-foreign, ping)",
				   arg);
		o->cmd = arg;
		break;
	case ARGP_KEY_END:
		if (!o->cmd)
			argp_error(state,
				   "which command? (status, deep-dive, export, summary, anomalies, "
				   "spill-foreign, ping)");
		if (!strcmp(o->cmd, "spill-foreign") && !o->action)
			argp_error(state, "spill-foreign needs send or discard");
		if (!strcmp(o->cmd, "deep-dive") && !o->instance)
			argp_error(state, "deep-dive needs --instance NAME");
		if (!strcmp(o->cmd, "export") && !o->perfetto)
			argp_error(state, "export needs --perfetto FILE");
		if (o->off && o->duration_s > 0)
			argp_error(state, "--off and --duration exclude each other");
		if ((o->duration_s > 0 || o->off) && strcmp(o->cmd, "deep-dive"))
			argp_error(state, "--duration and --off belong to deep-dive");
		if (o->kafka && strcmp(o->cmd, "deep-dive"))
			argp_error(state, "--kafka publishes deep-dive requests only");
		if (o->perfetto && strcmp(o->cmd, "export"))
			argp_error(state, "--perfetto belongs to export");
		if (o->reset && strcmp(o->cmd, "summary"))
			argp_error(state, "--reset belongs to summary");
		if (o->last && strcmp(o->cmd, "anomalies"))
			argp_error(state, "--last belongs to anomalies");
		if (o->follow && strcmp(o->cmd, "anomalies"))
			argp_error(state, "--follow belongs to anomalies");
		if (o->json && strcmp(o->cmd, "status") && strcmp(o->cmd, "anomalies"))
			argp_error(state, "--json belongs to status and anomalies");
		if (o->instance && strcmp(o->cmd, "deep-dive") && strcmp(o->cmd, "export") &&
		    strcmp(o->cmd, "anomalies"))
			argp_error(state, "--instance belongs to deep-dive, export and anomalies%s",
				   strcmp(o->cmd, "summary") ? "" : " (summary covers the node)");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

/* ------------------------------------------------------------ socket -- */

static int connect_agent(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun))) {
		int err = -errno;

		close(fd);
		return err;
	}
	return fd;
}

/* why connect_agent() failed, for people */
static void say_unreachable(const char *path, int err)
{
	if (err == -EACCES)
		fprintf(stderr,
			"agentctl: %s: permission denied (the agent serves root and its "
			"--control-group)\n",
			path);
	else if (err == -ENOENT || err == -ECONNREFUSED)
		fprintf(stderr,
			"agentctl: no agent listens on %s (%s): is it running, with "
			"--control-socket?\n",
			path, strerror(-err));
	else
		fprintf(stderr, "agentctl: %s: %s\n", path, strerror(-err));
}

/* send req (stolen), read the reply; *data gets the export frame when asked */
static int call(const struct opts *o, json_t *req, json_t **reply, char **data, size_t *dlen)
{
	const char *path = o->socket ? o->socket : CTL_SOCK_DEFAULT;
	int tmo = (int)(o->timeout_s * 1000), fd, err;
	char *s = json_dumps(req, JSON_COMPACT), *buf = NULL;
	json_error_t jerr;
	size_t len;

	json_decref(req);
	*reply = NULL;
	if (!s)
		return -ENOMEM;
	fd = connect_agent(path);
	if (fd < 0) {
		if (!o->quiet) /* --follow says it once */
			say_unreachable(path, fd);
		free(s);
		return fd;
	}
	err = ctl_send(fd, s, strlen(s));
	free(s);
	/* a refused peer gets its reply at accept, then the agent hangs up */
	if (!err || err == -EPIPE || err == -ECONNRESET) {
		int serr = err;

		err = ctl_recv(fd, &buf, &len, CTL_MAX_REQUEST * 16, tmo);
		if (err && serr)
			err = serr;
	}
	if (!err) {
		*reply = json_loadb(buf, len, 0, &jerr);
		if (!*reply)
			err = -EBADMSG;
	}
	free(buf);
	if (!err && data && json_is_true(json_object_get(*reply, "ok")))
		err = ctl_recv(fd, data, dlen, CTL_MAX_REPLY, tmo);
	close(fd);
	if (err && !o->quiet)
		fprintf(stderr, "agentctl: %s: %s\n", path,
			err == -ETIMEDOUT    ? "no reply in time (--timeout)"
			: err == -ECONNRESET ? "the agent closed the connection"
					     : strerror(-err));
	return err;
}

/* 0 when ok; prints the agent's refusal otherwise */
static int check_ok(const json_t *r)
{
	if (json_is_true(json_object_get(r, "ok")))
		return 0;
	fprintf(stderr, "agentctl: the agent refused: %s (%s)\n",
		json_string_value(json_object_get(r, "message")) ?: "no reason given",
		json_string_value(json_object_get(r, "error")) ?: "error");
	return 1;
}

/* ------------------------------------------------------------ status -- */

static double num(const json_t *o, const char *k)
{
	return json_number_value(json_object_get(o, k));
}

static const char *str(const json_t *o, const char *k, const char *dflt)
{
	const char *s = json_string_value(json_object_get(o, k));

	return s ? s : dflt;
}

static void print_counts(const char *title, const json_t *obj, bool rates)
{
	const char *k;
	json_t *v;
	int n = 0;

	printf("%-10s", title);
	json_object_foreach((json_t *)obj, k, v)
	{
		if (json_number_value(v) == 0)
			continue;
		printf(rates ? " %s %.1f/s" : " %s %.0f", k, json_number_value(v));
		n++;
	}
	printf("%s\n", n ? "" : " none");
}

static void print_status(const json_t *r)
{
	const json_t *st = json_object_get(r, "last_stats"), *x, *v;
	size_t i;

	printf("agent %s on %s (pid %.0f): %s mode, up %.0f s, BPF %s\n", str(r, "version", "?"),
	       str(r, "host", "?"), num(r, "agent_pid"), str(r, "mode", "?"), num(r, "uptime_s"),
	       json_is_true(json_object_get(r, "bpf_loaded")) ? "loaded" : "not loaded");

	printf("\n%-32s %-9s %-10s %s\n", "INSTANCE", "MODE", "DEEP LEFT", "PIDS");
	json_array_foreach(json_object_get(r, "instances"), i, x)
	{
		char left[32] = "-", pids[128] = "", name[256];
		size_t j, off = 0;

		if (json_object_get(x, "deep_remaining_s"))
			snprintf(left, sizeof(left), "%.0f s", num(x, "deep_remaining_s"));
		json_array_foreach(json_object_get(x, "pids"), j, v) if (off < sizeof(pids) - 12)
		    off += snprintf(pids + off, sizeof(pids) - off, "%s%lld", j ? "," : "",
				    (long long)json_integer_value(v));
		printf("%-32s %-9s %-10s %s\n", clean_to(name, sizeof(name), str(x, "name", "?")),
		       str(x, "mode", "?"), left, off ? pids : "(none yet)");
	}
	printf("\n%-8s %-16s %-32s %-5s %-9s %s\n", "PID", "COMM", "INSTANCE", "RANK", "MODE",
	       "LIBS");
	json_array_foreach(json_object_get(r, "processes"), i, x)
	{
		char rank[16] = "-", comm[64], inst[256];

		if (json_is_integer(json_object_get(x, "rank")))
			snprintf(rank, sizeof(rank), "%.0f", num(x, "rank"));
		printf("%-8.0f %-16s %-32s %-5s %-9s %.0f\n", num(x, "pid"),
		       clean_to(comm, sizeof(comm), str(x, "comm", "?")),
		       clean_to(inst, sizeof(inst), str(x, "instance", "?")), rank,
		       str(x, "mode", "?"), num(x, "libraries"));
	}
	printf("\n");
	if (json_object_get(r, "event_rates"))
		print_counts("rates", json_object_get(r, "event_rates"), true);
	else
		printf("%-10s n/a (after the second interval)\n", "rates");
	if (st) {
		print_counts("bpf drops", json_object_get(st, "bpf_drops"), false);
		printf("%-10s decoded %.0f, malformed %.0f, sink errors %.0f, json errors %.0f\n",
		       "records", num(st, "records_decoded"), num(st, "bad_records"),
		       num(st, "sink_errors"), num(st, "json_errors"));
		print_counts("emitted", json_object_get(st, "emitted"), false);
		x = json_object_get(st, "diag");
		if (x) {
			/* a level shift: a run of slow steps taken for the new normal */
			printf("%-10s %.0f cut, %.0f judged, %.0f new levels accepted", "steps",
			       num(x, "steps"), num(x, "judged"), num(x, "level_shifts"));
			if (num(x, "keys_dropped") > 0)
				printf(", %.0f not judged (every baseline slot taken)",
				       num(x, "keys_dropped"));
			printf("\n");
			print_counts("anomalies", json_object_get(x, "anomalies_by_kind"), false);
		}
	}
	json_array_foreach(json_object_get(r, "sinks"), i, x)
	    printf("%-10s %s: %.0f written, %.0f errors\n", "sink", str(x, "name", "?"),
		   num(x, "written"), num(x, "errors"));
	x = st ? json_object_get(st, "kafka") : NULL;
	if (x) {
		const char *k;

		printf("%-10s", "kafka");
		json_object_foreach((json_t *)x, k, v) if (json_is_number(v) || json_is_string(v) ||
							   json_is_boolean(v))
		{
			char *s = json_dumps(v, JSON_ENCODE_ANY);

			printf(" %s %s", k, s ? s : "?");
			free(s);
		}
		printf("\n");
	} else {
		printf("%-10s queue n/a, spill n/a, broker n/a (no Kafka sink)\n", "kafka");
	}
	x = json_object_get(r, "recorder");
	if (json_is_object(x))
		printf("%-10s window %.0f s, %.1f of %.0f MiB, %.0f records held, %.0f flushes, "
		       "%.0f evicted by the budget%s\n",
		       "recorder", num(x, "window_s"), num(x, "used_bytes") / 1048576.0,
		       num(x, "budget_bytes") / 1048576.0, num(x, "records_held"),
		       num(x, "flushes"), num(x, "evicted_budget"),
		       num(x, "sending") > 0 ? ", a window being sent" : "");
	else
		printf("%-10s off\n", "recorder");
	x = json_object_get(r, "control");
	if (x)
		printf("%-10s %.0f requests, %.0f malformed, %.0f oversized, %.0f peers refused\n",
		       "control", num(x, "requests"), num(x, "malformed"), num(x, "oversized"),
		       num(x, "refused_peer"));
}

/* --------------------------------------------------------- anomalies -- */

/* the agent's data frame as it came: 0, or 1 when standard output failed */
static int write_stdout(const char *data, size_t len)
{
	if (fwrite(data, 1, len, stdout) == len && !fflush(stdout))
		return 0;
	fprintf(stderr, "agentctl: standard output: %s\n", strerror(errno));
	return 1;
}

/* "41.2 s ago", "12.5 min ago", "3.1 h ago" */
static void fmt_ago(char *buf, size_t sz, double s)
{
	if (s < 120)
		snprintf(buf, sz, "%.1f s ago", s < 0 ? 0 : s);
	else if (s < 7200)
		snprintf(buf, sz, "%.1f min ago", s / 60);
	else
		snprintf(buf, sz, "%.1f h ago", s / 3600);
}

/*
 * A string of a record as text: a workload names its instance, so control
 * bytes (a newline, a terminal's escape) are printed as '?', as --summary
 * does (term_safe()).
 */
static void put_clean(const char *s)
{
	char *c = strdup(s ? s : "");

	if (c)
		term_safe(c);
	fputs(c ? c : "?", stdout); /* no memory: a mark, not nothing */
	free(c);
}

/*
 * One anomaly or level_shift record for people: when (the agent's
 * CLOCK_MONOTONIC now_ns against the record's ts_ns, as wall time here),
 * where, what; then each suspect's sentence, most likely first.
 */
static void print_anomaly(const json_t *x, double now_ns)
{
	double ago = (now_ns - num(x, "ts_ns")) / 1e9;
	time_t when = time(NULL) - (time_t)ago;
	char stamp[32] = "?", ago_s[32];
	const char *type = str(x, "type", "?");
	struct tm tm;
	const json_t *v;
	size_t i;

	if (localtime_r(&when, &tm))
		strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &tm);
	fmt_ago(ago_s, sizeof(ago_s), ago);
	printf("%s (%s)  ", stamp, ago_s);
	put_clean(str(x, "instance", "?"));
	if (json_is_integer(json_object_get(x, "rank")))
		printf(" rank %.0f", num(x, "rank"));
	if (json_is_integer(json_object_get(x, "pid")))
		printf(" pid %.0f", num(x, "pid"));
	printf("  ");
	put_clean(str(x, "phase", "?"));
	printf("\n");
	if (!strcmp(type, "level_shift")) {
		printf("  new level: %.0f steps flagged in a row at %.2fx what the baseline "
		       "expected, mostly ",
		       num(x, "steps"), num(x, "ratio"));
		put_clean(str(x, "kind", "?"));
		printf("; taken for the new normal\n");
		if (json_object_get(x, "gpu_clock")) {
			printf("    gpu_clock: ");
			put_clean(str(x, "gpu_clock", "?"));
			printf("\n");
		}
		return;
	}
	printf("  ");
	put_clean(str(x, "kind", type));
	printf(": %.3f ms", num(x, "dur_ns") / 1e6);
	if (num(x, "expected_ns") > 0)
		printf(", expected %.3f ms (%.2fx)", num(x, "expected_ns") / 1e6,
		       num(x, "dur_ns") / num(x, "expected_ns"));
	printf("; chart ");
	put_clean(str(x, "chart", "?"));
	printf(", score %.2f, run %.0f%s\n", num(x, "score"), num(x, "run"),
	       num(x, "run") == 1 ? " (opens an episode)" : "");
	json_array_foreach(json_object_get(x, "suspects"), i, v)
	{
		printf("    ");
		put_clean(str(v, "what", "?"));
		printf(": ");
		put_clean(str(v, "evidence", ""));
		printf("\n");
	}
}

/* the data frame's records: as they came (--json) or for people; 0, or 1 when one is not JSON */
static int print_records(const struct opts *o, const json_t *r, char *data, size_t len)
{
	char *line = data, *end = data + len;
	int ret = 0;

	if (o->json)
		return write_stdout(data, len);
	while (line < end) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		size_t l = nl ? (size_t)(nl - line) : (size_t)(end - line);
		json_t *x = json_loadb(line, l, 0, NULL);

		if (x) {
			printf("\n");
			print_anomaly(x, num(r, "now_ns"));
			json_decref(x);
		} else if (l) {
			fprintf(stderr, "agentctl: a line of the reply is not JSON: %.60s\n", line);
			ret = 1;
		}
		line += l + 1;
	}
	return ret;
}

/* the first reply: what it holds of how many (--json: the records alone) */
static int print_anomalies(const struct opts *o, const json_t *r, char *data, size_t len)
{
	double matched = num(r, "matched"), n = num(r, "records");

	if (o->json) /* the records alone */
		return print_records(o, r, data, len);
	if (n == 0)
		printf("no anomaly records%s%s%s (the agent keeps the last %.0f; %.0f since it "
		       "started)\n",
		       o->instance ? " of " : "", o->instance_shown,
		       o->instance && num(r, "kept") > 0 ? " among those kept" : "",
		       num(r, "capacity"), num(r, "seen"));
	else
		printf("%.0f of %.0f anomaly records%s%s, oldest first (the agent keeps the last "
		       "%.0f; %.0f since it started)\n",
		       n, matched, o->instance ? " of " : "", o->instance_shown, num(r, "capacity"),
		       num(r, "seen"));
	if (num(r, "not_kept") > 0)
		fprintf(stderr, "agentctl: the agent had no memory to keep %.0f of them\n",
			num(r, "not_kept"));
	return print_records(o, r, data, len);
}

/* the anomalies request: the newest last (0: all kept) after the after-th seen (-1: all) */
static json_t *anomalies_req(const struct opts *o, uint32_t last, int64_t after)
{
	json_t *req = json_pack("{s:s}", "cmd", "anomalies");

	if (last)
		json_object_set_new(req, "last", json_integer(last));
	if (after >= 0)
		json_object_set_new(req, "after", json_integer(after));
	if (o->instance)
		json_object_set_new(req, "instance", json_string(o->instance));
	return req;
}

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

/*
 * --follow: every second, the records that came after the last one seen,
 * as they come, until SIGINT or SIGTERM (exit 0). Records that left the
 * agent's memory before they were read are counted where they would be; an
 * agent that restarted (another started_ns) is read from its first record;
 * one out of reach is asked again every second (said once).
 */
static int follow_anomalies(const struct opts *o, int64_t seen, double started)
{
	struct sigaction sa = {.sa_handler = on_stop};
	struct opts q = *o;
	int ret = 0;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (!o->json)
		fprintf(stderr, "agentctl: following: new records as they come (Ctrl-C ends)\n");
	while (!stop && !ret) {
		struct timespec second = {1, 0};
		json_t *r = NULL;
		char *data = NULL;
		size_t len = 0;
		int err;

		fflush(stdout);
		nanosleep(&second, NULL);
		if (stop)
			break;
		err = call(&q, anomalies_req(o, 0, seen), &r, &data, &len);
		if (err && !q.quiet)
			fprintf(stderr, "agentctl: trying again every second\n");
		q.quiet = err != 0;
		if (err) {
			free(data);
			continue;
		}
		if (check_ok(r)) {
			ret = 1;
		} else if (num(r, "started_ns") != started) {
			fprintf(o->json ? stderr : stdout,
				"%sthe agent restarted: its records start anew\n",
				o->json ? "agentctl: " : "\n");
			started = num(r, "started_ns");
			seen = 0; /* read next time, from the first */
		} else {
			if (num(r, "missed") > 0)
				fprintf(
				    o->json ? stderr : stdout,
				    "%s%.0f anomaly records left the agent's memory before they "
				    "were read (it keeps the last %.0f)\n",
				    o->json ? "agentctl: " : "\n", num(r, "missed"),
				    num(r, "capacity"));
			ret = print_records(o, r, data, len);
			seen = (int64_t)num(r, "seen");
		}
		json_decref(r);
		free(data);
	}
	fflush(stdout);
	return ret;
}

/* ------------------------------------------------------------- Kafka -- */

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	*(rd_kafka_resp_err_t *)opaque = m->err;
}

static int publish(const struct opts *o, json_t *req)
{
	char topic[256], errstr[512], *val = NULL;
	rd_kafka_resp_err_t derr = RD_KAFKA_RESP_ERR__IN_PROGRESS, err;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_t *rk = NULL;
	int ret = 3;

	snprintf(topic, sizeof(topic), "%s.control", o->prefix ? o->prefix : "infertrace");
	if (rd_kafka_conf_set(conf, "bootstrap.servers", o->kafka, errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "acks", "all", errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "message.timeout.ms", "10000", errstr, sizeof(errstr))) {
		fprintf(stderr, "agentctl: --kafka: %s\n", errstr);
		goto out;
	}
	for (int i = 0; i < o->n_props; i++) {
		char kv[512], *eq;

		snprintf(kv, sizeof(kv), "%s", o->props[i]);
		eq = strchr(kv, '=');
		*eq = '\0';
		if (rd_kafka_conf_set(conf, kv, eq + 1, errstr, sizeof(errstr))) {
			fprintf(stderr, "agentctl: -X %s: %s\n", o->props[i], errstr);
			ret = 2;
			goto out;
		}
	}
	rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
	rd_kafka_conf_set_opaque(conf, &derr);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		fprintf(stderr, "agentctl: Kafka producer: %s\n", errstr);
		goto out;
	}
	conf = NULL; /* owned by rk */
	val = json_dumps(req, JSON_COMPACT);
	/* keyed by instance: one instance's requests stay in order */
	err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
				RD_KAFKA_V_KEY(o->instance, strlen(o->instance)),
				RD_KAFKA_V_VALUE(val, strlen(val)),
				RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
	if (err) {
		fprintf(stderr, "agentctl: produce to %s: %s\n", topic, rd_kafka_err2str(err));
		goto out;
	}
	rd_kafka_flush(rk, (int)(o->timeout_s * 1000));
	if (derr == RD_KAFKA_RESP_ERR__IN_PROGRESS)
		fprintf(stderr, "agentctl: %s: not delivered in time (--timeout)\n", topic);
	else if (derr)
		fprintf(stderr, "agentctl: %s: %s\n", topic, rd_kafka_err2str(derr));
	else {
		printf("deep-dive %s %s published to %s\n", o->instance_shown,
		       o->off ? "off" : "on", topic);
		ret = 0;
	}
out:
	free(val);
	if (conf)
		rd_kafka_conf_destroy(conf);
	if (rk)
		rd_kafka_destroy(rk);
	return ret;
}

/* -------------------------------------------------------------- main -- */

static int write_file(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "we");
	int err = 0;

	if (!f)
		return -errno;
	if (fwrite(data, 1, len, f) != len)
		err = -EIO;
	if (fclose(f) && !err)
		err = -errno;
	return err;
}

int main(int argc, char **argv)
{
	struct opts o = {.timeout_s = 10};
	const struct argp argp = {options, parse_arg, NULL, doc};
	json_t *req = NULL, *r = NULL;
	char *data = NULL;
	size_t dlen = 0;
	int ret = 0, err;

	argp_err_exit_status = 2; /* bad usage, as --help says (argp's default is 64) */
	if (argp_parse(&argp, argc, argv, 0, NULL, &o))
		return 2;

	if (!strcmp(o.cmd, "deep-dive")) {
		char id[96];

		snprintf(id, sizeof(id), "agentctl-%d-%ld", (int)getpid(), (long)time(NULL));
		req = json_pack("{s:s,s:s,s:s}", "cmd", "deep_dive", "instance", o.instance, "id",
				id);
		if (o.off)
			json_object_set_new(req, "off", json_true());
		if (o.duration_s > 0)
			json_object_set_new(req, "duration_s", json_real(o.duration_s));
		if (o.kafka) {
			ret = publish(&o, req);
			json_decref(req);
			return ret;
		}
	} else if (!strcmp(o.cmd, "export")) {
		req = json_pack("{s:s,s:s}", "cmd", "export", "format", "perfetto");
		if (o.instance)
			json_object_set_new(req, "instance", json_string(o.instance));
	} else if (!strcmp(o.cmd, "spill-foreign")) {
		req = json_pack("{s:s,s:s}", "cmd", "spill_foreign", "action", o.action);
	} else if (!strcmp(o.cmd, "summary") && o.reset) {
		req = json_pack("{s:s,s:b}", "cmd", "summary", "reset", 1);
	} else if (!strcmp(o.cmd, "anomalies")) {
		req = anomalies_req(&o, o.last ? o.last : 20, -1);
	} else {
		req = json_pack("{s:s}", "cmd", o.cmd);
	}

	err = call(&o, req, &r,
		   !strcmp(o.cmd, "export") || !strcmp(o.cmd, "summary") ||
			   !strcmp(o.cmd, "anomalies")
		       ? &data
		       : NULL,
		   &dlen);
	if (err)
		return 3;
	if (o.json && !strcmp(o.cmd, "status")) {
		char *s = json_dumps(r, JSON_INDENT(2));

		printf("%s\n", s ? s : "null");
		free(s);
		ret = check_ok(r) ? 1 : 0;
		goto out;
	}
	if (check_ok(r)) {
		ret = 1;
		goto out;
	}
	if (!strcmp(o.cmd, "status")) {
		print_status(r);
	} else if (!strcmp(o.cmd, "deep-dive")) {
		if (o.off)
			printf("deep-dive %s off after %.1f s\n", o.instance_shown,
			       num(r, "ran_s"));
		else
			printf("deep-dive %s on for %.1f s: %.0f processes now (more as they "
			       "appear)\n",
			       o.instance_shown, num(r, "remaining_s"), num(r, "processes"));
	} else if (!strcmp(o.cmd, "export")) {
		err = write_file(o.perfetto, data, dlen);
		if (err) {
			fprintf(stderr, "agentctl: %s: %s\n", o.perfetto, strerror(-err));
			ret = 1;
			goto out;
		}
		printf("%s: %zu bytes, %.0f trace events, %.0f flows from %.0f records\n",
		       o.perfetto, dlen, num(r, "events"), num(r, "flows"), num(r, "records"));
		if (num(r, "records") == 0)
			fprintf(stderr, "agentctl: the window is empty%s\n",
				o.instance ? " for this instance" : "");
	} else if (!strcmp(o.cmd, "summary")) {
		ret = write_stdout(data, dlen);
		if (o.reset && json_is_true(json_object_get(r, "reset"))) {
			fprintf(stderr,
				"agentctl: that covered %.1f s; the agent's digest starts anew\n",
				num(r, "since_s"));
		} else if (o.reset) {
			fprintf(stderr,
				"agentctl: the agent had no memory to start its digest anew: "
				"nothing was reset\n");
			ret = 1;
		}
	} else if (!strcmp(o.cmd, "anomalies")) {
		ret = print_anomalies(&o, r, data, dlen);
		if (!ret && o.follow)
			ret = follow_anomalies(&o, (int64_t)num(r, "seen"), num(r, "started_ns"));
	} else if (!strcmp(o.cmd, "spill-foreign")) {
		printf("%.0f records of another owner %s (%.0f segment files)\n", num(r, "records"),
		       !strcmp(o.action, "send") ? "sent with this agent's settings" : "deleted",
		       num(r, "segments"));
	} else {
		printf("agent %s is there\n", str(r, "version", "?"));
	}
out:
	free(data);
	json_decref(r);
	return ret;
}
