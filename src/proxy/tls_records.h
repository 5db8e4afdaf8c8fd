/* TLS record framing of a relayed connection, both ways, for as long as it
 * lasts.
 *
 * The proxy checks a guest's first ClientHello and then relays bytes it
 * does not decrypt.  Without this, a guest could send a ClientHello with an
 * allowed SNI and then anything at all (plain SMTP to port 25 behind an
 * allowed name).  Here every byte after the hello must belong to a TLS
 * record (RFC 8446 5.1, RFC 5246 6.2):
 *
 *   - content type change_cipher_spec, alert, handshake or application
 *     data (heartbeat and anything else: refused);
 *   - version 3.1-3.3 (3.0 only on the client's plaintext handshake, as
 *     in a first ClientHello);
 *   - length 1..16384 for plaintext records, up to 16384 + 2048 for
 *     protected ones;
 *   - change_cipher_spec is the one byte 1; a plaintext alert two bytes;
 *   - plaintext handshake records carry whole handshake messages back to
 *     back (type, 24-bit length); the server's first is a ServerHello,
 *     whose chosen version tells which later handshake records are
 *     encrypted (TLS 1.2 after that side's change_cipher_spec; in TLS 1.3
 *     every encrypted record is application data);
 *   - every ClientHello the client sends in the clear (a second one after
 *     a HelloRetryRequest, or any other) is parsed and handed to the
 *     caller's check (tls_records_ctx.on_hello): its SNI must still be the
 *     name.  The server never sends a ClientHello.
 *
 * The parser is streaming and bounded: bytes may come in any split, state
 * is a few counters and one ClientHello buffer (TLS_HELLO_MAX). */
#ifndef KOSA8_PROXY_TLS_RECORDS_H
#define KOSA8_PROXY_TLS_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proxy/tls_hello.h"

#define TLS_REC_HDR 5
#define TLS_REC_PLAIN_MAX 16384
#define TLS_REC_PROTECTED_MAX (16384 + 2048)   /* RFC 5246 6.2.3 */

/* One direction of the connection. */
struct tls_records {
	bool from_client;
	bool ccs_seen;               /* this side sent change_cipher_spec */
	uint8_t hdr[TLS_REC_HDR];
	uint8_t hdr_got;
	uint8_t type;                /* of the record being read */
	bool plain;                  /* its body is read, not skipped */
	size_t rec_left;             /* body bytes still to come */
	/* handshake messages in the clear, across records */
	uint8_t mhdr[4];
	uint8_t mhdr_got;
	size_t msg_left;
	bool collect;                /* the message is kept (ClientHello, ServerHello) */
	uint8_t msg[TLS_HELLO_MAX];
	size_t msg_len;
	unsigned messages;
};

/* What both directions share: the version the server chose, and the check
 * for each ClientHello. */
struct tls_records_ctx {
	int version;                 /* 0 until the ServerHello */
	/* Returns 0, or a negative errno (with *why set) to end the connection. */
	int (*on_hello)(void *arg, const struct tls_hello *h, const char **why);
	void *arg;
	struct tls_records up, down;
};

/* A fresh context: up is the client's side, down the server's. */
void tls_records_init(struct tls_records_ctx *x);
/* Checks the next n bytes of one direction (&x->up or &x->down).  Returns 0
 * when all of them fit, or -EPROTO / on_hello's error with *why saying
 * which rule the first byte that did not fit broke. */
int tls_records_feed(struct tls_records_ctx *x, struct tls_records *s, const uint8_t *p,
		     size_t n, const char **why);
/* Bytes at the end of what was fed that are a record header not yet whole
 * (0-4): a relay holds them back until the header is judged. */
size_t tls_records_pending(const struct tls_records *s);

#endif
