// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * infertrace-agent - the node daemon.
 *
 * One thread: poll the BPF rings (100 ms timeout), run discovery, and every
 * interval turn the in-kernel aggregates into summary records. Signals only
 * set a flag; shutdown drains the rings, reports what was lost, then frees.
 */
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "numparse.h"
#include "state.h"
#include "ops.h"
#include "sink_kafka.h"
#include "spill.h"
#include "infertrace.skel.h"

static volatile sig_atomic_t exiting;

const char *argp_program_version = "infertrace-agent " AGENT_VERSION;
const char *argp_program_bug_address = "<https://github.com/infertrace/infertrace/issues>";

static const char doc[] =
	"infertrace-agent: trace the CUDA processes of this node with eBPF.\n"
	"\n"
	"Finds the processes that map libcudart or libcuda (now and later), attaches\n"
	"uprobes to their CUDA launch paths and follows their scheduling and syscalls\n"
	"and the node's network traffic. Writes JSON lines (docs/events.md).\n"
	"\n"
	"USAGE: infertrace-agent [OPTION...]\n"
	"\n"
	"EXAMPLES:\n"
	"  # sentinel mode, JSON lines on stdout:\n"
	"  infertrace-agent\n"
	"  # one minute into a file, then a readable summary:\n"
	"  infertrace-agent -o /var/log/infertrace.jsonl -d 60 --summary\n"
	"  # every event of one process, with at most 50 user stacks/s per thread:\n"
	"  infertrace-agent --mode deep --pid 4242 --stack-rate 50\n"
	"  # single events only above 5 ms off-CPU and 10 ms syscalls:\n"
	"  infertrace-agent --offcpu-threshold 5 --syscall-threshold 10\n"
	"  # offline, a PyTorch profiler or Nsight Systems export:\n"
	"  infertrace-agent --replay trace.json.gz -o kernels.jsonl\n"
	"  # the same recording as a Perfetto / Chrome trace (ui.perfetto.dev):\n"
	"  infertrace-agent --replay trace.json.gz --perfetto trace.perfetto.json\n"
	"  # Prometheus metrics, agentctl for group 'infertrace', 30 s flight recorder:\n"
	"  infertrace-agent --metrics :9464 --control-group infertrace --recorder-seconds 30\n"
	"\n"
	"Needs root (or CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE, CAP_SYS_PTRACE,\n"
	"CAP_DAC_READ_SEARCH) and a kernel >= 5.8 with BTF, except for --replay.\n"
	"\n"
	"OPTIONS:";

enum {
	OPT_INSTANCE = 0x100,
	OPT_OFFCPU_T,
	OPT_RUNQ_T,
	OPT_SYSCALL_T,
	OPT_SYNC_T,
	OPT_NO_STACKS,
	OPT_STACK_RATE,
	OPT_RINGBUF,
	OPT_MAX_THREADS,
	OPT_SUMMARY,
	OPT_NO_NET,
	OPT_REPLAY,
	OPT_CONFIG_DOC,
	OPT_SHIM_SOCKET,
	OPT_CONTROL_SOCKET,
	OPT_CONTROL_GROUP,
	OPT_DEEP_DIVE_MAX,
	OPT_ANOMALY_DIVE,
	OPT_RECORDER_S,
	OPT_RECORDER_MIB,
	OPT_RECORDER_LAUNCHES,
	OPT_METRICS,
	OPT_PERFETTO,
	OPT_KAFKA,
	OPT_KAFKA_PREFIX,
	OPT_KAFKA_TOPIC,
	OPT_KAFKA_QUEUE_MAX,
	OPT_SPILL_DIR,
	OPT_SPILL_MAX,
	OPT_SPILL_FOREIGN,
	OPT_FLUSH_TIMEOUT,
	OPT_STEP_MARKERS, /* diagnosis (issue 5): agent/sources/replay.c */
	OPT_BASELINE,
	OPT_BASELINE_SAVE,
	OPT_DETECT,
};

/*
 * Diagnosis options are kept by agent/sources/replay.c (issue 5); the prototype
 * moves to agent.h when the live loop wires the detector.
 */

static const struct argp_option options[] = {
	{ "mode", 'm', "MODE", 0, "sentinel (default): per-thread aggregates every interval "
				  "plus events above the thresholds; deep: every event" },
	{ "interval", 'i', "SECS", 0, "Aggregation interval (default 1)" },
	{ "duration", 'd', "SECS", 0, "Stop after SECS (default: run until SIGINT/SIGTERM)" },
	{ "output", 'o', "FILE", 0, "Write JSON lines to FILE (default: stdout)" },
	{ "pid", 'p', "PID", 0, "Trace only this process (repeatable)" },
	{ "instance", OPT_INSTANCE, "NAME", 0,
	  "Instance name for every record (default: INFERTRACE_INSTANCE of the process, "
	  "else HOST/COMM)" },
	{ "offcpu-threshold", OPT_OFFCPU_T, "MS", 0,
	  "Report single off-CPU intervals from MS (default 1)" },
	{ "runq-threshold", OPT_RUNQ_T, "MS", 0, "Report single run-queue waits from MS (default 1)" },
	{ "syscall-threshold", OPT_SYSCALL_T, "MS", 0, "Report single syscalls from MS (default 1)" },
	{ "sync-threshold", OPT_SYNC_T, "MS", 0,
	  "Report single CUDA synchronisations from MS (default 1)" },
	{ "no-stacks", OPT_NO_STACKS, NULL, 0, "Deep mode: no user stacks at launches" },
	{ "stack-rate", OPT_STACK_RATE, "N", 0,
	  "Deep mode: at most N user stacks per thread per second (default 100)" },
	{ "ringbuf-kib", OPT_RINGBUF, "KIB", 0,
	  "Size of the scheduler and misc rings in KiB; the CUDA ring is 4x (default 1024)" },
	{ "max-threads", OPT_MAX_THREADS, "N", 0, "Traced threads kept in the kernel (default 16384)" },
	{ "summary", OPT_SUMMARY, NULL, 0, "Print a readable summary on stderr at exit" },
	{ "no-net", OPT_NO_NET, NULL, 0, "Do not trace network traffic" },
	{ "replay", OPT_REPLAY, "FILE", 0,
	  "Replay a recording (PyTorch profiler / Kineto trace, Nsight Systems SQLite export, "
	  "or this agent's JSON lines) instead of tracing; no root needed" },
	{ "config", 'c', "FILE", 0,
	  "Read options from FILE: one 'option = value' per line, option being a long option "
	  "name; options given after --config override it" },
	{ "shim-socket", OPT_SHIM_SOCKET, "PATH", 0,
	  "Unix socket the CUPTI shims (libinfertrace_cupti.so) connect to, or 'none' "
	  "(default /run/infertrace/shim.sock)" },
	{ "control-socket", OPT_CONTROL_SOCKET, "PATH", 0,
	  "Unix socket agentctl talks to (status, deep-dive, export), or 'none' "
	  "(default /run/infertrace/agent.sock)" },
	{ "control-group", OPT_CONTROL_GROUP, "GROUP", 0,
	  "Members of GROUP may use the control socket too (default: root only)" },
	{ "deep-dive-max", OPT_DEEP_DIVE_MAX, "SECS", 0,
	  "Longest deep-dive a request may ask for; longer ones are cut (default 600; "
	  "a request without duration gets 60)" },
	{ "anomaly-deep-dive", OPT_ANOMALY_DIVE, "SECS", 0,
	  "On an anomaly, deep-dive its instance for SECS (a later anomaly extends it; cut to "
	  "--deep-dive-max); 0: off (default)" },
	{ "recorder-seconds", OPT_RECORDER_S, "SECS", 0,
	  "Flight recorder: keep the last SECS of detail per instance, sent when an anomaly "
	  "is flagged or a deep-dive starts; 0 turns it off (default 10)" },
	{ "recorder-mib", OPT_RECORDER_MIB, "MIB", 0,
	  "Memory budget of the flight recorder, all instances together (default 64)" },
	{ "recorder-launches", OPT_RECORDER_LAUNCHES, "N", 0,
	  "Flight recorder in sentinel mode: every CUDA launch goes into a ring of N entries "
	  "per CPU (rounded up to a power of 2; 104 bytes each) that the agent copies into the "
	  "window every 100 ms, with the arguments passed in registers and user stacks at "
	  "--stack-rate; 0 keeps no launches (default 4096)" },
	{ "metrics", OPT_METRICS, "ADDR:PORT", 0,
	  "Serve Prometheus metrics (/metrics, /healthz, /readyz) over HTTP on ADDR:PORT, "
	  "e.g. :9464 or 127.0.0.1:9464 (default: off)" },
	{ "perfetto", OPT_PERFETTO, "FILE", 0,
	  "With --replay: write the recording as a Perfetto / Chrome trace JSON to FILE "
	  "(JSON lines only with --output)" },
	{ "step-markers", OPT_STEP_MARKERS, "LIST", 0,
	  "Steps: marker names that delimit a step, comma separated (default "
	  "execute_model,run_batch,forward_batch,ProfilerStep#); 'auto' ignores names and cuts "
	  "steps from the launch stream; 'launches' uses the launch stream only; 'off' disables "
	  "steps and detection" },
	{ "baseline", OPT_BASELINE, "FILE", 0,
	  "Compare steps with the baseline saved in FILE: sustained regressions and changed "
	  "kernels become anomalies" },
	{ "baseline-save", OPT_BASELINE_SAVE, "FILE", 0,
	  "Save the learned step baseline to FILE at the end" },
	{ "detect", OPT_DETECT, "KEY=VALUE", 0,
	  "Detector setting (repeatable): k (UCL sigmas, 5), floor (0.17), window-floor (0.09), "
	  "window (steps, 4), bootstrap (steps, 24), straggler (0.15), regression (0.10), "
	  "gap (ms of GPU idle in one gap beyond the usual longest, 10)" },
	{ "kafka", OPT_KAFKA, "BROKERS", 0,
	  "Produce every record to Kafka (bootstrap servers host:port,...) instead of stdout; "
	  "with --output, to both (default: off)" },
	{ "kafka-topic-prefix", OPT_KAFKA_PREFIX, "PREFIX", 0,
	  "Topics PREFIX.steps, PREFIX.anomalies, PREFIX.events, PREFIX.stats "
	  "(default infertrace)" },
	{ "kafka-topic", OPT_KAFKA_TOPIC, "CLASS=TOPIC", 0,
	  "Another topic for one class: steps, anomalies, events or stats (repeatable)" },
	{ "kafka-property", 'X', "KEY=VALUE", 0,
	  "librdkafka property, e.g. security.protocol=SASL_SSL (repeatable; overrides the "
	  "agent's producer defaults)" },
	{ "kafka-queue-max", OPT_KAFKA_QUEUE_MAX, "N", 0,
	  "Records the producer holds in memory before the spill takes them (default 100000)" },
	{ "spill-dir", OPT_SPILL_DIR, "DIR", 0,
	  "On-disk buffer for records Kafka cannot take now, resent in order and after a "
	  "restart (default /var/lib/infertrace/spill; with --replay "
	  "/var/lib/infertrace/spill-replay)" },
	{ "spill-foreign", OPT_SPILL_FOREIGN, "POLICY", 0,
	  "Records in the spill written for another Kafka cluster or topic prefix: leave them "
	  "(keep, the default, with a warning), send them with this run's settings (send), or "
	  "delete them (discard)" },
	{ "spill-max-mib", OPT_SPILL_MAX, "MIB", 0,
	  "Size bound of the spill; when full, events are shed first, then summaries and "
	  "stats, anomalies last (default 1024)" },
	{ "flush-timeout", OPT_FLUSH_TIMEOUT, "SECS", 0,
	  "At exit, wait up to SECS for Kafka to confirm what is queued; the rest stays in the "
	  "spill for the next start (default 10)" },
	{ "verbose", 'v', NULL, 0, "More diagnostics (repeat for debug)" },
	{ "config-doc", OPT_CONFIG_DOC, NULL, OPTION_HIDDEN,
	  "Print docs/configuration.md (generated from this table)" },
	{},
};

static error_t parse_arg(int key, char *arg, struct argp_state *state);

static const struct argp_option *option_by_name(const char *name)
{
	for (const struct argp_option *o = options; o->name || o->doc; o++)
		if (o->name && !(o->flags & OPTION_HIDDEN) && !strcmp(o->name, name) &&
		    strcmp(name, "config"))
			return o;
	return NULL;
}

/*
 * Values from a config file outlive the file's line buffer (options keep
 * pointers to paths and names): they are kept here and freed at exit.
 */
static char **config_strs;
static size_t n_config_strs;

static char *config_keep(const char *v)
{
	char **n = realloc(config_strs, (n_config_strs + 1) * sizeof(*n));
	char *d = strdup(v);

	if (!n || !d) {
		free(d);
		if (n)
			config_strs = n;
		fprintf(stderr, "infertrace-agent: out of memory reading --config\n");
		exit(1);
	}
	config_strs = n;
	config_strs[n_config_strs++] = d;
	return d;
}

static void config_free(void)
{
	for (size_t i = 0; i < n_config_strs; i++)
		free(config_strs[i]);
	free(config_strs);
	config_strs = NULL;
	n_config_strs = 0;
}

static bool is_true(const char *v)
{
	return !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "1");
}

/*
 * --config FILE: each line "option = value" (or "option value") applies
 * the long option of that name through parse_arg, so the file and the
 * command line share one table, one validation and one set of messages.
 * Flags take true/false. '#' starts a comment.
 */
static void load_config(const char *path, struct argp_state *state)
{
	char line[1024];
	int lineno = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		argp_failure(state, 2, errno, "--config %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *k = line, *v, *end;
		const struct argp_option *o;

		lineno++;
		line[strcspn(line, "#\n")] = '\0';
		while (*k == ' ' || *k == '\t')
			k++;
		if (!*k)
			continue;
		v = k + strcspn(k, " \t=");
		end = v;
		v += strspn(v, " \t=");
		*end = '\0';
		for (end = v + strlen(v); end > v && (end[-1] == ' ' || end[-1] == '\t'); end--)
			end[-1] = '\0';
		o = option_by_name(k);
		if (!o) {
			fclose(f);
			argp_error(state, "%s:%d: unknown option '%s'", path, lineno, k);
		}
		if (!o->arg) {
			if (!is_true(v) && strcmp(v, "false") && strcmp(v, "no") && strcmp(v, "off") &&
			    strcmp(v, "0")) {
				fclose(f);
				argp_error(state, "%s:%d: '%s' takes true or false, not '%s'", path,
					   lineno, k, v);
			}
			if (is_true(v))
				parse_arg(o->key, NULL, state);
			continue;
		}
		if (!*v) {
			fclose(f);
			argp_error(state, "%s:%d: '%s' needs a value", path, lineno, k);
		}
		/* parse_arg may keep the pointer (paths, names): keep the string */
		parse_arg(o->key, config_keep(v), state);
	}
	fclose(f);
}

/* docs/configuration.md, generated from the options table (make docs) */
static void print_config_doc(void)
{
	printf("# Configuration\n\n"
	       "Generated by `infertrace-agent --config-doc` from the agent's option table; a test\n"
	       "keeps this page equal to that output (`make docs` regenerates it).\n\n"
	       "Every option can be given on the command line (`--name=value`) or in a file read\n"
	       "with `--config FILE`, one `name = value` per line (`#` starts a comment; flags take\n"
	       "`true` or `false`). Options after `--config` on the command line override the file.\n\n"
	       "| option | short | value | meaning |\n|---|---|---|---|\n");
	for (const struct argp_option *o = options; o->name || o->doc; o++) {
		if (!o->name || (o->flags & OPTION_HIDDEN))
			continue;
		printf("| `--%s` | %s%c%s | %s | %s |\n", o->name, o->key < 128 ? "`-" : "",
		       o->key < 128 ? o->key : ' ', o->key < 128 ? "`" : "", o->arg ? o->arg : "flag",
		       o->doc);
	}
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	struct agent_opts *o = state->input;
	double d;
	long l;

	switch (key) {
	case 'm':
		if (!strcmp(arg, "sentinel"))
			o->mode = MODE_SENTINEL;
		else if (!strcmp(arg, "deep"))
			o->mode = MODE_DEEP;
		else
			argp_error(state, "--mode must be sentinel or deep, not '%s'", arg);
		break;
	case 'i':
		if (parse_double(arg, 0.01, 3600, &d))
			argp_error(state, "--interval takes seconds between 0.01 and 3600, not '%s'",
				   arg);
		o->interval_s = d;
		break;
	case 'd':
		if (parse_double(arg, 0.01, 1e9, &d))
			argp_error(state, "--duration takes a positive number of seconds, not '%s'",
				   arg);
		o->duration_s = d;
		break;
	case 'o':
		o->output = arg;
		break;
	case 'p':
		if (parse_long(arg, 1, INT_MAX, &l))
			argp_error(state, "--pid takes a process id, not '%s'", arg);
		if (o->n_pids >= MAX_PID_FILTER)
			argp_error(state, "at most %d --pid options", MAX_PID_FILTER);
		o->pids[o->n_pids++] = (int)l;
		break;
	case OPT_INSTANCE:
		if (!*arg || strlen(arg) >= INSTANCE_LEN)
			argp_error(state, "--instance takes a name of 1 to %d characters",
				   INSTANCE_LEN - 1);
		o->instance = arg;
		break;
	case OPT_OFFCPU_T:
	case OPT_RUNQ_T:
	case OPT_SYSCALL_T:
	case OPT_SYNC_T:
		if (parse_double(arg, 0, 3600e3, &d))
			argp_error(state, "--%s takes milliseconds from 0 to 3600000, not '%s'",
				   key == OPT_OFFCPU_T ? "offcpu-threshold"
				   : key == OPT_RUNQ_T ? "runq-threshold"
				   : key == OPT_SYSCALL_T ? "syscall-threshold"
							  : "sync-threshold",
				   arg);
		if (key == OPT_OFFCPU_T)
			o->offcpu_thresh_ns = d * 1e6;
		else if (key == OPT_RUNQ_T)
			o->runq_thresh_ns = d * 1e6;
		else if (key == OPT_SYSCALL_T)
			o->syscall_thresh_ns = d * 1e6;
		else
			o->sync_thresh_ns = d * 1e6;
		o->thresholds_set = true;
		break;
	case OPT_NO_STACKS:
		o->stacks = false;
		break;
	case OPT_STACK_RATE:
		if (parse_long(arg, 0, 1000000, &l))
			argp_error(state, "--stack-rate takes stacks per second (0-1000000), not '%s'",
				   arg);
		o->stack_rate = l;
		break;
	case OPT_RINGBUF:
		if (parse_long(arg, 64, 1 << 20, &l) || (l & (l - 1)))
			argp_error(state, "--ringbuf-kib takes a power of two from 64 to 1048576, "
					  "not '%s'",
				   arg);
		o->ringbuf_kib = l;
		break;
	case OPT_MAX_THREADS:
		if (parse_long(arg, 16, 1 << 22, &l))
			argp_error(state, "--max-threads takes 16 to 4194304, not '%s'", arg);
		o->max_threads = l;
		break;
	case OPT_SUMMARY:
		o->summary = true;
		break;
	case OPT_NO_NET:
		o->no_net = true;
		break;
	case OPT_REPLAY:
		o->replay = arg;
		break;
	case OPT_KAFKA:
		if (!*arg)
			argp_error(state, "--kafka takes host:port[,host:port...]");
		o->kafka = arg;
		break;
	case OPT_KAFKA_PREFIX:
		if (!*arg || strlen(arg) > 200)
			argp_error(state, "--kafka-topic-prefix takes 1 to 200 characters");
		o->kafka_prefix = arg;
		break;
	case OPT_KAFKA_TOPIC: {
		const char *eq = strchr(arg, '=');
		char cls[16];
		int c = -1;

		if (eq && eq[1] && (size_t)(eq - arg) < sizeof(cls)) {
			snprintf(cls, sizeof(cls), "%.*s", (int)(eq - arg), arg);
			c = kafka_class_of_suffix(cls);
		}
		if (c < 0)
			argp_error(state, "--kafka-topic takes CLASS=TOPIC, CLASS one of steps, "
					  "anomalies, events, stats; not '%s'",
				   arg);
		o->kafka_topics[c] = eq + 1;
		break;
	}
	case 'X':
		if (!strchr(arg, '=') || *arg == '=')
			argp_error(state, "-X takes KEY=VALUE, not '%s'", arg);
		if (o->n_kafka_props >= MAX_KAFKA_PROPS)
			argp_error(state, "at most %d -X options", MAX_KAFKA_PROPS);
		o->kafka_props[o->n_kafka_props++] = arg;
		break;
	case OPT_KAFKA_QUEUE_MAX:
		if (parse_long(arg, 10, 10000000, &l))
			argp_error(state, "--kafka-queue-max takes 10 to 10000000 records, not '%s'",
				   arg);
		o->kafka_queue_max = l;
		break;
	case OPT_SPILL_DIR:
		if (!*arg || strlen(arg) >= 3800)
			argp_error(state, "--spill-dir takes a directory");
		o->spill_dir = arg;
		break;
	case OPT_SPILL_MAX:
		if (parse_long(arg, 1, 1 << 20, &l))
			argp_error(state, "--spill-max-mib takes 1 to 1048576 MiB, not '%s'", arg);
		o->spill_max_mib = l;
		break;
	case OPT_SPILL_FOREIGN:
		if (!strcmp(arg, "keep"))
			o->spill_foreign = SPILL_FOREIGN_KEEP;
		else if (!strcmp(arg, "send"))
			o->spill_foreign = SPILL_FOREIGN_ADOPT;
		else if (!strcmp(arg, "discard"))
			o->spill_foreign = SPILL_FOREIGN_DISCARD;
		else
			argp_error(state, "--spill-foreign takes keep, send or discard, not '%s'", arg);
		break;
	case OPT_FLUSH_TIMEOUT:
		if (parse_double(arg, 0, 3600, &d))
			argp_error(state, "--flush-timeout takes seconds from 0 to 3600, not '%s'",
				   arg);
		o->flush_timeout_s = d;
		break;
	case 'v':
		o->verbose++;
		break;
	case 'c':
		load_config(arg, state);
		break;
	case OPT_SHIM_SOCKET:
		if (!*arg || strlen(arg) >= 108)
			argp_error(state, "--shim-socket takes a path shorter than 108 bytes or 'none'");
		o->shim_socket = arg;
		break;
	case OPT_CONTROL_SOCKET:
		if (!*arg || strlen(arg) >= 108)
			argp_error(state,
				   "--control-socket takes a path shorter than 108 bytes or 'none'");
		o->control_socket = arg;
		break;
	case OPT_CONTROL_GROUP:
		if (!*arg)
			argp_error(state, "--control-group takes a group name");
		o->control_group = arg;
		break;
	case OPT_DEEP_DIVE_MAX:
		if (parse_double(arg, 1, 86400, &d))
			argp_error(state, "--deep-dive-max takes seconds from 1 to 86400, not '%s'",
				   arg);
		o->deep_dive_max_s = d;
		break;
	case OPT_ANOMALY_DIVE:
		if (parse_double(arg, 0, 86400, &d))
			argp_error(state,
				   "--anomaly-deep-dive takes seconds from 0 (off) to 86400, not '%s'",
				   arg);
		o->anomaly_dive_s = d;
		break;
	case OPT_RECORDER_S:
		if (parse_double(arg, 0, 3600, &d))
			argp_error(state, "--recorder-seconds takes seconds from 0 to 3600, not '%s'",
				   arg);
		o->recorder_s = d;
		break;
	case OPT_RECORDER_MIB:
		if (parse_long(arg, 1, 65536, &l))
			argp_error(state, "--recorder-mib takes MiB from 1 to 65536, not '%s'", arg);
		o->recorder_mib = l;
		break;
	case OPT_RECORDER_LAUNCHES:
		if (parse_long(arg, 0, 1L << 20, &l))
			argp_error(state,
				   "--recorder-launches takes a count from 0 to 1048576, not '%s'", arg);
		o->recorder_launches = (uint32_t)l;
		break;
	case OPT_METRICS:
		if (!strchr(arg, ':') || !strrchr(arg, ':')[1])
			argp_error(state, "--metrics takes ADDR:PORT (e.g. :9464), not '%s'", arg);
		o->metrics = arg;
		break;
	case OPT_PERFETTO:
		o->perfetto = arg;
		break;
	case OPT_STEP_MARKERS:
	case OPT_BASELINE:
	case OPT_BASELINE_SAVE:
	case OPT_DETECT: {
		const char *name = key == OPT_STEP_MARKERS ? "step-markers"
				   : key == OPT_BASELINE    ? "baseline"
				   : key == OPT_BASELINE_SAVE ? "baseline-save"
							      : "detect";

		if (diag_option(name, arg))
			argp_error(state, "--%s: bad value '%s'", name, arg);
		break;
	}
	case ARGP_KEY_END:
		if (o->perfetto && !o->replay)
			argp_error(state, "--perfetto needs --replay FILE (live: agentctl export "
					  "--perfetto)");
		break;
	case OPT_CONFIG_DOC:
		print_config_doc();
		exit(0);
	case ARGP_KEY_ARG:
		argp_error(state, "unexpected argument '%s'", arg);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	exiting = 1;
}

static int on_ring(void *ctx, void *data, size_t size)
{
	struct agent *a = ctx;

	a->in_ring = true;
	decode_record(a, data, size);
	a->in_ring = false;
	return 0;
}

static int add_ring(struct agent *a, struct bpf_map *m)
{
	int err;

	if (!a->rb) {
		a->rb = ring_buffer__new(bpf_map__fd(m), on_ring, a, NULL);
		return a->rb ? 0 : -errno;
	}
	err = ring_buffer__add(a->rb, bpf_map__fd(m), on_ring, a);
	return err;
}

static void on_rings_readable(struct agent *a, void *ctx)
{
	(void)ctx;
	ring_buffer__consume(a->rb);
}

static void flush_sinks(struct agent *a, int timeout_ms)
{
	for (int i = 0; i < a->n_sinks; i++)
		a->sinks[i]->flush(a->sinks[i], timeout_ms);
}

static int run_live(struct agent *a)
{
	uint64_t interval = a->opts.interval_s * 1e9, deadline = 0;
	int err;

	err = loader_start(a);
	if (err)
		return err;
	err = aggregate_init(a);
	if (err)
		goto cleanup;
	err = add_ring(a, a->skel->maps.rb_cuda);
	if (!err)
		err = add_ring(a, a->skel->maps.rb_sched);
	if (!err)
		err = add_ring(a, a->skel->maps.rb_misc);
	if (err) {
		pr_err("ring buffer setup: %s", strerror(-err));
		goto cleanup;
	}
	err = agent_watch_fd(a, ring_buffer__epoll_fd(a->rb), on_rings_readable, NULL);
	if (err) {
		pr_err("event loop: %s", strerror(-err));
		goto cleanup;
	}
	err = gpu_init(a);
	if (!err)
		err = shim_init(a);
	if (err)
		goto cleanup;
	err = diag_new(a, &a->diag);
	if (err) {
		pr_err("step detection: %s", strerror(-err));
		goto cleanup;
	}
	err = discovery_start(a);
	if (err)
		goto cleanup;
	err = ops_init(a); /* control socket, metrics, deep-dive, flight recorder */
	if (err)
		goto cleanup;
	pr_info("running in %s mode, interval %.2f s%s",
		a->opts.mode == MODE_DEEP ? "deep" : "sentinel", a->opts.interval_s,
		a->opts.output ? "" : ", JSON lines on stdout");
	flush_sinks(a, 0);

	a->last_interval_ns = now_ns();
	if (a->opts.duration_s > 0)
		deadline = a->start_ns + (uint64_t)(a->opts.duration_s * 1e9);
	while (!exiting) {
		uint64_t now;

		/* wake for the next interval on time, and at least every 100 ms */
		{
			uint64_t due = a->last_interval_ns + interval, t = now_ns();
			int wait_ms = due > t ? (int)((due - t + 999999) / 1000000) : 0;

			err = loop_wait(a, wait_ms < 100 ? wait_ms : 100);
		}
		/* producers wake us only for batches: drain what is below the mark */
		if (err >= 0)
			err = ring_buffer__consume(a->rb);
		if (err < 0 && err != -EINTR) {
			pr_err("event loop: %s", strerror(-err));
			goto cleanup;
		}
		err = 0;
		discovery_tick(a);
		ops_tick(a);
		now = now_ns();
		if (now - a->last_interval_ns >= interval) {
			uint64_t span = now - a->last_interval_ns;

			/*
			 * Decode what the rings hold first: an exit seen on one ring
			 * may precede the process's last launches on another, and the
			 * interval reaps exited processes (their instance names).
			 */
			ring_buffer__consume(a->rb);
			shim_interval(a);
			gpu_interval(a, false);
			diag_advance(a->diag, now);
			aggregate_interval(a, false);
			stats_emit(a, span, false);
			flush_sinks(a, 0);
		}
		if (deadline && now >= deadline)
			break;
	}

	/* drain what the rings hold, then the last aggregates and counters */
	ring_buffer__consume(a->rb);
	{
		uint64_t span = now_ns() - a->last_interval_ns;

		shim_interval(a);
		gpu_interval(a, true);
		diag_finish(a->diag);
		aggregate_interval(a, true);
		stats_emit(a, span, true);
	}
	if (a->opts.summary)
		aggregate_print_summary(a, stderr);

cleanup:
	ops_free(a); /* first: deep-dived shims are told to go back to sentinel */
	diag_free(a->diag);
	a->diag = NULL;
	shim_free(a);
	gpu_free(a);
	loop_free();
	ring_buffer__free(a->rb);
	a->rb = NULL;
	discovery_stop(a);
	uprobes_reaper_stop(); /* links go before the programs they hold */
	aggregate_free(a);
	loader_stop(a);
	return err;
}

int main(int argc, char **argv)
{
	static struct agent agent; /* large: process and library tables */
	struct agent *a = &agent;
	const struct argp argp = { options, parse_arg, NULL, doc };
	struct sigaction sa = { .sa_handler = on_signal };
	int err;

	a->opts = (struct agent_opts){
		.mode = MODE_SENTINEL,
		.interval_s = 1,
		.offcpu_thresh_ns = 1000000,
		.runq_thresh_ns = 1000000,
		.syscall_thresh_ns = 1000000,
		.sync_thresh_ns = 1000000,
		.stacks = true,
		.stack_rate = 100,
		.ringbuf_kib = 1024,
		.max_threads = 16384,
		.deep_dive_max_s = 600,
		.recorder_s = 10,
		.recorder_mib = 64,
		.recorder_launches = 4096,
		.flush_timeout_s = FLUSH_TIMEOUT_DEFAULT,
	};
	err = argp_parse(&argp, argc, argv, 0, NULL, &a->opts);
	if (err)
		return 2;
	agent_log_set_level(LOG_INFO + a->opts.verbose);

	if (gethostname(a->host, sizeof(a->host) - 1))
		snprintf(a->host, sizeof(a->host), "unknown");
	a->start_ns = now_ns();

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* --perfetto without --output: the trace only, no JSON lines on stdout */
	a->sinks[0] = sink_file_open(a->opts.perfetto && !a->opts.output ? "/dev/null"
									   : a->opts.output);
	if (!a->sinks[0]) {
		pr_err("cannot open output %s: %s", a->opts.output, strerror(errno));
		return 1;
	}
	a->n_sinks = 1;
	/* --replay FILE --perfetto OUT: a sink draws the deep-mode records (ops.h) */
	if (a->opts.perfetto) {
		a->opts.mode = MODE_DEEP;
		a->sinks[a->n_sinks] = sink_perfetto_open(a->opts.perfetto);
		if (!a->sinks[a->n_sinks]) {
			pr_err("--perfetto %s: %s", a->opts.perfetto, strerror(errno));
			return 1;
		}
		a->n_sinks++;
	}
	/* --kafka: Kafka instead of stdout, or besides --output (sink_kafka.h) */
	if (a->opts.kafka) {
		struct sink *ks;

		if (!a->opts.output && !a->opts.perfetto) {
			a->sinks[0]->close(a->sinks[0]);
			a->n_sinks = 0;
		}
		ks = sink_kafka_open(a);
		if (!ks)
			return 1;
		a->sinks[a->n_sinks++] = ks;
	}

	if (a->opts.replay)
		err = replay_run(a, a->opts.replay, &exiting);
	else
		err = run_live(a);

	/* bounded wait for delivery (Kafka); what is left stays in the spill */
	flush_sinks(a, (int)(a->opts.flush_timeout_s * 1000));
	for (int i = 0; i < a->n_sinks; i++)
		a->sinks[i]->close(a->sinks[i]);
	config_free();
	return err ? 1 : 0;
}
