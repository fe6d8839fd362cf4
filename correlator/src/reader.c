// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * reader.c - replay entry: detect the format, load (and gunzip) the file,
 * run the matching reader through a correlator, flush it.
 *
 * Files are loaded whole: the pull scanner keeps pointers into the buffer and
 * costs nothing more, so peak memory is the uncompressed size plus the
 * correlator's bounded state.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <jansson.h>

#include "internal.h"

#define REPLAY_MAX_INPUT (16ULL << 30) /* refuse more than 16 GiB uncompressed */

const char *corr_format_name(enum corr_format f)
{
	switch (f) {
	case CORR_FMT_KINETO: return "kineto";
	case CORR_FMT_NSYS: return "nsys-sqlite";
	case CORR_FMT_JSONL: return "jsonl";
	default: return "auto";
	}
}

static int read_all(const char *path, char **out, size_t *len)
{
	struct stat sb;
	char *buf = NULL;
	size_t off = 0;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb)) {
		err = -errno;
		goto cleanup;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		goto cleanup;
	}
	while (off < (size_t)sb.st_size) {
		ssize_t n = read(fd, buf + off, (size_t)sb.st_size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			err = n < 0 ? -errno : -EIO;
			goto cleanup;
		}
		off += (size_t)n;
	}
	buf[off] = '\0';
	*out = buf;
	*len = off;
	buf = NULL;
cleanup:
	free(buf);
	close(fd);
	return err;
}

/* gunzip a whole buffer (concatenated members too); errors name the offset */
static int gunzip(const struct replay_ctx *rc, const char *in, size_t inlen, char **out,
		  size_t *outlen)
{
	z_stream zs = { 0 };
	size_t cap = inlen * 6 + 4096, len = 0;
	char *buf = malloc(cap + 1), *nb;
	int zr, err = 0;

	if (!buf)
		return -ENOMEM;
	if (inflateInit2(&zs, 15 + 32) != Z_OK) {
		free(buf);
		return -ENOMEM;
	}
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)(inlen > UINT32_MAX ? UINT32_MAX : inlen);
	for (;;) {
		if (len == cap) {
			if (cap >= REPLAY_MAX_INPUT) {
				replay_log(rc, CORR_LOG_ERROR, "gzip: more than %llu bytes",
					   (unsigned long long)REPLAY_MAX_INPUT);
				err = -EFBIG;
				goto cleanup;
			}
			cap *= 2;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				err = -ENOMEM;
				goto cleanup;
			}
			buf = nb;
		}
		zs.next_out = (Bytef *)buf + len;
		zs.avail_out = (uInt)(cap - len > UINT32_MAX ? UINT32_MAX : cap - len);
		zr = inflate(&zs, Z_NO_FLUSH);
		len = (size_t)((char *)zs.next_out - buf);
		if (zr == Z_STREAM_END) {
			size_t used = (size_t)((const char *)zs.next_in - in);

			if (used >= inlen)
				break;
			/* another gzip member follows */
			if (inflateReset(&zs) != Z_OK) {
				err = -EINVAL;
				goto cleanup;
			}
			zs.avail_in = (uInt)(inlen - used > UINT32_MAX ? UINT32_MAX : inlen - used);
			continue;
		}
		if (zr == Z_BUF_ERROR && zs.avail_in == 0 && zs.avail_out) {
			replay_log(rc, CORR_LOG_ERROR,
				   "gzip: truncated: input ends at compressed offset %zu "
				   "(uncompressed offset %zu) inside the stream",
				   (size_t)((const char *)zs.next_in - in), len);
			err = -EINVAL;
			goto cleanup;
		}
		if (zr != Z_OK && zr != Z_BUF_ERROR) {
			replay_log(rc, CORR_LOG_ERROR, "gzip: compressed offset %zu: %s",
				   (size_t)((const char *)zs.next_in - in),
				   zs.msg ? zs.msg : "corrupt data");
			err = -EINVAL;
			goto cleanup;
		}
		if (zs.avail_in == 0 && (size_t)((const char *)zs.next_in - in) < inlen)
			zs.avail_in = (uInt)(inlen - (size_t)((const char *)zs.next_in - in) >
							 UINT32_MAX ?
						     UINT32_MAX :
						     inlen - (size_t)((const char *)zs.next_in - in));
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	buf = NULL;
cleanup:
	inflateEnd(&zs);
	free(buf);
	return err;
}

static const char sqlite_magic[16] = "SQLite format 3";

/*
 * JSON lines when the first line is a whole JSON object with a string
 * "type" (our records); a Chrome trace starts an object that spans lines or
 * holds traceEvents.
 */
static enum corr_format detect_text(const char *buf, size_t len)
{
	const char *p = buf, *nl;
	json_t *o;
	enum corr_format f = CORR_FMT_KINETO;

	while (p < buf + len && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
		p++;
	if (p >= buf + len || (*p != '{' && *p != '['))
		return CORR_FMT_AUTO;
	if (*p == '[')
		return CORR_FMT_KINETO;
	nl = memchr(p, '\n', (size_t)(buf + len - p));
	if (!nl || nl - p > (1 << 20))
		return CORR_FMT_KINETO;
	o = json_loadb(p, (size_t)(nl - p), 0, NULL);
	if (o && json_is_string(json_object_get(o, "type")) && !json_object_get(o, "traceEvents"))
		f = CORR_FMT_JSONL;
	json_decref(o);
	return f;
}

int corr_replay_detect(const char *path, enum corr_format *out)
{
	unsigned char head[16] = { 0 };
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, head, sizeof(head));
	close(fd);
	if (n < 0)
		return -errno;
	if (n >= 16 && !memcmp(head, sqlite_magic, 16))
		*out = CORR_FMT_NSYS;
	else if (n >= 2 && head[0] == 0x1f && head[1] == 0x8b)
		*out = CORR_FMT_KINETO; /* refined after gunzip */
	else
		*out = CORR_FMT_AUTO;
	return 0;
}

static int run(struct replay_ctx *rc, const char *path, const char *buf, size_t len,
	       const struct corr_opts *copts)
{
	struct corr_opts o;
	enum corr_format f = rc->ro && rc->ro->format ? rc->ro->format : CORR_FMT_AUTO;
	int err;

	if (f == CORR_FMT_AUTO && buf)
		f = detect_text(buf, len);
	if (f == CORR_FMT_AUTO) {
		replay_log(rc, CORR_LOG_ERROR,
			   "%s: unknown format (not gzip, SQLite, a Chrome trace or JSON lines)",
			   path ? path : "buffer");
		return -EINVAL;
	}
	if (f == CORR_FMT_NSYS && !path) {
		replay_log(rc, CORR_LOG_ERROR, "nsys exports are read from a file");
		return -EINVAL;
	}
	rc->st->format = f;
	memset(&o, 0, sizeof(o));
	memcpy(&o, copts, copts->sz < sizeof(o) ? copts->sz : sizeof(o));
	o.sz = sizeof(o);
	/*
	 * A recording is read in file order, not time order: retire by
	 * capacity only, or kernels written before their launches would time
	 * out. Kineto GPU records carry the device as pid.
	 */
	if (!o.window_ns)
		o.window_ns = UINT64_MAX;
	if (f == CORR_FMT_KINETO)
		o.flags |= CORR_F_PID_FROM_LAUNCH;
	if (!o.log) {
		o.log = rc->ro ? rc->ro->log : NULL;
		o.log_ctx = rc->ro ? rc->ro->log_ctx : NULL;
	}
	rc->c = corr__new(&o);
	if (!rc->c)
		return -errno;
	switch (f) {
	case CORR_FMT_KINETO: err = kineto_read(rc, buf, len); break;
	case CORR_FMT_JSONL: err = jsonl_read(rc, buf, len); break;
	default: err = nsys_read(rc, path); break;
	}
	/* what was read stays emitted, also after an error */
	corr__flush(rc->c);
	rc->st->corr = *corr__counters(rc->c);
	corr__free(rc->c);
	rc->c = NULL;
	return err;
}

int corr_replay_buf(const char *buf, size_t len, const struct corr_opts *copts,
		    const struct corr_replay_opts *ropts, struct corr_replay_stats *stats)
{
	struct corr_replay_stats dummy;
	struct replay_ctx rc = { .ro = ropts, .st = stats ? stats : &dummy };

	memset(rc.st, 0, sizeof(*rc.st));
	rc.st->bytes = len;
	if (!copts || !copts->emit)
		return -EINVAL;
	return run(&rc, NULL, buf, len, copts);
}

int corr_replay_file(const char *path, const struct corr_opts *copts,
		     const struct corr_replay_opts *ropts, struct corr_replay_stats *stats)
{
	struct corr_replay_stats dummy;
	struct replay_ctx rc = { .ro = ropts, .st = stats ? stats : &dummy };
	enum corr_format f;
	char *raw = NULL, *text = NULL;
	size_t rawlen = 0, textlen = 0;
	int err;

	memset(rc.st, 0, sizeof(*rc.st));
	if (!copts || !copts->emit || !path)
		return -EINVAL;
	err = corr_replay_detect(path, &f);
	if (err) {
		replay_log(&rc, CORR_LOG_ERROR, "%s: %s", path, strerror(-err));
		return err;
	}
	if (f == CORR_FMT_NSYS || (ropts && ropts->format == CORR_FMT_NSYS)) {
		struct corr_replay_opts ro2 = { .sz = sizeof(ro2), .format = CORR_FMT_NSYS };
		struct stat sb;

		if (ropts)
			memcpy(&ro2, ropts, ropts->sz < sizeof(ro2) ? ropts->sz : sizeof(ro2));
		ro2.format = CORR_FMT_NSYS;
		rc.ro = &ro2;
		if (!stat(path, &sb))
			rc.st->bytes = (uint64_t)sb.st_size;
		return run(&rc, path, NULL, 0, copts);
	}
	err = read_all(path, &raw, &rawlen);
	if (err) {
		replay_log(&rc, CORR_LOG_ERROR, "%s: %s", path, strerror(-err));
		return err;
	}
	if (rawlen >= 2 && (unsigned char)raw[0] == 0x1f && (unsigned char)raw[1] == 0x8b) {
		err = gunzip(&rc, raw, rawlen, &text, &textlen);
		free(raw);
		raw = NULL;
		if (err)
			goto cleanup;
	} else {
		text = raw;
		textlen = rawlen;
		raw = NULL;
	}
	rc.st->bytes = textlen;
	err = run(&rc, path, text, textlen, copts);
cleanup:
	free(raw);
	free(text);
	return err;
}
