// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * reader.c - replay entry: load (and gunzip) the input, detect the format,
 * run the matching reader through a correlator, flush it.
 *
 * Inputs are read as a stream, once, from a single open(): a FIFO or a pipe
 * (`--replay <(zcat x.gz)`) works like a file, and the format is detected
 * from the bytes read, never by reopening or seeking. Only an SQLite export
 * in a regular file is left in place for SQLite to open; one from a pipe is
 * opened from memory.
 *
 * Inputs are loaded whole: the pull scanner keeps pointers into the buffer
 * and costs nothing more. Peak memory is the input, plus its uncompressed
 * text for gzip (at most REPLAY_GZIP_RATIO times the compressed size plus
 * REPLAY_GZIP_SLACK: a gzip bomb is refused, not inflated), plus the
 * correlator's and the readers' bounded state (docs/operations.md).
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
/*
 * gzip: the uncompressed text may be at most this many times the compressed
 * input plus the slack. Real traces expand 9-19x (../shared/data); gzip's
 * own limit is ~1032x, reached by a file of one repeated byte.
 */
#define REPLAY_GZIP_RATIO 64
#define REPLAY_GZIP_SLACK (64ULL << 20)
#define READ_CHUNK (16u << 20) /* read() and inflate() steps: a stop is seen between them */

const char *corr_format_name(enum corr_format f)
{
	switch (f) {
	case CORR_FMT_KINETO:
		return "kineto";
	case CORR_FMT_NSYS:
		return "nsys-sqlite";
	case CORR_FMT_JSONL:
		return "jsonl";
	default:
		return "auto";
	}
}

/* the caller's options at their full size (older callers pass a smaller sz) */
static void ropts_copy(struct corr_replay_opts *dst, const struct corr_replay_opts *src)
{
	memset(dst, 0, sizeof(*dst));
	if (src)
		memcpy(dst, src, src->sz < sizeof(*dst) ? src->sz : sizeof(*dst));
	dst->sz = sizeof(*dst);
}

static int stop_err(const struct replay_ctx *rc)
{
	replay_log(rc, CORR_LOG_WARN, "stopped on request: the input was not read to its end");
	return -EINTR;
}

/* open once; a FIFO blocks here until a writer comes, or a signal stops it */
static int open_input(const struct replay_ctx *rc, const char *path)
{
	for (;;) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd >= 0)
			return fd;
		if (errno != EINTR)
			return -errno;
		if (replay_stopped(rc))
			return -EINTR;
	}
}

/* read to EOF (a regular file, a FIFO, a pipe); *out is NUL-terminated */
static int read_fd(const struct replay_ctx *rc, int fd, const struct stat *sb, char **out,
		   size_t *len)
{
	size_t cap = S_ISREG(sb->st_mode) && sb->st_size > 0 ? (size_t)sb->st_size : 1 << 20;
	size_t off = 0;
	char *buf, *nb;

	if (cap > REPLAY_MAX_INPUT)
		cap = REPLAY_MAX_INPUT;
	buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		size_t want = cap - off < READ_CHUNK ? cap - off : READ_CHUNK;
		ssize_t n;

		if (replay_stopped(rc)) {
			free(buf);
			return -EINTR;
		}
		if (!want) {
			/* full: a pipe, or a file that grew; one byte more tells */
			if (cap >= REPLAY_MAX_INPUT) {
				char probe;

				n = read(fd, &probe, 1);
				if (n == 0)
					break;
				replay_log(rc, CORR_LOG_ERROR,
					   "input larger than %llu bytes: refused",
					   (unsigned long long)REPLAY_MAX_INPUT);
				free(buf);
				return -EFBIG;
			}
			cap = cap * 2 > REPLAY_MAX_INPUT ? REPLAY_MAX_INPUT : cap * 2;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			continue;
		}
		n = read(fd, buf + off, want);
		if (n < 0 && errno == EINTR)
			continue; /* the stop flag is checked above */
		if (n < 0) {
			int err = -errno;

			free(buf);
			return err;
		}
		if (!n)
			break;
		off += (size_t)n;
	}
	buf[off] = '\0';
	*out = buf;
	*len = off;
	return 0;
}

/* gunzip a whole buffer (concatenated members too); errors name the offset */
static int gunzip(const struct replay_ctx *rc, const char *in, size_t inlen, char **out,
		  size_t *outlen)
{
	z_stream zs = {0};
	uint64_t limit = (uint64_t)inlen * REPLAY_GZIP_RATIO + REPLAY_GZIP_SLACK;
	size_t cap = inlen * 6 + 4096, len = 0;
	char *buf, *nb;
	int zr, err = 0;

	if (limit > REPLAY_MAX_INPUT)
		limit = REPLAY_MAX_INPUT;
	if (cap > limit)
		cap = (size_t)limit;
	buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	if (inflateInit2(&zs, 15 + 32) != Z_OK) {
		free(buf);
		return -ENOMEM;
	}
	zs.next_in = (Bytef *)in;
	zs.avail_in = (uInt)(inlen > READ_CHUNK ? READ_CHUNK : inlen);
	for (;;) {
		size_t used;

		if (replay_stopped(rc)) {
			err = -EINTR;
			goto cleanup;
		}
		if (len == cap) {
			if (cap >= limit) {
				replay_log(
				    rc, CORR_LOG_ERROR,
				    "gzip: expands beyond %llu bytes (%dx its %zu compressed "
				    "bytes + %llu MiB): refused",
				    (unsigned long long)limit, REPLAY_GZIP_RATIO, inlen,
				    (unsigned long long)(REPLAY_GZIP_SLACK >> 20));
				err = -EFBIG;
				goto cleanup;
			}
			cap = (uint64_t)cap * 2 > limit ? (size_t)limit : cap * 2;
			nb = realloc(buf, cap + 1);
			if (!nb) {
				err = -ENOMEM;
				goto cleanup;
			}
			buf = nb;
		}
		zs.next_out = (Bytef *)buf + len;
		zs.avail_out = (uInt)(cap - len > READ_CHUNK ? READ_CHUNK : cap - len);
		zr = inflate(&zs, Z_NO_FLUSH);
		len = (size_t)((char *)zs.next_out - buf);
		used = (size_t)((const char *)zs.next_in - in);
		if (zr == Z_STREAM_END) {
			if (used >= inlen)
				break;
			/* another gzip member follows */
			if (inflateReset(&zs) != Z_OK) {
				err = -EINVAL;
				goto cleanup;
			}
			zs.avail_in = (uInt)(inlen - used > READ_CHUNK ? READ_CHUNK : inlen - used);
			continue;
		}
		if (zr == Z_BUF_ERROR && used >= inlen && zs.avail_out) {
			replay_log(rc, CORR_LOG_ERROR,
				   "gzip: truncated: input ends at compressed offset %zu "
				   "(uncompressed offset %zu) inside the stream",
				   used, len);
			err = -EINVAL;
			goto cleanup;
		}
		if (zr != Z_OK && zr != Z_BUF_ERROR) {
			replay_log(rc, CORR_LOG_ERROR, "gzip: compressed offset %zu: %s", used,
				   zs.msg ? zs.msg : "corrupt data");
			err = -EINVAL;
			goto cleanup;
		}
		if (zs.avail_in == 0 && used < inlen)
			zs.avail_in = (uInt)(inlen - used > READ_CHUNK ? READ_CHUNK : inlen - used);
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

static bool is_gzip(const char *b, size_t n)
{
	return n >= 2 && (unsigned char)b[0] == 0x1f && (unsigned char)b[1] == 0x8b;
}

static bool is_sqlite(const char *b, size_t n)
{
	return n >= 16 && !memcmp(b, sqlite_magic, 16);
}

/* the first byte from p on that is not white space; end if none */
static const char *skip_space(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
		p++;
	return p;
}

/*
 * JSON lines when the first line is a whole JSON object, unless it holds
 * traceEvents, or is all there is and has no string "type" (a one-line
 * Chrome trace); a Chrome trace otherwise (its object spans lines). Whether the lines are this
 * agent's records (a string "type") is the JSON-lines reader's to say. A UTF-8 BOM is skipped.
 */
static enum corr_format detect_text(const char *buf, size_t len)
{
	const char *p = buf + corr_bom_len(buf, len), *nl, *q;
	json_t *o;
	enum corr_format f = CORR_FMT_KINETO;

	p = skip_space(p, buf + len);
	if (p >= buf + len || (*p != '{' && *p != '['))
		return CORR_FMT_AUTO;
	if (*p == '[')
		return CORR_FMT_KINETO;
	nl = memchr(p, '\n', (size_t)(buf + len - p));
	if (!nl || nl - p > (1 << 20))
		return CORR_FMT_KINETO;
	q = skip_space(nl, buf + len);
	o = json_loadb(p, (size_t)(nl - p), 0, NULL);
	/* one line that is no record of ours: a document, not a stream of records */
	if (json_is_object(o) && !json_object_get(o, "traceEvents") &&
	    (json_is_string(json_object_get(o, "type")) || q < buf + len))
		f = CORR_FMT_JSONL;
	json_decref(o);
	return f;
}

int corr_replay_detect(const char *path, enum corr_format *out)
{
	char head[16] = {0};
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	n = read(fd, head, sizeof(head));
	close(fd);
	if (n < 0)
		return -errno;
	if (is_sqlite(head, (size_t)n))
		*out = CORR_FMT_NSYS;
	else if (is_gzip(head, (size_t)n))
		*out = CORR_FMT_KINETO; /* refined after gunzip */
	else
		*out = CORR_FMT_AUTO;
	return 0;
}

static int run(struct replay_ctx *rc, const char *path, const char *buf, size_t len,
	       const struct corr_opts *copts)
{
	struct corr_opts o;
	enum corr_format f = rc->ro->format;
	int err;

	if (f == CORR_FMT_AUTO && buf)
		f = is_sqlite(buf, len) ? CORR_FMT_NSYS : detect_text(buf, len);
	if (f == CORR_FMT_AUTO && !buf && path)
		f = CORR_FMT_NSYS;
	if (f == CORR_FMT_AUTO) {
		replay_log(rc, CORR_LOG_ERROR,
			   /* nothing but white space: an empty file, a pipe closed at once */
			   buf && skip_space(buf, buf + len) == buf + len
			       ? "%s: empty: no records to replay"
			       : "%s: unknown format (not gzip, SQLite, a Chrome trace or "
				 "JSON lines)",
			   path ? path : "buffer");
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
		o.log = rc->ro->log;
		o.log_ctx = rc->ro->log_ctx;
	}
	rc->c = corr__new(&o);
	if (!rc->c)
		return -errno;
	switch (f) {
	case CORR_FMT_KINETO:
		err = kineto_read(rc, buf, len);
		break;
	case CORR_FMT_JSONL:
		err = jsonl_read(rc, buf, len);
		break;
	default:
		err = nsys_read(rc, path, buf, len);
		break;
	}
	if (err == -EINTR)
		stop_err(rc);
	/* what was read stays emitted, also after an error */
	corr__flush(rc->c);
	rc->st->corr = *corr__counters(rc->c);
	corr__free(rc->c);
	rc->c = NULL;
	return err;
}

/* a buffer as read: gunzipped first when it is gzip (not for SQLite) */
static int load_buf(struct replay_ctx *rc, char *raw, size_t rawlen, bool owned,
		    struct corr_input *in)
{
	int err;

	memset(in, 0, sizeof(*in));
	if (rc->ro->format == CORR_FMT_NSYS || !is_gzip(raw, rawlen)) {
		in->buf = raw;
		in->len = rawlen;
		in->owned = owned;
		return 0;
	}
	err = gunzip(rc, raw, rawlen, &in->buf, &in->len);
	if (owned)
		free(raw);
	if (err == -EINTR)
		return stop_err(rc);
	in->owned = !err;
	return err;
}

int corr_replay_load(const char *path, const struct corr_replay_opts *ropts, struct corr_input *in)
{
	struct corr_replay_stats dummy;
	struct corr_replay_opts ro;
	struct replay_ctx rc = {.ro = &ro, .st = &dummy};
	struct stat sb;
	char head[16];
	char *raw = NULL;
	size_t rawlen = 0;
	int fd, err;

	ropts_copy(&ro, ropts);
	memset(in, 0, sizeof(*in));
	if (!path)
		return -EINVAL;
	fd = open_input(&rc, path);
	if (fd < 0) {
		if (fd == -EINTR)
			return stop_err(&rc);
		replay_log(&rc, CORR_LOG_ERROR, "%s: %s", path, strerror(-fd));
		return fd;
	}
	if (fstat(fd, &sb)) {
		err = -errno;
		close(fd);
		replay_log(&rc, CORR_LOG_ERROR, "%s: %s", path, strerror(-err));
		return err;
	}
	/* an SQLite export in a regular file: SQLite reads it in place */
	if (S_ISREG(sb.st_mode) &&
	    (ro.format == CORR_FMT_NSYS ||
	     (pread(fd, head, sizeof(head), 0) == sizeof(head) && is_sqlite(head, sizeof(head))))) {
		close(fd);
		in->in_place = true;
		in->len = (size_t)sb.st_size;
		return 0;
	}
	err = read_fd(&rc, fd, &sb, &raw, &rawlen);
	close(fd);
	if (err == -EINTR)
		return stop_err(&rc);
	if (err) {
		if (err != -EFBIG)
			replay_log(&rc, CORR_LOG_ERROR, "%s: %s", path, strerror(-err));
		return err;
	}
	return load_buf(&rc, raw, rawlen, true, in);
}

void corr_input_release(struct corr_input *in)
{
	if (in->owned)
		free(in->buf);
	memset(in, 0, sizeof(*in));
}

int corr_replay_input(const char *path, const struct corr_input *in, const struct corr_opts *copts,
		      const struct corr_replay_opts *ropts, struct corr_replay_stats *stats)
{
	struct corr_replay_stats dummy;
	struct corr_replay_opts ro;
	struct replay_ctx rc = {.ro = &ro, .st = stats ? stats : &dummy};

	ropts_copy(&ro, ropts);
	memset(rc.st, 0, sizeof(*rc.st));
	rc.st->bytes = in->len;
	if (!copts || !copts->emit || (!in->buf && !in->in_place) || (in->in_place && !path))
		return -EINVAL;
	if (in->in_place)
		ro.format = CORR_FMT_NSYS;
	return run(&rc, path, in->in_place ? NULL : in->buf, in->in_place ? 0 : in->len, copts);
}

int corr_replay_buf(const char *buf, size_t len, const struct corr_opts *copts,
		    const struct corr_replay_opts *ropts, struct corr_replay_stats *stats)
{
	struct corr_replay_stats dummy;
	struct corr_replay_opts ro;
	struct replay_ctx rc = {.ro = &ro, .st = stats ? stats : &dummy};
	struct corr_input in;
	int err;

	ropts_copy(&ro, ropts);
	memset(rc.st, 0, sizeof(*rc.st));
	rc.st->bytes = len;
	if (!copts || !copts->emit || (!buf && len))
		return -EINVAL;
	err = load_buf(&rc, (char *)(buf ? buf : ""), len, false, &in);
	if (err)
		return err;
	err = corr_replay_input(NULL, &in, copts, ropts, stats);
	corr_input_release(&in);
	return err;
}

int corr_replay_file(const char *path, const struct corr_opts *copts,
		     const struct corr_replay_opts *ropts, struct corr_replay_stats *stats)
{
	struct corr_input in;
	int err;

	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (!copts || !copts->emit || !path)
		return -EINVAL;
	err = corr_replay_load(path, ropts, &in);
	if (err)
		return err;
	err = corr_replay_input(path, &in, copts, ropts, stats);
	corr_input_release(&in);
	return err;
}
