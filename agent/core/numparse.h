/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * numparse.h - option values as numbers, for the agent and agentctl alike:
 * the whole string must be a number within [min, max]; returns 0, or
 * -EINVAL and leaves *out alone.
 */
#ifndef INFERTRACE_NUMPARSE_H
#define INFERTRACE_NUMPARSE_H

int parse_double(const char *arg, double min, double max, double *out);
int parse_long(const char *arg, long min, long max, long *out);

#endif /* INFERTRACE_NUMPARSE_H */
