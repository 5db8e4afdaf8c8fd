/* The per-user Ed25519 key that signs tree heads.
 *
 * It lives in <kosa8 config dir>/audit/: the private key as PKCS#8 PEM, mode
 * 0600 (refused if anyone else may read it), and the public key as PEM next
 * to it for export.  The first process that needs a key creates it; two
 * processes racing to do so end up with the same key (link(2) decides). */
#ifndef KOSA8_AUDIT_SIGN_H
#define KOSA8_AUDIT_SIGN_H

#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>

#include "audit/format.h"

#define AUDIT_KEY_FILE "audit-ed25519.pem"
#define AUDIT_PUB_FILE "audit-ed25519.pub.pem"

/* The folder that holds the key: <kosa8_config_dir()>/audit. */
int audit_key_dir(char *buf, size_t len);

/* Loads the private key from dir (NULL: audit_key_dir()), creating it when
 * there is none.  Returns 0 or a negative errno (-EPERM: the key file is
 * readable by others). */
int audit_key_load_or_create(const char *dir, EVP_PKEY **key);
/* The same without creating one: -ENOENT when there is none yet (what
 * `kosa8 doctor` reads, so that looking never makes a key). */
int audit_key_load(const char *dir, EVP_PKEY **key);

/* The raw 32-byte public key of a loaded key. */
int audit_key_public(EVP_PKEY *key, uint8_t pub[AUDIT_PUBKEY_LEN]);

/* A MAC key derived from the private key (once per open log): for what
 * the key's holder writes for itself and must find unchanged (the writer's
 * state cache), so that whoever can write the files but lacks the key
 * cannot make the holder trust them. */
int audit_key_mac_key(EVP_PKEY *key, uint8_t k[AUDIT_HASH_LEN]);
/* HMAC-SHA-256 of msg under k. */
int audit_mac(const uint8_t k[AUDIT_HASH_LEN], const void *msg, size_t len,
	      uint8_t out[AUDIT_HASH_LEN]);

/* Reads a public key file: PEM (SubjectPublicKeyInfo, as written above or
 * by `openssl pkey -pubout`) or the key as 64 hex digits. */
int audit_pubkey_load(const char *path, uint8_t pub[AUDIT_PUBKEY_LEN]);
/* Parses the same formats from memory. */
int audit_pubkey_parse(const uint8_t *buf, size_t len, uint8_t pub[AUDIT_PUBKEY_LEN]);
/* PEM text of a raw public key into buf (NUL-terminated); returns its length. */
int audit_pubkey_pem(const uint8_t pub[AUDIT_PUBKEY_LEN], char *buf, size_t cap);

/* Fills h->pubkey and h->sig (log_id, size, time and root already set). */
int audit_head_sign(EVP_PKEY *key, struct audit_head *h);

/* 0 when h->sig is a valid signature of h by pub (which need not equal
 * h->pubkey: the caller's trusted key decides), else -EBADMSG. */
int audit_head_verify(const uint8_t pub[AUDIT_PUBKEY_LEN], const struct audit_head *h);

/* The same for many heads: the key is decoded and the context allocated
 * once (in OpenSSL 3 they cost a third of each check).  One checker per
 * thread. */
struct audit_head_checker;
int audit_head_checker_new(const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_head_checker **c);
int audit_head_check(struct audit_head_checker *c, const struct audit_head *h);
void audit_head_checker_free(struct audit_head_checker *c);

#endif
