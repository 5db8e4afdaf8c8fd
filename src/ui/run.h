/* This kosa8 binary run as a child, as the console's way to do exactly
 * what the command line does (`audit verify`, `rewind`, `fork`, and, where
 * sandboxes live in the helper machine, everything that talks to a
 * supervisor: the child's own dispatch forwards it there). */
#ifndef KOSA8_UI_RUN_H
#define KOSA8_UI_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Keeps at most cap bytes of what it is given: the newest (a command's
 * output can be as long as it likes). */
struct ui_tail {
	char *buf;              /* cap + 1 bytes, for a NUL */
	size_t len, cap;
	bool cut;
};

void ui_tail_add(struct ui_tail *t, const char *p, size_t n);

/* Starts this kosa8 with argv (argv[0] ignored), stdin from /dev/null,
 * stdout (and stderr when err_too) into *fd.  0 or -errno. */
int ui_spawn_self(char *const argv[], bool err_too, pid_t *pid, int *fd);

/* Runs it to its end, at most timeout_s seconds (then SIGKILL); its output
 * kept in t (NUL-terminated).  Its exit status, -ETIMEDOUT or -errno. */
int ui_run_self(char *const argv[], struct ui_tail *t, bool err_too, int timeout_s);

#endif
