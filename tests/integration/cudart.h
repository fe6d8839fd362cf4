/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * cudart.h - the slice of the CUDA runtime the workloads call without its
 * headers, loaded with dlopen as inference engines load it: dim3,
 * cudaLaunchKernel's signature and the launch config of the Ex calls
 * (cuda_runtime_api.h, driver_types.h, cuda.h).
 */
#ifndef INFERTRACE_TEST_CUDART_H
#define INFERTRACE_TEST_CUDART_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#define CUDA_LIB "/usr/local/cuda/lib64/libcudart.so"

struct dim3 {
	unsigned x, y, z;
};
typedef int (*launch_fn)(const void *, struct dim3, struct dim3, void **, size_t, void *);

/*
 * The prefix of cudaLaunchConfig_t / CUlaunchConfig that bpf/cuda.bpf.c reads
 * (grid, block, shared memory, stream), then the attributes
 */
struct launch_config {
	unsigned grid[3], block[3];
	unsigned long long shmem;
	void *stream;
	void *attrs;
	unsigned nattrs;
};

/* cudaLaunchKernel of CUDA_LIB, or NULL after a message naming prog */
static inline launch_fn cudart_launch(const char *prog)
{
	void *rt = dlopen(CUDA_LIB, RTLD_NOW);
	launch_fn launch = rt ? (launch_fn)dlsym(rt, "cudaLaunchKernel") : NULL;

	if (!launch)
		fprintf(stderr, "%s: cannot load %s: %s\n", prog, CUDA_LIB, dlerror());
	return launch;
}

#endif /* INFERTRACE_TEST_CUDART_H */
