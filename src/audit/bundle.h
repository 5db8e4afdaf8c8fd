/* Consistent snapshots of a live log, and the export bundle: one file with
 * the records, the heads and the public key, that `kosa8 audit verify
 * --bundle` checks on any machine (docs/audit-format.md, "Bundle"). */
#ifndef KOSA8_AUDIT_BUNDLE_H
#define KOSA8_AUDIT_BUNDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "audit/format.h"
#include "audit/verify.h"

#define AUDIT_BUNDLE_MAGIC "KOSA8-AUDIT-BUNDLE 1\n"

struct audit_snapshot {
	const uint8_t *log;   /* the log up to its last complete record */
	size_t log_len;
	const uint8_t *heads; /* the heads up to the last complete line */
	size_t heads_len;
	size_t torn_bytes;    /* an incomplete last record left out */
	size_t log_map, heads_map; /* mapped lengths */
	bool have_fd;         /* log_fd is the log, open (unlocked) */
	int log_fd;
};

/* Maps both files under a shared lock on the log, so that no writer is
 * half-way between its records and its head.  Still under the lock it finds
 * where the last complete record and head line end (a pass over record
 * lengths, no hashing, reading the file rather than touching the mapping)
 * and leaves out an incomplete tail: that is all a writer may ever cut, so
 * once the lock is dropped, appends go on while the caller reads the
 * snapshot.  The log's pages are mapped, not loaded: what is not touched
 * costs nothing.  A missing heads file reads as empty; a missing log is
 * -ENOENT; a file bigger than max gives -EFBIG. */
int audit_snapshot_read(const char *log_path, size_t max, struct audit_snapshot *s);
void audit_snapshot_free(struct audit_snapshot *s);

/* audit_verify() of the snapshot, reading the log through its descriptor
 * (audit_verify_fd()). */
int audit_snapshot_verify(const struct audit_snapshot *s, const uint8_t pub[AUDIT_PUBKEY_LEN],
			  struct audit_verify_result *res, merkle_hash **leaves);

/* Verifies the log at log_path in one pass over its bytes: under the shared
 * lock only its size is taken and the heads are mapped, then the records
 * up to that size are read and checked (audit_verify_fd_clean()).  Only
 * if they do not end there cleanly (a torn tail, a problem to name, the
 * file changed) does it fall back to audit_snapshot_read() and
 * audit_snapshot_verify(), whose verdicts are therefore the same.
 * *torn_bytes: an incomplete last record left out (0 if none).  Returns as
 * audit_verify(), or a negative errno as audit_snapshot_read(). */
int audit_log_verify(const char *log_path, size_t max, const uint8_t pub[AUDIT_PUBKEY_LEN],
		     struct audit_verify_result *res, size_t *torn_bytes);

/* Writes a bundle of s and pub to f.  0 or -EIO. */
int audit_bundle_write(FILE *f, const struct audit_snapshot *s, const uint8_t pub[AUDIT_PUBKEY_LEN]);

/* A parsed bundle: pointers into the caller's buffer. */
struct audit_bundle {
	const uint8_t *log, *heads;
	size_t log_len, heads_len;
	uint8_t pub[AUDIT_PUBKEY_LEN];
};

/* Parses a bundle held in buf.  0, or -EBADMSG for anything that is not
 * exactly a bundle (bounds-checked: the bytes come from elsewhere). */
int audit_bundle_parse(const uint8_t *buf, size_t len, struct audit_bundle *b);

#endif
