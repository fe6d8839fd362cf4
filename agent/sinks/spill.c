// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * spill.c - the Kafka sink's bounded on-disk buffer (interface: spill.h).
 *
 * A spill is a directory of append-only segment files, read in ascending
 * id order. The tail segment takes new records until it reaches the segment
 * size, then it is sealed (fdatasync) and a new one starts. A "front"
 * segment gets an id below every other one, so what it holds is read first.
 *
 * Segment file <dir>/<id, 16 hex digits>.seg, native byte order (a spill
 * never leaves its host):
 *
 *   header, 32 bytes
 *   0        8        16         24        28       32
 *   +--------+--------+----------+---------+--------+
 *   | magic  | id     | consumed | version | zero   |
 *   +--------+--------+----------+---------+--------+
 *   magic "ITSPILL1"; consumed: offset of the first record not yet
 *   confirmed delivered, rewritten in place (8 bytes, one sector).
 *
 *   then records, each:
 *   0     4       8       12       14    15     16
 *   +-----+-------+-------+--------+-----+------+-----+-------+
 *   | crc | magic | len   | keylen | cls | zero | key | value |
 *   +-----+-------+-------+--------+-----+------+-----+-------+
 *   crc: zlib crc32 of bytes 4 .. end of value; magic "ITRC".
 *
 * A record whose header, lengths or crc do not check out ends the segment:
 * whatever follows (a write torn by a crash) is skipped and counted.
 *
 * Space is reclaimed a segment at a time: a segment is deleted once every
 * record in it is confirmed; eviction rewrites one segment without its least
 * important records (write to .tmp, fdatasync, rename).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <zlib.h>

#include "spill.h"
#include "util.h"

#define SEG_MAGIC "ITSPILL1"
#define SEG_VERSION 1
#define REC_MAGIC 0x43525449u /* "ITRC" */
#define HDR_SZ 32
#define RHDR_SZ 16
#define OFF_CONSUMED 16
#define WBUF_SZ (64 * 1024)
#define RBUF_MIN (256 * 1024)
#define FIRST_ID (1ull << 40) /* room below for front segments */

struct seg_hdr {
	char magic[8];
	uint64_t id;
	uint64_t consumed;
	uint32_t version;
	uint32_t zero;
};
_Static_assert(sizeof(struct seg_hdr) == HDR_SZ, "segment header layout");

struct rec_hdr {
	uint32_t crc;
	uint32_t magic;
	uint32_t len;
	uint16_t key_len;
	uint8_t cls;
	uint8_t zero;
};
_Static_assert(sizeof(struct rec_hdr) == RHDR_SZ, "record header layout");

struct seg {
	uint64_t id;
	uint64_t end;		     /* end of the valid records, buffered ones included */
	uint64_t disk;		     /* bytes the file takes (more than end after a torn tail) */
	uint64_t cons;		     /* records before this offset are done */
	uint64_t read;		     /* records before this offset were handed out */
	uint64_t n[REC_CLASS_COUNT]; /* records in [cons, end), by class */
	uint64_t unread;	     /* records in [read, end) */
	uint64_t outstanding;	     /* handed out, not done */
	bool dirty;		     /* cons not written to the header yet */
	bool front;		     /* being prepended to: not read before spill_prepend_end() */
	bool open;		     /* a writer appends to it */
};

struct writer {
	uint64_t id; /* 0: none */
	int fd;
	uint64_t flushed; /* file offset where buf goes */
	char *buf;
	size_t len;
	bool need_sync;
};

struct ticket {
	uint64_t seg;
	uint64_t end;
	uint8_t cls;
	bool done;
};

struct spill {
	char *dir;
	int dir_fd;
	uint64_t max_bytes, seg_bytes;
	uint64_t bytes;	  /* sum of seg.disk */
	uint64_t unread;  /* sum of seg.unread */
	struct seg *segs; /* ascending id */
	int n_segs;
	size_t cap_segs;
	uint64_t next_id;
	struct writer tail, front;
	/* reader: a window of one segment file */
	uint64_t rd_seg;
	int rd_fd;
	char *rd_buf;
	size_t rd_cap, rd_len;
	uint64_t rd_off;
	bool peeked;
	uint64_t peek_seg, peek_end;
	uint8_t peek_cls;
	/* handed-out records, tickets [tk_head, tk_next) */
	struct ticket *tk;
	uint64_t tk_cap, tk_head, tk_next;
	bool dir_dirty;
	struct spill_stats st;
};

static void seg_path(const struct spill *sp, uint64_t id, const char *sfx, char *buf, size_t sz)
{
	snprintf(buf, sz, "%s/%016" PRIx64 ".seg%s", sp->dir, id, sfx);
}

static struct seg *seg_find(struct spill *sp, uint64_t id)
{
	int lo = 0, hi = sp->n_segs - 1;

	while (lo <= hi) {
		int mid = (lo + hi) / 2;

		if (sp->segs[mid].id == id)
			return &sp->segs[mid];
		if (sp->segs[mid].id < id)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

static struct seg *seg_insert(struct spill *sp, uint64_t id)
{
	int i;

	if (grow_array((void **)&sp->segs, &sp->cap_segs, sp->n_segs, sizeof(*sp->segs), 16))
		return NULL;
	for (i = sp->n_segs; i > 0 && sp->segs[i - 1].id > id; i--)
		;
	memmove(&sp->segs[i + 1], &sp->segs[i], (sp->n_segs - i) * sizeof(*sp->segs));
	sp->n_segs++;
	memset(&sp->segs[i], 0, sizeof(*sp->segs));
	sp->segs[i].id = id;
	return &sp->segs[i];
}

static void seg_remove(struct spill *sp, struct seg *s)
{
	int i = s - sp->segs;

	sp->bytes -= s->disk;
	sp->unread -= s->unread;
	memmove(&sp->segs[i], &sp->segs[i + 1], (sp->n_segs - i - 1) * sizeof(*sp->segs));
	sp->n_segs--;
}

static void io_error(struct spill *sp, const char *what, uint64_t id, int err)
{
	sp->st.io_errors++;
	pr_err("spill %s: %s %016" PRIx64 ": %s", sp->dir, what, id, strerror(err));
}

/* bytes read (short at end of file) or -errno */
static ssize_t pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, off + got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (!n)
			break;
		got += n;
	}
	return got;
}

static struct writer *writer_of(struct spill *sp, const struct seg *s)
{
	if (sp->tail.id == s->id)
		return &sp->tail;
	if (sp->front.id == s->id)
		return &sp->front;
	return NULL;
}

static int writer_flush(struct spill *sp, struct writer *w)
{
	int err;

	if (!w->id || !w->len)
		return 0;
	err = write_all(w->fd, w->buf, w->len, w->flushed);
	if (err) {
		io_error(sp, "write", w->id, -err);
		return err;
	}
	w->flushed += w->len;
	w->len = 0;
	w->need_sync = true;
	return 0;
}

/* seal: flush, fdatasync, close */
static int writer_close(struct spill *sp, struct writer *w)
{
	struct seg *s;
	int err;

	if (!w->id)
		return 0;
	err = writer_flush(sp, w);
	s = seg_find(sp, w->id);
	if (s && s->dirty) {
		uint64_t c = s->cons;

		if (!write_all(w->fd, &c, sizeof(c), OFF_CONSUMED))
			s->dirty = false;
	}
	if (fdatasync(w->fd) && !err) {
		err = -errno;
		io_error(sp, "fdatasync", w->id, -err);
	}
	close(w->fd);
	if (s) {
		s->open = false;
		s->front = false;
	}
	w->id = 0;
	w->fd = -1;
	w->len = 0;
	w->need_sync = false;
	return err;
}

static void reader_reset(struct spill *sp)
{
	if (sp->rd_fd >= 0)
		close(sp->rd_fd);
	sp->rd_fd = -1;
	sp->rd_seg = 0;
	sp->rd_len = 0;
	sp->peeked = false;
}

/* delete a segment whose records are all done */
static void seg_retire(struct spill *sp, struct seg *s)
{
	char path[PATH_MAX];
	struct writer *w = writer_of(sp, s);

	if (s->outstanding || s->cons < s->end || s->front)
		return;
	if (w) {
		if (w->len)
			return;
		close(w->fd);
		w->id = 0;
		w->fd = -1;
	}
	if (sp->rd_seg == s->id)
		reader_reset(sp);
	seg_path(sp, s->id, "", path, sizeof(path));
	if (unlink(path) && errno != ENOENT)
		io_error(sp, "unlink", s->id, errno);
	sp->dir_dirty = true;
	seg_remove(sp, s);
}

static int seg_create(struct spill *sp, struct writer *w, uint64_t id, bool front)
{
	struct seg_hdr h = {
	    .magic = SEG_MAGIC, .id = id, .consumed = HDR_SZ, .version = SEG_VERSION};
	char path[PATH_MAX];
	struct seg *s;
	int fd, err;

	seg_path(sp, id, "", path, sizeof(path));
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		err = -errno;
		io_error(sp, "create", id, -err);
		return err;
	}
	err = write_all(fd, &h, sizeof(h), 0);
	if (err) {
		io_error(sp, "write header", id, -err);
		goto fail;
	}
	s = seg_insert(sp, id);
	if (!s) {
		err = -ENOMEM;
		goto fail;
	}
	s->end = s->disk = s->cons = s->read = HDR_SZ;
	s->front = front;
	s->open = true;
	sp->bytes += HDR_SZ;
	sp->dir_dirty = true;
	w->id = id;
	w->fd = fd;
	w->flushed = HDR_SZ;
	w->len = 0;
	w->need_sync = true;
	return 0;
fail:
	close(fd);
	unlink(path);
	return err;
}

static bool rec_hdr_ok(const struct rec_hdr *h)
{
	return h->magic == REC_MAGIC && h->len <= SPILL_MAX_VALUE && h->cls < REC_CLASS_COUNT &&
	       !h->zero;
}

static uint32_t rec_crc(const struct rec_hdr *h, const char *key, const char *val)
{
	uLong c = crc32(0L, (const Bytef *)h + 4, RHDR_SZ - 4);

	c = crc32(c, (const Bytef *)key, h->key_len);
	return crc32(c, (const Bytef *)val, h->len);
}

/* make [off, off + need) of segment s readable at *p: 0, -ENODATA past the file, -errno */
static int reader_load(struct spill *sp, struct seg *s, uint64_t off, size_t need, const char **p)
{
	struct writer *w;
	ssize_t n;

	if (sp->rd_seg != s->id) {
		char path[PATH_MAX];

		reader_reset(sp);
		seg_path(sp, s->id, "", path, sizeof(path));
		sp->rd_fd = open(path, O_RDONLY | O_CLOEXEC);
		if (sp->rd_fd < 0) {
			int err = -errno;

			io_error(sp, "open", s->id, -err);
			return err;
		}
		sp->rd_seg = s->id;
	}
	if (off >= sp->rd_off && off + need <= sp->rd_off + sp->rd_len) {
		*p = sp->rd_buf + (off - sp->rd_off);
		return 0;
	}
	w = writer_of(sp, s);
	if (w && off + need > w->flushed && writer_flush(sp, w))
		return -EIO;
	if (sp->rd_cap < need || !sp->rd_buf) {
		size_t cap = need > RBUF_MIN ? need : RBUF_MIN;
		char *nb = realloc(sp->rd_buf, cap);

		if (!nb)
			return -ENOMEM;
		sp->rd_buf = nb;
		sp->rd_cap = cap;
	}
	n = pread_all(sp->rd_fd, sp->rd_buf, sp->rd_cap, off);
	if (n < 0) {
		io_error(sp, "read", s->id, (int)-n);
		sp->rd_len = 0;
		return (int)n;
	}
	sp->rd_off = off;
	sp->rd_len = n;
	if ((size_t)n < need)
		return -ENODATA;
	*p = sp->rd_buf;
	return 0;
}

/* the record at s->read: 0, -EBADMSG when it does not check out, -errno */
static int parse_at(struct spill *sp, struct seg *s, struct spill_rec *r, uint64_t *rsz)
{
	struct rec_hdr h;
	const char *p;
	uint64_t total;
	int err;

	if (s->read + RHDR_SZ > s->end)
		return -EBADMSG;
	err = reader_load(sp, s, s->read, RHDR_SZ, &p);
	if (err)
		return err == -ENODATA ? -EBADMSG : err;
	memcpy(&h, p, sizeof(h));
	total = RHDR_SZ + (uint64_t)h.key_len + h.len;
	if (!rec_hdr_ok(&h) || s->read + total > s->end)
		return -EBADMSG;
	err = reader_load(sp, s, s->read, total, &p);
	if (err)
		return err == -ENODATA ? -EBADMSG : err;
	if (rec_crc(&h, p + RHDR_SZ, p + RHDR_SZ + h.key_len) != h.crc)
		return -EBADMSG;
	r->cls = h.cls;
	r->key_len = h.key_len;
	r->key = h.key_len ? p + RHDR_SZ : NULL;
	r->val = p + RHDR_SZ + h.key_len;
	r->len = h.len;
	*rsz = total;
	return 0;
}

/* a record in the middle of a segment went bad after it was checked at open */
static void seg_truncate_at_read(struct spill *sp, struct seg *s)
{
	sp->st.torn++;
	sp->st.torn_bytes += s->end - s->read;
	pr_warn("spill %s: segment %016" PRIx64 ": bad record at offset %" PRIu64
		", skipping %" PRIu64 " records after it",
		sp->dir, s->id, s->read, s->unread);
	sp->unread -= s->unread;
	s->unread = 0;
	s->end = s->read;
	/* what stays counted: the records handed out and not done */
	memset(s->n, 0, sizeof(s->n));
	for (uint64_t t = sp->tk_head; t < sp->tk_next; t++) {
		struct ticket *k = &sp->tk[t % sp->tk_cap];

		if (k->seg == s->id && !k->done)
			s->n[k->cls]++;
	}
}

int spill_peek(struct spill *sp, struct spill_rec *r)
{
	uint64_t rsz;
	int i, err;

	for (;;) {
		struct seg *s = NULL;

		for (i = 0; i < sp->n_segs; i++)
			if (!sp->segs[i].front && sp->segs[i].read < sp->segs[i].end) {
				s = &sp->segs[i];
				break;
			}
		if (!s)
			return -ENOENT;
		err = parse_at(sp, s, r, &rsz);
		if (err == -EBADMSG) {
			seg_truncate_at_read(sp, s);
			seg_retire(sp, s);
			continue;
		}
		if (err)
			return err;
		sp->peeked = true;
		sp->peek_seg = s->id;
		sp->peek_end = s->read + rsz;
		sp->peek_cls = r->cls;
		r->ticket = sp->tk_next;
		return 0;
	}
}

uint64_t spill_take(struct spill *sp)
{
	struct ticket *k;
	struct seg *s;

	if (!sp->peeked)
		return 0;
	s = seg_find(sp, sp->peek_seg);
	if (!s)
		return 0;
	if (sp->tk_next - sp->tk_head == sp->tk_cap) {
		uint64_t cap = sp->tk_cap ? 2 * sp->tk_cap : 1024;
		struct ticket *n = malloc(cap * sizeof(*n));

		if (!n)
			return 0;
		for (uint64_t t = sp->tk_head; t < sp->tk_next; t++)
			n[t % cap] = sp->tk[t % sp->tk_cap];
		free(sp->tk);
		sp->tk = n;
		sp->tk_cap = cap;
	}
	k = &sp->tk[sp->tk_next % sp->tk_cap];
	*k = (struct ticket){.seg = s->id, .end = sp->peek_end, .cls = sp->peek_cls};
	s->read = sp->peek_end;
	s->outstanding++;
	s->unread--;
	sp->unread--;
	sp->st.replayed++;
	sp->peeked = false;
	return sp->tk_next++;
}

void spill_done(struct spill *sp, uint64_t ticket)
{
	if (ticket < sp->tk_head || ticket >= sp->tk_next)
		return;
	sp->tk[ticket % sp->tk_cap].done = true;
	while (sp->tk_head < sp->tk_next && sp->tk[sp->tk_head % sp->tk_cap].done) {
		struct ticket *k = &sp->tk[sp->tk_head % sp->tk_cap];
		struct seg *s = seg_find(sp, k->seg);

		sp->tk_head++;
		if (!s)
			continue;
		if (k->end > s->cons)
			s->cons = k->end;
		s->outstanding--;
		if (s->n[k->cls])
			s->n[k->cls]--;
		s->dirty = true;
		seg_retire(sp, s);
	}
}

/* rewrite segment s without the records of priority <= prio */
static int seg_compact(struct spill *sp, struct seg *s, int prio)
{
	struct seg_hdr h = {
	    .magic = SEG_MAGIC, .id = s->id, .consumed = HDR_SZ, .version = SEG_VERSION};
	uint64_t evicted[REC_CLASS_COUNT] = {}, kept[REC_CLASS_COUNT] = {}, n_evicted = 0;
	char path[PATH_MAX], tmp[PATH_MAX];
	struct writer *w = writer_of(sp, s);
	size_t len = s->end - s->cons, in = 0, out = 0;
	char *buf = NULL;
	int fd = -1, dfd = -1, err;
	ssize_t n;

	if (w && writer_flush(sp, w))
		return -EIO;
	seg_path(sp, s->id, "", path, sizeof(path));
	seg_path(sp, s->id, ".tmp", tmp, sizeof(tmp));
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
		io_error(sp, "open", s->id, -err);
		goto cleanup;
	}
	n = pread_all(fd, buf, len, s->cons);
	if (n < 0 || (size_t)n != len) {
		err = n < 0 ? (int)n : -EIO;
		io_error(sp, "read", s->id, -err);
		goto cleanup;
	}
	/* squeeze the kept records to the front of buf (checked at open or written by us) */
	while (in + RHDR_SZ <= len) {
		struct rec_hdr rh;
		size_t total;

		memcpy(&rh, buf + in, sizeof(rh));
		total = RHDR_SZ + (size_t)rh.key_len + rh.len;
		if (!rec_hdr_ok(&rh) || in + total > len)
			break;
		if (rec_class_prio(rh.cls) <= prio) {
			evicted[rh.cls]++;
			n_evicted++;
		} else {
			memmove(buf + out, buf + in, total);
			out += total;
			kept[rh.cls]++;
		}
		in += total;
	}
	dfd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (dfd < 0) {
		err = -errno;
		io_error(sp, "create", s->id, -err);
		goto cleanup;
	}
	err = write_all(dfd, &h, sizeof(h), 0);
	if (!err)
		err = write_all(dfd, buf, out, HDR_SZ);
	if (!err && fdatasync(dfd))
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err) {
		io_error(sp, "rewrite", s->id, -err);
		unlink(tmp);
		goto cleanup;
	}
	if (w) {
		close(w->fd);
		w->fd = dfd;
		w->flushed = HDR_SZ + out;
		dfd = -1;
	}
	if (sp->rd_seg == s->id)
		reader_reset(sp);
	sp->peeked = false;
	sp->dir_dirty = true;
	for (int c = 0; c < REC_CLASS_COUNT; c++) {
		sp->st.evicted[c] += evicted[c];
		s->n[c] = kept[c];
	}
	s->unread -= n_evicted;
	sp->unread -= n_evicted;
	sp->bytes -= s->disk;
	s->end = s->disk = HDR_SZ + out;
	sp->bytes += s->disk;
	s->cons = s->read = HDR_SZ;
	s->dirty = false;
	if (!out && !w)
		seg_retire(sp, s);
cleanup:
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	free(buf);
	return err;
}

/* room for need more bytes, evicting records less important than prio */
static int make_room(struct spill *sp, uint64_t need, int prio)
{
	while (sp->bytes + need > sp->max_bytes) {
		struct seg *best = NULL;
		int best_p = prio, err;

		/* the least important class any evictable segment holds, oldest first */
		for (int i = 0; i < sp->n_segs; i++) {
			struct seg *s = &sp->segs[i];

			if (s->outstanding || s->front)
				continue;
			for (int c = 0; c < REC_CLASS_COUNT; c++)
				if (s->n[c] && rec_class_prio(c) < best_p) {
					best_p = rec_class_prio(c);
					best = s;
				}
		}
		if (!best)
			return -ENOSPC;
		err = seg_compact(sp, best, best_p);
		if (err)
			return err;
	}
	return 0;
}

static int put(struct spill *sp, bool front, enum rec_class cls, const char *key, size_t key_len,
	       const char *val, size_t len)
{
	struct writer *w = front ? &sp->front : &sp->tail;
	struct rec_hdr h = {.magic = REC_MAGIC, .len = len, .key_len = key_len, .cls = cls};
	uint64_t rsz = RHDR_SZ + key_len + len;
	struct seg *s;
	int err;

	if (cls >= REC_CLASS_COUNT)
		return -EINVAL;
	if (len > SPILL_MAX_VALUE || key_len > UINT16_MAX || rsz + HDR_SZ > sp->max_bytes) {
		sp->st.refused[cls]++;
		return -E2BIG;
	}
	if (!front && w->id) {
		s = seg_find(sp, w->id);
		if (s && s->end > HDR_SZ && s->end + rsz > sp->seg_bytes)
			writer_close(sp, w);
	}
	err = make_room(sp, rsz + (w->id ? 0 : HDR_SZ), rec_class_prio(cls));
	if (err == -ENOSPC)
		sp->st.refused[cls]++;
	if (err)
		return err;
	if (!w->id) {
		uint64_t id = sp->next_id++;

		if (front && sp->n_segs)
			id = sp->segs[0].id - 1;
		err = seg_create(sp, w, id, front);
		if (err)
			return err;
	}
	s = seg_find(sp, w->id);
	if (!s)
		return -EIO;
	h.crc = rec_crc(&h, key, val);
	if (w->len + rsz > WBUF_SZ && (err = writer_flush(sp, w)))
		return err;
	if (rsz > WBUF_SZ) {
		struct iovec iov[3] = {{&h, RHDR_SZ}, {(void *)key, key_len}, {(void *)val, len}};
		ssize_t n = pwritev(w->fd, iov, 3, w->flushed);

		if (n != (ssize_t)rsz) {
			err = n < 0 ? -errno : -EIO;
			io_error(sp, "write", w->id, -err);
			return err;
		}
		w->flushed += rsz;
		w->need_sync = true;
	} else {
		memcpy(w->buf + w->len, &h, RHDR_SZ);
		memcpy(w->buf + w->len + RHDR_SZ, key, key_len);
		memcpy(w->buf + w->len + RHDR_SZ + key_len, val, len);
		w->len += rsz;
	}
	s->end += rsz;
	s->disk += rsz;
	sp->bytes += rsz;
	s->n[cls]++;
	s->unread++;
	sp->unread++;
	sp->st.appended++;
	return 0;
}

int spill_append(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		 const char *val, size_t len)
{
	return put(sp, false, cls, key, key_len, val, len);
}

int spill_prepend(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		  const char *val, size_t len)
{
	return put(sp, true, cls, key, key_len, val, len);
}

int spill_prepend_end(struct spill *sp)
{
	return writer_close(sp, &sp->front);
}

uint64_t spill_unread(const struct spill *sp)
{
	return sp->unread;
}

int spill_flush(struct spill *sp)
{
	int err = writer_flush(sp, &sp->tail);
	int err2 = writer_flush(sp, &sp->front);

	return err ? err : err2;
}

int spill_commit(struct spill *sp)
{
	char path[PATH_MAX];
	int ret = 0;

	for (int i = 0; i < sp->n_segs; i++) {
		struct seg *s = &sp->segs[i];
		struct writer *w = writer_of(sp, s);
		uint64_t c = s->cons;
		int fd, err;

		if (!s->dirty)
			continue;
		fd = w ? w->fd : -1;
		if (fd < 0) {
			seg_path(sp, s->id, "", path, sizeof(path));
			fd = open(path, O_WRONLY | O_CLOEXEC);
			if (fd < 0) {
				ret = -errno;
				io_error(sp, "open", s->id, -ret);
				continue;
			}
		}
		err = write_all(fd, &c, sizeof(c), OFF_CONSUMED);
		if (err) {
			io_error(sp, "write header", s->id, -err);
			ret = err;
		} else {
			s->dirty = false;
		}
		if (!w)
			close(fd);
	}
	return ret;
}

int spill_sync(struct spill *sp)
{
	struct writer *ws[2] = {&sp->tail, &sp->front};
	int ret = spill_flush(sp);
	int err = spill_commit(sp);

	if (!ret)
		ret = err;
	for (int i = 0; i < 2; i++) {
		if (!ws[i]->id || !ws[i]->need_sync)
			continue;
		if (fdatasync(ws[i]->fd)) {
			ret = -errno;
			io_error(sp, "fdatasync", ws[i]->id, -ret);
		} else {
			ws[i]->need_sync = false;
		}
	}
	if (sp->dir_dirty) {
		if (fsync(sp->dir_fd))
			ret = -errno;
		else
			sp->dir_dirty = false;
	}
	return ret;
}

void spill_get_stats(const struct spill *sp, struct spill_stats *st)
{
	*st = sp->st;
	st->bytes = sp->bytes;
	st->max_bytes = sp->max_bytes;
	st->unread = sp->unread;
	st->segments = sp->n_segs;
	st->records = 0;
	for (int i = 0; i < sp->n_segs; i++)
		for (int c = 0; c < REC_CLASS_COUNT; c++)
			st->records += sp->segs[i].n[c];
}

/* check a segment left by an earlier run; keep it when it holds records not done */
static int seg_recover(struct spill *sp, uint64_t id, const char *name)
{
	uint64_t n[REC_CLASS_COUNT] = {}, off = HDR_SZ, cons, count = 0;
	struct seg_hdr h;
	struct stat stb;
	char path[PATH_MAX];
	char *buf = NULL;
	struct seg *s;
	int fd, err = 0;
	ssize_t got;

	snprintf(path, sizeof(path), "%s/%s", sp->dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &stb)) {
		err = -errno;
		io_error(sp, "open", id, -err);
		goto cleanup;
	}
	buf = malloc(stb.st_size ? stb.st_size : 1);
	if (!buf) {
		err = -ENOMEM;
		goto cleanup;
	}
	got = pread_all(fd, buf, stb.st_size, 0);
	if (got < 0) {
		err = (int)got;
		io_error(sp, "read", id, -err);
		goto cleanup;
	}
	memcpy(&h, buf, got >= HDR_SZ ? sizeof(h) : 0);
	if (got < HDR_SZ || memcmp(h.magic, SEG_MAGIC, 8) || h.id != id) {
		/* created and never written to the end of its header */
		sp->st.torn++;
		sp->st.torn_bytes += got;
		pr_warn("spill %s: %s: no valid header, removed", sp->dir, name);
		unlink(path);
		goto cleanup;
	}
	cons = h.consumed;
	/* walk the records; consumed must fall on a record boundary */
	while (off + RHDR_SZ <= (uint64_t)got) {
		struct rec_hdr rh;
		uint64_t total;

		memcpy(&rh, buf + off, sizeof(rh));
		total = RHDR_SZ + (uint64_t)rh.key_len + rh.len;
		if (!rec_hdr_ok(&rh) || off + total > (uint64_t)got ||
		    rec_crc(&rh, buf + off + RHDR_SZ, buf + off + RHDR_SZ + rh.key_len) != rh.crc)
			break;
		if (off < cons && off + total > cons)
			cons = off + total; /* not a boundary: resume at the next one */
		if (off >= cons) {
			n[rh.cls]++;
			count++;
		}
		off += total;
	}
	if (off < (uint64_t)got) {
		sp->st.torn++;
		sp->st.torn_bytes += got - off;
		pr_warn("spill %s: %s: torn or corrupt tail at offset %" PRIu64 " (%" PRIu64
			" bytes skipped)",
			sp->dir, name, off, (uint64_t)got - off);
	}
	if (!count) {
		unlink(path);
		sp->dir_dirty = true;
		goto cleanup;
	}
	s = seg_insert(sp, id);
	if (!s) {
		err = -ENOMEM;
		goto cleanup;
	}
	s->end = off;
	s->disk = got;
	s->cons = s->read = cons < HDR_SZ ? HDR_SZ : cons;
	memcpy(s->n, n, sizeof(n));
	s->unread = count;
	sp->unread += count;
	sp->bytes += got;
	sp->st.recovered += count;
	if (id >= sp->next_id)
		sp->next_id = id + 1;
cleanup:
	if (fd >= 0)
		close(fd);
	free(buf);
	return err;
}

struct spill *spill_open(const struct spill_opts *o)
{
	struct spill *sp = NULL;
	struct dirent *de;
	DIR *d = NULL;
	int err;

	if (!o || o->sz < sizeof(*o) || !o->dir || !*o->dir || o->max_bytes < 2 * HDR_SZ) {
		errno = EINVAL;
		return NULL;
	}
	sp = calloc(1, sizeof(*sp));
	if (!sp) {
		err = -ENOMEM;
		goto fail;
	}
	sp->dir_fd = sp->rd_fd = sp->tail.fd = sp->front.fd = -1;
	sp->tk_head = sp->tk_next = 1;
	sp->next_id = FIRST_ID;
	sp->max_bytes = o->max_bytes;
	sp->seg_bytes = o->segment_bytes;
	if (!sp->seg_bytes) {
		sp->seg_bytes = o->max_bytes / 16;
		if (sp->seg_bytes < 64 * 1024)
			sp->seg_bytes = 64 * 1024;
		if (sp->seg_bytes > 16 << 20)
			sp->seg_bytes = 16 << 20;
	}
	sp->dir = strdup(o->dir);
	sp->tail.buf = malloc(WBUF_SZ);
	sp->front.buf = malloc(WBUF_SZ);
	if (!sp->dir || !sp->tail.buf || !sp->front.buf) {
		err = -ENOMEM;
		goto fail;
	}
	err = mkdir_p(sp->dir, 0755, 0700);
	if (err) {
		pr_err("spill: cannot create %s: %s", sp->dir, strerror(-err));
		goto fail;
	}
	sp->dir_fd = open(sp->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sp->dir_fd < 0) {
		err = -errno;
		pr_err("spill: cannot open %s: %s", sp->dir, strerror(-err));
		goto fail;
	}
	if (flock(sp->dir_fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		pr_err("spill: %s is in use by another agent", sp->dir);
		goto fail;
	}
	d = opendir(sp->dir);
	if (!d) {
		err = -errno;
		goto fail;
	}
	while ((de = readdir(d))) {
		const char *nm = de->d_name;
		size_t l = strlen(nm);
		char *end;
		uint64_t id;

		if (l == 16 + 8 && !strcmp(nm + 16, ".seg.tmp")) {
			unlinkat(sp->dir_fd, nm, 0); /* an eviction cut short */
			continue;
		}
		if (l != 16 + 4 || strcmp(nm + 16, ".seg"))
			continue;
		errno = 0;
		id = strtoull(nm, &end, 16);
		if (errno || end != nm + 16 || !id)
			continue;
		err = seg_recover(sp, id, nm);
		if (err)
			goto fail;
	}
	closedir(d);
	d = NULL;
	if (sp->unread)
		pr_info("spill %s: %" PRIu64 " records (%" PRIu64 " bytes in %d segments) "
			"left by an earlier run; they are sent first",
			sp->dir, sp->unread, sp->bytes, sp->n_segs);
	return sp;
fail:
	if (d)
		closedir(d);
	spill_close(sp);
	errno = -err;
	return NULL;
}

void spill_close(struct spill *sp)
{
	if (!sp)
		return;
	if (sp->dir_fd >= 0) {
		spill_sync(sp);
		writer_close(sp, &sp->front);
		writer_close(sp, &sp->tail);
		spill_commit(sp);
		if (sp->dir_dirty)
			fsync(sp->dir_fd);
		close(sp->dir_fd); /* releases the lock */
	}
	reader_reset(sp);
	free(sp->tail.buf);
	free(sp->front.buf);
	free(sp->rd_buf);
	free(sp->tk);
	free(sp->segs);
	free(sp->dir);
	free(sp);
}
