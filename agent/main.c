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
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "jsonw.h"
#include "numparse.h"
#include "state.h"
#include "pipeline.h"
#include "sources.h"
#include "ops.h"
#include "perfetto.h"
#include "sink_kafka.h"
#include "sink_otlp.h"
#include "spill.h"
#include "nccl_live.h"

static volatile sig_atomic_t exiting;

const char *argp_program_version = "infertrace-agent " AGENT_VERSION;
const char *argp_program_bug_address = "<https://github.com/infertrace/infertrace/issues>";

static const char doc[] =
    "infertrace-agent: trace the CUDA processes of this node with eBPF.\n"
    "\n"
    "Finds the processes that map libcudart, libcuda or libnccl (now and later),\n"
    "attaches uprobes to their CUDA launch paths and NCCL calls and follows their\n"
    "scheduling and syscalls and the node's network traffic. Writes JSON lines\n"
    "(docs/events.md).\n"
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
    "  # offline, a record per kernel (with_stack=True: its Python calls too):\n"
    "  infertrace-agent --replay trace.json.gz -m deep -o kernels.jsonl\n"
    "  # the same recording as a Perfetto / Chrome trace (ui.perfetto.dev):\n"
    "  infertrace-agent --replay trace.json.gz --perfetto trace.perfetto.json\n"
    "  # two ranks of one job: who each NCCL collective waited for\n"
    "  infertrace-agent -m deep --replay rank0.json.gz --replay-rank rank1.json.gz\n"
    "  # Prometheus metrics, agentctl for group 'infertrace', 30 s flight recorder:\n"
    "  infertrace-agent --metrics :9464 --control-group infertrace \\\n"
    "      --recorder-seconds 30\n"
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
	OPT_SUMMARY_EVERY,
	OPT_NO_NET,
	OPT_REPLAY,
	OPT_REPLAY_RANK,
	OPT_CONFIG_DOC,
	OPT_SHIM_SOCKET,
	OPT_CONTROL_SOCKET,
	OPT_CONTROL_GROUP,
	OPT_SHIM_GROUP,
	OPT_DEEP_DIVE_MAX,
	OPT_ANOMALY_DIVE,
	OPT_RECORDER_S,
	OPT_RECORDER_MIB,
	OPT_RECORDER_LAUNCHES,
	OPT_NCCL_SLOTS,
	OPT_METRICS,
	OPT_METRICS_INSTANCES,
	OPT_METRICS_INSTANCE_IDLE,
	OPT_PERFETTO,
	OPT_KAFKA,
	OPT_KAFKA_PREFIX,
	OPT_KAFKA_TOPIC,
	OPT_KAFKA_QUEUE_MAX,
	OPT_SPILL_DIR,
	OPT_SPILL_MAX,
	OPT_SPILL_FOREIGN,
	OPT_FLUSH_TIMEOUT,
	OPT_STEP_MARKERS, /* diagnosis: agent_opts.diag, parsed by agent/pipeline/diag.c */
	OPT_BASELINE,
	OPT_BASELINE_SAVE,
	OPT_DETECT,
	OPT_OTLP, /* OpenTelemetry (issue 19): agent/sinks/sink_otlp.c */
	OPT_OTLP_QUEUE_MAX,
	OPT_SENTINEL_LAUNCHES, /* issue 20: agent/sources/uprobes.c */
	OPT_LAUNCH_SAMPLING,
	OPT_LIB_GRACE,	   /* issue 18: agent/sources/discovery.c */
	OPT_GPU_TELEMETRY, /* agent/sources/gpu_telemetry.c */
	OPT_NVML_LIB,
	OPT_GPU_TELEMETRY_PERIOD,
	OPT_PYTHON_STACKS, /* agent/sources/python.c */
	OPT_PYTHON_HZ,
};

/*
 * The option table: every option once, with its value type, bounds, the
 * field it sets and its doc. It drives parse_arg (command line and
 * --config alike), --help (argp's table is built from it) and
 * docs/configuration.md (--config-doc). Numbers are validated whole with
 * strtol/strtod and errno (core/numparse.h) against the bounds; a bad value
 * is one error line "--NAME WHAT, not 'VALUE'".
 */
enum opt_type {
	OT_FLAG,   /* bool field: true (false with OF_CLEAR) */
	OT_COUNT,  /* int field: one more each time */
	OT_STR,	   /* const char * field; length within [min, max] when they are set */
	OT_DOUBLE, /* double field within [min, max] */
	OT_MS,	   /* milliseconds within [min, max] into a uint64_t field of ns */
	OT_U32,	   /* uint32_t field, an integer within [min, max] */
	OT_ENUM,   /* int or enum field: the value of the choice named */
	OT_FN,	   /* set() takes the value */
};

/* OT_ENUM: the names an option takes, ended by { NULL } */
struct opt_choice {
	const char *name;
	int value;
};

enum {
	OF_CLEAR = 1,  /* OT_FLAG: sets false */
	OF_POW2 = 2,   /* OT_U32: a power of two */
	OF_HIDDEN = 4, /* not in --help, the docs or --config */
};

struct opt_def;
/* 0, or -EINVAL for the option's error line (set() may also argp_error() itself) */
typedef int (*opt_set_fn)(const struct opt_def *d, struct agent_opts *o, char *arg,
			  struct argp_state *state);

struct opt_def {
	const char *name;
	int key;
	const char *arg; /* the value's name; NULL: a flag */
	enum opt_type type;
	size_t off; /* the field in struct agent_opts */
	double min, max;
	int flags;
	opt_set_fn set;			  /* OT_FN */
	const struct opt_choice *choices; /* OT_ENUM */
	const char *err;		  /* what the value must be: "--NAME ERR, not 'VALUE'" */
	const char *doc;
};

#define FIELD(f) offsetof(struct agent_opts, f)
#define CHOICES(...) ((const struct opt_choice[]){__VA_ARGS__, {NULL, 0}})

/* OT_ENUM stores an int: the enum fields it sets must be int-sized */
_Static_assert(sizeof(enum agent_mode) == sizeof(int), "OT_ENUM field size");

static int set_pid(const struct opt_def *d, struct agent_opts *o, char *arg,
		   struct argp_state *state);
static int set_instance(const struct opt_def *d, struct agent_opts *o, char *arg,
			struct argp_state *state);
static int set_config(const struct opt_def *d, struct agent_opts *o, char *arg,
		      struct argp_state *state);
static int set_metrics(const struct opt_def *d, struct agent_opts *o, char *arg,
		       struct argp_state *state);
static int set_replay_rank(const struct opt_def *d, struct agent_opts *o, char *arg,
			   struct argp_state *state);
static int set_diag(const struct opt_def *d, struct agent_opts *o, char *arg,
		    struct argp_state *state);
static int set_kafka_topic(const struct opt_def *d, struct agent_opts *o, char *arg,
			   struct argp_state *state);
static int set_kafka_prop(const struct opt_def *d, struct agent_opts *o, char *arg,
			  struct argp_state *state);
static int set_config_doc(const struct opt_def *d, struct agent_opts *o, char *arg,
			  struct argp_state *state);
static int set_otlp(const struct opt_def *d, struct agent_opts *o, char *arg,
		    struct argp_state *state);
static int set_launch_sampling(const struct opt_def *d, struct agent_opts *o, char *arg,
			       struct argp_state *state);

/* --instance names: INSTANCE_LEN - 1 characters, as the error line says */
_Static_assert(INSTANCE_LEN == 128, "update --instance's bound and message");

static const struct opt_def opt_table[] = {
    {"mode", 'm', "MODE", OT_ENUM, FIELD(mode),
     .choices = CHOICES({"sentinel", MODE_SENTINEL}, {"deep", MODE_DEEP}),
     .err = "must be sentinel or deep",
     .doc = "sentinel (default): per-thread aggregates every interval plus events above "
	    "the thresholds; deep: every event"},
    {"interval", 'i', "SECS", OT_DOUBLE, FIELD(interval_s), 0.01, 3600,
     .err = "takes seconds between 0.01 and 3600", .doc = "Aggregation interval (default 1)"},
    {"duration", 'd', "SECS", OT_DOUBLE, FIELD(duration_s), 0.01, 1e9,
     .err = "takes a positive number of seconds",
     .doc = "Stop after SECS (default: run until SIGINT/SIGTERM)"},
    {"output", 'o', "FILE", OT_STR, FIELD(output),
     .doc = "Write JSON lines to FILE (default: stdout)"},
    {"pid", 'p', "PID", OT_FN, .set = set_pid, .err = "takes a process id",
     .doc = "Trace only this process (repeatable)"},
    {"instance", OPT_INSTANCE, "NAME", OT_FN, .set = set_instance,
     .err = "takes a name of 1 to 127 bytes of UTF-8",
     .doc = "Instance name for every record (default: INFERTRACE_INSTANCE of the process, "
	    "else HOST/COMM)"},
    {"offcpu-threshold", OPT_OFFCPU_T, "MS", OT_MS, FIELD(offcpu_thresh_ns), 0, 3600e3,
     .err = "takes milliseconds from 0 to 3600000",
     .doc = "Report single off-CPU intervals from MS (default 1)"},
    {"runq-threshold", OPT_RUNQ_T, "MS", OT_MS, FIELD(runq_thresh_ns), 0, 3600e3,
     .err = "takes milliseconds from 0 to 3600000",
     .doc = "Report single run-queue waits from MS (default 1)"},
    {"syscall-threshold", OPT_SYSCALL_T, "MS", OT_MS, FIELD(syscall_thresh_ns), 0, 3600e3,
     .err = "takes milliseconds from 0 to 3600000",
     .doc = "Report single syscalls from MS (default 1)"},
    {"sync-threshold", OPT_SYNC_T, "MS", OT_MS, FIELD(sync_thresh_ns), 0, 3600e3,
     .err = "takes milliseconds from 0 to 3600000",
     .doc = "Report single CUDA synchronisations from MS (default 1)"},
    {"no-stacks", OPT_NO_STACKS, NULL, OT_FLAG, FIELD(stacks), .flags = OF_CLEAR,
     .doc = "Deep mode: no user stacks at launches"},
    {"stack-rate", OPT_STACK_RATE, "N", OT_U32, FIELD(stack_rate), 0, 1000000,
     .err = "takes stacks per second (0-1000000)",
     .doc = "Deep mode: at most N user stacks per thread per second (default 100)"},
    {"ringbuf-kib", OPT_RINGBUF, "KIB", OT_U32, FIELD(ringbuf_kib), 64, 1 << 20, .flags = OF_POW2,
     .err = "takes a power of two from 64 to 1048576",
     .doc = "Size of the scheduler and misc rings in KiB; the CUDA ring is 4x (default 1024)"},
    {"max-threads", OPT_MAX_THREADS, "N", OT_U32, FIELD(max_threads), 16, 1 << 22,
     .err = "takes 16 to 4194304", .doc = "Traced threads kept in the kernel (default 16384)"},
    {"summary", OPT_SUMMARY, NULL, OT_FLAG, FIELD(summary),
     .doc = "Print a readable summary on stderr at exit: CUDA calls, off-CPU time, slow "
	    "syscalls, network, the GPU records (kernels by GPU time, busy, launch to start), "
	    "GPU time by the Python calls that launched them, steps and anomalies (with "
	    "--replay: the last three); `agentctl summary` prints it while the agent runs"},
    {"summary-every", OPT_SUMMARY_EVERY, "SECS", OT_DOUBLE, FIELD(summary_every_s), 1, 31 * 86400,
     .err = "takes seconds from 1 to 2678400",
     .doc = "Live: print --summary's text on stderr every SECS, each covering its own period "
	    "(the digest then starts anew, as after a reset by agentctl); implies --summary "
	    "(default: off)"},
    {"no-net", OPT_NO_NET, NULL, OT_FLAG, FIELD(no_net), .doc = "Do not trace network traffic"},
    {"replay", OPT_REPLAY, "FILE", OT_STR, FIELD(replay),
     .doc = "Replay a recording (PyTorch profiler / Kineto trace, Nsight Systems SQLite "
	    "export, or this agent's JSON lines) instead of tracing; no root needed"},
    {"replay-rank", OPT_REPLAY_RANK, "FILE", OT_FN, .set = set_replay_rank,
     .err = "takes a recording (at most 63)",
     .doc = "With --replay: another rank's recording of the same job (Kineto traces with "
	    "distributedInfo), replayed after it; NCCL collectives are matched across the "
	    "ranks into collective_wait records (repeatable)"},
    {"config", 'c', "FILE", OT_FN, .set = set_config,
     .doc = "Read options from FILE: one 'option = value' per line, option being a long "
	    "option name; options given after --config override it"},
    {"shim-socket", OPT_SHIM_SOCKET, "PATH", OT_STR, FIELD(shim_socket), 1, 107,
     .err = "takes a path shorter than 108 bytes or 'none'",
     .doc = "Unix socket the CUPTI shims (libinfertrace_cupti.so) connect to, or 'none' "
	    "(default /run/infertrace/shim.sock)"},
    {"shim-group", OPT_SHIM_GROUP, "GROUP", OT_STR, FIELD(shim_group), 1, 0,
     .err = "takes a group name or number",
     .doc = "Group (name or GID) the shim socket is given to, mode 0660: workloads not "
	    "running as root join it to send GPU activity; 'root' keeps it root's "
	    "(default infertrace; a warning when it does not exist)"},
    {"control-socket", OPT_CONTROL_SOCKET, "PATH", OT_STR, FIELD(control_socket), 1, 107,
     .err = "takes a path shorter than 108 bytes or 'none'",
     .doc = "Unix socket agentctl talks to (status, deep-dive, export), or 'none' "
	    "(default /run/infertrace/agent.sock)"},
    {"control-group", OPT_CONTROL_GROUP, "GROUP", OT_STR, FIELD(control_group), 1, 0,
     .err = "takes a group name",
     .doc = "Members of GROUP may use the control socket too (default: root only)"},
    {"deep-dive-max", OPT_DEEP_DIVE_MAX, "SECS", OT_DOUBLE, FIELD(deep_dive_max_s), 1, 86400,
     .err = "takes seconds from 1 to 86400",
     .doc = "Longest deep-dive a request may ask for; longer ones are cut (default 600; "
	    "a request without duration gets 60)"},
    {"anomaly-deep-dive", OPT_ANOMALY_DIVE, "SECS", OT_DOUBLE, FIELD(anomaly_dive_s), 0, 86400,
     .err = "takes seconds from 0 (off) to 86400",
     .doc = "On an anomaly, deep-dive its instance for SECS (a later anomaly extends it; "
	    "cut to --deep-dive-max); 0: off (default)"},
    {"recorder-seconds", OPT_RECORDER_S, "SECS", OT_DOUBLE, FIELD(recorder_s), 0, 3600,
     .err = "takes seconds from 0 to 3600",
     .doc = "Flight recorder: keep the last SECS of detail per instance, sent when an "
	    "anomaly is flagged or a deep-dive starts; 0 turns it off (default 10)"},
    {"recorder-mib", OPT_RECORDER_MIB, "MIB", OT_U32, FIELD(recorder_mib), 1, 65536,
     .err = "takes MiB from 1 to 65536",
     .doc = "Memory budget of the flight recorder, all instances together (default 64)"},
    {"recorder-launches", OPT_RECORDER_LAUNCHES, "N", OT_U32, FIELD(recorder_launches), 0, 1 << 20,
     .err = "takes a count from 0 to 1048576",
     .doc = "Flight recorder in sentinel mode: every CUDA launch goes into a ring of N "
	    "entries per CPU (rounded up to a power of 2; 104 bytes each) that the agent "
	    "copies into the window every 100 ms, with the arguments passed in registers "
	    "and user stacks at --stack-rate; 0 keeps no launches (default 4096)"},
    {"nccl-slots", OPT_NCCL_SLOTS, "N", OT_U32, FIELD(nccl_slots), 0, 1 << 20,
     .err = "takes a count from 0 to 1048576",
     .doc = "Sentinel mode: each NCCL call of a traced thread goes into a slot of its CPU's "
	    "slice of N entries (rounded up to a power of 2, at least 16; 88 bytes each), which "
	    "the agent copies on every loop turn and whenever half a slice has filled; calls "
	    "written over before that are counted (stats nccl.slots_overwritten); 0 puts each "
	    "call on the ring buffer instead (default 1024)"},
    {"sentinel-launches", OPT_SENTINEL_LAUNCHES, "sync|graphs|all", OT_ENUM,
     FIELD(sentinel_launches),
     .choices = CHOICES({"sync", SENTINEL_LAUNCHES_SYNC}, {"graphs", SENTINEL_LAUNCHES_GRAPHS},
			{"all", SENTINEL_LAUNCHES_ALL}),
     .err = "must be sync, graphs or all",
     .doc = "Sentinel mode's uprobes: sync (default) traps only the synchronising calls and "
	    "copies, a few per step; graphs also every CUDA graph launch; all also every "
	    "kernel launch (cudaLaunchKernel, cuLaunchKernel and their Ex forms), as before "
	    "issue 20 (docs/operations.md, \"What each mode costs\")"},
    {"launch-sampling", OPT_LAUNCH_SAMPLING, "WINDOW/PERIOD", OT_FN, .set = set_launch_sampling,
     .err = "takes WINDOW/PERIOD durations like 200ms/10s (window >= 100ms, below the period)",
     .doc = "Sentinel mode: attach the per-launch uprobes for WINDOW every PERIOD (e.g. "
	    "200ms/10s), so that launch counts and the flight recorder get launch detail "
	    "from those windows; units ms or s (default: off)"},
    {"lib-grace", OPT_LIB_GRACE, "SECS", OT_DOUBLE, FIELD(lib_grace_s), 0, 3600,
     .err = "takes seconds from 0 to 3600",
     .doc = "Keep a CUDA library file's uprobes attached for SECS after the last traced "
	    "process mapping it exits, so that the next process mapping it does not pay the "
	    "attach (at most 8 such files; 0: detach at once; default 30)"},
    {"gpu-telemetry", OPT_GPU_TELEMETRY, "auto|on|off", OT_ENUM, FIELD(gpu_telemetry),
     .choices = CHOICES({"auto", GPU_TELEMETRY_AUTO}, {"on", GPU_TELEMETRY_ON},
			{"off", GPU_TELEMETRY_OFF}),
     .err = "must be auto, on or off",
     .doc = "Read the node's GPUs through NVML (the driver's libnvidia-ml.so.1) every "
	    "--gpu-telemetry-period: SM and memory clocks, throttle reasons (power cap, "
	    "thermal, hardware slowdown), power, temperature, utilisation, as gpu_telemetry "
	    "records and metrics; auto (default) does so where NVML loads, on refuses to "
	    "start without it, off never loads it"},
    {"nvml-lib", OPT_NVML_LIB, "PATH", OT_STR, FIELD(nvml_lib), 1, 4095,
     .err = "takes a library path",
     .doc = "The NVML library to load for --gpu-telemetry (default libnvidia-ml.so.1, "
	    "found by the dynamic loader)"},
    {"gpu-telemetry-period", OPT_GPU_TELEMETRY_PERIOD, "MS", OT_MS, FIELD(gpu_telemetry_period_ns),
     100, 3600e3, .err = "takes milliseconds from 100 to 3600000",
     .doc = "How often --gpu-telemetry reads each GPU (default 1000)"},
    {"python-stacks", OPT_PYTHON_STACKS, "auto|on|off", OT_ENUM, FIELD(python_stacks),
     .choices = CHOICES({"auto", PYTHON_STACKS_AUTO}, {"on", PYTHON_STACKS_ON},
			{"off", PYTHON_STACKS_OFF}),
     .err = "must be auto, on or off",
     .doc = "Sample the Python frames of traced processes that run CPython 3.10-3.13, "
	    "--python-hz times a second per CPU, in the kernel (no restart, no change to "
	    "the workload): python_profile records per thread and stack every --interval, "
	    "and a python suspect on anomalies naming the function a step spent its time in; "
	    "auto (default) goes on without it where the kernel refuses the CPU clock "
	    "event, on refuses to start, off loads nothing"},
    {"python-hz", OPT_PYTHON_HZ, "HZ", OT_U32, FIELD(python_hz), 1, 1000,
     .err = "takes samples per second from 1 to 1000",
     .doc = "How often --python-stacks samples each CPU, on average: at random gaps, so "
	    "that no work that repeats is missed (default 49: a 75 ms step gets 3-4 samples "
	    "of the thread that ran it)"},
    {"metrics", OPT_METRICS, "ADDR:PORT", OT_FN, .set = set_metrics,
     .err = "takes ADDR:PORT (e.g. :9464)",
     .doc = "Serve Prometheus metrics (/metrics, /healthz, /readyz) over HTTP on ADDR:PORT, "
	    "e.g. :9464 or 127.0.0.1:9464 (default: off)"},
    {"metrics-instances", OPT_METRICS_INSTANCES, "N", OT_U32, FIELD(metrics_instances), 0, 256,
     .err = "takes 0 to 256",
     .doc = "The step duration histogram on /metrics has a series per instance "
	    "(label infertrace_instance) for N instances at a time, in the order they came, the "
	    "rest together as '_other' (--metrics-instance-idle frees a slot); 0: one per phase "
	    "for the whole node (default 8)"},
    {"metrics-instance-idle", OPT_METRICS_INSTANCE_IDLE, "SECS", OT_U32,
     FIELD(metrics_instance_idle), 0, 604800, .err = "takes seconds from 0 to 604800 (a week)",
     .doc = "An instance's step histogram series leave /metrics after SECS without a step "
	    "(its pod gone, or idle), '_other' too: the slot is the next new instance's; back, "
	    "it counts again from 0, a counter reset to rate(). 0: kept while the agent runs "
	    "(default 600)"},
    {"perfetto", OPT_PERFETTO, "FILE", OT_STR, FIELD(perfetto),
     .doc = "With --replay: write the recording as a Perfetto / Chrome trace JSON to FILE "
	    "(JSON lines only with --output)"},
    {"step-markers", OPT_STEP_MARKERS, "LIST", OT_FN, .set = set_diag,
     .doc = "Steps: marker names that delimit a step, comma separated (default "
	    "execute_model,run_batch,forward_batch,ProfilerStep#); 'auto' ignores names and "
	    "cuts steps from the launch stream; 'launches' uses the launch stream only; "
	    "'off' disables steps and detection"},
    {"baseline", OPT_BASELINE, "FILE", OT_FN, .set = set_diag,
     .doc = "Compare steps with the baseline saved in FILE: sustained regressions and "
	    "changed kernels become anomalies"},
    {"baseline-save", OPT_BASELINE_SAVE, "FILE", OT_FN, .set = set_diag,
     .doc = "Save the learned step baseline to FILE at the end"},
    {"detect", OPT_DETECT, "KEY=VALUE", OT_FN, .set = set_diag,
     .doc = "Detector setting (repeatable): k (UCL sigmas, 5), floor (0.17), window-floor "
	    "(0.09), window (steps, 4), bootstrap (steps, 24), straggler (0.15), straggler_abs "
	    "(ms a step beyond its peers' or a rank late to a collective, 1), regression (0.10), "
	    "gap (ms of GPU idle in one gap beyond the usual longest, 10), model (grid: a "
	    "workload between measured ones judged against their interpolation; cells: the "
	    "nearest one scaled; grid)"},
    {"kafka", OPT_KAFKA, "BROKERS", OT_STR, FIELD(kafka), 1, 0,
     .err = "takes host:port[,host:port...]",
     .doc = "Produce every record to Kafka (bootstrap servers host:port,...) instead of "
	    "stdout; with --output, to both (default: off)"},
    {"kafka-topic-prefix", OPT_KAFKA_PREFIX, "PREFIX", OT_STR, FIELD(kafka_prefix), 1, 200,
     .err = "takes 1 to 200 characters",
     .doc = "Topics PREFIX.steps, PREFIX.anomalies, PREFIX.events, PREFIX.stats "
	    "(default infertrace)"},
    {"kafka-topic", OPT_KAFKA_TOPIC, "CLASS=TOPIC", OT_FN, .set = set_kafka_topic,
     .err = "takes CLASS=TOPIC, CLASS one of steps, anomalies, events, stats",
     .doc = "Another topic for one class: steps, anomalies, events or stats (repeatable)"},
    {"kafka-property", 'X', "KEY=VALUE", OT_FN, .set = set_kafka_prop,
     .doc = "librdkafka property, e.g. security.protocol=SASL_SSL (repeatable; overrides "
	    "the agent's producer defaults)"},
    {"kafka-queue-max", OPT_KAFKA_QUEUE_MAX, "N", OT_U32, FIELD(kafka_queue_max), 10, 10000000,
     .err = "takes 10 to 10000000 records",
     .doc = "Records the producer holds in memory before the spill takes them (default "
	    "100000)"},
    {"spill-dir", OPT_SPILL_DIR, "DIR", OT_STR, FIELD(spill_dir), 1, 3799,
     .err = "takes a directory",
     .doc = "On-disk buffer for records Kafka cannot take now, resent in order and after a "
	    "restart (default /var/lib/infertrace/spill; with --replay "
	    "/var/lib/infertrace/spill-replay)"},
    {"spill-foreign", OPT_SPILL_FOREIGN, "POLICY", OT_ENUM, FIELD(spill_foreign),
     .choices = CHOICES({"keep", SPILL_FOREIGN_KEEP}, {"send", SPILL_FOREIGN_ADOPT},
			{"discard", SPILL_FOREIGN_DISCARD}),
     .err = "takes keep, send or discard",
     .doc = "Records in the spill written for another Kafka cluster or topic prefix: leave "
	    "them (keep, the default, with a warning), send them with this run's settings "
	    "(send), or delete them (discard)"},
    {"spill-max-mib", OPT_SPILL_MAX, "MIB", OT_U32, FIELD(spill_max_mib), 1, 1 << 20,
     .err = "takes 1 to 1048576 MiB",
     .doc = "Size bound of the spill; when full, events are shed first, then summaries and "
	    "stats, anomalies last (default 1024)"},
    {"flush-timeout", OPT_FLUSH_TIMEOUT, "SECS", OT_DOUBLE, FIELD(flush_timeout_s), 0, 3600,
     .err = "takes seconds from 0 to 3600",
     .doc = "At exit, wait up to SECS for Kafka (and OTLP) to confirm what is queued; the "
	    "rest stays in the spill for the next start (default 10)"},
    {"otlp", OPT_OTLP, "URL", OT_FN, .set = set_otlp, .err = "takes an http:// or https:// URL",
     .doc = "Also send steps, anomalies and process changes as OpenTelemetry log records and "
	    "the interval aggregates as metrics, over OTLP/HTTP JSON to URL/v1/logs and "
	    "URL/v1/metrics, e.g. http://collector:4318 (default: off)"},
    {"otlp-queue-max", OPT_OTLP_QUEUE_MAX, "N", OT_U32, FIELD(otlp_queue_max), 1, 100000,
     .err = "takes 1 to 100000 requests",
     .doc = "OTLP requests held while the collector is slow or away; beyond, new ones are "
	    "dropped and counted (default 64)"},
    {"verbose", 'v', NULL, OT_COUNT, FIELD(verbose), .doc = "More diagnostics (repeat for debug)"},
    {"config-doc", OPT_CONFIG_DOC, NULL, OT_FN, .flags = OF_HIDDEN, .set = set_config_doc,
     .doc = "Print docs/configuration.md (generated from this table)"},
};

#define N_OPTS (sizeof(opt_table) / sizeof(opt_table[0]))

/* argp's view of opt_table, for --help (built in main) */
static struct argp_option argp_options[N_OPTS + 1];

static void build_argp_options(void)
{
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &opt_table[i];

		argp_options[i] = (struct argp_option){
		    .name = d->name,
		    .key = d->key,
		    .arg = d->arg,
		    .flags = d->flags & OF_HIDDEN ? OPTION_HIDDEN : 0,
		    .doc = d->doc,
		};
	}
}

static const struct opt_def *option_by_key(int key)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (opt_table[i].key == key)
			return &opt_table[i];
	return NULL;
}

/* what --config may set: every visible option but --config itself */
static const struct opt_def *option_by_name(const char *name)
{
	for (size_t i = 0; i < N_OPTS; i++)
		if (!(opt_table[i].flags & OF_HIDDEN) && opt_table[i].set != set_config &&
		    !strcmp(opt_table[i].name, name))
			return &opt_table[i];
	return NULL;
}

/* one option's value into its field: 0 or -EINVAL */
static int opt_apply(const struct opt_def *d, struct agent_opts *o, char *arg,
		     struct argp_state *state)
{
	void *field = (char *)o + d->off;
	double v;
	long l;

	switch (d->type) {
	case OT_FLAG:
		*(bool *)field = !(d->flags & OF_CLEAR);
		return 0;
	case OT_COUNT:
		(*(int *)field)++;
		return 0;
	case OT_STR: {
		size_t len = strlen(arg);

		if ((d->min && len < d->min) || (d->max && len > d->max))
			return -EINVAL;
		*(const char **)field = arg;
		return 0;
	}
	case OT_DOUBLE:
		if (parse_double(arg, d->min, d->max, &v))
			return -EINVAL;
		*(double *)field = v;
		return 0;
	case OT_MS:
		if (parse_double(arg, d->min, d->max, &v))
			return -EINVAL;
		*(uint64_t *)field = v * 1e6;
		o->thresholds_set = true;
		return 0;
	case OT_U32:
		if (parse_long(arg, (long)d->min, (long)d->max, &l) ||
		    ((d->flags & OF_POW2) && (l & (l - 1))))
			return -EINVAL;
		*(uint32_t *)field = (uint32_t)l;
		return 0;
	case OT_ENUM:
		for (const struct opt_choice *c = d->choices; c->name; c++) {
			if (!strcmp(arg, c->name)) {
				*(int *)field = c->value;
				return 0;
			}
		}
		return -EINVAL;
	case OT_FN:
		return d->set(d, o, arg, state);
	}
	return -EINVAL;
}

/* apply, or exit with the option's one error line */
static void opt_set(const struct opt_def *d, struct agent_opts *o, char *arg,
		    struct argp_state *state)
{
	if (!opt_apply(d, o, arg, state))
		return;
	if (d->type == OT_STR)
		argp_error(state, "--%s %s", d->name, d->err);
	else
		argp_error(state, "--%s %s, not '%s'", d->name, d->err, arg);
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
 * --config FILE: each line "option = value" (or "option value") sets the
 * long option of that name through opt_set, so the file and the command
 * line share one table, one validation and one set of messages. Flags take
 * true/false. '#' starts a comment.
 */
static int set_config(const struct opt_def *od, struct agent_opts *opts, char *path,
		      struct argp_state *state)
{
	char line[1024];
	int lineno = 0;
	FILE *f = fopen(path, "re");

	(void)od;
	if (!f)
		argp_failure(state, 2, errno, "--config %s", path);
	while (fgets(line, sizeof(line), f)) {
		char *k = line, *v, *end;
		const struct opt_def *d;

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
		d = option_by_name(k);
		if (!d) {
			fclose(f);
			argp_error(state, "%s:%d: unknown option '%s'", path, lineno, k);
		}
		if (!d->arg) {
			if (!is_true(v) && strcmp(v, "false") && strcmp(v, "no") &&
			    strcmp(v, "off") && strcmp(v, "0")) {
				fclose(f);
				argp_error(state, "%s:%d: '%s' takes true or false, not '%s'", path,
					   lineno, k, v);
			}
			if (is_true(v))
				opt_set(d, opts, NULL, state);
			continue;
		}
		if (!*v) {
			fclose(f);
			argp_error(state, "%s:%d: '%s' needs a value", path, lineno, k);
		}
		/* options may keep the pointer (paths, names): keep the string */
		opt_set(d, opts, config_keep(v), state);
	}
	fclose(f);
	return 0;
}

/* docs/configuration.md, generated from the option table (make docs) */
static int set_config_doc(const struct opt_def *od, struct agent_opts *o, char *arg,
			  struct argp_state *state)
{
	(void)od, (void)o, (void)arg, (void)state;
	printf(
	    "# Configuration\n\n"
	    "Generated by `infertrace-agent --config-doc` from the agent's option table; a test\n"
	    "keeps this page equal to that output (`make docs` regenerates it).\n\n"
	    "Every option can be given on the command line (`--name=value`) or in a file read\n"
	    "with `--config FILE`, one `name = value` per line (`#` starts a comment; flags take\n"
	    "`true` or `false`). Options after `--config` on the command line override the "
	    "file.\n\n"
	    "| option | short | value | meaning |\n|---|---|---|---|\n");
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct opt_def *d = &opt_table[i];

		if (d->flags & OF_HIDDEN)
			continue;
		printf("| `--%s` | %s%c%s | %s | %s |\n", d->name, d->key < 128 ? "`-" : "",
		       d->key < 128 ? d->key : ' ', d->key < 128 ? "`" : "",
		       d->arg ? d->arg : "flag", d->doc);
	}
	exit(0);
}

static int set_pid(const struct opt_def *d, struct agent_opts *o, char *arg,
		   struct argp_state *state)
{
	long l;

	(void)d;
	if (parse_long(arg, 1, INT_MAX, &l))
		return -EINVAL;
	if (o->n_pids >= MAX_PID_FILTER)
		argp_error(state, "at most %d --pid options", MAX_PID_FILTER);
	o->pids[o->n_pids++] = (int)l;
	return 0;
}

/* --instance: as records write it (valid UTF-8), so that agentctl finds it by that name */
static int set_instance(const struct opt_def *d, struct agent_opts *o, char *arg,
			struct argp_state *state)
{
	size_t n = strlen(arg);

	(void)d;
	(void)state;
	if (!n || n > INSTANCE_LEN - 1 || jw_utf8_valid(arg, n) != n)
		return -EINVAL;
	o->instance = arg;
	return 0;
}

static int set_replay_rank(const struct opt_def *d, struct agent_opts *o, char *arg,
			   struct argp_state *state)
{
	(void)d;
	if (!*arg)
		return -EINVAL;
	if (o->n_replay_ranks >= MAX_REPLAY_RANKS)
		argp_error(state, "at most %d --replay-rank options", MAX_REPLAY_RANKS);
	o->replay_ranks[o->n_replay_ranks++] = arg;
	return 0;
}

static int set_metrics(const struct opt_def *d, struct agent_opts *o, char *arg,
		       struct argp_state *state)
{
	(void)d, (void)state;
	if (!strchr(arg, ':') || !strrchr(arg, ':')[1])
		return -EINVAL;
	o->metrics = arg;
	return 0;
}

/* "200ms" or "10s" (or "1.5s") into ns; -EINVAL otherwise */
static int parse_span_ns(const char *s, size_t len, uint64_t *ns)
{
	char buf[32];
	double v, unit;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (len > 2 && !strcmp(buf + len - 2, "ms")) {
		unit = 1e6;
		buf[len - 2] = '\0';
	} else if (len > 1 && buf[len - 1] == 's') {
		unit = 1e9;
		buf[len - 1] = '\0';
	} else {
		return -EINVAL;
	}
	if (parse_double(buf, 0, 86400e3, &v))
		return -EINVAL;
	*ns = (uint64_t)(v * unit);
	return 0;
}

static int set_launch_sampling(const struct opt_def *d, struct agent_opts *o, char *arg,
			       struct argp_state *state)
{
	const char *slash = strchr(arg, '/');
	uint64_t w, p;

	(void)d, (void)state;
	if (!strcmp(arg, "off")) {
		o->launch_sample_window_ns = o->launch_sample_period_ns = 0;
		return 0;
	}
	if (!slash || parse_span_ns(arg, slash - arg, &w) ||
	    parse_span_ns(slash + 1, strlen(slash + 1), &p))
		return -EINVAL;
	/* the loop ticks every 100 ms at most: a shorter window could be missed */
	if (w < 100000000ull || p <= w)
		return -EINVAL;
	o->launch_sample_window_ns = w;
	o->launch_sample_period_ns = p;
	return 0;
}

static int set_otlp(const struct opt_def *d, struct agent_opts *o, char *arg,
		    struct argp_state *state)
{
	(void)d, (void)state;
	if (strncmp(arg, "http://", 7) && strncmp(arg, "https://", 8))
		return -EINVAL;
	o->otlp = arg;
	return 0;
}

/* the diagnosis options: agent_opts.diag, parsed by agent/pipeline/diag.c */
static int set_diag(const struct opt_def *d, struct agent_opts *o, char *arg,
		    struct argp_state *state)
{
	if (diag_option(o, d->name, arg))
		argp_error(state, "--%s: bad value '%s'", d->name, arg);
	return 0;
}

static int set_kafka_topic(const struct opt_def *d, struct agent_opts *o, char *arg,
			   struct argp_state *state)
{
	const char *eq = strchr(arg, '=');
	char cls[16];
	int c = -1;

	(void)d, (void)state;
	if (eq && eq[1] && (size_t)(eq - arg) < sizeof(cls)) {
		snprintf(cls, sizeof(cls), "%.*s", (int)(eq - arg), arg);
		c = kafka_class_of_suffix(cls);
	}
	if (c < 0)
		return -EINVAL;
	o->kafka_topics[c] = eq + 1;
	return 0;
}

static int set_kafka_prop(const struct opt_def *d, struct agent_opts *o, char *arg,
			  struct argp_state *state)
{
	(void)d;
	if (!strchr(arg, '=') || *arg == '=')
		argp_error(state, "-X takes KEY=VALUE, not '%s'", arg);
	if (o->n_kafka_props >= MAX_KAFKA_PROPS)
		argp_error(state, "at most %d -X options", MAX_KAFKA_PROPS);
	o->kafka_props[o->n_kafka_props++] = arg;
	return 0;
}

static error_t parse_arg(int key, char *arg, struct argp_state *state)
{
	struct agent_opts *o = state->input;
	const struct opt_def *d = option_by_key(key);

	if (d) {
		opt_set(d, o, arg, state);
		return 0;
	}
	switch (key) {
	case ARGP_KEY_END:
		if (o->n_replay_ranks && !o->replay)
			argp_error(state, "--replay-rank needs --replay FILE (the first rank's "
					  "recording)");
		if (o->perfetto && !o->replay)
			argp_error(state, "--perfetto needs --replay FILE (live: agentctl export "
					  "--perfetto)");
		break;
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

static int on_ring_as(struct agent *a, uint8_t which, void *data, size_t size)
{
	a->in_ring |= which;
	decode_record(a, data, size);
	a->in_ring &= (uint8_t)~which;
	return 0;
}

static int on_ring_cuda(void *ctx, void *data, size_t size)
{
	return on_ring_as(ctx, IN_RB_CUDA, data, size);
}

static int on_ring(void *ctx, void *data, size_t size)
{
	return on_ring_as(ctx, IN_RB, data, size);
}

static void on_rings_readable(struct agent *a, void *ctx)
{
	(void)ctx;
	slots_consume(a);
}

static void flush_sinks(struct agent *a, int timeout_ms)
{
	for (int i = 0; i < a->n_sinks; i++)
		a->sinks[i]->flush(a->sinks[i], timeout_ms);
}

/*
 * The end of the way out: a bounded wait for delivery (Kafka, OTLP), then
 * the sinks closed (what Kafka's producer still holds goes back to the
 * spill). Once; later calls find no sink.
 */
static void sinks_finish(struct agent *a)
{
	flush_sinks(a, (int)(a->opts.flush_timeout_s * 1000));
	for (int i = 0; i < a->n_sinks; i++)
		a->sinks[i]->close(a->sinks[i]);
	a->n_sinks = 0;
}

/*
 * --summary-every: the digest on stderr (the journal, the pod's log) every
 * SECS, each covering its own period: written, then started anew. A reset
 * by agentctl starts the period again. Without memory for the empty GPU
 * digests the next one covers this period too (said each time).
 */
static void summary_every(struct agent *a, uint64_t now)
{
	static uint64_t last; /* the last digest written */
	uint64_t every = (uint64_t)(a->opts.summary_every_s * 1e9);

	if (!every || now < a->summary_ns + every || (last && now < last + every))
		return;
	last = now;
	if (control_summary(a, stderr, true))
		pr_warn("--summary-every: no memory to start the digest anew; the next one "
			"covers this period too");
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
	err = loader_open_rings(a, on_ring_cuda, on_ring, a);
	if (err) {
		pr_err("ring buffer setup: %s", strerror(-err));
		goto cleanup;
	}
	err = agent_watch_fd_edge(a, ring_buffer__epoll_fd(a->rb_cuda), on_rings_readable, NULL);
	if (!err)
		err = agent_watch_fd_edge(a, ring_buffer__epoll_fd(a->rb), on_rings_readable, NULL);
	if (err) {
		pr_err("event loop: %s", strerror(-err));
		goto cleanup;
	}
	err = slots_nccl_start(a);
	if (err)
		goto cleanup;
	err = gpu_init(a);
	if (!err)
		err = shim_init(a);
	if (!err)
		err = telem_start(a);
	if (!err)
		err = python_start(a);
	if (err)
		goto cleanup;
	err = diag_new(a, &a->diag);
	if (err) {
		pr_err("step detection: %s", strerror(-err));
		goto cleanup;
	}
	uprobes_launch_start(a); /* before discovery: its files get the launch probes at once */
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

			if (recorder_sending(a))
				wait_ms = 0; /* its next slice, after what is ready */

			err = loop_wait(a, wait_ms < 100 ? wait_ms : 100);
		}
		/* producers wake us only for batches: drain what is below the mark */
		if (err >= 0)
			err = slots_consume(a);
		if (err < 0 && err != -EINTR) {
			pr_err("event loop: %s", strerror(-err));
			goto cleanup;
		}
		err = 0;
		discovery_tick(a);
		ops_tick(a);
		uprobes_launch_policy(a); /* --launch-sampling windows open and close */
		now = now_ns();
		nccl_tick(a, now);
		if (now - a->last_interval_ns >= interval) {
			uint64_t span = now - a->last_interval_ns;

			/*
			 * Decode what the rings hold first: an exit seen on one ring
			 * may precede the process's last launches on another, and the
			 * interval reaps exited processes (their instance names).
			 */
			slots_consume(a);
			shim_interval(a);
			gpu_interval(a, false);
			nccl_interval(a, false);
			python_interval(a, now);
			diag_advance(a->diag, now);
			aggregate_interval(a, false);
			stats_emit(a, span, false);
			flush_sinks(a, 0);
			summary_every(a, now);
		}
		if (deadline && now >= deadline)
			break;
	}

	/* drain what the rings and slots hold, then the last aggregates and counters */
	slots_consume(a);
	{
		uint64_t span = now_ns() - a->last_interval_ns;

		shim_interval(a);
		gpu_interval(a, true);
		nccl_interval(a, true);
		python_interval(a, now_ns());
		diag_finish(a->diag);
		aggregate_interval(a, true);
		stats_emit(a, span, true);
	}
	if (a->opts.summary)
		control_summary(a, stderr, false);

cleanup:
	ops_free(a); /* first: deep-dived shims are told to go back to sentinel */
	telem_stop(a);
	diag_free(a->diag);
	a->diag = NULL;
	shim_free(a);
	gpu_free(a);
	slots_nccl_stop(a);
	nccl_free(a);
	loop_free();
	/*
	 * Deliver before detaching: each uprobe's unregistration waits for an
	 * RCU grace period in the kernel, one link after the other (0.1 s a
	 * link idle, about 1 s under load: 25-43 s for 30-42 links at a load
	 * of 14 on 2 CPUs), so a stop deadline (systemd's TimeoutStopSec, the
	 * pod's grace period, both 30 s) may kill the agent during the detach:
	 * what was queued must be out, or back in the spill, by then.
	 */
	sinks_finish(a);
	pr_info("records delivered; detaching the probes (each link waits for the kernel)");
	discovery_stop(a);
	python_stop(a);	       /* after discovery: its processes' entries go first */
	uprobes_reaper_stop(); /* links go before the programs they hold */
	aggregate_free(a);
	loader_stop(a);
	return err;
}

int main(int argc, char **argv)
{
	static struct agent agent; /* large: process and library tables */
	struct agent *a = &agent;
	const struct argp argp = {argp_options, parse_arg, NULL, doc};
	struct sigaction sa = {.sa_handler = on_signal};
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
	    .nccl_slots = 1024,
	    .lib_grace_s = 30,
	    .gpu_telemetry_period_ns = 1000000000ULL,
	    .python_hz = 49,
	    .metrics_instances = 8,
	    .metrics_instance_idle = 600,
	    .flush_timeout_s = FLUSH_TIMEOUT_DEFAULT,
	};
	build_argp_options();
	err = argp_parse(&argp, argc, argv, 0, NULL, &a->opts);
	if (err)
		return 2;
	agent_log_set_level(LOG_INFO + a->opts.verbose);

	if (gethostname(a->host, sizeof(a->host) - 1))
		snprintf(a->host, sizeof(a->host), "unknown");
	a->start_ns = now_ns();
	a->summary_ns = a->start_ns;
	if (a->opts.summary_every_s > 0)
		a->opts.summary = true;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* --perfetto without --output: the trace only, no JSON lines on stdout */
	a->sinks[0] =
	    sink_file_open(a->opts.perfetto && !a->opts.output ? "/dev/null" : a->opts.output);
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
	/* --otlp: besides the others (sink_otlp.h) */
	if (a->opts.otlp) {
		struct sink *os = sink_otlp_open(a->opts.otlp, a->opts.otlp_queue_max);

		if (!os)
			return 1;
		a->sinks[a->n_sinks++] = os;
	}

	/* --summary: the GPU records, GPU time by Python call (pipeline/gpusum.c, pyprof.c) */
	if (a->opts.summary && a->opts.python_stacks != PYTHON_STACKS_OFF &&
	    !(a->pyprof = pyprof_new()))
		pr_warn("--summary: no memory for the GPU time by Python call: that section is "
			"left out");
	if (a->opts.summary && !(a->gpusum = gpusum_new()))
		pr_warn("--summary: no memory for the GPU records: that section is left out");
	if (a->opts.replay)
		err = replay_run(a, a->opts.replay, &exiting);
	else
		err = run_live(a);
	pyprof_free(a->pyprof);
	a->pyprof = NULL;
	gpusum_free(a->gpusum);
	a->gpusum = NULL;

	/* bounded wait for delivery (Kafka); what is left stays in the spill */
	sinks_finish(a);
	config_free();
	return err ? 1 : 0;
}
