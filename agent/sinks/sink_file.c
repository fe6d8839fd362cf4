// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * sink_file.c - JSON lines to a file or stdout.
 *
 * Lines are buffered by stdio and flushed every interval and at exit, so a
 * reader following the file sees whole lines at least once per interval.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"

struct file_sink {
	struct sink s;
	FILE *f;
	bool owned;
};

static int file_write(struct sink *s, enum rec_class cls, const char *key, const char *json,
		      size_t len)
{
	struct file_sink *fs = s->priv;

	(void)cls;
	(void)key;
	if (fwrite(json, 1, len, fs->f) != len || fputc('\n', fs->f) == EOF) {
		s->errors++;
		return -EIO;
	}
	s->written++;
	return 0;
}

static int file_flush(struct sink *s, int timeout_ms)
{
	struct file_sink *fs = s->priv;

	(void)timeout_ms;
	if (fflush(fs->f)) {
		s->errors++;
		return -errno;
	}
	return 0;
}

static void file_close(struct sink *s)
{
	struct file_sink *fs;

	if (!s)
		return;
	fs = s->priv;
	if (fs->f) {
		fflush(fs->f);
		if (fs->owned)
			fclose(fs->f);
	}
	free(fs);
}

struct sink *sink_file_open(const char *path)
{
	struct file_sink *fs = calloc(1, sizeof(*fs));

	if (!fs)
		return NULL;
	if (!path || !strcmp(path, "-")) {
		fs->f = stdout;
	} else {
		fs->f = fopen(path, "w");
		if (!fs->f) {
			int err = errno;

			free(fs);
			errno = err;
			return NULL;
		}
		fs->owned = true;
	}
	/* a line per record; large buffer so bursts cost few syscalls */
	setvbuf(fs->f, NULL, _IOFBF, 1 << 16);
	fs->s.name = "file";
	fs->s.write = file_write;
	fs->s.flush = file_flush;
	fs->s.close = file_close;
	fs->s.priv = fs;
	return &fs->s;
}
