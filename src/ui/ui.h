/* kosa8 ui: the local web console (docs/console.md).  An HTTP server
 * (libmicrohttpd) on 127.0.0.1 only: there is no TLS, so it never listens
 * where another machine could reach it.  Every request passes ui/checks.h
 * first; what it shows and does goes through the same supervisor calls as
 * the command line (ui/state.h). */
#ifndef KOSA8_UI_UI_H
#define KOSA8_UI_UI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ui/checks.h"

#define UI_CONNECTIONS_MAX 32   /* at once; each has its own thread */
#define UI_STREAMS_MAX 8        /* live pages (server-sent events) at once */

struct ui_opts {
	const char *listen;  /* NULL or "127.0.0.1"/"localhost": nothing else */
	uint16_t port;       /* 0: a free one */
	bool notify;         /* notify-send on a new approval request */
	bool remote;         /* sandboxes live in the helper machine (ui/state.h) */
};

struct ui;

/* Listens and serves from threads of its own.  0, or -errno with why. */
int ui_start(const struct ui_opts *o, struct ui **out, char *why, size_t len);
const struct ui_auth *ui_auth(const struct ui *u);
void ui_stop(struct ui *u);

/* The page's files, built into the binary (ui/assets.c). */
extern const char ui_index_html[], ui_app_js[], ui_app_css[];

#endif
