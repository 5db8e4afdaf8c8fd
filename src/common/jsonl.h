/* JSON lines, the framing of kosa8's control hops (CLI <-> supervisor and
 * supervisor <-> VMM; docs/control-protocol.md): one JSON object per line,
 * each carrying the protocol version "v", optionally one descriptor passed
 * with its first byte (common/fdpass.h).
 *
 * Both ends are untrusted by the other: a line is bounded, must be one
 * object of this version and nothing else (no NUL, no trailing bytes), and
 * every refusal comes with a sentence saying what was wrong. */
#ifndef KOSA8_JSONL_H
#define KOSA8_JSONL_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* The protocol version every message carries as "v".  Raise it when a
 * message changes meaning; a receiver refuses any other version. */
#define JSONL_VERSION 1

/* Parses one line (len bytes, without its newline).  0 and *msg (the caller's to
 * cJSON_Delete), or -EPROTO (not one JSON object, a NUL byte, longer than
 * max) / -EPROTONOSUPPORT (another version) with *why set. */
int jsonl_parse(const char *line, size_t len, size_t max, cJSON **msg, const char **why);

/* Sends msg as one line with "v" set (msg itself is not changed), with
 * pass_fd attached when >= 0.  0 or -errno. */
int jsonl_send(int sock, const cJSON *msg, int pass_fd);

/* Reads one message of at most max bytes, waiting up to timeout_ms in all
 * (-ETIMEDOUT), and the descriptor passed with it into *fd_out (-1 if
 * none; NULL: a descriptor is refused).  The peer sends exactly one line:
 * bytes after its newline are refused.  0 or -errno with *why set. */
int jsonl_recv(int sock, size_t max, int timeout_ms, cJSON **msg, int *fd_out, const char **why);

#endif
