/* The body of a console POST: what the page asks to do, as JSON, checked
 * whole before anything is done with it:
 *   POST /api/answer      {"sandbox":NAME,"id":N,"answer":"allow"|"always"|"deny"}
 *   POST /api/checkpoint  {"sandbox":NAME,"op":"rewind","checkpoint":"cN"}
 *                         {"sandbox":NAME,"op":"fork","checkpoint":"cN","name":NEW}
 * Fuzzed (fuzz/fuzz_ui_request.c). */
#ifndef KOSA8_UI_ACTION_H
#define KOSA8_UI_ACTION_H

#include <stddef.h>
#include <stdint.h>

#include "sandbox/checkpoints.h"
#include "sandbox/sandbox.h"

#define UI_BODY_MAX 4096

struct ui_action {
	char sandbox[SANDBOX_NAME_MAX + 1];
	uint64_t id;                 /* >= 1, below 2^53 */
	char answer[8];              /* "allow", "always" or "deny" */
};

/* 0, or -EINVAL with *why naming what is wrong (a static string). */
int ui_action_parse(const char *body, size_t len, struct ui_action *a, const char **why);

struct ui_ckpt_action {
	char sandbox[SANDBOX_NAME_MAX + 1];
	char op[8];                          /* "rewind" or "fork" */
	char checkpoint[CKPT_ID_LEN];
	char name[SANDBOX_NAME_MAX + 1];     /* the fork's; "" for rewind */
};

/* The same, for /api/checkpoint. */
int ui_ckpt_action_parse(const char *body, size_t len, struct ui_ckpt_action *a, const char **why);

#endif
