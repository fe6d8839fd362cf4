// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * demangle.c - Itanium C++ demangling through libstdc++'s __cxa_demangle,
 * loaded with dlopen so the repository stays C-only and the agent runs (with
 * mangled names only) where libstdc++ is absent. Kernel names repeat, so each
 * name is demangled once and cached.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

static struct {
	int state; /* 0: not tried, 1: loaded, -1: unavailable */
	void *handle;
	cxa_demangle_fn fn;
	struct names *names; /* mangled name -> id */
	char **out;	     /* id -> demangled, NULL: not demangled */
	uint32_t cap;
} dm;

#define DM_MAX_NAMES 65536

static int dm_load(void)
{
	if (dm.state)
		return dm.state;
	dm.state = -1;
	dm.handle = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
	if (!dm.handle)
		return dm.state;
	*(void **)&dm.fn = dlsym(dm.handle, "__cxa_demangle");
	dm.names = names_new(DM_MAX_NAMES);
	dm.out = calloc(DM_MAX_NAMES, sizeof(*dm.out));
	if (!dm.fn || !dm.names || !dm.out) {
		corr_demangle_cache_free();
		dm.state = -1;
		return dm.state;
	}
	dm.cap = DM_MAX_NAMES;
	dm.state = 1;
	return dm.state;
}

const char *corr_demangle(const char *mangled)
{
	int32_t id;
	int status = 0;
	char *res;

	/* only Itanium symbols: "_Z..." (Kineto often stores names already demangled) */
	if (!mangled || mangled[0] != '_' || mangled[1] != 'Z')
		return NULL;
	if (dm_load() < 0)
		return NULL;
	id = names_intern(dm.names, mangled, strlen(mangled));
	if (id < 0) {
		/* cache full: demangle without caching would leak; report none */
		return NULL;
	}
	if ((uint32_t)id + 1 == names_count(dm.names) && !dm.out[id]) {
		res = dm.fn(mangled, NULL, NULL, &status);
		if (status || !res) {
			free(res);
			/* remember the failure as an empty string */
			res = strdup("");
		}
		dm.out[id] = res;
	}
	if (!dm.out[id] || !dm.out[id][0])
		return NULL;
	return dm.out[id];
}

void corr_demangle_cache_free(void)
{
	if (dm.out) {
		for (uint32_t i = 0; dm.names && i < names_count(dm.names); i++)
			free(dm.out[i]);
		free(dm.out);
	}
	names_free(dm.names);
	if (dm.handle)
		dlclose(dm.handle);
	memset(&dm, 0, sizeof(dm));
}
