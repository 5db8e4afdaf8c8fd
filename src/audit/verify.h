/* Checks a whole audit log against its signed heads, from bytes alone: no
 * lock, no private key, nothing but the trusted public key.  The same code
 * checks a log in place and a bundle exported to another machine. */
#ifndef KOSA8_AUDIT_VERIFY_H
#define KOSA8_AUDIT_VERIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/format.h"
#include "audit/merkle.h"

enum audit_problem {
	AUDIT_OK = 0,
	AUDIT_BAD_HEADER,    /* not a kosa8 audit log, or another version */
	AUDIT_MALFORMED,     /* bytes where a record should be are not one */
	AUDIT_EDITED,        /* a record's bytes changed */
	AUDIT_REORDERED,     /* a record moved or appears twice */
	AUDIT_REMOVED,       /* records missing from the middle */
	AUDIT_TRUNCATED,     /* fewer records than a signed head covers */
	AUDIT_BAD_SIGNATURE, /* a head's signature does not verify */
	AUDIT_ROOT_MISMATCH, /* chain intact but the tree differs from a signed head */
	AUDIT_BAD_HEADS,     /* heads missing, malformed, out of order, or another log's */
	AUDIT_BAD_TIME,      /* a record dated before the one before it */
};

struct audit_verify_result {
	enum audit_problem problem;
	uint64_t bad_seq;      /* first bad record (the sequence number expected there) */
	uint64_t bad_seq_last; /* last one it may be, when only a range is known */
	uint64_t bad_offset;   /* byte offset of the first bad record, or of the head line */
	uint64_t bad_head;     /* index in the heads file, for head problems */
	char what[384];        /* one sentence for people */

	struct audit_header header;
	uint64_t records;          /* records checked good */
	uint64_t bytes;            /* log bytes covered by them, header included */
	uint64_t heads;            /* heads checked good */
	uint64_t unsigned_records; /* records after the last signed head */
	bool torn_tail;            /* an incomplete last record (a crashed write) */
	uint64_t torn_offset;
	bool have_head;
	struct audit_head last_head; /* the newest head checked good */
	merkle_hash root;            /* root over all good records */
};

const char *audit_problem_name(enum audit_problem p);

/* Checks log and heads bytes with the trusted public key.  Returns 0 when
 * all is well, -EBADMSG when res->problem says what is wrong, or -ENOMEM.
 * With `leaves` non-NULL it also hands back the leaf hashes of the good
 * records (malloc'd, res->records of them). */
int audit_verify(const uint8_t *log, size_t log_len, const uint8_t *heads, size_t heads_len,
		 const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		 merkle_hash **leaves);

/* The same over the first log_len bytes of the file fd, read a few MiB at a
 * time (mapping a big file costs more than reading it on some virtual
 * machines, and as much elsewhere); the file is mapped only to name a
 * problem.  fd's offset is not used. */
int audit_verify_fd(int fd, size_t log_len, const uint8_t *heads, size_t heads_len,
		    const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		    merkle_hash **leaves);

/* Like audit_verify_fd(), but never maps the file: when the records do not
 * end exactly at log_len, or a problem needs the bytes after it to be
 * named, it returns -ESTALE (the caller then takes the careful way). */
int audit_verify_fd_clean(int fd, size_t log_len, const uint8_t *heads, size_t heads_len,
			  const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res);

/* The same over files (the log read, the heads mapped); a missing heads file
 * counts as empty.  Other errors: negative errno. */
int audit_verify_files(const char *log_path, const char *heads_path,
		       const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_verify_result *res,
		       merkle_hash **leaves);

/* Maps a whole file read-only (len 0 gives *p == NULL); unmap with
 * audit_unmap(). */
int audit_map_file(const char *path, const uint8_t **p, size_t *len);
void audit_unmap(const uint8_t *p, size_t len);

/* Parses every head line.  Returns their number (heads malloc'd) or
 * -EBADMSG with *bad_line set; a final line without '\n' (torn) is skipped. */
int audit_heads_parse_all(const uint8_t *buf, size_t len, struct audit_head **heads,
			  size_t *bad_line);

/* An auditor's saved head `pin` against a log that verified (res, with
 * its parsed heads and the leaf hashes of its records): signed by pub, of
 * this log, still in it unchanged, and extended by the newest head (RFC
 * 9162 consistency proof).  The proof's length, or -EBADMSG with why. */
int audit_pin_check(const struct audit_head *pin, const uint8_t pub[AUDIT_PUBKEY_LEN],
		    const struct audit_verify_result *res, const struct audit_head *heads,
		    size_t nheads, const merkle_hash *leaves, char *why, size_t cap);

#endif
