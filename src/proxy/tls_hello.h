/* A TLS ClientHello, as much as the egress proxy needs: the server name
 * (SNI) and whether the client tries to hide it (Encrypted Client Hello).
 *
 * The input is the start of a guest's TCP stream: TLS records (RFC 8446
 * 5.1) of type handshake, whose fragments are joined into the handshake
 * message, which must be one ClientHello (RFC 8446 4.1.2, RFC 5246 7.4.1.2)
 * with well-formed extensions (no type twice) and at most one host_name in
 * server_name (RFC 6066 3).  A ClientHello may be split over several
 * records and over several reads: call again with more bytes.  Everything
 * is bounded by TLS_HELLO_MAX bytes of stream. */
#ifndef KOSA8_PROXY_TLS_HELLO_H
#define KOSA8_PROXY_TLS_HELLO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TLS_HELLO_MAX (16 * 1024)
#define TLS_SNI_MAX 255

struct tls_hello {
	bool has_sni;
	char sni[TLS_SNI_MAX + 1];   /* as sent, NUL-terminated (never holds a NUL) */
	bool ech;                    /* encrypted_client_hello or draft ESNI present */
	uint16_t legacy_version;
};

/* Returns the number of stream bytes the ClientHello takes (its records,
 * headers included) once it is complete, 0 if more bytes are needed,
 * -EPROTO if the stream does not start like a TLS handshake at all,
 * -EBADMSG if it is malformed, -E2BIG if it would exceed TLS_HELLO_MAX. */
int tls_hello_parse(const uint8_t *buf, size_t len, struct tls_hello *h);

/* The body of one ClientHello handshake message (after its 4-byte
 * header): 0 or -EBADMSG.  tls_records.c reads later hellos with it. */
int tls_client_hello_body(const uint8_t *body, size_t len, struct tls_hello *h);
/* The version a ServerHello body (after its 4-byte header) chose: the
 * supported_versions extension's if present, else legacy_version (e.g.
 * 0x0304, 0x0303), or -EBADMSG. */
int tls_server_hello_version(const uint8_t *body, size_t len);

#endif
