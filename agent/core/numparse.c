// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* numparse.c - see numparse.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "numparse.h"

int parse_double(const char *arg, double min, double max, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int parse_long(const char *arg, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}
