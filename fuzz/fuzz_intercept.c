/* libFuzzer target: what an upstream server sends back on an intercepted
 * connection (src/proxy/intercept.c: response heads, framing, chunked
 * decoding, redaction, re-framing).
 *
 * Each run is the real thing over socketpairs: a guest TLS client sends one
 * request carrying a secret's placeholder; egress_connect_serve intercepts
 * (sandbox CA towards the guest, verified TLS upstream); the "server" (a
 * TLS server thread with a certificate from a CA the proxy trusts) answers
 * with the fuzz input, byte for byte, then closes.  Checks beyond "no
 * crash": the server received the real value, and the guest never sees the
 * value, whatever the server sent. */
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/ssl.h>

#include "proxy/ca.h"
#include "proxy/egress.h"
#include "proxy/secrets.h"

#define NAME "api.fuzz.example"
#define VALUE "sk-fuzz-SECRET-VALUE-123456"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct egress_ctx ctx;
static SSL_CTX *server_ctx, *client_ctx;
static char request[512];
static const uint8_t *answer;
static size_t answer_len;
static pthread_t server_thread;
static bool server_started, server_saw_value;

static bool injected;

static void audit_drop(void *arg, const char *type, cJSON *d)
{
	if (!strcmp(type, "secret.use"))
		injected = true;
	cJSON_Delete(d);
}

static void timeouts(int fd)
{
	struct timeval tv = {.tv_sec = 3};

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* The upstream server: reads the request head, answers with the input. */
static void *server(void *arg)
{
	int fd = (int)(intptr_t)arg;
	SSL *s = SSL_new(server_ctx);
	char head[4096];
	int n, got = 0;

	timeouts(fd);
	SSL_set_fd(s, fd);
	if (SSL_accept(s) == 1) {
		while (got < (int)sizeof(head) - 1 && (n = SSL_read(s, head + got, (int)sizeof(head) - 1 - got)) > 0) {
			got += n;
			head[got] = 0;
			if (strstr(head, "\r\n\r\n"))
				break;
		}
		server_saw_value = got > 0 && strstr(head, VALUE);
		if (answer_len)
			SSL_write(s, answer, (int)answer_len);
		SSL_shutdown(s);
	}
	SSL_free(s);
	close(fd);
	return NULL;
}

static int upstream(void *arg, const char *name, uint16_t port)
{
	int sp[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		abort();
	server_started = pthread_create(&server_thread, NULL, server, (void *)(intptr_t)sp[0]) == 0;
	return sp[1];
}

/* The guest: one request, then everything until the proxy closes. */
static void *client(void *arg)
{
	int fd = (int)(intptr_t)arg, n;
	SSL *s = SSL_new(client_ctx);
	size_t cap = 1 << 20, got = 0;
	char *buf = malloc(cap);

	timeouts(fd);
	SSL_set_fd(s, fd);
	SSL_set_tlsext_host_name(s, NAME);
	if (SSL_connect(s) == 1 && SSL_write(s, request, (int)strlen(request)) > 0) {
		while (got < cap && (n = SSL_read(s, buf + got, (int)(cap - got))) > 0)
			got += (size_t)n;
	}
	if (memmem(buf, got, VALUE, strlen(VALUE)))
		abort();   /* the value reached the guest */
	free(buf);
	SSL_free(s);
	return NULL;
}

static char dir[] = "/tmp/kosa8-fuzz-intercept-XXXXXX", up[] = "/tmp/kosa8-fuzz-upca-XXXXXX";

/* The scratch folders hold CA keys: gone when the fuzzer exits. */
static void cleanup(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s %s", dir, up);
	if (system(cmd))
		fprintf(stderr, "fuzz_intercept: could not remove %s, %s\n", dir, up);
}

static void make_dir(char *tmpl)
{
	if (!mkdtemp(tmpl))
		abort();
}

static void init(void)
{
	static char cafile[128];
	struct secret s = {.name = "TOKEN", .nhosts = 1};
	const char *names[] = {"TOKEN"};
	struct policy_error perr;
	struct secret_set *set;
	struct egress_ca *ca;
	static struct egress_ca *upca;   /* kept: the run's upstream CA */
	struct policy *p;
	struct names *n;
	X509 *cert;
	EVP_PKEY *key;
	FILE *f;
	uint32_t a;

	/* The test's own TLS ends write with write(2): a peer gone is EPIPE. */
	signal(SIGPIPE, SIG_IGN);
	make_dir(dir);
	make_dir(up);
	atexit(cleanup);
	setenv("KOSA8_CONFIG_DIR", dir, 1);
	strcpy(s.hosts[0], NAME);
	if (secret_store(&s, VALUE, strlen(VALUE), true) || secret_set_load(names, 1, dir, &set) ||
	    egress_ca_open(dir, "fuzz", &ca) || egress_ca_open(up, "upstream", &upca) ||
	    egress_ca_leaf(upca, NAME, &cert, &key))
		abort();
	snprintf(cafile, sizeof(cafile), "%s/upstream-ca.pem", up);
	if (!(f = fopen(cafile, "w")) || fputs(egress_ca_cert_pem(upca), f) < 0 || fclose(f))
		abort();
	server_ctx = SSL_CTX_new(TLS_server_method());
	client_ctx = SSL_CTX_new(TLS_client_method());
	if (SSL_CTX_use_certificate(server_ctx, cert) != 1 || SSL_CTX_use_PrivateKey(server_ctx, key) != 1)
		abort();
	X509_free(cert);
	EVP_PKEY_free(key);
	snprintf(request, sizeof(request), "GET /x HTTP/1.1\r\nHost: " NAME "\r\nAuthorization: Bearer %s\r\n\r\n",
		 secret_set_get(set, 0)->placeholder);
	if (policy_new(&p) || policy_add_text(p, "allow " NAME "\n", strlen(NAME) + 7, "fuzz", &perr) ||
	    names_new(&n) || names_assign(n, NAME, &a))
		abort();
	ctx = (struct egress_ctx){.sandbox = "fuzz", .policy = p, .names = n, .secrets = set, .ca = ca,
				  .audit = audit_drop, .connect_upstream = upstream,
				  .upstream_ca_file = cafile, .idle_timeout_ms = 500};
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hdr[12] = "K8E1\x04\x00\x01\xbb";
	uint32_t be = htonl(NAMES_BASE + 1);
	pthread_t ct;
	int sp[2];

	if (!ctx.policy)
		init();
	answer = data;
	answer_len = size;
	server_started = server_saw_value = injected = false;
	memcpy(hdr + 8, &be, 4);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) || write(sp[0], hdr, 12) != 12 ||
	    pthread_create(&ct, NULL, client, (void *)(intptr_t)sp[0]))
		abort();
	egress_connect_serve(&ctx, sp[1]);
	pthread_join(ct, NULL);
	close(sp[0]);
	if (server_started) {
		pthread_join(server_thread, NULL);
		/* A request the proxy says it put the secret into reached the
		 * server with the value (a run cut short by the idle timeout on
		 * a loaded machine sends none, and says nothing). */
		if (injected && !server_saw_value)
			abort();
	}
	return 0;
}
