/* What the web console shows, read afresh from the sandboxes themselves:
 * the same files and supervisor calls as `kosa8 ps` and `kosa8 approvals`
 * (the console keeps nothing of its own).  One watcher thread reads it
 * every second and hands the newest snapshot, as JSON text, to every page
 * that follows it (server-sent events); a new approval request also goes
 * to the desktop through notify-send when that is installed. */
#ifndef KOSA8_UI_STATE_H
#define KOSA8_UI_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct ui_state;

/* notify: run notify-send for new requests (when it is on PATH).
 * remote: the sandboxes live in kosa8's helper machine, whose control
 * sockets this process cannot reach: the snapshots are read there, by
 * `kosa8 __ui-state SECONDS` forwarded into it (docs/console.md). */
int ui_state_start(bool notify, bool remote, struct ui_state **out);
/* Ends the watcher and wakes every follower: ui_state_wait returns
 * -ESHUTDOWN from then on.  Free only when no follower is left. */
void ui_state_stop(struct ui_state *s);
void ui_state_free(struct ui_state *s);

/* The newest snapshot's text (malloc'd) and its generation. */
char *ui_state_get(struct ui_state *s, uint64_t *gen);
/* Waits up to timeout_ms for a snapshot newer than gen: 0 (then
 * ui_state_get), -ETIMEDOUT, or -ESHUTDOWN. */
int ui_state_wait(struct ui_state *s, uint64_t gen, int timeout_ms);
/* Reads the state now, without the watcher (tests, the first page). */
cJSON *ui_state_read(void);

/* Answers request id of sandbox name through its supervisor
 * (approvals.answer; remote: through `kosa8 approvals VERB NAME ID`
 * forwarded into the helper machine): 0, or -errno with why filled for
 * the page. */
int ui_answer(const char *name, uint64_t id, const char *answer, bool remote, char *why, size_t len);

/* Runs `kosa8 ARGV...` (this binary, as a child, forwarded into the helper
 * machine where sandboxes live there) for at most timeout_s: 0 with out
 * its last line of output, -EPERM when it failed (out: its last line, the
 * error), or -errno. */
int ui_run_cli(char *const argv[], int timeout_s, char *out, size_t len);

struct ui_ckpt_action;
/* `kosa8 rewind NAME ID` or `kosa8 fork NAME ID --name NEW`: the
 * supervisor does it and audits it exactly as for the command line.  One
 * at a time (-EBUSY otherwise); as ui_run_cli. */
int ui_checkpoint_op(const struct ui_ckpt_action *a, char *out, size_t len);

#endif
