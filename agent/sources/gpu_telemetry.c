// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * gpu_telemetry.c - the node's GPUs as NVML sees them (--gpu-telemetry): SM
 * and memory clocks, why the clocks are held down (power cap, thermal and
 * hardware slowdowns), power draw against the enforced limit, temperature
 * and utilisation, one "gpu_telemetry" record per GPU every
 * --gpu-telemetry-period. A GPU whose clock moved runs the same kernels
 * slower: the step detector sees a gpu_slow step, this says why.
 *
 * NVML is the driver's own library (libnvidia-ml.so.1, mounted into
 * containers by the NVIDIA container toolkit with the "utility"
 * capability): loaded with dlopen() at start, never linked, so the agent
 * runs on nodes without it (auto, the default: telemetry off, one line in
 * the log; on: the agent refuses to start).
 *
 * Threading: NVML calls block (nvmlInit takes seconds on a GPU without
 * persistence mode; a query waits for the driver's lock, and a GPU that
 * fell off the bus answers after a timeout), and the event loop must never
 * wait for them: a poller thread of its own does every NVML call and
 * hands the samples over through a small ring under a mutex and an
 * eventfd the loop watches. The loop side (telem_on_ready) builds and
 * emits the records. A poller stuck in the driver at exit is left
 * behind after TELEM_JOIN_NS (the library stays loaded): the agent's
 * exit never waits on the driver either.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include "state.h"
#include "sources.h"
#include "pipeline.h"
#include "nvml_api.h"

#define TELEM_MAX_DEV 64
#define TELEM_RING 512 /* samples the loop has not taken yet; older ones are dropped */
#define TELEM_BATCH 64 /* readings the loop takes per lock */
#define TELEM_JOIN_NS 2000000000ULL
#define TELEM_LIB_DEFAULT "libnvidia-ml.so.1"

/* which fields of a sample NVML answered */
enum {
	HAVE_SM = 1 << 0,
	HAVE_SM_MAX = 1 << 1,
	HAVE_MEM = 1 << 2,
	HAVE_POWER = 1 << 3,
	HAVE_POWER_LIMIT = 1 << 4,
	HAVE_TEMP = 1 << 5,
	HAVE_UTIL = 1 << 6,
	HAVE_REASONS = 1 << 7,
};

struct telem_sample {
	uint64_t ts_ns;
	uint32_t dev, have;
	uint32_t sm_mhz, sm_max_mhz, mem_mhz, power_mw, power_limit_mw, temp_c;
	uint32_t util_gpu, util_mem;
	unsigned long long reasons;
};

struct nvml_fns {
	nvml_init_fn init;
	nvml_shutdown_fn shutdown;
	nvml_error_string_fn error_string;
	nvml_driver_version_fn driver_version; /* optional */
	nvml_count_fn count;
	nvml_handle_fn handle;
	nvml_string_fn uuid, name;	 /* optional */
	nvml_clock_fn clock, max_clock;	 /* optional */
	nvml_uint_fn power, power_limit; /* optional */
	nvml_temp_fn temp;		 /* optional */
	nvml_reasons_fn reasons;	 /* optional */
	nvml_util_fn util;		 /* optional */
};

/* NVML's throttle reasons by name (nvml_api.h); the records, metrics and summary use these */
static const struct {
	uint64_t bit;
	const char *name;
} reason_names[] = {
    {NVML_THR_GPU_IDLE, "gpu_idle"},
    {NVML_THR_APP_CLOCKS, "applications_clocks"},
    {NVML_THR_SW_POWER_CAP, "sw_power_cap"},
    {NVML_THR_HW_SLOWDOWN, "hw_slowdown"},
    {NVML_THR_SYNC_BOOST, "sync_boost"},
    {NVML_THR_SW_THERMAL, "sw_thermal"},
    {NVML_THR_HW_THERMAL, "hw_thermal"},
    {NVML_THR_HW_POWER_BRAKE, "hw_power_brake"},
    {NVML_THR_DISPLAY_CLOCKS, "display_clocks"},
};
#define NREASONS (sizeof(reason_names) / sizeof(reason_names[0]))
#define NAMED_REASONS 0x1ffULL /* the bits above, each from bit 0 in turn */
_Static_assert(NAMED_REASONS == (1ULL << NREASONS) - 1 &&
		   NVML_THR_DISPLAY_CLOCKS << 1 == NAMED_REASONS + 1,
	       "reason_names holds bits 0 to 8, in order");

enum telem_state { T_UNAVAILABLE, T_STARTING, T_RUNNING, T_FAILED };
static const char *const state_names[] = {"unavailable", "starting", "running", "failed"};

struct telem {
	struct agent *a;
	void *lib;
	struct nvml_fns f;
	uint64_t period_ns;
	int efd;
	pthread_t thr;
	bool thr_started;
	/* shared with the poller, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC: the poller's wait, cut short by stop */
	bool stop, done;
	enum telem_state state;
	char error[160];
	char driver[NVML_DRIVER_LEN];
	uint32_t ndev;
	char uuid[TELEM_MAX_DEV][NVML_UUID_LEN], name[TELEM_MAX_DEV][NVML_NAME_LEN];
	struct telem_sample ring[TELEM_RING];
	uint32_t head, n;
	uint64_t samples, dropped, read_errors, slow_polls, lost;
	/* the loop's own */
	enum telem_state logged;
	uint64_t records;
	struct telem_sample last[TELEM_MAX_DEV]; /* each GPU's latest, for the metrics */
	struct telem_acc {			 /* since start, for --summary */
		uint64_t reads, held[NREASONS], held_other;
		uint32_t sm_min, sm_max, temp_max, power_max;
	} acc[TELEM_MAX_DEV];
};

static const char *nvml_err(const struct telem *t, nvml_return_t r)
{
	const char *s = t->f.error_string ? t->f.error_string(r) : NULL;

	return s ? s : "unknown NVML error";
}

/* ------------------------------------------------------------- poller -- */

static void fail(struct telem *t, const char *what, nvml_return_t r)
{
	pthread_mutex_lock(&t->mu);
	t->state = T_FAILED;
	snprintf(t->error, sizeof(t->error), "%s: %s (NVML error %d)", what, nvml_err(t, r), r);
	pthread_mutex_unlock(&t->mu);
}

/* one optional query: true when NVML answered; errors other than "not supported" are counted */
static bool answered(nvml_return_t r, uint64_t *errors, uint64_t *lost)
{
	if (r == NVML_OK)
		return true;
	if (r == NVML_ERR_GPU_IS_LOST)
		(*lost)++;
	else if (r != NVML_ERR_NOT_SUPPORTED)
		(*errors)++;
	return false;
}

static void read_one(struct telem *t, nvml_device_t h, uint32_t dev, uint32_t sm_max,
		     uint32_t limit, struct telem_sample *s, uint64_t *errors, uint64_t *lost)
{
	const struct nvml_fns *f = &t->f;
	struct nvml_utilization u = {0};
	unsigned int v;

	memset(s, 0, sizeof(*s));
	s->dev = dev;
	if (f->clock && answered(f->clock(h, NVML_CLK_SM, &v), errors, lost)) {
		s->sm_mhz = v;
		s->have |= HAVE_SM;
	}
	if (f->clock && answered(f->clock(h, NVML_CLK_MEM, &v), errors, lost)) {
		s->mem_mhz = v;
		s->have |= HAVE_MEM;
	}
	if (f->power && answered(f->power(h, &v), errors, lost)) {
		s->power_mw = v;
		s->have |= HAVE_POWER;
	}
	if (f->temp && answered(f->temp(h, NVML_TEMP_GPU, &v), errors, lost)) {
		s->temp_c = v;
		s->have |= HAVE_TEMP;
	}
	if (f->util && answered(f->util(h, &u), errors, lost)) {
		s->util_gpu = u.gpu;
		s->util_mem = u.memory;
		s->have |= HAVE_UTIL;
	}
	if (f->reasons && answered(f->reasons(h, &s->reasons), errors, lost))
		s->have |= HAVE_REASONS;
	if (sm_max) {
		s->sm_max_mhz = sm_max;
		s->have |= HAVE_SM_MAX;
	}
	if (limit) {
		s->power_limit_mw = limit;
		s->have |= HAVE_POWER_LIMIT;
	}
	s->ts_ns = now_ns();
}

/* the loop's eventfd: readings or a state to take */
static void wake(struct telem *t)
{
	uint64_t one = 1;

	if (write(t->efd, &one, sizeof(one)) < 0) {
		/* the counter is full only if the loop never reads: nothing to add */
	}
}

static void publish(struct telem *t, const struct telem_sample *s, uint32_t n, uint64_t errors,
		    uint64_t lost, bool slow)
{
	pthread_mutex_lock(&t->mu);
	for (uint32_t i = 0; i < n; i++) {
		if (t->n == TELEM_RING) { /* the loop is behind: the oldest goes */
			t->head = (t->head + 1) % TELEM_RING;
			t->n--;
			t->dropped++;
		}
		t->ring[(t->head + t->n++) % TELEM_RING] = s[i];
	}
	t->samples += n;
	t->read_errors += errors;
	t->lost += lost;
	t->slow_polls += slow;
	pthread_mutex_unlock(&t->mu);
	wake(t);
}

/* wait until `until` (CLOCK_MONOTONIC) or stop; true when stopping */
static bool wait_until(struct telem *t, uint64_t until)
{
	struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ULL),
			      .tv_nsec = (long)(until % 1000000000ULL)};
	bool stop;

	pthread_mutex_lock(&t->mu);
	while (!t->stop && pthread_cond_timedwait(&t->cv, &t->mu, &ts) != ETIMEDOUT)
		;
	stop = t->stop;
	pthread_mutex_unlock(&t->mu);
	return stop;
}

static void *poller(void *arg)
{
	struct telem *t = arg;
	const struct nvml_fns *f = &t->f;
	nvml_device_t h[TELEM_MAX_DEV];
	uint32_t sm_max[TELEM_MAX_DEV] = {0}, limit[TELEM_MAX_DEV] = {0};
	struct telem_sample s[TELEM_MAX_DEV];
	unsigned int count = 0;
	nvml_return_t r;
	uint64_t next;

	r = f->init();
	if (r != NVML_OK) {
		fail(t, "nvmlInit_v2", r);
		goto out;
	}
	r = f->count(&count);
	if (r != NVML_OK) {
		fail(t, "nvmlDeviceGetCount_v2", r);
		goto shutdown;
	}
	if (count > TELEM_MAX_DEV)
		count = TELEM_MAX_DEV;
	for (unsigned int i = 0; i < count; i++) {
		r = f->handle(i, &h[i]);
		if (r != NVML_OK) {
			char what[64];

			snprintf(what, sizeof(what), "nvmlDeviceGetHandleByIndex_v2(%u)", i);
			fail(t, what, r);
			goto shutdown;
		}
	}
	/*
	 * No lock around NVML: the loop reads the names only once the state is
	 * running (set under the lock below), and it must never wait for NVML
	 */
	for (unsigned int i = 0; i < count; i++) {
		unsigned int v;

		if (f->uuid && f->uuid(h[i], t->uuid[i], NVML_UUID_LEN) != NVML_OK)
			t->uuid[i][0] = 0;
		if (f->name && f->name(h[i], t->name[i], NVML_NAME_LEN) != NVML_OK)
			t->name[i][0] = 0;
		t->uuid[i][NVML_UUID_LEN - 1] = t->name[i][NVML_NAME_LEN - 1] = 0;
		if (f->max_clock && f->max_clock(h[i], NVML_CLK_SM, &v) == NVML_OK)
			sm_max[i] = v;
		if (f->power_limit && f->power_limit(h[i], &v) == NVML_OK)
			limit[i] = v;
	}
	if (!f->driver_version || f->driver_version(t->driver, sizeof(t->driver)) != NVML_OK)
		t->driver[0] = 0;
	t->driver[sizeof(t->driver) - 1] = 0;
	pthread_mutex_lock(&t->mu);
	t->ndev = count;
	t->state = T_RUNNING;
	pthread_mutex_unlock(&t->mu);

	next = now_ns();
	for (;;) {
		uint64_t errors = 0, lost = 0, took;

		for (unsigned int i = 0; i < count; i++)
			read_one(t, h[i], i, sm_max[i], limit[i], &s[i], &errors, &lost);
		took = now_ns() - next;
		publish(t, s, count, errors, lost, took > t->period_ns);
		next += t->period_ns;
		/* a poll that took longer than the period: no catch-up burst */
		if (next < now_ns())
			next = now_ns();
		if (wait_until(t, next))
			break;
	}
shutdown:
	f->shutdown();
out:
	pthread_mutex_lock(&t->mu);
	t->done = true;
	pthread_mutex_unlock(&t->mu);
	wake(t);
	return NULL;
}

/* ------------------------------------------------------- loop side -- */

/* the names of the throttle bits set in mask; a bit NVML added since is "bit_N" */
static json_t *reasons_json(uint64_t mask)
{
	json_t *arr = json_array();

	for (int b = 0; b < 64; b++) {
		const char *name = NULL;
		char other[16];

		if (!(mask & (1ULL << b)))
			continue;
		for (size_t i = 0; i < NREASONS; i++)
			if (reason_names[i].bit == 1ULL << b)
				name = reason_names[i].name;
		if (!name) {
			snprintf(other, sizeof(other), "bit_%d", b);
			name = other;
		}
		json_array_append_new(arr, json_string(name));
	}
	return arr;
}

static void account(struct telem_acc *c, const struct telem_sample *s)
{
	c->reads++;
	if (s->have & HAVE_SM) {
		if (!c->sm_min || s->sm_mhz < c->sm_min)
			c->sm_min = s->sm_mhz;
		if (s->sm_mhz > c->sm_max)
			c->sm_max = s->sm_mhz;
	}
	if ((s->have & HAVE_TEMP) && s->temp_c > c->temp_max)
		c->temp_max = s->temp_c;
	if ((s->have & HAVE_POWER) && s->power_mw > c->power_max)
		c->power_max = s->power_mw;
	if (!(s->have & HAVE_REASONS))
		return;
	for (size_t i = 0; i < NREASONS; i++)
		c->held[i] += !!(s->reasons & reason_names[i].bit);
	c->held_other += !!(s->reasons & ~NAMED_REASONS);
}

/* the reading to the detector, for its gpu_clock suspect (pipeline.h) */
static void to_diag(struct telem *t, const struct telem_sample *s, const char *uuid)
{
	struct gpu_reading r = {.ts_ns = s->ts_ns, .index = s->dev, .uuid = uuid};
	char why[84] = "";
	size_t n = 0;

	if (!t->a->diag || !(s->have & HAVE_SM))
		return;
	r.sm_mhz = s->sm_mhz;
	for (size_t i = 0; (s->have & HAVE_REASONS) && i < NREASONS; i++)
		if ((s->reasons & reason_names[i].bit) &&
		    reason_names[i].bit != NVML_THR_GPU_IDLE && n < sizeof(why))
			n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s", n ? ", " : "",
					      reason_names[i].name);
	r.why = why;
	diag_on_gpu_reading(t->a->diag, &r);
}

static void emit_sample(struct telem *t, const struct telem_sample *s, const char *uuid,
			const char *name)
{
	json_t *r = rec_new(t->a, "gpu_telemetry", 0, 0, s->ts_ns);

	if (!r)
		return;
	json_object_set_new(r, "device", json_integer(s->dev));
	if (uuid[0])
		json_object_set_new(r, "uuid", rec_string(uuid));
	if (name[0])
		json_object_set_new(r, "name", rec_string(name));
	json_object_set_new(r, "period_ns", json_integer((json_int_t)t->period_ns));
	if (s->have & HAVE_SM)
		json_object_set_new(r, "sm_clock_mhz", json_integer(s->sm_mhz));
	if (s->have & HAVE_SM_MAX)
		json_object_set_new(r, "sm_clock_max_mhz", json_integer(s->sm_max_mhz));
	if (s->have & HAVE_MEM)
		json_object_set_new(r, "mem_clock_mhz", json_integer(s->mem_mhz));
	if (s->have & HAVE_POWER)
		json_object_set_new(r, "power_mw", json_integer(s->power_mw));
	if (s->have & HAVE_POWER_LIMIT)
		json_object_set_new(r, "power_limit_mw", json_integer(s->power_limit_mw));
	if (s->have & HAVE_TEMP)
		json_object_set_new(r, "temperature_c", json_integer(s->temp_c));
	if (s->have & HAVE_UTIL) {
		json_object_set_new(r, "util_gpu_pct", json_integer(s->util_gpu));
		json_object_set_new(r, "util_mem_pct", json_integer(s->util_mem));
	}
	if (s->have & HAVE_REASONS) {
		json_object_set_new(r, "throttle_mask", json_integer((json_int_t)s->reasons));
		json_object_set_new(r, "throttle", reasons_json(s->reasons));
	}
	if (!rec_emit(t->a, REC_SUMMARY, r))
		t->records++;
	t->last[s->dev] = *s;
	account(&t->acc[s->dev], s);
	to_diag(t, s, uuid);
}

/* the log line of a state, once */
static void log_state(struct telem *t)
{
	const char *lib = t->a->opts.nvml_lib ? t->a->opts.nvml_lib : TELEM_LIB_DEFAULT;

	if (t->logged == t->state)
		return;
	t->logged = t->state;
	if (t->state == T_RUNNING)
		pr_info("GPU telemetry: %u GPU%s through NVML (%s%s%s), every %.3g s", t->ndev,
			t->ndev == 1 ? "" : "s", lib, t->driver[0] ? ", driver " : "", t->driver,
			(double)t->period_ns / 1e9);
	else if (t->state == T_FAILED)
		pr_warn("GPU telemetry off: %s (%s); the agent goes on without it", t->error, lib);
}

static void telem_on_ready(struct agent *a, void *ctx)
{
	struct telem *t = ctx;
	struct telem_sample batch[TELEM_BATCH];
	uint64_t v;
	uint32_t n;

	(void)a;
	if (read(t->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return;
	do {
		pthread_mutex_lock(&t->mu);
		n = t->n < TELEM_BATCH ? t->n : TELEM_BATCH;
		for (uint32_t i = 0; i < n; i++)
			batch[i] = t->ring[(t->head + i) % TELEM_RING];
		t->head = (t->head + n) % TELEM_RING;
		t->n -= n;
		log_state(t);
		pthread_mutex_unlock(&t->mu);
		/* uuid and name are written once, before the state went to running */
		for (uint32_t i = 0; i < n; i++)
			emit_sample(t, &batch[i], t->uuid[batch[i].dev], t->name[batch[i].dev]);
	} while (n == TELEM_BATCH);
}

/* ------------------------------------------------------------- api -- */

#define SYM(field, name, required)                                                                 \
	do {                                                                                       \
		*(void **)&t->f.field = dlsym(t->lib, name);                                       \
		if (!t->f.field && (required)) {                                                   \
			missing = name;                                                            \
			goto bad_lib;                                                              \
		}                                                                                  \
	} while (0)

int telem_start(struct agent *a)
{
	const struct agent_opts *o = &a->opts;
	const char *lib = o->nvml_lib ? o->nvml_lib : TELEM_LIB_DEFAULT;
	const char *missing = NULL;
	pthread_condattr_t ca;
	struct telem *t;
	int err;

	if (o->gpu_telemetry == GPU_TELEMETRY_OFF)
		return 0;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->a = a;
	t->efd = -1;
	t->period_ns = o->gpu_telemetry_period_ns;
	t->state = T_UNAVAILABLE;
	t->logged = T_STARTING;
	a->telem = t;
	pthread_mutex_init(&t->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);

	t->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!t->lib) {
		snprintf(t->error, sizeof(t->error), "%s", dlerror());
		goto unavailable;
	}
	SYM(init, "nvmlInit_v2", true);
	SYM(shutdown, "nvmlShutdown", true);
	SYM(count, "nvmlDeviceGetCount_v2", true);
	SYM(handle, "nvmlDeviceGetHandleByIndex_v2", true);
	SYM(error_string, "nvmlErrorString", false);
	SYM(driver_version, "nvmlSystemGetDriverVersion", false);
	SYM(uuid, "nvmlDeviceGetUUID", false);
	SYM(name, "nvmlDeviceGetName", false);
	SYM(clock, "nvmlDeviceGetClockInfo", false);
	SYM(max_clock, "nvmlDeviceGetMaxClockInfo", false);
	SYM(power, "nvmlDeviceGetPowerUsage", false);
	SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit", false);
	SYM(temp, "nvmlDeviceGetTemperature", false);
	SYM(reasons, "nvmlDeviceGetCurrentClocksEventReasons", false);
	if (!t->f.reasons) /* its name before R550 */
		SYM(reasons, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
	SYM(util, "nvmlDeviceGetUtilizationRates", false);

	t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (t->efd < 0) {
		err = -errno;
		pr_err("GPU telemetry: eventfd: %s", strerror(-err));
		return err;
	}
	err = agent_watch_fd(a, t->efd, telem_on_ready, t);
	if (err) {
		pr_err("GPU telemetry: event loop: %s", strerror(-err));
		return err;
	}
	t->state = T_STARTING;
	err = -pthread_create(&t->thr, NULL, poller, t);
	if (err) {
		pr_err("GPU telemetry: poller thread: %s", strerror(-err));
		return err;
	}
	t->thr_started = true;
	return 0;

bad_lib:
	snprintf(t->error, sizeof(t->error), "%s has no %s: not NVML, or too old", lib, missing);
	dlclose(t->lib);
	t->lib = NULL;
unavailable:
	if (o->gpu_telemetry == GPU_TELEMETRY_ON) {
		pr_err("--gpu-telemetry on: cannot load NVML: %s (on a GPU node it is the driver's "
		       "libnvidia-ml.so.1; in a container, the NVIDIA container toolkit mounts it "
		       "with NVIDIA_DRIVER_CAPABILITIES=utility; --nvml-lib gives a path)",
		       t->error);
		return -ENOENT;
	}
	pr_info("GPU telemetry off: NVML not loaded (%s); --gpu-telemetry off says so without "
		"this line",
		t->error);
	t->logged = T_UNAVAILABLE;
	return 0;
}

void telem_stats(struct agent *a, json_t *stats_record)
{
	struct telem *t = a->telem;
	json_t *o;

	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	o = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "state", state_names[t->state],
		      "devices", (json_int_t)t->ndev, "samples", (json_int_t)t->samples, "records",
		      (json_int_t)t->records, "dropped", (json_int_t)t->dropped, "read_errors",
		      (json_int_t)t->read_errors, "gpu_lost", (json_int_t)t->lost, "slow_polls",
		      (json_int_t)t->slow_polls);
	if (o && t->error[0] && t->state != T_RUNNING)
		json_object_set_new(o, "error", rec_string(t->error));
	pthread_mutex_unlock(&t->mu);
	if (o)
		json_object_set_new(stats_record, "gpu_telemetry", o);
}

static void gauge(FILE *f, const struct telem *t, const char *name, const char *help, uint32_t have,
		  double scale, size_t off)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
	for (uint32_t d = 0; d < t->ndev; d++)
		if (t->last[d].have & have)
			fprintf(f, "%s{device=\"%u\"} %.15g\n", name, d,
				*(const uint32_t *)((const char *)&t->last[d] + off) * scale);
}

#define GAUGE(name, help, have, scale, field)                                                      \
	gauge(f, t, name, help, have, scale, offsetof(struct telem_sample, field))

void telem_metrics(struct agent *a, FILE *f)
{
	struct telem *t = a->telem;

	if (!t || t->logged != T_RUNNING)
		return; /* ndev and the names are the loop's to read once it logged "running" */
	GAUGE("infertrace_gpu_sm_clock_mhz", "The GPU's SM clock at the latest sample (NVML).",
	      HAVE_SM, 1, sm_mhz);
	GAUGE("infertrace_gpu_sm_clock_max_mhz", "The GPU's highest SM clock (NVML).", HAVE_SM_MAX,
	      1, sm_max_mhz);
	GAUGE("infertrace_gpu_power_watts", "The GPU's power draw at the latest sample (NVML).",
	      HAVE_POWER, 1e-3, power_mw);
	GAUGE("infertrace_gpu_power_limit_watts", "The power limit the driver enforces (NVML).",
	      HAVE_POWER_LIMIT, 1e-3, power_limit_mw);
	GAUGE("infertrace_gpu_temperature_celsius", "The GPU's temperature (NVML).", HAVE_TEMP, 1,
	      temp_c);
	GAUGE("infertrace_gpu_utilization_ratio",
	      "Share of NVML's last sample period in which a kernel ran.", HAVE_UTIL, 0.01,
	      util_gpu);
	fprintf(f, "# HELP infertrace_gpu_clock_throttled Whether a reason holds the GPU's clocks "
		   "down at the latest sample (NVML throttle reasons), by reason.\n"
		   "# TYPE infertrace_gpu_clock_throttled gauge\n");
	for (uint32_t d = 0; d < t->ndev; d++)
		if (t->last[d].have & HAVE_REASONS)
			for (size_t i = 0; i < NREASONS; i++)
				fprintf(
				    f,
				    "infertrace_gpu_clock_throttled{device=\"%u\",reason=\"%s\"} "
				    "%d\n",
				    d, reason_names[i].name,
				    !!(t->last[d].reasons & reason_names[i].bit));
}

void telem_print_summary(struct agent *a, FILE *out)
{
	struct telem *t = a->telem;

	if (!t)
		return;
	if (t->efd >= 0)
		telem_on_ready(a, t);
	fprintf(out, "\nThe node's GPUs (NVML, --gpu-telemetry)\n");
	if (t->logged != T_RUNNING) {
		fprintf(out, "  not read: %s\n",
			t->state == T_STARTING ? "NVML's initialisation has not returned"
			: t->error[0]	       ? t->error
					       : state_names[t->state]);
		return;
	}
	for (uint32_t d = 0; d < t->ndev; d++) {
		const struct telem_acc *c = &t->acc[d];
		const struct telem_sample *l = &t->last[d];
		bool any = false;

		fprintf(out, "  GPU %u %s: %llu reads", d, t->uuid[d][0] ? t->uuid[d] : "(no uuid)",
			(unsigned long long)c->reads);
		if (c->sm_max)
			fprintf(out, ", SM clock %u-%u MHz", c->sm_min, c->sm_max);
		if (l->have & HAVE_SM_MAX)
			fprintf(out, " (highest %u)", l->sm_max_mhz);
		if (c->temp_max)
			fprintf(out, ", up to %u C", c->temp_max);
		if (c->power_max)
			fprintf(out, ", up to %.0f W", c->power_max / 1e3);
		if (l->have & HAVE_POWER_LIMIT)
			fprintf(out, " of %.0f", l->power_limit_mw / 1e3);
		fprintf(out, "\n    clocks held down by:");
		for (size_t i = 0; i < NREASONS; i++)
			if (c->held[i] && reason_names[i].bit != NVML_THR_GPU_IDLE) {
				fprintf(out, "%s %s in %llu of %llu reads", any ? "," : "",
					reason_names[i].name, (unsigned long long)c->held[i],
					(unsigned long long)c->reads);
				any = true;
			}
		if (c->held_other) {
			fprintf(out, "%s reasons NVML added since in %llu reads", any ? "," : "",
				(unsigned long long)c->held_other);
			any = true;
		}
		fprintf(out, "%s\n", any ? "" : " nothing (idle aside)");
	}
}

void telem_summary_reset(struct agent *a)
{
	struct telem *t = a->telem;

	if (t)
		memset(t->acc, 0, sizeof(t->acc)); /* the loop thread's, as account() */
}

void telem_stop(struct agent *a)
{
	struct telem *t = a->telem;
	bool joined = true;

	if (!t)
		return;
	if (t->thr_started) {
		uint64_t until = now_ns() + TELEM_JOIN_NS;
		bool done;

		pthread_mutex_lock(&t->mu);
		t->stop = true;
		pthread_cond_signal(&t->cv);
		pthread_mutex_unlock(&t->mu);
		do {
			pthread_mutex_lock(&t->mu);
			done = t->done;
			pthread_mutex_unlock(&t->mu);
			if (!done)
				usleep(10000);
		} while (!done && now_ns() < until);
		if (done) {
			pthread_join(t->thr, NULL);
		} else {
			/* inside NVML: left behind, with the library and its state */
			pr_warn("GPU telemetry: NVML did not return in %.0f s; exiting without it",
				TELEM_JOIN_NS / 1e9);
			pthread_detach(t->thr);
			joined = false;
		}
	}
	if (t->efd >= 0) {
		telem_on_ready(a, t); /* what the poller handed over last */
		agent_unwatch_fd(a, t->efd);
	}
	a->telem = NULL;
	if (!joined)
		return; /* t, its fd and the library stay: the poller may still use them */
	if (t->efd >= 0)
		close(t->efd);
	if (t->lib)
		dlclose(t->lib);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}
