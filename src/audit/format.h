/* The bytes of the audit log: file header, records, signed tree heads.
 *
 * docs/audit-format.md is the normative description; this header mirrors it.
 * All integers are big-endian.  Nothing here touches files: the functions
 * encode into and parse from memory, so the same code serves the writer,
 * the verifier, the bundle reader and the fuzz target. */
#ifndef KOSA8_AUDIT_FORMAT_H
#define KOSA8_AUDIT_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUDIT_HASH_LEN 32
#define AUDIT_LOG_ID_LEN 16
#define AUDIT_PUBKEY_LEN 32
#define AUDIT_SIG_LEN 64

/* File header: "K8AL", u32 version, 16-byte log id, u64 creation time (ns). */
#define AUDIT_HDR_MAGIC "K8AL"
#define AUDIT_HDR_LEN 32
#define AUDIT_VERSION 2

/* Record: "K8AR", u32 total length, u64 seq, u64 time (ns), 32-byte prev,
 * u16 sandbox length, u16 actor length, u16 type length, u32 details length,
 * the four fields, then one '\n'. */
#define AUDIT_REC_MAGIC "K8AR"
#define AUDIT_REC_PREV_OFF 24     /* where the prev field starts */
#define AUDIT_REC_FIXED 66        /* bytes before the variable fields */
#define AUDIT_REC_MIN (AUDIT_REC_FIXED + 1 + 1 + 2 + 1) /* actor, type, "{}", newline */
#define AUDIT_REC_MAX (1u << 20)  /* a whole record, bytes */
#define AUDIT_NAME_MAX 256        /* sandbox, actor, type: bytes */

/* Head line: "K8AH2 <log id> <created> <index> <prev> <size> <time> <root>
 * <public key> <signature>\n", hex in lower case, decimal without leading
 * zeros. */
#define AUDIT_HEAD_TAG "K8AH2"
#define AUDIT_HEAD_LINE_MAX 512
/* The signed message: this 25-byte domain string, then log id, u64 created,
 * u64 index, prev (SHA-256 of the previous head's message), u64 size, u64
 * time, root, public key: every field of the line but the signature. */
#define AUDIT_HEAD_DOMAIN "KOSA8 AUDIT TREE HEAD V2\n"
#define AUDIT_HEAD_DOMAIN_LEN 25
#define AUDIT_HEAD_MSG_LEN                                                                 \
	(AUDIT_HEAD_DOMAIN_LEN + AUDIT_LOG_ID_LEN + 8 + 8 + AUDIT_HASH_LEN + 8 + 8 +          \
	 AUDIT_HASH_LEN + AUDIT_PUBKEY_LEN)

struct audit_header {
	uint8_t log_id[AUDIT_LOG_ID_LEN];
	uint64_t created_ns;
};

/* The caller's view of an event before it becomes a record. */
struct audit_event {
	const char *sandbox; /* "" when the event belongs to no sandbox */
	const char *actor;   /* who caused it: "agent", "user:alice", ... */
	const char *type;    /* "exec", "net.allow", "sandbox.stop", ... */
	const char *details; /* a JSON object; NULL means "{}" */
};

/* A parsed record: pointers into the buffer it was parsed from (strings are
 * not NUL-terminated). */
struct audit_record {
	uint64_t seq;
	uint64_t time_ns;
	const uint8_t *prev;
	const char *sandbox, *actor, *type, *details;
	uint16_t sandbox_len, actor_len, type_len;
	uint32_t details_len;
	const uint8_t *raw; /* the whole record: the Merkle leaf */
	uint32_t len;
};

struct audit_head {
	uint8_t log_id[AUDIT_LOG_ID_LEN];
	uint64_t created_ns;         /* the log header's creation time */
	uint64_t index;              /* its line number in PATH.heads, from 0 */
	uint8_t prev[AUDIT_HASH_LEN]; /* audit_head_digest() of head index-1; zeros for 0 */
	uint64_t size;
	uint64_t time_ns;
	uint8_t root[AUDIT_HASH_LEN];
	uint8_t pubkey[AUDIT_PUBKEY_LEN];
	uint8_t sig[AUDIT_SIG_LEN];
};

/* The version of a whole header (AUDIT_HDR_LEN bytes, magic right), else
 * -EAGAIN (too short) or -EBADMSG (not a kosa8 log). */
int audit_header_version(const uint8_t *buf, size_t len);
void audit_header_encode(const struct audit_header *h, uint8_t out[AUDIT_HDR_LEN]);
/* 0, -EAGAIN (fewer than AUDIT_HDR_LEN bytes), -EBADMSG (not a kosa8 log),
 * -EPROTONOSUPPORT (another version: *h holds its log id and time all the
 * same, for the upgrade of a format-1 log). */
int audit_header_parse(const uint8_t *buf, size_t len, struct audit_header *h);

/* Checks an event's fields (lengths; no control characters, no DEL and
 * well-formed UTF-8 in every field, details included; details a JSON
 * object).  Returns the size its record will have, or -EINVAL / -E2BIG. */
int audit_event_check(const struct audit_event *ev);

/* Writes the record for ev into buf (cap bytes).  ev must have passed
 * audit_event_check().  Returns the record's length or -ENOSPC. */
int audit_record_encode(uint8_t *buf, size_t cap, uint64_t seq, uint64_t time_ns,
			const uint8_t prev[AUDIT_HASH_LEN], const struct audit_event *ev);

/* Parses the record at the start of buf.  Returns its length (> 0),
 * -EAGAIN when buf holds only a prefix of a well-formed record (a torn
 * write), or -EBADMSG when the bytes cannot be a record. */
int audit_record_parse(const uint8_t *buf, size_t len, struct audit_record *r);

/* True when the len bytes at p (what follows the last whole record) can be
 * what a crashed write leaves: the start of one record, or zeros, with no
 * whole record anywhere after.  Only such a tail may be cut; anything else
 * is damage to report.  (No whole record can hide inside a record's
 * details: JSON text has no raw bytes below 0x20, record headers do.) */
bool audit_tail_is_torn(const uint8_t *p, size_t len);

/* True when the details of a parsed record are a JSON object (cJSON). */
bool audit_record_details_valid(const struct audit_record *r);

void audit_head_message(const struct audit_head *h, uint8_t msg[AUDIT_HEAD_MSG_LEN]);
/* SHA-256 of the head's message: the next head's prev field. */
void audit_head_digest(const struct audit_head *h, uint8_t out[AUDIT_HASH_LEN]);
/* Formats the head line, '\n' included, into buf; returns its length. */
int audit_head_format(const struct audit_head *h, char *buf, size_t cap);
/* Parses the head line at the start of buf.  Returns the bytes consumed
 * (through '\n'), -EAGAIN when no '\n' came yet, -EBADMSG when malformed. */
int audit_head_parse(const char *buf, size_t len, struct audit_head *h);

/* Lower-case hex of n bytes into out (2n+1 bytes, NUL-terminated). */
void audit_hex(const uint8_t *in, size_t n, char *out);
/* Exactly 2n hex digits (either case) into n bytes: 0 or -EINVAL. */
int audit_unhex(const char *in, size_t inlen, uint8_t *out, size_t n);

#endif
