// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nest_cudart.c - a CUDA runtime double that does what the real one does on
 * a real driver and cannot do on the toolkit's stub libcuda (whose cuInit
 * fails): enter the driver's exported entry point from inside the runtime
 * call. Seen on an H100 (driver 580.159.04, CUDA 13.0, docs/operations.md,
 * "Checking a GPU node"): cudaLaunchKernel calls cuLaunchKernel,
 * cudaLaunchKernelExC cuLaunchKernelEx, cudaGraphLaunch cuGraphLaunch,
 * cudaStreamSynchronize cuStreamSynchronize, each as a real call from the
 * runtime's own code. Built as libcudart.so.13 (so discovery takes it for
 * the runtime and attaches the runtime's probes to it) and compiled with
 * -fno-optimize-sibling-calls so that every driver call is a call, not a
 * jump. The driver is the stub libcuda, loaded with dlopen on first use.
 *
 * cudaLaunchKernel with a NULL function fails before reaching the driver,
 * as the real runtime does on a bad argument (cudaErrorInvalidDeviceFunction).
 */
#include <dlfcn.h>
#include <stddef.h>

#include "../integration/cudart.h"

#define STUB_CUDA "/usr/local/cuda/lib64/stubs/libcuda.so"

typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			    unsigned, void *, void **, void **);
typedef int (*cu_launch_ex_fn)(const struct launch_config *, void *, void **, void **);
typedef int (*cu_graph_fn)(void *, void *);
typedef int (*cu_sync_fn)(void *);

static struct {
	cu_launch_fn launch;
	cu_launch_ex_fn launch_ex;
	cu_graph_fn graph;
	cu_sync_fn sync;
} drv;

/* the driver's entry points, once; 999 (cudaErrorUnknown) without them */
static int load(void)
{
	void *h;

	if (drv.launch)
		return 0;
	h = dlopen(STUB_CUDA, RTLD_NOW);
	if (!h)
		return 999;
	drv.launch_ex = (cu_launch_ex_fn)dlsym(h, "cuLaunchKernelEx");
	drv.graph = (cu_graph_fn)dlsym(h, "cuGraphLaunch");
	drv.sync = (cu_sync_fn)dlsym(h, "cuStreamSynchronize");
	drv.launch = (cu_launch_fn)dlsym(h, "cuLaunchKernel");
	return drv.launch && drv.launch_ex && drv.graph && drv.sync ? 0 : 999;
}

/* a driver result as a runtime one; the work after the call keeps it a call */
static int rt_result(int r)
{
	return r ? 999 : 0;
}

__attribute__((visibility("default"))) int cudaLaunchKernel(const void *func, struct dim3 grid,
							    struct dim3 block, void **args,
							    size_t shmem, void *stream)
{
	if (!func)
		return 98; /* cudaErrorInvalidDeviceFunction: the driver is not entered */
	if (load())
		return 999;
	return rt_result(drv.launch((void *)func, grid.x, grid.y, grid.z, block.x, block.y, block.z,
				    (unsigned)shmem, stream, args, NULL));
}

__attribute__((visibility("default"))) int cudaLaunchKernelExC(const struct launch_config *cfg,
							       const void *func, void **args)
{
	if (load())
		return 999;
	return rt_result(drv.launch_ex(cfg, (void *)func, args, NULL));
}

__attribute__((visibility("default"))) int cudaGraphLaunch(void *exec, void *stream)
{
	if (load())
		return 999;
	return rt_result(drv.graph(exec, stream));
}

__attribute__((visibility("default"))) int cudaStreamSynchronize(void *stream)
{
	if (load())
		return 999;
	return rt_result(drv.sync(stream));
}
