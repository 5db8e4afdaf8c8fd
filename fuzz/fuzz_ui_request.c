/* libFuzzer target: what a browser (or any local process) sends the web
 * console, through its checks and its body parsers: the request's
 * strings (method, Host, Origin, cookie, query token, CSRF header) through
 * ui_check (src/ui/checks.c), the body through ui_action_parse and
 * ui_ckpt_action_parse (src/ui/action.c), a name through regdomain_of (src/common/regdomain.c).
 * Input: fields separated by '\n'; the last one is the body.  A token the
 * fuzzer writes with the byte 0x01 stands for the real token, 0x02 for the
 * real CSRF token (it cannot guess random ones).  Checks that nothing is
 * allowed without the console's Host and the token, that a POST allowed
 * had the console's Origin, CSRF token and cookie, and that a parsed action
 * holds a valid name, id and answer (a rewind or fork: valid names, a
 * valid checkpoint id, rewind or fork).
 *
 *   fuzz/run.sh 60 ui_request */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/regdomain.h"
#include "ui/action.h"
#include "ui/checks.h"

#define FIELDS 7

static const char *field(char *f, const struct ui_auth *a)
{
	if (!strcmp(f, "\x01"))
		return a->token;
	if (!strcmp(f, "\x02"))
		return a->csrf;
	return f[0] == '\x03' ? NULL : f;   /* 0x03: the header is absent */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ui_auth a;
	char *buf = malloc(size + 1), *f[FIELDS] = {0}, *p, reg[256];
	struct ui_ckpt_action ck;
	struct ui_action act;
	struct ui_req r;
	const char *why;
	enum ui_verdict v;
	size_t n = 0;

	if (!a.port && ui_auth_init(&a, 8123))
		abort();
	if (!buf)
		abort();
	memcpy(buf, data, size);
	buf[size] = '\0';
	for (p = buf; n < FIELDS - 1 && (f[n] = p); n++) {
		if (!(p = strchr(p, '\n')))
			break;
		*p++ = '\0';
	}
	if (n < FIELDS - 1) {
		free(buf);
		return 0;
	}
	f[FIELDS - 1] = p;
	r = (struct ui_req){field(f[0], &a), field(f[1], &a), field(f[2], &a), field(f[3], &a),
			    field(f[4], &a), field(f[5], &a)};
	v = ui_check(&a, &r, &why);
	if (v != UI_DENY && !ui_host_ok(&a, r.host))
		abort();
	if (v == UI_DENY && !why)
		abort();
	if (v != UI_DENY && r.origin && !ui_origin_same(r.origin, r.host))
		abort();
	if (v == UI_ALLOW && !(r.cookie && !strcmp(r.cookie, a.token)) && strcmp(r.method, "POST"))
		abort();
	if (v == UI_ALLOW_LOGIN && !(r.query_token && !strcmp(r.query_token, a.token)))
		abort();
	if (v != UI_DENY && !strcmp(r.method, "POST") &&
	    (!r.origin || !r.csrf || strcmp(r.csrf, a.csrf) || !r.cookie || strcmp(r.cookie, a.token)))
		abort();
	if (ui_action_parse(f[FIELDS - 1], strlen(f[FIELDS - 1]), &act, &why) == 0 &&
	    (!sandbox_name_valid(act.sandbox) || act.id < 1 ||
	     (strcmp(act.answer, "allow") && strcmp(act.answer, "always") && strcmp(act.answer, "deny"))))
		abort();
	/* A rewind or fork: every word it puts on kosa8's command line is a
	 * valid name or id, so none can pass for an option. */
	if (ui_ckpt_action_parse(f[FIELDS - 1], strlen(f[FIELDS - 1]), &ck, &why) == 0 &&
	    (!sandbox_name_valid(ck.sandbox) || !ckpt_id_valid(ck.checkpoint) ||
	     (strcmp(ck.op, "rewind") && strcmp(ck.op, "fork")) ||
	     (!strcmp(ck.op, "fork") ? !sandbox_name_valid(ck.name) : ck.name[0] != '\0')))
		abort();
	if (r.host && regdomain_of(r.host, reg, sizeof(reg)) == 0 &&
	    (!reg[0] || strlen(reg) > strlen(r.host)))
		abort();
	free(buf);
	return 0;
}
