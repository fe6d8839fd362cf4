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

#define SEG_MAGIC1 "ITSPILL1"
#define SEG_MAGIC2 "ITSPILL2"
#define REC_MAGIC1 0x43525449u /* "ITRC" */
#define REC_MAGIC2 0x32525449u /* "ITR2" */
#define HDR1_SZ 32
#define HDR2_SZ 256
#define RHDR1_SZ 16
#define RHDR2_SZ 32
#define OFF_CONSUMED 16
#define OWNER_TEXT_MAX 208
#define WBUF_SZ (64 * 1024)
#define RBUF_MIN (256 * 1024)
#define FIRST_ID (1ull << 40) /* room below for front segments */

/* the first 32 bytes of either version */
struct seg_hdr {
	char magic[8];
	uint64_t id;
	uint64_t consumed;
	uint32_t ccrc; /* v2: crc32 of id, consumed, owner hash; v1: version */
	uint32_t version;
};
_Static_assert(sizeof(struct seg_hdr) == HDR1_SZ, "segment header layout");

/* v2 only, after struct seg_hdr */
struct seg_owner {
	uint64_t hash; /* FNV-1a 64 of the whole owner string */
	uint16_t len;  /* bytes of text kept (the string cut at OWNER_TEXT_MAX) */
	uint16_t zero;
	uint32_t zero2;
	char text[OWNER_TEXT_MAX];
};
_Static_assert(sizeof(struct seg_hdr) + sizeof(struct seg_owner) == HDR2_SZ, "v2 header layout");

/* the first 16 bytes of a record of either version */
struct rec_hdr {
	uint32_t crc;
	uint32_t magic;
	uint32_t len;
	uint16_t key_len;
	uint8_t cls;
	uint8_t zero;
};
_Static_assert(sizeof(struct rec_hdr) == RHDR1_SZ, "record header layout");

/* a record checked out of a buffer */
struct rec_view {
	uint8_t cls;
	uint16_t key_len;
	uint32_t len;
	const char *key, *val;
	struct spill_id rid;
	uint64_t total;
};

struct seg {
	uint64_t id;
	uint64_t hdr;		     /* header size: HDR1_SZ or HDR2_SZ */
	int ver;		     /* 1 (read only) or 2 */
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
	uint64_t owner;		     /* owner hash in its header (v2) */
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
	bool write_through;
	uint64_t owner_hash;
	char *owner;
	struct spill_stats st;
};

/* segment files are opened relative to the locked directory, never through a link */
static void seg_name(uint64_t id, const char *sfx, char *buf, size_t sz)
{
	snprintf(buf, sz, "%016" PRIx64 ".seg%s", id, sfx);
}

static int seg_open(const struct spill *sp, uint64_t id, int flags)
{
	char name[64];

	seg_name(id, "", name, sizeof(name));
	return openat(sp->dir_fd, name, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
}

/* FNV-1a, 64 bit: the owner string's hash in segment headers */
static uint64_t owner_hash(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static uint32_t cons_crc(uint64_t id, uint64_t consumed, uint64_t owner)
{
	uint64_t v[3] = {id, consumed, owner};

	return (uint32_t)crc32(0L, (const Bytef *)v, sizeof(v));
}

/* the consumed offset into the header: one write inside the first sector */
static int hdr_write_cons(const struct spill *sp, int fd, const struct seg *s)
{
	struct {
		uint64_t consumed;
		uint32_t ccrc;
	} __attribute__((packed)) c = {s->cons, cons_crc(s->id, s->cons, s->owner)};

	(void)sp;
	return write_all(fd, &c, s->ver == 1 ? sizeof(uint64_t) : sizeof(c), OFF_CONSUMED);
}

/* a header of version ver for segment id into buf (HDR2_SZ bytes): its size */
static size_t hdr_build(const struct spill *sp, int ver, uint64_t id, char *buf)
{
	struct seg_hdr h = {.id = id};
	struct seg_owner ow = {.hash = sp->owner_hash};
	size_t l = strlen(sp->owner);

	memset(buf, 0, HDR2_SZ);
	if (ver == 1) {
		memcpy(h.magic, SEG_MAGIC1, 8);
		h.consumed = HDR1_SZ;
		h.ccrc = 1; /* the version field of v1 */
		memcpy(buf, &h, sizeof(h));
		return HDR1_SZ;
	}
	memcpy(h.magic, SEG_MAGIC2, 8);
	h.consumed = HDR2_SZ;
	h.ccrc = cons_crc(id, HDR2_SZ, sp->owner_hash);
	h.version = 2;
	ow.len = l < OWNER_TEXT_MAX ? l : OWNER_TEXT_MAX;
	memcpy(ow.text, sp->owner, ow.len);
	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), &ow, sizeof(ow));
	return HDR2_SZ;
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
	if (s && s->dirty && !hdr_write_cons(sp, w->fd, s))
		s->dirty = false;
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
	char name[64];
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
	seg_name(s->id, "", name, sizeof(name));
	if (unlinkat(sp->dir_fd, name, 0) && errno != ENOENT)
		io_error(sp, "unlink", s->id, errno);
	sp->dir_dirty = true;
	seg_remove(sp, s);
}

static int seg_create(struct spill *sp, struct writer *w, uint64_t id, bool front)
{
	char hb[HDR2_SZ], name[64];
	size_t hsz = hdr_build(sp, 2, id, hb);
	struct seg *s;
	int fd, err;

	seg_name(id, "", name, sizeof(name));
	fd = seg_open(sp, id, O_RDWR | O_CREAT | O_EXCL);
	if (fd < 0) {
		err = -errno;
		io_error(sp, "create", id, -err);
		return err;
	}
	err = write_all(fd, hb, hsz, 0);
	if (err) {
		io_error(sp, "write header", id, -err);
		goto fail;
	}
	s = seg_insert(sp, id);
	if (!s) {
		err = -ENOMEM;
		goto fail;
	}
	s->hdr = hsz;
	s->ver = 2;
	s->owner = sp->owner_hash;
	s->end = s->disk = s->cons = s->read = hsz;
	s->front = front;
	s->open = true;
	sp->bytes += hsz;
	sp->dir_dirty = true;
	w->id = id;
	w->fd = fd;
	w->flushed = hsz;
	w->len = 0;
	w->need_sync = true;
	return 0;
fail:
	close(fd);
	unlinkat(sp->dir_fd, name, 0);
	return err;
}

static size_t rhdr_sz(int ver)
{
	return ver == 1 ? RHDR1_SZ : RHDR2_SZ;
}

/* the size of the record whose header is at p, 0 when the header is not one */
static uint64_t rec_size(int ver, const char *p)
{
	struct rec_hdr h;

	memcpy(&h, p, sizeof(h));
	if (h.magic != (ver == 1 ? REC_MAGIC1 : REC_MAGIC2) || h.len > SPILL_MAX_VALUE ||
	    h.cls >= REC_CLASS_COUNT || h.zero)
		return 0;
	return rhdr_sz(ver) + (uint64_t)h.key_len + h.len;
}

/* check the record at p (avail bytes readable): 0, -ENODATA (cut short), -EBADMSG */
static int rec_check(int ver, const char *p, uint64_t avail, struct rec_view *v)
{
	size_t rh = rhdr_sz(ver);
	struct rec_hdr h;
	uint64_t total;

	if (avail < rh)
		return -ENODATA;
	total = rec_size(ver, p);
	if (!total)
		return -EBADMSG;
	if (avail < total)
		return -ENODATA;
	memcpy(&h, p, sizeof(h));
	if ((uint32_t)crc32(0L, (const Bytef *)p + 4, total - 4) != h.crc)
		return -EBADMSG;
	v->cls = h.cls;
	v->key_len = h.key_len;
	v->len = h.len;
	v->key = p + rh;
	v->val = p + rh + h.key_len;
	v->total = total;
	memset(&v->rid, 0, sizeof(v->rid));
	if (ver != 1)
		memcpy(&v->rid, p + RHDR1_SZ, sizeof(v->rid));
	return 0;
}

/*
 * The next offset in buf[from, len) where a whole good record starts, or
 * len: how a corrupt stretch is skipped.
 */
static uint64_t rec_resync(int ver, const char *buf, uint64_t from, uint64_t len)
{
	uint32_t magic = ver == 1 ? REC_MAGIC1 : REC_MAGIC2;
	struct rec_view v;

	for (uint64_t o = from; o + rhdr_sz(ver) <= len; o++) {
		uint32_t m;

		memcpy(&m, buf + o + 4, sizeof(m));
		if (m == magic && !rec_check(ver, buf + o, len - o, &v))
			return o;
	}
	return len;
}

/* make [off, off + need) of segment s readable at *p: 0, -ENODATA past the file, -errno */
static int reader_load(struct spill *sp, struct seg *s, uint64_t off, size_t need, const char **p)
{
	struct writer *w;
	ssize_t n;

	if (sp->rd_seg != s->id) {
		reader_reset(sp);
		sp->rd_fd = seg_open(sp, s->id, O_RDONLY);
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
	size_t rh = rhdr_sz(s->ver);
	struct rec_view v;
	const char *p;
	uint64_t total;
	int err;

	if (s->read + rh > s->end)
		return -EBADMSG;
	err = reader_load(sp, s, s->read, rh, &p);
	if (err)
		return err == -ENODATA ? -EBADMSG : err;
	total = rec_size(s->ver, p);
	if (!total || s->read + total > s->end)
		return -EBADMSG;
	err = reader_load(sp, s, s->read, total, &p);
	if (err)
		return err == -ENODATA ? -EBADMSG : err;
	if (rec_check(s->ver, p, total, &v))
		return -EBADMSG;
	r->cls = v.cls;
	r->key_len = v.key_len;
	r->key = v.key_len ? v.key : NULL;
	r->val = v.val;
	r->len = v.len;
	r->rid = v.rid;
	*rsz = total;
	return 0;
}

/*
 * A record in the middle of a segment went bad after it was checked at open
 * (the disk, or someone else): skip to the next record that checks out,
 * count the bytes, and count again what is left unread in the segment.
 */
static void seg_resync_at_read(struct spill *sp, struct seg *s)
{
	uint64_t len = s->end - s->read, at, n[REC_CLASS_COUNT] = {}, unread = 0;
	const char *p = NULL;
	struct rec_view v;

	if (reader_load(sp, s, s->read, len, &p))
		p = NULL;
	at = p ? rec_resync(s->ver, p, 1, len) : len;
	sp->st.torn++;
	sp->st.torn_bytes += at;
	if (at < len)
		sp->st.resynced++;
	for (uint64_t o = at; p && o < len && !rec_check(s->ver, p + o, len - o, &v);
	     o += v.total) {
		n[v.cls]++;
		unread++;
	}
	pr_warn("spill %s: segment %016" PRIx64 ": bad record at offset %" PRIu64 ", %" PRIu64
		" bytes skipped%s",
		sp->dir, s->id, s->read, at, at < len ? ", resumed at the next good record" : "");
	sp->unread -= s->unread;
	s->unread = unread;
	sp->unread += unread;
	if (at == len)
		s->end = s->read; /* nothing good after it */
	else
		s->read += at;
	/* records skipped count as done: cons may pass them */
	if (s->cons < s->read && !s->outstanding)
		s->cons = s->read;
	/* what stays counted: the records handed out and not done, and the unread */
	memcpy(s->n, n, sizeof(s->n));
	for (uint64_t t = sp->tk_head; t < sp->tk_next; t++) {
		struct ticket *k = &sp->tk[t % sp->tk_cap];

		if (k->seg == s->id && !k->done)
			s->n[k->cls]++;
	}
	reader_reset(sp);
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
			seg_resync_at_read(sp, s);
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

/* hand out the record of s that ends at end: its ticket, 0 when out of memory */
static uint64_t ticket_new(struct spill *sp, struct seg *s, uint64_t end, uint8_t cls, bool replay)
{
	struct ticket *k;

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
	*k = (struct ticket){.seg = s->id, .end = end, .cls = cls};
	s->read = end;
	s->outstanding++;
	s->unread--;
	sp->unread--;
	if (replay)
		sp->st.replayed++;
	sp->peeked = false;
	return sp->tk_next++;
}

uint64_t spill_take(struct spill *sp)
{
	struct seg *s;

	if (!sp->peeked)
		return 0;
	s = seg_find(sp, sp->peek_seg);
	if (!s)
		return 0;
	return ticket_new(sp, s, sp->peek_end, sp->peek_cls, true);
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

/*
 * Replace segment id's file by a header of version ver and the records in
 * buf[0, len) (tmp file, fdatasync, rename): its new fd (O_RDWR), -errno.
 */
static int seg_rewrite(struct spill *sp, uint64_t id, int ver, const char *buf, size_t len)
{
	char hb[HDR2_SZ], name[64], tmp[64];
	size_t hsz = hdr_build(sp, ver, id, hb);
	int dfd, err;

	seg_name(id, "", name, sizeof(name));
	seg_name(id, ".tmp", tmp, sizeof(tmp));
	unlinkat(sp->dir_fd, tmp, 0);
	dfd = openat(sp->dir_fd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (dfd < 0) {
		err = -errno;
		io_error(sp, "create", id, -err);
		return err;
	}
	err = write_all(dfd, hb, hsz, 0);
	if (!err)
		err = write_all(dfd, buf, len, hsz);
	if (!err && fdatasync(dfd))
		err = -errno;
	if (!err && renameat(sp->dir_fd, tmp, sp->dir_fd, name))
		err = -errno;
	if (err) {
		io_error(sp, "rewrite", id, -err);
		unlinkat(sp->dir_fd, tmp, 0);
		close(dfd);
		return err;
	}
	sp->dir_dirty = true;
	return dfd;
}

/* rewrite segment s without the records of priority <= prio */
static int seg_compact(struct spill *sp, struct seg *s, int prio)
{
	uint64_t evicted[REC_CLASS_COUNT] = {}, kept[REC_CLASS_COUNT] = {}, n_evicted = 0;
	struct writer *w = writer_of(sp, s);
	size_t len = s->end - s->cons, in = 0, out = 0;
	char *buf = NULL;
	int fd = -1, dfd = -1, err = 0;
	ssize_t n;

	if (w && writer_flush(sp, w))
		return -EIO;
	buf = malloc(len ? len : 1);
	if (!buf)
		return -ENOMEM;
	fd = seg_open(sp, s->id, O_RDONLY);
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
	while (in < len) {
		uint64_t total = in + rhdr_sz(s->ver) <= len ? rec_size(s->ver, buf + in) : 0;
		struct rec_hdr rh;

		if (!total || in + total > len)
			break;
		memcpy(&rh, buf + in, sizeof(rh));
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
	dfd = seg_rewrite(sp, s->id, s->ver, buf, out);
	if (dfd < 0) {
		err = dfd;
		dfd = -1;
		goto cleanup;
	}
	if (w) {
		close(w->fd);
		w->fd = dfd;
		w->flushed = s->hdr + out;
		dfd = -1;
	}
	if (sp->rd_seg == s->id)
		reader_reset(sp);
	sp->peeked = false;
	for (int c = 0; c < REC_CLASS_COUNT; c++) {
		sp->st.evicted[c] += evicted[c];
		s->n[c] = kept[c];
	}
	s->unread -= n_evicted;
	sp->unread -= n_evicted;
	sp->bytes -= s->disk;
	s->end = s->disk = s->hdr + out;
	sp->bytes += s->disk;
	s->cons = s->read = s->hdr;
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

static int put(struct spill *sp, bool front, enum rec_class cls, const struct spill_id *rid,
	       const char *key, size_t key_len, const char *val, size_t len, uint64_t *ticket)
{
	struct writer *w = front ? &sp->front : &sp->tail;
	struct rec_hdr h = {.magic = REC_MAGIC2, .len = len, .key_len = key_len, .cls = cls};
	struct spill_id id = rid ? *rid : (struct spill_id){0, 0};
	uint64_t rsz = RHDR2_SZ + key_len + len;
	char rh[RHDR2_SZ];
	struct seg *s;
	uLong crc;
	int err;

	if (ticket)
		*ticket = 0;
	if (cls >= REC_CLASS_COUNT)
		return -EINVAL;
	if (len > SPILL_MAX_VALUE || key_len > UINT16_MAX || rsz + HDR2_SZ > sp->max_bytes) {
		sp->st.refused[cls]++;
		return -E2BIG;
	}
	if (!front && w->id) {
		s = seg_find(sp, w->id);
		if (s && s->end > s->hdr && s->end + rsz > sp->seg_bytes)
			writer_close(sp, w);
	}
	err = make_room(sp, rsz + (w->id ? 0 : HDR2_SZ), rec_class_prio(cls));
	if (err == -ENOSPC)
		sp->st.refused[cls]++;
	if (err)
		return err;
	if (!w->id) {
		uint64_t nid = sp->next_id++;

		if (front && sp->n_segs)
			nid = sp->segs[0].id - 1;
		err = seg_create(sp, w, nid, front);
		if (err)
			return err;
	}
	s = seg_find(sp, w->id);
	if (!s)
		return -EIO;
	memcpy(rh, &h, RHDR1_SZ);
	memcpy(rh + RHDR1_SZ, &id, sizeof(id));
	crc = crc32(0L, (const Bytef *)rh + 4, RHDR2_SZ - 4);
	crc = crc32(crc, (const Bytef *)key, key_len);
	h.crc = (uint32_t)crc32(crc, (const Bytef *)val, len);
	memcpy(rh, &h.crc, sizeof(h.crc));
	if (w->len + rsz > WBUF_SZ && (err = writer_flush(sp, w)))
		return err;
	if (rsz > WBUF_SZ) {
		struct iovec iov[3] = {{rh, RHDR2_SZ}, {(void *)key, key_len}, {(void *)val, len}};
		ssize_t n = pwritev(w->fd, iov, 3, w->flushed);

		if (n != (ssize_t)rsz) {
			err = n < 0 ? -errno : -EIO;
			io_error(sp, "write", w->id, -err);
			return err;
		}
		w->flushed += rsz;
		w->need_sync = true;
	} else {
		memcpy(w->buf + w->len, rh, RHDR2_SZ);
		memcpy(w->buf + w->len + RHDR2_SZ, key, key_len);
		memcpy(w->buf + w->len + RHDR2_SZ + key_len, val, len);
		w->len += rsz;
		/* in the kernel before the caller counts it accepted: kill -9 keeps it */
		if (sp->write_through && (err = writer_flush(sp, w))) {
			w->len -= rsz;
			return err;
		}
	}
	s->end += rsz;
	s->disk += rsz;
	sp->bytes += rsz;
	s->n[cls]++;
	s->unread++;
	sp->unread++;
	sp->st.appended++;
	/* nothing else waits: hand it out at once, no read back */
	if (ticket && !front && sp->unread == 1 && s->read == s->end - rsz)
		*ticket = ticket_new(sp, s, s->end, cls, false);
	return 0;
}

int spill_append(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		 const char *val, size_t len)
{
	return put(sp, false, cls, NULL, key, key_len, val, len, NULL);
}

int spill_append_id(struct spill *sp, enum rec_class cls, const struct spill_id *rid,
		    const char *key, size_t key_len, const char *val, size_t len, uint64_t *ticket)
{
	return put(sp, false, cls, rid, key, key_len, val, len, ticket);
}

int spill_prepend(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		  const char *val, size_t len)
{
	return put(sp, true, cls, NULL, key, key_len, val, len, NULL);
}

int spill_prepend_id(struct spill *sp, enum rec_class cls, const struct spill_id *rid,
		     const char *key, size_t key_len, const char *val, size_t len)
{
	return put(sp, true, cls, rid, key, key_len, val, len, NULL);
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
	int ret = 0;

	for (int i = 0; i < sp->n_segs; i++) {
		struct seg *s = &sp->segs[i];
		struct writer *w = writer_of(sp, s);
		int fd, err;

		if (!s->dirty)
			continue;
		fd = w ? w->fd : seg_open(sp, s->id, O_WRONLY);
		if (fd < 0) {
			ret = -errno;
			io_error(sp, "open", s->id, -ret);
			continue;
		}
		err = hdr_write_cons(sp, fd, s);
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

/* what a segment header says of its owner, for the log */
static void owner_text(int ver, const struct seg_owner *ow, char *buf, size_t sz)
{
	if (ver == 1) {
		snprintf(buf, sz, "an agent without the owner field (spill format 1)");
		return;
	}
	snprintf(buf, sz, "\"");
	for (size_t i = 0, o = 1; i < ow->len && o + 5 < sz; i++) {
		unsigned char c = ow->text[i];

		o += snprintf(buf + o, sz - o, c >= 0x20 && c < 0x7f && c != '"' ? "%c" : "\\x%02x",
			      c);
	}
	snprintf(buf + strlen(buf), sz - strlen(buf), "\"");
}

/*
 * Walk the records of a segment held in buf[hdr, len), skipping corrupt
 * stretches: fn(ctx, off, view) for each good one; the bytes skipped and
 * the stretches are added to *lost and *stretches, *holes is set when a
 * good record follows a bad stretch. Returns the end of the last good one.
 */
typedef void (*rec_fn)(void *ctx, uint64_t off, const struct rec_view *v);
static uint64_t seg_walk(int ver, const char *buf, uint64_t hdr, uint64_t len, rec_fn fn, void *ctx,
			 uint64_t *lost, uint64_t *stretches, bool *holes)
{
	uint64_t off = hdr, end = hdr;
	struct rec_view v;

	while (off < len) {
		uint64_t next;

		if (!rec_check(ver, buf + off, len - off, &v)) {
			fn(ctx, off, &v);
			off += v.total;
			end = off;
			continue;
		}
		next = rec_resync(ver, buf, off + 1, len);
		*lost += next - off;
		(*stretches)++;
		if (next < len)
			*holes = true;
		off = next;
	}
	return end;
}

struct recover_walk {
	uint64_t cons, hdr;
	bool cons_ok;
	uint64_t n_all[REC_CLASS_COUNT], n_after[REC_CLASS_COUNT], all, after;
	char *keep; /* the second walk: records from cons on, squeezed */
	size_t kept;
	const char *buf;
};

static void recover_count(void *ctx, uint64_t off, const struct rec_view *v)
{
	struct recover_walk *w = ctx;

	if (off + v->total == w->cons)
		w->cons_ok = true;
	w->n_all[v->cls]++;
	w->all++;
	if (off >= w->cons) {
		w->n_after[v->cls]++;
		w->after++;
	}
}

static void recover_copy(void *ctx, uint64_t off, const struct rec_view *v)
{
	struct recover_walk *w = ctx;

	if (off < w->cons)
		return;
	memcpy(w->keep + w->kept, w->buf + off, v->total);
	w->kept += v->total;
}

/*
 * Check a segment left by an earlier run; keep it when it holds records not
 * done. A corrupt stretch inside is skipped (the segment is rewritten
 * without it), a consumed offset that does not check out sends the whole
 * segment again, another owner's segment is kept, adopted or discarded.
 */
static int seg_recover(struct spill *sp, uint64_t id, const char *name, enum spill_foreign pol,
		       char *foreign_desc, size_t fd_sz)
{
	struct recover_walk rw = {0};
	uint64_t lost = 0, stretches = 0, end, hdr = 0, cons, seg_owner = 0;
	struct seg_owner ow = {0};
	struct seg_hdr h;
	struct stat stb;
	char *buf = NULL, who[300];
	bool holes = false, foreign, bad_cons = false;
	struct seg *s;
	int ver = 0, fd, err = 0;
	ssize_t got;

	/* new segments never take the name of one left here, whatever it is */
	if (id >= sp->next_id)
		sp->next_id = id + 1;
	fd = openat(sp->dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 || fstat(fd, &stb)) {
		err = -errno;
		if (err == -ELOOP) {
			pr_warn("spill %s: %s is a symbolic link: left alone", sp->dir, name);
			err = 0;
		} else {
			io_error(sp, "open", id, -err);
		}
		goto cleanup;
	}
	if (!S_ISREG(stb.st_mode) || stb.st_uid != geteuid()) {
		pr_warn("spill %s: %s is not a regular file of uid %u: left alone", sp->dir, name,
			(unsigned)geteuid());
		sp->st.unsafe_dir = 1;
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
	memcpy(&h, buf, got >= HDR1_SZ ? sizeof(h) : 0);
	if (got >= HDR1_SZ && !memcmp(h.magic, SEG_MAGIC1, 8)) {
		ver = 1;
		hdr = HDR1_SZ;
	} else if (got >= HDR2_SZ && !memcmp(h.magic, SEG_MAGIC2, 8) && h.version == 2) {
		ver = 2;
		hdr = HDR2_SZ;
		memcpy(&ow, buf + HDR1_SZ, sizeof(ow));
		if (ow.len > OWNER_TEXT_MAX)
			ow.len = OWNER_TEXT_MAX;
		seg_owner = ow.hash;
	}
	if (!ver || h.id != id) {
		/* created and never written to the end of its header */
		sp->st.torn++;
		sp->st.torn_bytes += got;
		pr_warn("spill %s: %s: no valid header, removed (%zd bytes)", sp->dir, name, got);
		unlinkat(sp->dir_fd, name, 0);
		sp->dir_dirty = true;
		goto cleanup;
	}
	foreign = ver == 1 || seg_owner != sp->owner_hash;
	cons = h.consumed;
	if ((ver == 2 && h.ccrc != cons_crc(id, cons, seg_owner)) || cons < hdr ||
	    cons > (uint64_t)got)
		bad_cons = true;
	rw.cons = bad_cons ? hdr : cons;
	rw.hdr = hdr;
	rw.cons_ok = rw.cons == hdr;
	end = seg_walk(ver, buf, hdr, got, recover_count, &rw, &lost, &stretches, &holes);
	if (!rw.cons_ok) {
		/* not the end of a record: we cannot know which were delivered */
		bad_cons = true;
		rw.cons = hdr;
		rw.after = rw.all;
		memcpy(rw.n_after, rw.n_all, sizeof(rw.n_all));
	}
	owner_text(ver, &ow, who, sizeof(who));
	if (foreign && pol != SPILL_FOREIGN_ADOPT) {
		if (pol == SPILL_FOREIGN_DISCARD) {
			pr_warn("spill %s: %s holds %" PRIu64 " records for %s: discarded", sp->dir,
				name, rw.after, who);
			sp->st.discarded += rw.after;
			unlinkat(sp->dir_fd, name, 0);
			sp->dir_dirty = true;
		} else if (rw.after) {
			sp->st.foreign_segments++;
			sp->st.foreign_records += rw.after;
			sp->st.foreign_bytes += got;
			if (!*foreign_desc)
				snprintf(foreign_desc, fd_sz, "%s", who);
		}
		goto cleanup;
	}
	if (lost) {
		sp->st.torn += stretches;
		sp->st.torn_bytes += lost;
		if (holes)
			sp->st.resynced++;
		pr_warn("spill %s: %s: %" PRIu64 " corrupt or torn bytes skipped in %" PRIu64
			" stretches%s",
			sp->dir, name, lost, stretches,
			holes ? "; resumed at the next good record" : "");
	}
	if (bad_cons && rw.after) {
		sp->st.suspect += rw.after;
		pr_warn("spill %s: %s: consumed offset %" PRIu64 " does not check out; all %" PRIu64
			" records are sent again (those delivered before arrive twice, with the "
			"same record id)",
			sp->dir, name, cons, rw.after);
	}
	if (!rw.after) {
		unlinkat(sp->dir_fd, name, 0);
		sp->dir_dirty = true;
		goto cleanup;
	}
	if (foreign) {
		pr_warn("spill %s: %s: %" PRIu64 " records for %s adopted", sp->dir, name, rw.after,
			who);
		sp->st.adopted += rw.after;
	}
	if (holes || bad_cons) {
		/* a clean copy: the reader never meets the bad stretches again */
		int nfd;

		rw.keep = malloc(got);
		rw.buf = buf;
		if (!rw.keep) {
			err = -ENOMEM;
			goto cleanup;
		}
		seg_walk(ver, buf, hdr, got, recover_copy, &rw, &(uint64_t){0}, &(uint64_t){0},
			 &(bool){0});
		nfd = seg_rewrite(sp, id, ver, rw.keep, rw.kept);
		free(rw.keep);
		if (nfd < 0) {
			err = nfd;
			goto cleanup;
		}
		close(nfd);
		seg_owner = ver == 2 ? sp->owner_hash : 0;
		got = hdr + rw.kept;
		end = got;
		rw.cons = hdr;
	}
	s = seg_insert(sp, id);
	if (!s) {
		err = -ENOMEM;
		goto cleanup;
	}
	s->ver = ver;
	s->hdr = hdr;
	s->owner = seg_owner;
	s->end = end;
	s->disk = got;
	s->cons = s->read = rw.cons;
	memcpy(s->n, rw.n_after, sizeof(rw.n_after));
	s->unread = rw.after;
	sp->unread += rw.after;
	sp->bytes += got;
	sp->st.recovered += rw.after;
cleanup:
	if (fd >= 0)
		close(fd);
	free(buf);
	return err;
}

/* the spill directory's entries, from the start (a dup() of dir_fd); NULL and *err */
static DIR *dir_walk(struct spill *sp, int *err)
{
	int dfd = dup(sp->dir_fd);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;

	if (!d) {
		*err = -errno;
		if (dfd >= 0)
			close(dfd);
		return NULL;
	}
	rewinddir(d); /* a dup() shares the offset an earlier walk left at the end */
	return d;
}

/* a segment's file name, 16 hex digits and ".seg": its id; 0 for any other name */
static uint64_t seg_name_id(const char *nm)
{
	char *end;
	uint64_t id;

	if (strlen(nm) != 16 + 4 || strcmp(nm + 16, ".seg"))
		return 0;
	errno = 0;
	id = strtoull(nm, &end, 16);
	return errno || end != nm + 16 ? 0 : id;
}

struct spill *spill_open(const struct spill_opts *o)
{
	struct spill *sp = NULL;
	char foreign_desc[300] = "";
	struct dirent *de;
	struct stat dst;
	DIR *d = NULL;
	int err;

	if (!o || o->sz < sizeof(*o) || !o->dir || !*o->dir || o->max_bytes < 2 * HDR2_SZ) {
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
	sp->owner = strdup(o->owner ? o->owner : "");
	sp->write_through = o->write_through;
	sp->tail.buf = malloc(WBUF_SZ);
	sp->front.buf = malloc(WBUF_SZ);
	if (!sp->dir || !sp->owner || !sp->tail.buf || !sp->front.buf) {
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
	sp->owner_hash = owner_hash(sp->owner);
	/*
	 * Another user who can write here can plant records (sent to Kafka as
	 * ours) or links: say so. Segment files are opened relative to this
	 * descriptor, with O_NOFOLLOW, and only when they are ours.
	 */
	if (!fstat(sp->dir_fd, &dst) &&
	    (dst.st_uid != geteuid() || (dst.st_mode & (S_IWOTH | S_IWGRP)))) {
		sp->st.unsafe_dir = 1;
		pr_warn("spill %s: owned by uid %u, mode %04o: other users can write to it and "
			"plant records; use a directory of uid %u, mode 0700",
			sp->dir, (unsigned)dst.st_uid, (unsigned)(dst.st_mode & 07777),
			(unsigned)geteuid());
	}
	if (flock(sp->dir_fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		pr_err("spill: %s is in use by another agent", sp->dir);
		goto fail;
	}
	d = dir_walk(sp, &err);
	if (!d)
		goto fail;
	while ((de = readdir(d))) {
		const char *nm = de->d_name;
		uint64_t id;

		if (strlen(nm) == 16 + 8 && !strcmp(nm + 16, ".seg.tmp")) {
			unlinkat(sp->dir_fd, nm, 0); /* an eviction cut short */
			continue;
		}
		id = seg_name_id(nm);
		if (!id)
			continue;
		err = seg_recover(sp, id, nm, o->foreign, foreign_desc, sizeof(foreign_desc));
		if (err)
			goto fail;
	}
	closedir(d);
	d = NULL;
	if (sp->st.foreign_records)
		pr_warn("spill %s: %" PRIu64 " records (%" PRIu64 " bytes in %" PRIu64
			" segments) were written for another Kafka cluster or topic prefix, e.g. "
			"%s, not for \"%s\": left alone (agentctl spill-foreign send|discard, or "
			"--spill-foreign at the next start)",
			sp->dir, sp->st.foreign_records, sp->st.foreign_bytes,
			sp->st.foreign_segments, foreign_desc, sp->owner);
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

int spill_foreign_apply(struct spill *sp, enum spill_foreign pol, struct spill_foreign_done *out)
{
	uint64_t adopted = sp->st.adopted, discarded = sp->st.discarded;
	char foreign_desc[300] = "";
	struct dirent *de;
	int err = 0, n = 0;
	DIR *d;

	memset(out, 0, sizeof(*out));
	if (pol == SPILL_FOREIGN_KEEP)
		return -EINVAL;
	d = dir_walk(sp, &err);
	if (!d)
		return err;
	/*
	 * The segments left alone are the files this spill does not hold: read
	 * each again as at open, with the policy given now. Adopted segments
	 * keep their (lower) ids, so they are read before what waits here.
	 */
	sp->st.foreign_segments = sp->st.foreign_records = sp->st.foreign_bytes = 0;
	while ((de = readdir(d))) {
		uint64_t id = seg_name_id(de->d_name);
		const char *nm = de->d_name;

		if (!id || seg_find(sp, id))
			continue;
		n++;
		err = seg_recover(sp, id, nm, pol, foreign_desc, sizeof(foreign_desc));
		if (err)
			break;
	}
	closedir(d);
	out->segments = n;
	out->adopted = sp->st.adopted - adopted;
	out->discarded = sp->st.discarded - discarded;
	if (sp->dir_dirty && !err)
		fsync(sp->dir_fd);
	return err;
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
	free(sp->owner);
	free(sp);
}
