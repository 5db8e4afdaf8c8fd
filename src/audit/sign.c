#include "audit/sign.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

int audit_key_dir(char *buf, size_t len)
{
	char base[PATH_MAX];
	int err = kosa8_config_dir(base, sizeof(base));
	int n;

	if (err)
		return err;
	n = snprintf(buf, len, "%s/audit", base);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int load_private(const char *path, EVP_PKEY **key)
{
	struct stat st;
	BIO *bio = NULL;
	EVP_PKEY *k = NULL;
	int fd, err = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	/* Like ssh: a signing key others can read proves nothing. */
	if (!S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid()) {
		err = -EPERM;
		goto out;
	}
	bio = BIO_new_fd(fd, BIO_NOCLOSE);
	if (!bio) {
		err = -ENOMEM;
		goto out;
	}
	k = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
	if (!k || EVP_PKEY_get_id(k) != EVP_PKEY_ED25519) {
		err = -EINVAL;
		goto out;
	}
	*key = k;
	k = NULL;
out:
	EVP_PKEY_free(k);
	BIO_free(bio);
	close(fd);
	return err;
}

/* Writes PEM through a temporary file in dir, then puts it in place: with
 * link() when `exclusive` (the loser of a creation race keeps the winner's
 * key), else with rename(). */
static int write_pem_file(const char *dir, const char *path, EVP_PKEY *k, int is_private,
			  int exclusive)
{
	char tmp[PATH_MAX];
	BIO *bio = NULL;
	int fd, err = 0, n;

	n = snprintf(tmp, sizeof(tmp), "%s/.tmp-key-XXXXXX", dir);
	if (n < 0 || (size_t)n >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkstemp(tmp); /* mode 0600 */
	if (fd < 0)
		return -errno;
	if (!is_private && fchmod(fd, 0644) < 0) {
		err = -errno;
		goto out;
	}
	bio = BIO_new_fd(fd, BIO_NOCLOSE);
	if (!bio || !(is_private ? PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL, NULL)
				 : PEM_write_bio_PUBKEY(bio, k)) ||
	    BIO_flush(bio) != 1) {
		err = -EIO;
		goto out;
	}
	if (fsync(fd) < 0) {
		err = -errno;
		goto out;
	}
	if (exclusive ? link(tmp, path) : rename(tmp, path))
		err = -errno;
out:
	BIO_free(bio);
	close(fd);
	unlink(tmp); /* after rename() this fails harmlessly */
	return err;
}

static int create_key(const char *dir, const char *path)
{
	char pub[PATH_MAX];
	EVP_PKEY *k = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
	int err, n, dfd;

	if (!k)
		return -ENOMEM;
	err = write_pem_file(dir, path, k, 1, 1);
	if (err)
		goto out;
	n = snprintf(pub, sizeof(pub), "%s/%s", dir, AUDIT_PUB_FILE);
	err = n < 0 || (size_t)n >= sizeof(pub) ? -ENAMETOOLONG : 0;
	if (!err)
		err = write_pem_file(dir, pub, k, 0, 0);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd); /* the new names, not only the contents */
		close(dfd);
	}
out:
	EVP_PKEY_free(k);
	return err;
}

/* dir (NULL: audit_key_dir()) into d, the key file's path into path. */
static int key_paths(const char *dir, char d[PATH_MAX], char path[PATH_MAX])
{
	int err, n;

	if (dir) {
		n = snprintf(d, PATH_MAX, "%s", dir);
		if (n < 0 || n >= PATH_MAX)
			return -ENAMETOOLONG;
	} else if ((err = audit_key_dir(d, PATH_MAX))) {
		return err;
	}
	n = snprintf(path, PATH_MAX, "%s/%s", d, AUDIT_KEY_FILE);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

int audit_key_load(const char *dir, EVP_PKEY **key)
{
	char d[PATH_MAX], path[PATH_MAX];
	int err;

	if ((err = key_paths(dir, d, path)) || (err = process_hold_secrets()))
		return err;
	return load_private(path, key);
}

int audit_key_load_or_create(const char *dir, EVP_PKEY **key)
{
	char d[PATH_MAX], path[PATH_MAX];
	int err;

	if ((err = key_paths(dir, d, path)) || (err = process_hold_secrets()))
		return err;
	err = load_private(path, key);
	if (err != -ENOENT)
		return err;
	err = mkdir_p(d, 0700);
	if (err)
		return err;
	err = create_key(d, path);
	if (err && err != -EEXIST)
		return err;
	return load_private(path, key);
}

int audit_key_public(EVP_PKEY *key, uint8_t pub[AUDIT_PUBKEY_LEN])
{
	size_t len = AUDIT_PUBKEY_LEN;

	if (EVP_PKEY_get_raw_public_key(key, pub, &len) != 1 || len != AUDIT_PUBKEY_LEN)
		return -EINVAL;
	return 0;
}

int audit_key_mac_key(EVP_PKEY *key, uint8_t k[AUDIT_HASH_LEN])
{
	static const char domain[] = "KOSA8 AUDIT STATE MAC V1\n";
	uint8_t priv[32];
	size_t plen = sizeof(priv);
	EVP_MD_CTX *c;
	int ok;

	if (EVP_PKEY_get_raw_private_key(key, priv, &plen) != 1 || plen != sizeof(priv))
		return -EINVAL;
	/* A key of its own for the MAC, never the signing key's bytes as such. */
	c = EVP_MD_CTX_new();
	ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) == 1 &&
	     EVP_DigestUpdate(c, domain, sizeof(domain) - 1) == 1 &&
	     EVP_DigestUpdate(c, priv, sizeof(priv)) == 1 && EVP_DigestFinal_ex(c, k, NULL) == 1;
	EVP_MD_CTX_free(c);
	OPENSSL_cleanse(priv, sizeof(priv));
	return ok ? 0 : -EINVAL;
}

int audit_mac(const uint8_t k[AUDIT_HASH_LEN], const void *msg, size_t len,
	      uint8_t out[AUDIT_HASH_LEN])
{
	unsigned int olen = AUDIT_HASH_LEN;

	return HMAC(EVP_sha256(), k, AUDIT_HASH_LEN, msg, len, out, &olen) && olen == AUDIT_HASH_LEN
		       ? 0
		       : -EINVAL;
}

int audit_pubkey_parse(const uint8_t *buf, size_t len, uint8_t pub[AUDIT_PUBKEY_LEN])
{
	static const char pem_tag[] = "-----BEGIN PUBLIC KEY-----";
	BIO *bio;
	EVP_PKEY *k;
	int err;

	while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
		len--;
	if (len == 2 * AUDIT_PUBKEY_LEN)
		return audit_unhex((const char *)buf, len, pub, AUDIT_PUBKEY_LEN);
	if (len < sizeof(pem_tag) - 1 || memcmp(buf, pem_tag, sizeof(pem_tag) - 1) ||
	    len > 4096)
		return -EINVAL;
	bio = BIO_new_mem_buf(buf, (int)len);
	if (!bio)
		return -ENOMEM;
	k = PEM_read_bio_PUBKEY(bio, NULL, NULL, NULL);
	BIO_free(bio);
	if (!k)
		return -EINVAL;
	err = EVP_PKEY_get_id(k) == EVP_PKEY_ED25519 ? audit_key_public(k, pub) : -EINVAL;
	EVP_PKEY_free(k);
	return err;
}

int audit_pubkey_load(const char *path, uint8_t pub[AUDIT_PUBKEY_LEN])
{
	uint8_t *buf = NULL;
	size_t len;
	int err = read_file(path, 64 * KiB, &buf, &len);

	if (err)
		return err;
	err = audit_pubkey_parse(buf, len, pub);
	free(buf);
	return err;
}

int audit_pubkey_pem(const uint8_t pub[AUDIT_PUBKEY_LEN], char *buf, size_t cap)
{
	EVP_PKEY *k = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, AUDIT_PUBKEY_LEN);
	BIO *bio = BIO_new(BIO_s_mem());
	char *data;
	long n;
	int err = -ENOMEM;

	if (!k || !bio || !PEM_write_bio_PUBKEY(bio, k))
		goto out;
	n = BIO_get_mem_data(bio, &data);
	err = -ENOSPC;
	if (n <= 0 || (size_t)n >= cap)
		goto out;
	memcpy(buf, data, (size_t)n);
	buf[n] = '\0';
	err = (int)n;
out:
	BIO_free(bio);
	EVP_PKEY_free(k);
	return err;
}

int audit_head_sign(EVP_PKEY *key, struct audit_head *h)
{
	uint8_t msg[AUDIT_HEAD_MSG_LEN];
	size_t siglen = AUDIT_SIG_LEN;
	EVP_MD_CTX *ctx;
	int err;

	err = audit_key_public(key, h->pubkey);
	if (err)
		return err;
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	audit_head_message(h, msg);
	/* Ed25519 hashes internally: no digest, one-shot call. */
	if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) != 1 ||
	    EVP_DigestSign(ctx, h->sig, &siglen, msg, sizeof(msg)) != 1 ||
	    siglen != AUDIT_SIG_LEN)
		err = -EIO;
	EVP_MD_CTX_free(ctx);
	return err;
}

struct audit_head_checker {
	EVP_PKEY *key;
	EVP_MD_CTX *ctx;
};

int audit_head_checker_new(const uint8_t pub[AUDIT_PUBKEY_LEN], struct audit_head_checker **out)
{
	struct audit_head_checker *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, NULL, pub, AUDIT_PUBKEY_LEN);
	c->ctx = EVP_MD_CTX_new();
	if (!c->key || !c->ctx) {
		audit_head_checker_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void audit_head_checker_free(struct audit_head_checker *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->ctx);
	EVP_PKEY_free(c->key);
	free(c);
}

int audit_head_check(struct audit_head_checker *c, const struct audit_head *h)
{
	uint8_t msg[AUDIT_HEAD_MSG_LEN];

	audit_head_message(h, msg);
	/* Pure Ed25519 is one-shot: every check starts with a fresh init. */
	if (EVP_DigestVerifyInit(c->ctx, NULL, NULL, NULL, c->key) == 1 &&
	    EVP_DigestVerify(c->ctx, h->sig, AUDIT_SIG_LEN, msg, sizeof(msg)) == 1)
		return 0;
	return -EBADMSG;
}

int audit_head_verify(const uint8_t pub[AUDIT_PUBKEY_LEN], const struct audit_head *h)
{
	struct audit_head_checker *c;
	int err = audit_head_checker_new(pub, &c);

	if (err)
		return err;
	err = audit_head_check(c, h);
	audit_head_checker_free(c);
	return err;
}
