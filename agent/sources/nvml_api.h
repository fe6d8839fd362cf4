/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * nvml_api.h - the part of NVML (libnvidia-ml.so.1, the NVIDIA driver's
 * management library) that agent/sources/gpu_telemetry.c calls, declared
 * here because nvml.h is not in the CUDA toolkit the build uses: the agent
 * loads the library with dlopen() at run time and needs no NVML to build.
 * tests/fakes/fake_nvml.c implements the same entry points for the tests.
 *
 * Source of every name, value and prototype: the NVML API Reference Guide,
 * https://docs.nvidia.com/deploy/nvml-api/ ("Initialization and Cleanup",
 * "Device Queries", "Error reporting", nvmlReturn_t, nvmlClockType_t,
 * nvmlTemperatureSensors_t, "NvmlClocksThrottleReasons": the same bits as
 * "NvmlClocksEventReasons" in R550 and later), and the DCGM field constants
 * that mirror the throttle bits one for one.
 */
#ifndef INFERTRACE_NVML_API_H
#define INFERTRACE_NVML_API_H

typedef struct nvml_device_st *nvml_device_t; /* nvmlDevice_t: an opaque handle */
typedef int nvml_return_t;		      /* nvmlReturn_t */

enum {
	NVML_OK = 0,			/* NVML_SUCCESS */
	NVML_ERR_NOT_SUPPORTED = 3,	/* NVML_ERROR_NOT_SUPPORTED */
	NVML_ERR_NO_PERMISSION = 4,	/* NVML_ERROR_NO_PERMISSION */
	NVML_ERR_DRIVER_NOT_LOADED = 9, /* NVML_ERROR_DRIVER_NOT_LOADED */
	NVML_ERR_GPU_IS_LOST = 15,	/* NVML_ERROR_GPU_IS_LOST */
};

enum { NVML_CLK_SM = 1, NVML_CLK_MEM = 2 }; /* nvmlClockType_t NVML_CLOCK_SM, NVML_CLOCK_MEM */
enum { NVML_TEMP_GPU = 0 };		    /* nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU */

/* buffer sizes: NVML_DEVICE_UUID_V2_BUFFER_SIZE, NVML_DEVICE_NAME_V2_BUFFER_SIZE,
 * NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE */
#define NVML_UUID_LEN 96
#define NVML_NAME_LEN 96
#define NVML_DRIVER_LEN 80

/* nvmlUtilization_t: percent of the last sample period (1/6 s to 1 s by product) */
struct nvml_utilization {
	unsigned int gpu;    /* a kernel was running */
	unsigned int memory; /* device memory was read or written */
};

/* nvmlClocksThrottleReason* (nvmlClocksEventReason* since R550): why the clocks are held down */
#define NVML_THR_GPU_IDLE 0x1ULL
#define NVML_THR_APP_CLOCKS 0x2ULL
#define NVML_THR_SW_POWER_CAP 0x4ULL
#define NVML_THR_HW_SLOWDOWN 0x8ULL
#define NVML_THR_SYNC_BOOST 0x10ULL
#define NVML_THR_SW_THERMAL 0x20ULL
#define NVML_THR_HW_THERMAL 0x40ULL
#define NVML_THR_HW_POWER_BRAKE 0x80ULL
#define NVML_THR_DISPLAY_CLOCKS 0x100ULL

/* the entry points, as the library exports them (dlsym names in gpu_telemetry.c) */
typedef nvml_return_t (*nvml_init_fn)(void);		      /* nvmlInit_v2 */
typedef nvml_return_t (*nvml_shutdown_fn)(void);	      /* nvmlShutdown */
typedef const char *(*nvml_error_string_fn)(nvml_return_t r); /* nvmlErrorString */
typedef nvml_return_t (*nvml_driver_version_fn)(char *ver,
						unsigned int len); /* nvmlSystemGetDriverVersion */
typedef nvml_return_t (*nvml_count_fn)(unsigned int *count);	   /* nvmlDeviceGetCount_v2 */
typedef nvml_return_t (*nvml_handle_fn)(unsigned int index,
					nvml_device_t *dev); /* nvmlDeviceGetHandleByIndex_v2 */
/* nvmlDeviceGetUUID, nvmlDeviceGetName */
typedef nvml_return_t (*nvml_string_fn)(nvml_device_t dev, char *buf, unsigned int len);
/* nvmlDeviceGetClockInfo, nvmlDeviceGetMaxClockInfo: MHz */
typedef nvml_return_t (*nvml_clock_fn)(nvml_device_t dev, int type, unsigned int *mhz);
/* nvmlDeviceGetPowerUsage, nvmlDeviceGetEnforcedPowerLimit: milliwatts */
typedef nvml_return_t (*nvml_uint_fn)(nvml_device_t dev, unsigned int *v);
/* nvmlDeviceGetTemperature: degrees C */
typedef nvml_return_t (*nvml_temp_fn)(nvml_device_t dev, int sensor, unsigned int *c);
/* nvmlDeviceGetCurrentClocksThrottleReasons (nvmlDeviceGetCurrentClocksEventReasons) */
typedef nvml_return_t (*nvml_reasons_fn)(nvml_device_t dev, unsigned long long *reasons);
/* nvmlDeviceGetUtilizationRates */
typedef nvml_return_t (*nvml_util_fn)(nvml_device_t dev, struct nvml_utilization *u);

#endif
