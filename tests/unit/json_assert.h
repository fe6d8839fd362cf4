/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * json_assert.h - cmocka assertions on one member of a jansson object, for
 * the unit tests that check records field by field. Macros, so that a
 * failure names the test's line.
 */
#ifndef INFERTRACE_JSON_ASSERT_H
#define INFERTRACE_JSON_ASSERT_H

#include <jansson.h>

/* o's member key is the string want */
#define assert_json_str(o, key, want)                                                              \
	assert_string_equal(json_string_value(json_object_get((o), (key))), (want))
/* o's member key is the integer want */
#define assert_json_int(o, key, want)                                                              \
	assert_int_equal(json_integer_value(json_object_get((o), (key))), (want))

#endif /* INFERTRACE_JSON_ASSERT_H */
