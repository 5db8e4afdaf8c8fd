/* The per-sandbox certificate authority for TLS interception.
 *
 * Made on first use in the sandbox's state folder: egress-ca.key (0600,
 * never leaves the host: the guest gets only the certificate, for its trust
 * store) and egress-ca.crt.  The proxy asks it for a leaf certificate for a
 * host name it intercepts; leaves are made on the fly (ECDSA P-256, one
 * subjectAltName, serverAuth, short-lived) and cached.  Thread-safe. */
#ifndef KOSA8_PROXY_CA_H
#define KOSA8_PROXY_CA_H

#include <openssl/evp.h>
#include <openssl/x509.h>

struct egress_ca;

#define EGRESS_CA_KEY_FILE "egress-ca.key"
#define EGRESS_CA_CERT_FILE "egress-ca.crt"

/* Loads the CA from state_dir, creating it there if absent.  -EBADMSG if
 * the files exist but do not hold a matching key and CA certificate. */
int egress_ca_open(const char *state_dir, const char *sandbox, struct egress_ca **out);
void egress_ca_free(struct egress_ca *ca);

/* The CA certificate, PEM, NUL-terminated, owned by ca: for the guest. */
const char *egress_ca_cert_pem(const struct egress_ca *ca);

/* A leaf certificate for host (a normalised name) and its key, each with a
 * reference the caller drops (X509_free, EVP_PKEY_free). */
int egress_ca_leaf(struct egress_ca *ca, const char *host, X509 **cert, EVP_PKEY **key);

#endif
