/* The audit log writer: what the supervisor, the proxy and the CLI call.
 *
 * One log is two files: the records (PATH) and the signed tree heads
 * (PATH.heads); docs/audit-format.md describes both byte for byte.
 *
 * Concurrency: any number of processes may have the log open; each append
 * batch is written under an exclusive flock(2) on PATH, after reading what
 * other processes added since (so every process numbers and chains from the
 * true end).  Inside a process, threads share one handle and group commit:
 * one thread writes and fdatasyncs everything queued while the previous
 * batch was being synced, then wakes the others.
 *
 * Durability: audit_log_append() returns only after the record and all
 * before it are on stable storage (fdatasync), unless opened with no_sync.
 * A write that fails (full disk) is cut back off the file, so the log stays
 * readable and verifiable; a crash mid-write leaves at most one incomplete
 * record, never acknowledged, which the next writer to take the lock cuts. */
#ifndef KOSA8_AUDIT_AUDIT_H
#define KOSA8_AUDIT_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/format.h"

/* A head at least every 4096 records.  Each head costs its writer a
 * signature and an fdatasync of PATH.heads, and every verify an Ed25519
 * check (about 86 us here, the time verify takes for 300-400 records): at
 * one head per 1000 records the checks were a quarter of verify's CPU
 * time, at 4096 they are under a tenth.  Records after the newest head rest on the chain alone;
 * the 10-second rule and the head signed at every sandbox stop bound that
 * in time, which is what matters on a log written at human speed. */
#define AUDIT_HEAD_EVERY_DEFAULT 4096 /* records */
#define AUDIT_HEAD_SECS_DEFAULT 10

struct audit_opts {
	const char *path;    /* NULL: audit_default_path() */
	const char *key_dir; /* NULL: <kosa8 config dir>/audit */
	unsigned head_every; /* a signed head at least every N records; 0: default */
	unsigned head_secs;  /* and on the first append T seconds after the last; 0: default */
	bool no_sync;        /* acknowledge before fdatasync: benchmarks only */
	bool lazy_close;     /* close signs a head only when one is due (head_every,
			      * head_secs): for short-lived writers such as
			      * `kosa8 audit append`, so that a script's appends
			      * cost neither a signature nor a heads sync each */
};

struct audit_log;

/* $KOSA8_AUDIT_LOG, else <kosa8 state dir>/audit.log. */
int audit_default_path(char *buf, size_t len);
/* PATH.heads */
int audit_heads_path(const char *log_path, char *buf, size_t len);

/* Opens (creating on first use: header and a first head of size 0, which
 * signs it) the log and the signing key, cutting a torn last record.  A log
 * shorter than its header, or with records and no head, is never rewritten:
 * -EBADMSG.  -EBADMSG when the log is damaged: a writer refuses to extend
 * a chain it cannot continue (run `kosa8 audit verify` to see why). */
int audit_log_open(const struct audit_opts *o, struct audit_log **out);

/* Appends one event; *seq (optional) gets its sequence number.  Thread-safe.
 * Returns 0 once durable, -EINVAL/-E2BIG for a bad event, -ENOSPC/-EFBIG/
 * -EIO when the disk refused (nothing was added), -EBADMSG (see open). */
int audit_log_append(struct audit_log *l, const struct audit_event *ev, uint64_t *seq);

/* Appends n events as one group: they get consecutive sequence numbers
 * (*first_seq the first; another process may slip in between only where a
 * group spans more than one 4 MiB batch), and the call returns once all
 * are durable.  For a caller that gathers
 * events, e.g. a supervisor's event loop handing them to a log thread: one
 * fdatasync for the lot instead of one wake-up per record.  If any event is
 * invalid, none is written. */
int audit_log_append_many(struct audit_log *l, const struct audit_event *evs, size_t n,
			  uint64_t *first_seq);

/* Signs a head over every record now in the log (unless the newest head
 * already covers them all) and makes it durable: the supervisor calls this
 * when a sandbox stops.  *head (optional) receives the newest head. */
int audit_log_sign_head(struct audit_log *l, struct audit_head *head);

/* Signs a head if records wait and head_secs passed: for callers with a
 * timer, so that a quiet log still gets its head in time. */
int audit_log_tick(struct audit_log *l);

/* Signs a final head if records wait for one, then frees everything. */
void audit_log_close(struct audit_log *l);

/* Records in the log as of this handle's last batch. */
uint64_t audit_log_count(struct audit_log *l);
const char *audit_log_path(const struct audit_log *l);
int audit_log_public_key(struct audit_log *l, uint8_t pub[AUDIT_PUBKEY_LEN]);

/* A message for errors from this API ("no space left on device: nothing was
 * written, the log is intact", ...). */
const char *audit_strerror(int err);

#endif
