/* What every request to the web console must show before it gets a byte:
 * the console's secret token (in the URL's query once, then in a cookie),
 * a Host header naming the console itself (a page of another site whose
 * name an attacker re-points at 127.0.0.1, DNS rebinding, sends its own
 * name), no foreign Origin, and for a POST the console's own Origin and
 * its CSRF token in a header.  Pure functions of the request's strings:
 * unit-tested and fuzzed apart from the HTTP server. */
#ifndef KOSA8_UI_CHECKS_H
#define KOSA8_UI_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define UI_TOKEN_HEX 64           /* 32 random bytes */
#define UI_COOKIE_NAME_MAX 24

struct ui_auth {
	uint16_t port;
	char token[UI_TOKEN_HEX + 1];
	char csrf[UI_TOKEN_HEX + 1];
	/* "kosa8_ui_PORT": cookies are not kept apart by port, so two
	 * consoles must not overwrite each other's. */
	char cookie_name[UI_COOKIE_NAME_MAX];
};

/* What the server read from one request; NULL where it is absent. */
struct ui_req {
	const char *method;
	const char *host;        /* the Host header */
	const char *origin;      /* the Origin header */
	const char *cookie;      /* the value of the cookie named auth->cookie_name */
	const char *query_token; /* ?token= */
	const char *csrf;        /* the X-Kosa8-CSRF header */
};

enum ui_verdict {
	UI_DENY,
	UI_ALLOW,
	UI_ALLOW_LOGIN,  /* a GET with the token in its query: set the cookie */
};

/* Fills auth with fresh random tokens for port; -errno from getrandom. */
int ui_auth_init(struct ui_auth *auth, uint16_t port);
/* The verdict; *why (may be NULL) gets a short reason for a denial, for
 * the console's own log, never for the client. */
enum ui_verdict ui_check(const struct ui_auth *auth, const struct ui_req *r, const char **why);
/* Host is "127.0.0.1:PORT" or "localhost:PORT" (any case) for auth's port. */
bool ui_host_ok(const struct ui_auth *auth, const char *host);
/* Origin is exactly "http://" + host (host already checked). */
bool ui_origin_same(const char *origin, const char *host);

#endif
