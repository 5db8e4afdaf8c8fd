/* Per-sandbox CA and leaf certificates (ca.h), with OpenSSL 3. */
#include "proxy/ca.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "common/util.h"
#include "proxy/policy.h"

#define CA_DAYS 3650
#define LEAF_SECS (7 * 24 * 3600)
#define LEAF_REUSE_SECS (24 * 3600)     /* re-made well before it expires */
#define LEAF_CACHE 128

struct leaf {
	char host[POLICY_NAME_MAX + 1];
	X509 *cert;
	time_t made;
};

struct egress_ca {
	EVP_PKEY *key;
	X509 *cert;
	char *pem;
	EVP_PKEY *leaf_key;    /* one key for every leaf of this run */
	pthread_mutex_t lock;
	struct leaf cache[LEAF_CACHE];
	size_t next;           /* round-robin eviction */
};

static int random_serial(X509 *x)
{
	BIGNUM *bn = BN_new();
	int ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) &&
		 BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x));

	BN_free(bn);
	return ok ? 0 : -EIO;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX v3;
	X509_EXTENSION *ext;
	int ok;

	X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
	if (!(ext = X509V3_EXT_conf_nid(NULL, &v3, nid, value)))
		return -EIO;
	ok = X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok ? 0 : -EIO;
}

static X509 *cert_new(EVP_PKEY *key, const char *cn, long not_before, long secs)
{
	X509 *x = X509_new();
	X509_NAME *n;

	if (!x || !X509_set_version(x, 2) || random_serial(x) ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), not_before) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), secs) || !X509_set_pubkey(x, key) ||
	    !(n = X509_get_subject_name(x)) ||
	    /* A CN holds at most 64 characters; a leaf for a longer name has
	     * only its subjectAltName, which is what clients check anyway. */
	    (strlen(cn) <= 64 &&
	     !X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0))) {
		X509_free(x);
		return NULL;
	}
	return x;
}

static int ca_make(struct egress_ca *ca, const char *sandbox)
{
	char cn[128];

	snprintf(cn, sizeof(cn), "kosa8 sandbox CA %.80s", sandbox ? sandbox : "");
	if (!(ca->key = EVP_EC_gen("P-256")) ||
	    !(ca->cert = cert_new(ca->key, cn, -3600, (long)CA_DAYS * 24 * 3600)) ||
	    !X509_set_issuer_name(ca->cert, X509_get_subject_name(ca->cert)) ||
	    add_ext(ca->cert, ca->cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
	    add_ext(ca->cert, ca->cert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
	    add_ext(ca->cert, ca->cert, NID_subject_key_identifier, "hash") ||
	    !X509_sign(ca->cert, ca->key, EVP_sha256()))
		return -EIO;
	return 0;
}

static int pem_write_file(const char *path, mode_t mode, EVP_PKEY *key, X509 *cert)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
	BIO *b;
	int ok;

	if (fd < 0)
		return -errno;
	if (!(b = BIO_new_fd(fd, BIO_CLOSE))) {
		close(fd);
		return -ENOMEM;
	}
	ok = key ? PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL)
		 : PEM_write_bio_X509(b, cert);
	ok = ok && BIO_flush(b) == 1 && fsync(fd) == 0;
	BIO_free(b);
	if (!ok)
		unlink(path);
	return ok ? 0 : -EIO;
}

static int ca_load(struct egress_ca *ca, const char *keyp, const char *certp)
{
	BIO *kb = BIO_new_file(keyp, "r"), *cb = BIO_new_file(certp, "r");
	int err = 0;

	if (!kb || !cb)
		err = -ENOENT;
	else if (!(ca->key = PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL)) ||
		 !(ca->cert = PEM_read_bio_X509(cb, NULL, NULL, NULL)) ||
		 X509_check_private_key(ca->cert, ca->key) != 1 || X509_check_ca(ca->cert) < 1)
		err = -EBADMSG;
	BIO_free(kb);
	BIO_free(cb);
	return err;
}

static int ca_files(struct egress_ca *ca, const char *state_dir, const char *sandbox)
{
	char keyp[PATH_MAX], certp[PATH_MAX];
	int err;

	if ((size_t)snprintf(keyp, sizeof(keyp), "%s/%s", state_dir, EGRESS_CA_KEY_FILE) >= sizeof(keyp) ||
	    (size_t)snprintf(certp, sizeof(certp), "%s/%s", state_dir, EGRESS_CA_CERT_FILE) >= sizeof(certp))
		return -ENAMETOOLONG;
	if (access(keyp, F_OK) == 0 || access(certp, F_OK) == 0)
		return ca_load(ca, keyp, certp);
	if ((err = ca_make(ca, sandbox)) || (err = pem_write_file(keyp, 0600, ca->key, NULL)))
		return err;
	if ((err = pem_write_file(certp, 0644, NULL, ca->cert)))
		unlink(keyp);
	return err;
}

static int ca_pem(struct egress_ca *ca)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *data;
	long len;
	int err = -ENOMEM;

	if (b && PEM_write_bio_X509(b, ca->cert) && (len = BIO_get_mem_data(b, &data)) > 0 &&
	    (ca->pem = strndup(data, (size_t)len)))
		err = 0;
	BIO_free(b);
	return err;
}

int egress_ca_open(const char *state_dir, const char *sandbox, struct egress_ca **out)
{
	struct egress_ca *ca = calloc(1, sizeof(*ca));
	int err;

	*out = NULL;
	if (!ca)
		return -ENOMEM;
	if ((err = process_hold_secrets())) {
		free(ca);
		return err;
	}
	pthread_mutex_init(&ca->lock, NULL);
	if (!(err = ca_files(ca, state_dir, sandbox)) && !(err = ca_pem(ca)))
		err = (ca->leaf_key = EVP_EC_gen("P-256")) ? 0 : -EIO;
	if (err) {
		egress_ca_free(ca);
		return err;
	}
	*out = ca;
	return 0;
}

void egress_ca_free(struct egress_ca *ca)
{
	if (!ca)
		return;
	for (size_t i = 0; i < LEAF_CACHE; i++)
		X509_free(ca->cache[i].cert);
	EVP_PKEY_free(ca->leaf_key);
	EVP_PKEY_free(ca->key);
	X509_free(ca->cert);
	free(ca->pem);
	pthread_mutex_destroy(&ca->lock);
	free(ca);
}

const char *egress_ca_cert_pem(const struct egress_ca *ca)
{
	return ca->pem;
}

static X509 *leaf_make(struct egress_ca *ca, const char *host)
{
	char san[POLICY_NAME_MAX + 8];
	X509 *x = cert_new(ca->leaf_key, host, -3600, LEAF_SECS);

	snprintf(san, sizeof(san), "DNS:%s", host);
	if (!x || !X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) ||
	    add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") ||
	    add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature") ||
	    add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") ||
	    add_ext(x, ca->cert, NID_subject_alt_name, san) ||
	    add_ext(x, ca->cert, NID_authority_key_identifier, "keyid:always") ||
	    !X509_sign(x, ca->key, EVP_sha256())) {
		X509_free(x);
		return NULL;
	}
	return x;
}

int egress_ca_leaf(struct egress_ca *ca, const char *host, X509 **cert, EVP_PKEY **key)
{
	time_t now = time(NULL);
	struct leaf *slot = NULL;
	X509 *x;
	int err = 0;

	if (strlen(host) > POLICY_NAME_MAX)
		return -EINVAL;
	pthread_mutex_lock(&ca->lock);
	for (size_t i = 0; i < LEAF_CACHE && !slot; i++) {
		if (ca->cache[i].cert && !strcmp(ca->cache[i].host, host))
			slot = &ca->cache[i];
	}
	if (!slot || now - slot->made > LEAF_REUSE_SECS) {
		if (!(x = leaf_make(ca, host))) {
			err = -EIO;
			goto out;
		}
		if (!slot) {
			slot = &ca->cache[ca->next];
			ca->next = (ca->next + 1) % LEAF_CACHE;
		}
		X509_free(slot->cert);
		strcpy(slot->host, host);
		slot->cert = x;
		slot->made = now;
	}
	X509_up_ref(slot->cert);
	EVP_PKEY_up_ref(ca->leaf_key);
	*cert = slot->cert;
	*key = ca->leaf_key;
out:
	pthread_mutex_unlock(&ca->lock);
	return err;
}
