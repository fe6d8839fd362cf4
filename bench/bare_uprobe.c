// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * bare_uprobe - load bench/bare_uprobe.bpf.c (build/bench/bare_uprobe.bpf.o,
 * found next to this binary) and attach it to one symbol of one library,
 * for every process (pid -1, as the agent attaches), until SIGINT/SIGTERM.
 *
 * usage: bare_uprobe [-o BPF_OBJECT] LIBRARY SYMBOL
 * Prints "attached LIBRARY:SYMBOL" (flushed) once the probe is live and
 * "hits N" at exit.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

static volatile sig_atomic_t exiting;

static void on_signal(int sig)
{
	(void)sig;
	exiting = 1;
}

static int quiet_print(enum libbpf_print_level lvl, const char *fmt, va_list ap)
{
	if (lvl == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

int main(int argc, char **argv)
{
	char path[PATH_MAX], *slash;
	const char *obj_path = NULL;
	struct bpf_object *obj = NULL;
	struct bpf_link *link = NULL;
	struct bpf_program *prog;
	struct bpf_map *bss;
	unsigned long long hits = 0;
	int opt, err = 1;

	while ((opt = getopt(argc, argv, "o:")) != -1) {
		if (opt != 'o') {
			fprintf(stderr, "usage: %s [-o BPF_OBJECT] LIBRARY SYMBOL\n", argv[0]);
			return 2;
		}
		obj_path = optarg;
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: %s [-o BPF_OBJECT] LIBRARY SYMBOL\n", argv[0]);
		return 2;
	}
	if (!obj_path) {
		ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 32);

		if (n < 0) {
			perror("bare_uprobe: /proc/self/exe");
			return 1;
		}
		path[n] = '\0';
		slash = strrchr(path, '/');
		strcpy(slash ? slash + 1 : path, "bare_uprobe.bpf.o");
		obj_path = path;
	}
	libbpf_set_print(quiet_print);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	obj = bpf_object__open_file(obj_path, NULL);
	if (!obj) {
		fprintf(stderr, "bare_uprobe: open %s: %s\n", obj_path, strerror(errno));
		goto cleanup;
	}
	if (bpf_object__load(obj)) {
		fprintf(stderr, "bare_uprobe: load %s: %s (root needed)\n", obj_path,
			strerror(errno));
		goto cleanup;
	}
	prog = bpf_object__find_program_by_name(obj, "on_hit");
	bss = bpf_object__find_map_by_name(obj, ".bss");
	if (!prog || !bss) {
		fprintf(stderr, "bare_uprobe: %s lacks on_hit or .bss\n", obj_path);
		goto cleanup;
	}
	{
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = argv[optind + 1]);

		link = bpf_program__attach_uprobe_opts(prog, -1, argv[optind], 0, &uo);
	}
	if (!link) {
		fprintf(stderr, "bare_uprobe: attach %s:%s: %s\n", argv[optind], argv[optind + 1],
			strerror(errno));
		goto cleanup;
	}
	printf("attached %s:%s\n", argv[optind], argv[optind + 1]);
	fflush(stdout);
	while (!exiting)
		usleep(100000); /* a signal interrupts it; no pause() race */
	{
		__u32 zero = 0;
		size_t sz = bpf_map__value_size(bss);
		char *val = calloc(1, sz);

		if (val && !bpf_map__lookup_elem(bss, &zero, sizeof(zero), val, sz, 0))
			memcpy(&hits, val, sizeof(hits));
		free(val);
	}
	printf("hits %llu\n", hits);
	err = 0;
cleanup:
	bpf_link__destroy(link);
	bpf_object__close(obj);
	return err;
}
