// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * fake_nvml.c - the NVML test double (build/tests/fakes/libnvidia-ml.so.1):
 * the entry points agent/sources/gpu_telemetry.c loads, with the prototypes
 * of agent/sources/nvml_api.h, answering from a text file so that a test
 * can move a GPU's clock while the agent runs.
 *
 * FAKE_NVML_STATE=FILE, read again at every query: one GPU per line, in
 * index order, fields separated by '|':
 *   uuid|name|sm_mhz|sm_max_mhz|mem_mhz|power_mw|limit_mw|temp_c|util_gpu|util_mem|reasons
 * reasons in hex (the throttle bits); a field "-" answers
 * NVML_ERROR_NOT_SUPPORTED, "lost" NVML_ERROR_GPU_IS_LOST, "err"
 * NVML_ERROR_UNKNOWN (999). No file, or no line: no GPU.
 * FAKE_NVML_INIT_RC=N: nvmlInit_v2 returns N (9: the driver is not loaded).
 * FAKE_NVML_SLEEP_MS=N: every query and nvmlInit_v2 sleeps N ms first (a
 * driver that holds its lock, a GPU that fell off the bus).
 * FAKE_NVML_LOG=FILE: "init", "shutdown" appended as they are called.
 *
 * It exports the pre-R550 name of the throttle query only
 * (nvmlDeviceGetCurrentClocksThrottleReasons), which every driver keeps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_api.h"

#define EXPORT __attribute__((visibility("default")))
#define MAXDEV 64
#define NFIELDS 11

enum { F_UUID, F_NAME, F_SM, F_SMMAX, F_MEM, F_POWER, F_LIMIT, F_TEMP, F_UGPU, F_UMEM, F_REASONS };

struct dev {
	char f[NFIELDS][128];
};

static void nap(void)
{
	const char *s = getenv("FAKE_NVML_SLEEP_MS");
	long ms = s ? strtol(s, NULL, 10) : 0;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	if (ms > 0)
		nanosleep(&ts, NULL);
}

static void note(const char *what)
{
	const char *p = getenv("FAKE_NVML_LOG");
	FILE *f = p ? fopen(p, "a") : NULL;

	if (f) {
		fprintf(f, "%s\n", what);
		fclose(f);
	}
}

/* the state file's GPUs, read again at every query; one caller thread (the agent's poller) */
static struct dev d[MAXDEV];

/* the state file's GPUs into d (at most MAXDEV); how many */
static unsigned int load(void)
{
	const char *p = getenv("FAKE_NVML_STATE");
	FILE *f = p ? fopen(p, "r") : NULL;
	char line[1024];
	unsigned int n = 0;

	if (!f)
		return 0;
	while (n < MAXDEV && fgets(line, sizeof(line), f)) {
		char *save = NULL, *tok;
		int i = 0;

		line[strcspn(line, "\n")] = 0;
		if (!line[0])
			continue;
		memset(&d[n], 0, sizeof(d[n]));
		for (tok = strtok_r(line, "|", &save); tok && i < NFIELDS;
		     tok = strtok_r(NULL, "|", &save))
			snprintf(d[n].f[i++], sizeof(d[n].f[0]), "%s", tok);
		n++;
	}
	fclose(f);
	return n;
}

static unsigned int index_of(nvml_device_t h)
{
	return (unsigned int)((unsigned long)h - 1);
}

/* field k of GPU h as an unsigned number, or the error its text asks for */
static nvml_return_t field(nvml_device_t h, int k, unsigned long long *v, int base)
{
	unsigned int n, i = index_of(h);
	const char *s;

	nap();
	n = load();
	if (i >= n)
		return 2; /* NVML_ERROR_INVALID_ARGUMENT */
	s = d[i].f[k];
	if (!s[0] || !strcmp(s, "-"))
		return NVML_ERR_NOT_SUPPORTED;
	if (!strcmp(s, "lost"))
		return NVML_ERR_GPU_IS_LOST;
	if (!strcmp(s, "err"))
		return 999;
	*v = strtoull(s, NULL, base);
	return NVML_OK;
}

static nvml_return_t ufield(nvml_device_t h, int k, unsigned int *out)
{
	unsigned long long v = 0;
	nvml_return_t r = field(h, k, &v, 10);

	if (r == NVML_OK)
		*out = (unsigned int)v;
	return r;
}

static nvml_return_t sfield(nvml_device_t h, int k, char *buf, unsigned int len)
{
	unsigned int n = load(), i = index_of(h);

	if (i >= n || !buf || !len)
		return 2;
	if (strlen(d[i].f[k]) + 1 > len)
		return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
	snprintf(buf, len, "%s", d[i].f[k]);
	return NVML_OK;
}

EXPORT nvml_return_t nvmlInit_v2(void)
{
	const char *rc = getenv("FAKE_NVML_INIT_RC");

	nap();
	note("init");
	return rc ? (nvml_return_t)strtol(rc, NULL, 10) : NVML_OK;
}

EXPORT nvml_return_t nvmlShutdown(void)
{
	note("shutdown");
	return NVML_OK;
}

EXPORT const char *nvmlErrorString(nvml_return_t r)
{
	switch (r) {
	case NVML_OK:
		return "Success";
	case NVML_ERR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERR_GPU_IS_LOST:
		return "GPU is lost";
	default:
		return "Unknown Error";
	}
}

EXPORT nvml_return_t nvmlSystemGetDriverVersion(char *ver, unsigned int len)
{
	snprintf(ver, len, "%s", "999.99-fake");
	return NVML_OK;
}

EXPORT nvml_return_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	*count = load();
	return NVML_OK;
}

EXPORT nvml_return_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvml_device_t *dev)
{
	*dev = (nvml_device_t)(unsigned long)(index + 1);
	return NVML_OK;
}

EXPORT nvml_return_t nvmlDeviceGetUUID(nvml_device_t h, char *buf, unsigned int len)
{
	return sfield(h, F_UUID, buf, len);
}

EXPORT nvml_return_t nvmlDeviceGetName(nvml_device_t h, char *buf, unsigned int len)
{
	return sfield(h, F_NAME, buf, len);
}

EXPORT nvml_return_t nvmlDeviceGetClockInfo(nvml_device_t h, int type, unsigned int *mhz)
{
	if (type == NVML_CLK_SM)
		return ufield(h, F_SM, mhz);
	if (type == NVML_CLK_MEM)
		return ufield(h, F_MEM, mhz);
	return NVML_ERR_NOT_SUPPORTED;
}

EXPORT nvml_return_t nvmlDeviceGetMaxClockInfo(nvml_device_t h, int type, unsigned int *mhz)
{
	return type == NVML_CLK_SM ? ufield(h, F_SMMAX, mhz) : NVML_ERR_NOT_SUPPORTED;
}

EXPORT nvml_return_t nvmlDeviceGetPowerUsage(nvml_device_t h, unsigned int *mw)
{
	return ufield(h, F_POWER, mw);
}

EXPORT nvml_return_t nvmlDeviceGetEnforcedPowerLimit(nvml_device_t h, unsigned int *mw)
{
	return ufield(h, F_LIMIT, mw);
}

EXPORT nvml_return_t nvmlDeviceGetTemperature(nvml_device_t h, int sensor, unsigned int *c)
{
	return sensor == NVML_TEMP_GPU ? ufield(h, F_TEMP, c) : NVML_ERR_NOT_SUPPORTED;
}

EXPORT nvml_return_t nvmlDeviceGetUtilizationRates(nvml_device_t h, struct nvml_utilization *u)
{
	nvml_return_t r = ufield(h, F_UGPU, &u->gpu);

	return r == NVML_OK ? ufield(h, F_UMEM, &u->memory) : r;
}

EXPORT nvml_return_t nvmlDeviceGetCurrentClocksThrottleReasons(nvml_device_t h,
							       unsigned long long *reasons)
{
	return field(h, F_REASONS, reasons, 16);
}
