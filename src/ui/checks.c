#include "ui/checks.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

static int random_hex(char *out, size_t bytes)
{
	unsigned char b[UI_TOKEN_HEX / 2];

	if (bytes > sizeof(b) || getrandom(b, bytes, 0) != (ssize_t)bytes)
		return -EIO;
	for (size_t i = 0; i < bytes; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	return 0;
}

int ui_auth_init(struct ui_auth *auth, uint16_t port)
{
	int err;

	memset(auth, 0, sizeof(*auth));
	auth->port = port;
	snprintf(auth->cookie_name, sizeof(auth->cookie_name), "kosa8_ui_%u", port);
	if ((err = random_hex(auth->token, UI_TOKEN_HEX / 2)) ||
	    (err = random_hex(auth->csrf, UI_TOKEN_HEX / 2)))
		return err;
	return 0;
}

/* In time independent of where the strings differ: how long a refusal
 * took must not tell a local attacker how much of a guess was right. */
static bool secret_equal(const char *given, const char *secret)
{
	size_t n = strlen(secret);
	unsigned char diff = 0;

	if (!given || strnlen(given, n + 1) != n)
		return false;
	for (size_t i = 0; i < n; i++)
		diff |= (unsigned char)(given[i] ^ secret[i]);
	return diff == 0;
}

bool ui_host_ok(const struct ui_auth *auth, const char *host)
{
	static const char *const names[] = {"127.0.0.1", "localhost"};
	char want[32];

	if (!host)
		return false;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(want, sizeof(want), "%s:%u", names[i], auth->port);
		if (!strcasecmp(host, want))
			return true;
	}
	return false;
}

bool ui_origin_same(const char *origin, const char *host)
{
	return origin && host && !strncmp(origin, "http://", 7) && !strcasecmp(origin + 7, host);
}

enum ui_verdict ui_check(const struct ui_auth *auth, const struct ui_req *r, const char **why)
{
	const char *dummy;
	bool get, post;

	if (!why)
		why = &dummy;
	get = r->method && (!strcmp(r->method, "GET") || !strcmp(r->method, "HEAD"));
	post = r->method && !strcmp(r->method, "POST");
	*why = NULL;
	if (!get && !post)
		*why = "method";
	else if (!ui_host_ok(auth, r->host))
		*why = "Host is not the console's (DNS rebinding?)";
	/* Browsers send Origin with every cross-origin request and with
	 * every POST: anything but our own is another site's page. */
	else if (r->origin && !ui_origin_same(r->origin, r->host))
		*why = "foreign Origin";
	else if (post && !r->origin)
		*why = "POST without Origin";
	else if (post && !secret_equal(r->csrf, auth->csrf))
		*why = "POST without the CSRF token";
	else if (post && !secret_equal(r->cookie, auth->token))
		*why = "POST without the token cookie";
	if (*why)
		return UI_DENY;
	if (post || secret_equal(r->cookie, auth->token))
		return UI_ALLOW;
	if (secret_equal(r->query_token, auth->token))
		return UI_ALLOW_LOGIN;
	*why = "no token";
	return UI_DENY;
}
