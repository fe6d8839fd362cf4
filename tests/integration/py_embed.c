// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * py_embed.c - built as infer-engine (owner: tests/integration/python.sh):
 * an inference engine that links CPython in statically (Debian's
 * libpython3.11.a) under a name that does not say python, and runs a Python
 * script in it, the way a C++ server embeds its Python side. The agent must
 * find the interpreter in the program itself.
 *
 * usage: infer-engine SCRIPT [ARGS...]   (sys.argv = [SCRIPT, ARGS...])
 */
#include <Python.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	PyConfig config;
	PyStatus st;
	FILE *f;
	int rc;

	if (argc < 2) {
		fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
		return 2;
	}
	PyConfig_InitPythonConfig(&config);
	config.parse_argv = 0; /* the script's arguments are its own */
	st = PyConfig_SetBytesArgv(&config, argc - 1, argv + 1);
	if (!PyStatus_Exception(st))
		st = Py_InitializeFromConfig(&config);
	PyConfig_Clear(&config);
	if (PyStatus_Exception(st)) {
		fprintf(stderr, "%s: Python did not start: %s\n", argv[0],
			st.err_msg ? st.err_msg : "?");
		return 1;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	rc = PyRun_SimpleFileEx(f, argv[1], 1);
	if (Py_FinalizeEx() < 0)
		rc = 1;
	return rc ? 1 : 0;
}
