/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * spill.h - the Kafka sink's bounded on-disk buffer (agent/sinks/spill.c).
 *
 * Records that the producer cannot take (its queue is full, the broker is
 * away) are appended to segment files in a directory; they are read back in
 * order and handed to the producer again when it has room. A record leaves
 * the spill only once the producer reports it delivered (spill_done()), so a
 * restart, even after kill -9, resends what was not confirmed.
 *
 * Order: records come out in the order they went in, segment by segment
 * (ascending id). spill_prepend() puts records before everything unread:
 * the sink uses it to give back what the producer held when a delivery
 * failed or at exit, which is older than what the spill already holds.
 *
 * Bound: the segment files never exceed max_bytes. When a record does not
 * fit, records of lower priority (rec_class_prio()) are evicted, oldest
 * segment first; when there are none the record is refused. Both are
 * counted by class (struct spill_stats).
 *
 * Owner: every segment says whose records it holds (spill_opts.owner);
 * another owner's segments are left alone, adopted or discarded
 * (enum spill_foreign), and said so.
 *
 * Damage: a corrupt stretch inside a segment is skipped up to the next
 * record that checks out, and every byte skipped is counted; a consumed
 * offset that does not check out makes the whole segment be sent again,
 * counted as suspect (the record ids let consumers drop the repeats).
 *
 * File format and fsync policy: docs/architecture.md, "Kafka". Single
 * threaded: every function is called from the agent's event loop thread.
 */
#ifndef INFERTRACE_SPILL_H
#define INFERTRACE_SPILL_H

#include <stddef.h>
#include <stdint.h>

#include "agent.h"

/* shedding order: events first, then summaries and stats, anomalies last */
static inline int rec_class_prio(enum rec_class c)
{
	switch (c) {
	case REC_EVENT:
		return 0;
	case REC_ANOMALY:
		return 2;
	default:
		return 1;
	}
}

#define SPILL_MAX_VALUE (16u << 20) /* larger records are refused (-E2BIG) */

struct spill;

/*
 * Segments written for another owner (another cluster or topic prefix, see
 * spill_opts.owner) or by an agent older than the owner field:
 * KEEP leaves them on disk, unread, counted (foreign_* in spill_stats);
 * ADOPT reads them as ours, oldest first; DISCARD deletes them, counted.
 */
enum spill_foreign { SPILL_FOREIGN_KEEP, SPILL_FOREIGN_ADOPT, SPILL_FOREIGN_DISCARD };

struct spill_opts {
	size_t sz;		/* sizeof(struct spill_opts) */
	const char *dir;	/* created (mode 0700) when missing; locked while open */
	uint64_t max_bytes;	/* bound of the segment files together */
	uint64_t segment_bytes; /* 0: max_bytes / 16, within 64 KiB .. 16 MiB */
	/*
	 * Whose records these are, e.g. "bootstrap=H:P prefix=P topics=A,B":
	 * written into every segment header; segments of another owner are
	 * foreign (see enum spill_foreign). NULL: "".
	 */
	const char *owner;
	enum spill_foreign foreign;
	/* every record reaches the kernel (write(2)) before append returns */
	bool write_through;
};

/* a record's id: the run that accepted it and its number in that run */
struct spill_id {
	uint64_t run;
	uint64_t seq;
};

/* a record read back; pointers valid until the next spill_* call */
struct spill_rec {
	enum rec_class cls;
	const char *key; /* NULL when key_len is 0 */
	size_t key_len;
	const char *val;
	size_t len;
	uint64_t ticket;     /* what spill_take() will return for it */
	struct spill_id rid; /* {0, 0} when written without one */
};

struct spill_stats {
	uint64_t bytes; /* segment files on disk now */
	uint64_t max_bytes;
	uint64_t records; /* held: not yet confirmed delivered */
	uint64_t unread;  /* held and not handed out */
	uint64_t segments;
	uint64_t appended;		   /* records written (append and prepend), since open */
	uint64_t replayed;		   /* records read back and handed out, since open */
	uint64_t evicted[REC_CLASS_COUNT]; /* shed from the spill for a more important one */
	uint64_t refused[REC_CLASS_COUNT]; /* not written: full of records as important */
	uint64_t torn; /* torn tails and corrupt stretches skipped (crash mid-write, bad disk) */
	uint64_t torn_bytes; /* every byte skipped */
	uint64_t resynced;   /* corrupt stretches after which a good record was found */
	uint64_t recovered;  /* records found at open (left by an earlier run) */
	uint64_t suspect;    /* recovered records behind a bad consumed offset: maybe sent before */
	uint64_t foreign_segments, foreign_records, foreign_bytes; /* left alone (KEEP) */
	uint64_t discarded;  /* foreign records deleted (DISCARD) */
	uint64_t adopted;    /* foreign records taken as ours (ADOPT) */
	uint64_t unsafe_dir; /* 1: the directory is writable by others or not ours */
	uint64_t io_errors;
};

/*
 * Another owner's segments left alone at open (SPILL_FOREIGN_KEEP), dealt
 * with now: ADOPT reads them as ours (before the records waiting, oldest
 * first), DISCARD deletes them; counted in spill_stats as at open. 0 or
 * -errno (-EINVAL for KEEP); *out says what was done.
 */
struct spill_foreign_done {
	uint64_t segments;  /* segment files found that this spill did not hold */
	uint64_t adopted;   /* records adopted */
	uint64_t discarded; /* records deleted */
};
int spill_foreign_apply(struct spill *sp, enum spill_foreign pol, struct spill_foreign_done *out);

/* NULL with errno set (EBUSY: another agent holds the directory) */
struct spill *spill_open(const struct spill_opts *o);
/* writes buffers and consumed offsets, fsyncs, frees; accepts NULL */
void spill_close(struct spill *sp);

/*
 * Append one record at the end. 0; -ENOSPC when it was shed (counted in
 * refused[cls]); -E2BIG when it can never fit; -errno on I/O errors.
 */
int spill_append(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		 const char *val, size_t len);
/*
 * The same with the record's id. ticket: when not NULL and nothing else is
 * unread, the record is also taken (as spill_peek + spill_take would) and
 * its ticket (>= 1) stored there; else 0 is stored and it is read back in
 * its turn. The write-ahead path of the Kafka sink: the record is on disk
 * before the producer gets it.
 */
int spill_append_id(struct spill *sp, enum rec_class cls, const struct spill_id *rid,
		    const char *key, size_t key_len, const char *val, size_t len, uint64_t *ticket);
/*
 * Put a record before everything unread, after those prepended since the
 * last spill_prepend_end(); they are not read back before that call.
 */
int spill_prepend(struct spill *sp, enum rec_class cls, const char *key, size_t key_len,
		  const char *val, size_t len);
int spill_prepend_id(struct spill *sp, enum rec_class cls, const struct spill_id *rid,
		     const char *key, size_t key_len, const char *val, size_t len);
int spill_prepend_end(struct spill *sp);

/* the next unread record, without taking it: 0, -ENOENT when none, -errno */
int spill_peek(struct spill *sp, struct spill_rec *r);
/* take the peeked record: returns its ticket (>= 1) for spill_done() */
uint64_t spill_take(struct spill *sp);
/* the record of this ticket was delivered (or given back with spill_prepend) */
void spill_done(struct spill *sp, uint64_t ticket);

uint64_t spill_unread(const struct spill *sp);
/* write buffered records (no fsync) */
int spill_flush(struct spill *sp);
/* persist consumed offsets (no fsync): cheap, after each batch of spill_done() */
int spill_commit(struct spill *sp);
/* flush + commit + fdatasync: every interval and at close */
int spill_sync(struct spill *sp);
void spill_get_stats(const struct spill *sp, struct spill_stats *st);

#endif /* INFERTRACE_SPILL_H */
