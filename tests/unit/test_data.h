/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * test_data.h - where the unit tests find the shared recordings: the
 * directory named by INFERTRACE_DATA, else ../shared/data (tests run from
 * the repository root, tests/run.sh). A test that needs them and finds none
 * skips with a message (docs/development.md).
 */
#ifndef INFERTRACE_TEST_DATA_H
#define INFERTRACE_TEST_DATA_H

#include <stdlib.h>
#include <unistd.h>

/* the data directory, or NULL when there is none */
static inline const char *test_data_dir(void)
{
	const char *env = getenv("INFERTRACE_DATA");

	if (env && !access(env, R_OK))
		return env;
	if (!access("../shared/data/README.md", R_OK))
		return "../shared/data";
	return NULL;
}

#endif /* INFERTRACE_TEST_DATA_H */
