/* Secret store, per-sandbox secret sets, `kosa8 secret`, and the
 * per-sandbox interception CA. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/pem.h>
#include <openssl/x509_vfy.h>

#include "cli/commands.h"
#include "common/util.h"
#include "proxy/ca.h"
#include "proxy/secrets.h"

static char tmp[64];

static int setup(void **state)
{
	snprintf(tmp, sizeof(tmp), "/tmp/kosa8-test-secrets-XXXXXX");
	assert_non_null(mkdtemp(tmp));
	setenv("KOSA8_CONFIG_DIR", tmp, 1);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	return system(cmd) == 0 ? 0 : -1;
}

/* The permission bits of tmp/rel. */
static mode_t mode_of(const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", tmp, rel);
	assert_int_equal(stat(path, &st), 0);
	return st.st_mode & 07777;
}

static struct secret def(const char *name, const char *host)
{
	struct secret s = {.nhosts = 1};

	strcpy(s.name, name);
	strcpy(s.hosts[0], host);
	return s;
}

static void test_store_roundtrip(void **state)
{
	struct secret s = def("API_KEY", "api.example.com"), r;
	char **names;

	strcpy(s.hosts[1], "uploads.example.com");
	s.nhosts = 2;
	strcpy(s.header, "Authorization");
	strcpy(s.format, "Bearer {}");
	assert_int_equal(secret_store(&s, "abc123", 6, false), 0);
	assert_int_equal(secret_store(&s, "abc123", 6, false), -EEXIST);
	assert_int_equal(mode_of("secrets/API_KEY.json"), 0600);
	assert_int_equal(mode_of("secrets"), 0700);
	assert_int_equal(secret_read("API_KEY", true, &r), 0);
	assert_string_equal(r.value, "abc123");
	assert_int_equal(r.nhosts, 2);
	assert_string_equal(r.hosts[1], "uploads.example.com");
	assert_string_equal(r.format, "Bearer {}");
	secret_clear(&r);
	assert_null(r.value);
	assert_int_equal(secret_read("API_KEY", false, &r), 0);
	assert_null(r.value);
	assert_int_equal(secret_names(&names), 1);
	assert_string_equal(names[0], "API_KEY");
	secret_names_free(names, 1);
	assert_int_equal(secret_remove("API_KEY"), 0);
	assert_int_equal(secret_read("API_KEY", false, &r), -ENOENT);
	assert_int_equal(secret_remove("API_KEY"), -ENOENT);
}

static void test_store_rejects(void **state)
{
	struct secret s;

	assert_false(secret_name_valid("1ABC"));
	assert_false(secret_name_valid("A-B"));
	assert_false(secret_name_valid("../x"));
	assert_true(secret_name_valid("_OK_1"));
	s = def("BAD_HOST", "192.0.2.1");
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
	s = def("BAD_HOST", "*.example.com");
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
	s = def("BAD_HOST", "Example.COM");     /* not normalised */
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
	s = def("BAD_VALUE", "example.com");
	assert_int_equal(secret_store(&s, "a\r\nX-Evil: 1", 12, false), -EINVAL);
	assert_int_equal(secret_store(&s, "", 0, false), -EINVAL);
	strcpy(s.header, "Bad Header");
	strcpy(s.format, "{}");
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
	strcpy(s.header, "X-Key");
	strcpy(s.format, "no placeholder");
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
	strcpy(s.format, "{} {}");
	assert_int_equal(secret_store(&s, "v", 1, false), -EINVAL);
}

static void test_from_env(void **state)
{
	struct secret s = def("ENV_KEY", "example.com"), r;

	strcpy(s.from_env, "KOSA8_TEST_SECRET_VAR");
	assert_int_equal(secret_store(&s, NULL, 0, true), 0);
	unsetenv("KOSA8_TEST_SECRET_VAR");
	assert_int_equal(secret_read("ENV_KEY", true, &r), -ENOKEY);
	setenv("KOSA8_TEST_SECRET_VAR", "from-the-env", 1);
	assert_int_equal(secret_read("ENV_KEY", true, &r), 0);
	assert_string_equal(r.value, "from-the-env");
	secret_clear(&r);
	/* The file never holds it. */
	{
		char path[256];
		uint8_t *buf;
		size_t len;
		snprintf(path, sizeof(path), "%s/secrets/ENV_KEY.json", tmp);
		assert_int_equal(read_file(path, 65536, &buf, &len), 0);
		assert_null(memmem(buf, len, "from-the-env", 12));
		free(buf);
	}
	assert_int_equal(secret_remove("ENV_KEY"), 0);
}

static void test_set(void **state)
{
	struct secret a = def("KEY_A", "api.example.com"), b = def("KEY_B", "other.example.org");
	const char *both[] = {"KEY_A", "KEY_B"}, *dup[] = {"KEY_A", "KEY_A"}, *missing[] = {"NOPE"};
	char sb1[128], sb2[128], sb3[128], sb4[128], ph[SECRET_PLACEHOLDER_MAX + 1];
	struct secret_set *set, *set2;
	const char *const *env;

	snprintf(sb1, sizeof(sb1), "%s/sb1", tmp);
	snprintf(sb2, sizeof(sb2), "%s/sb2", tmp);
	mkdir(sb1, 0700);
	mkdir(sb2, 0700);
	assert_int_equal(secret_store(&a, "value-a", 7, true), 0);
	assert_int_equal(secret_store(&b, "value-b", 7, true), 0);
	assert_int_equal(secret_set_load(both, 2, sb1, &set), 0);
	assert_int_equal(secret_set_count(set), 2);
	env = secret_set_env(set);
	assert_non_null(env[0]);
	assert_non_null(env[1]);
	assert_null(env[2]);
	assert_int_equal(strncmp(env[0], "KEY_A=k8s-placeholder-KEY_A-", 28), 0);
	assert_int_equal(strlen(env[0]), 6 + strlen("k8s-placeholder-KEY_A-") + 32);
	assert_null(strstr(env[0], "value-a"));
	strcpy(ph, secret_set_get(set, 0)->placeholder);
	assert_true(secret_set_binds(set, "api.example.com", 443));
	assert_true(secret_set_binds(set, "API.Example.COM.", 443));
	assert_true(secret_set_binds(set, "other.example.org", 443));
	assert_false(secret_set_binds(set, "example.com", 443));
	assert_false(secret_set_binds(set, "api.example.com.evil.net", 443));
	assert_false(secret_bound_to(secret_set_get(set, 0), "other.example.org", 443));
	assert_int_equal(mode_of("sb1/secret-placeholders.json"), 0600);
	secret_set_free(set);
	/* Stable for one sandbox, different for another. */
	assert_int_equal(secret_set_load(both, 2, sb1, &set), 0);
	assert_string_equal(secret_set_get(set, 0)->placeholder, ph);
	assert_int_equal(secret_set_load(both, 2, sb2, &set2), 0);
	assert_string_not_equal(secret_set_get(set2, 0)->placeholder, ph);
	secret_set_free(set);
	secret_set_free(set2);
	/* A fork (sb3) gets its parent's placeholders; no table, nothing copied. */
	snprintf(sb3, sizeof(sb3), "%s/sb3", tmp);
	mkdir(sb3, 0700);
	assert_int_equal(secret_placeholders_copy(sb1, sb3), 0);
	assert_int_equal(mode_of("sb3/secret-placeholders.json"), 0600);
	assert_int_equal(secret_set_load(both, 2, sb3, &set), 0);
	assert_string_equal(secret_set_get(set, 0)->placeholder, ph);
	secret_set_free(set);
	snprintf(sb4, sizeof(sb4), "%s/sb4", tmp);
	mkdir(sb4, 0700);
	assert_int_equal(secret_placeholders_copy(sb4, sb3), 0);
	assert_int_equal(secret_set_load(both, 2, sb3, &set), 0);
	assert_string_equal(secret_set_get(set, 0)->placeholder, ph);
	secret_set_free(set);
	assert_int_equal(secret_set_load(dup, 2, sb1, &set), -EINVAL);
	assert_int_equal(secret_set_load(missing, 1, sb1, &set), -ENOENT);
	assert_null(set);
	assert_int_equal(secret_set_load(NULL, 0, sb1, &set), 0);
	assert_null(secret_set_env(set)[0]);
	assert_false(secret_set_binds(set, "api.example.com", 443));
	secret_set_free(set);
}

/* Runs `kosa8 secret ...` in-process with stdin from text. */
static int run_cli(const char *stdin_text, int argc, const char **argv)
{
	int p[2], saved = dup(0), r;

	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], stdin_text, strlen(stdin_text)), (ssize_t)strlen(stdin_text));
	close(p[1]);
	dup2(p[0], 0);
	close(p[0]);
	clearerr(stdin);
	r = cmd_secret(argc, (char **)argv);
	dup2(saved, 0);
	close(saved);
	clearerr(stdin);
	return r;
}

/* Issue 23 item 10: a secret is bound to host and port (443 unless
 * named), not to every port of the host. */
static void test_host_port(void **state)
{
	struct secret s = {0}, r;
	const char *names[] = {"PORT_KEY"};
	char sb[128], path[300];
	struct secret_set *set;
	FILE *f;

	strcpy(s.name, "PORT_KEY");
	assert_int_equal(secret_add_host(&s, "API.example.com"), 0);
	assert_int_equal(secret_add_host(&s, "up.example.com:8443"), 0);
	assert_int_equal(s.ports[0], 443);
	assert_int_equal(s.ports[1], 8443);
	assert_int_equal(secret_add_host(&s, "a.example.com:0"), -EINVAL);
	assert_int_equal(secret_add_host(&s, "a.example.com:65536"), -EINVAL);
	assert_int_equal(secret_add_host(&s, "a.example.com:"), -EINVAL);
	assert_int_equal(secret_add_host(&s, "a.example.com:+1"), -EINVAL);
	assert_int_equal(secret_add_host(&s, "a.example.com:44x"), -EINVAL);
	/* The port reads as in a policy file: at most five digits. */
	assert_int_equal(secret_add_host(&s, "a.example.com:0000443"), -EINVAL);
	assert_int_equal(secret_add_host(&s, "10.0.0.1:443"), -EINVAL);
	assert_int_equal(s.nhosts, 2);
	assert_int_equal(secret_store(&s, "port-value", 10, true), 0);
	assert_int_equal(secret_read("PORT_KEY", false, &r), 0);
	assert_int_equal(r.ports[0], 443);
	assert_int_equal(r.ports[1], 8443);
	snprintf(sb, sizeof(sb), "%s/sbp", tmp);
	mkdir(sb, 0700);
	assert_int_equal(secret_set_load(names, 1, sb, &set), 0);
	assert_true(secret_set_binds(set, "api.example.com", 443));
	assert_false(secret_set_binds(set, "api.example.com", 80));
	assert_false(secret_set_binds(set, "api.example.com", 8443));
	assert_false(secret_set_binds(set, "api.example.com", 25));
	assert_true(secret_set_binds(set, "up.example.com", 8443));
	assert_false(secret_set_binds(set, "up.example.com", 443));
	secret_set_free(set);
	/* A file written before ports were bound names bare hosts: 443. */
	snprintf(path, sizeof(path), "%s/secrets/OLD_KEY.json", tmp);
	assert_non_null(f = fopen(path, "w"));
	fputs("{\"name\":\"OLD_KEY\",\"hosts\":[\"old.example.com\"],\"value\":\"old-value\"}", f);
	fclose(f);
	assert_int_equal(secret_read("OLD_KEY", false, &r), 0);
	assert_int_equal(r.ports[0], 443);
	assert_string_equal(r.hosts[0], "old.example.com");
	assert_int_equal(secret_remove("OLD_KEY"), 0);
	assert_int_equal(secret_remove("PORT_KEY"), 0);
}

static void test_cli(void **state)
{
	const char *add[] = {"secret", "add", "CLI_KEY", "--host", "API.Example.com", "--header",
			     "Authorization", "--format", "Bearer {}"};
	const char *add_ip[] = {"secret", "add", "CLI_IP", "--host", "10.0.0.1"};
	const char *rm[] = {"secret", "rm", "CLI_KEY"};
	const char *ls[] = {"secret", "ls"};
	struct secret r;

	assert_int_equal(run_cli("cli-value\n", 9, add), 0);
	assert_int_equal(secret_read("CLI_KEY", true, &r), 0);
	assert_string_equal(r.value, "cli-value");
	assert_string_equal(r.hosts[0], "api.example.com");
	assert_string_equal(r.header, "Authorization");
	secret_clear(&r);
	assert_int_equal(run_cli("again\n", 9, add), 1);      /* exists */
	assert_int_equal(run_cli("x\n", 5, add_ip), 2);
	assert_int_equal(run_cli("", 2, ls), 0);
	assert_int_equal(run_cli("", 3, rm), 0);
	assert_int_equal(run_cli("", 3, rm), 1);

	/* The longest value, with its CR LF, fits; one byte more does not. */
	{
		const char *add_long[] = {"secret", "add", "CLI_LONG", "--host", "example.com"};
		char *v = malloc(SECRET_VALUE_MAX + 3);
		memset(v, 'v', SECRET_VALUE_MAX);
		strcpy(v + SECRET_VALUE_MAX, "\r\n");
		assert_int_equal(run_cli(v, 5, add_long), 0);
		assert_int_equal(secret_read("CLI_LONG", true, &r), 0);
		assert_int_equal(r.value_len, SECRET_VALUE_MAX);
		secret_clear(&r);
		assert_int_equal(secret_remove("CLI_LONG"), 0);
		strcpy(v + SECRET_VALUE_MAX, "w\n");
		assert_int_equal(run_cli(v, 5, add_long), 1);
		assert_int_equal(run_cli("", 5, add_long), 1);   /* empty */
		assert_int_equal(secret_read("CLI_LONG", false, &r), -ENOENT);
		free(v);
	}
}

static void test_ca(void **state)
{
	char dir[128], host[300];
	struct egress_ca *ca, *again;
	X509 *leaf, *leaf2;
	EVP_PKEY *key;
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *vctx = X509_STORE_CTX_new();
	char *pem;

	snprintf(dir, sizeof(dir), "%s/sb-ca", tmp);
	mkdir(dir, 0700);
	assert_int_equal(egress_ca_open(dir, "sb", &ca), 0);
	assert_int_equal(mode_of("sb-ca/" EGRESS_CA_KEY_FILE), 0600);
	assert_non_null(strstr(egress_ca_cert_pem(ca), "BEGIN CERTIFICATE"));
	assert_null(strstr(egress_ca_cert_pem(ca), "PRIVATE"));
	pem = strdup(egress_ca_cert_pem(ca));
	assert_int_equal(egress_ca_open(dir, "sb", &again), 0);   /* loads, not remakes */
	assert_string_equal(egress_ca_cert_pem(again), pem);
	egress_ca_free(again);
	free(pem);

	/* A leaf verifies against the CA for its name, and only its name. */
	assert_int_equal(egress_ca_leaf(ca, "api.example.com", &leaf, &key), 0);
	{
		BIO *b = BIO_new_mem_buf(egress_ca_cert_pem(ca), -1);
		X509 *cacert = PEM_read_bio_X509(b, NULL, NULL, NULL);
		assert_int_equal(X509_STORE_add_cert(store, cacert), 1);
		X509_free(cacert);
		BIO_free(b);
	}
	X509_STORE_CTX_init(vctx, store, leaf, NULL);
	X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(vctx), "api.example.com", 0);
	assert_int_equal(X509_verify_cert(vctx), 1);
	X509_STORE_CTX_cleanup(vctx);
	X509_STORE_CTX_init(vctx, store, leaf, NULL);
	X509_VERIFY_PARAM_set1_host(X509_STORE_CTX_get0_param(vctx), "other.example.com", 0);
	assert_int_not_equal(X509_verify_cert(vctx), 1);
	assert_int_equal(X509_check_private_key(leaf, key), 1);
	/* Cached: the same certificate the second time. */
	assert_int_equal(egress_ca_leaf(ca, "api.example.com", &leaf2, &key), 0);
	assert_ptr_equal(leaf, leaf2);
	X509_free(leaf2);
	EVP_PKEY_free(key);
	EVP_PKEY_free(key);
	X509_free(leaf);
	/* A name longer than a CN can hold still gets a leaf. */
	memset(host, 'a', 63);
	strcpy(host + 63, ".bbbbbbbbbbbbbbbbbbbb.example.com");
	assert_int_equal(egress_ca_leaf(ca, host, &leaf, &key), 0);
	X509_free(leaf);
	EVP_PKEY_free(key);
	X509_STORE_CTX_free(vctx);
	X509_STORE_free(store);
	egress_ca_free(ca);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_store_roundtrip),
		cmocka_unit_test(test_store_rejects),
		cmocka_unit_test(test_from_env),
		cmocka_unit_test(test_set),
		cmocka_unit_test(test_host_port),
		cmocka_unit_test(test_cli),
		cmocka_unit_test(test_ca),
	};
	return cmocka_run_group_tests_name("secrets", tests, setup, teardown);
}
