/* The body of a console POST: what the page asks to do, as JSON
 * ({"sandbox":NAME,"id":N,"answer":"allow"|"always"|"deny"}), checked
 * whole before anything is done with it.  Fuzzed (fuzz/fuzz_ui_action.c). */
#ifndef KOSA8_UI_ACTION_H
#define KOSA8_UI_ACTION_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/sandbox.h"

#define UI_BODY_MAX 4096

struct ui_action {
	char sandbox[SANDBOX_NAME_MAX + 1];
	uint64_t id;                 /* >= 1, below 2^53 */
	char answer[8];              /* "allow", "always" or "deny" */
};

/* 0, or -EINVAL with *why naming what is wrong (a static string). */
int ui_action_parse(const char *body, size_t len, struct ui_action *a, const char **why);

#endif
