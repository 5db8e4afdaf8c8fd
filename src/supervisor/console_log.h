/* The guest's console, bounded on the host (issue 23 item 4): the VMM
 * writes its serial port and its own messages into a pipe, and a thread of
 * the supervisor copies them into console.log.  At CONSOLE_LOG_MAX bytes
 * the file becomes console.log.1 (the one before is dropped) and a new
 * console.log begins: a guest printing without pause holds at most twice
 * that on the host.  `kosa8 logs` prints both, oldest first. */
#ifndef KOSA8_CONSOLE_LOG_H
#define KOSA8_CONSOLE_LOG_H

#include <stdint.h>

#define CONSOLE_LOG_MAX (1024 * 1024)
#define CONSOLE_LOG_OLD_SUFFIX ".1"

struct console_log;

/* Opens (appends to) path and starts the copying thread; *wfd gets the
 * pipe's write end for the VMM (close-on-exec: dup2 it onto the child's
 * stdout and stderr, and close it in the parent once the child runs).
 * max 0: CONSOLE_LOG_MAX. */
int console_log_start(const char *path, uint64_t max, struct console_log **out, int *wfd);
/* The supervisor's own log (supervisor.log, its stdout and stderr, opened
 * by `kosa8 start`) kept the same way: a guest can make it write lines,
 * at a bounded rate, for as long as the sandbox runs.  When this process's
 * stderr is the file at path and holds more than max bytes (0:
 * CONSOLE_LOG_MAX), it becomes path.1 and stdout and stderr go to a new
 * path.  No thread and no pipe: a crash report still reaches the file.
 * Called about once a second.  1: rotated, 0: nothing to do, or -errno. */
int console_log_bound_stderr(const char *path, uint64_t max);
/* Waits until every writer has closed the pipe (the VMM has exited) and
 * everything is in the file, then frees.  NULL is fine. */
void console_log_stop(struct console_log *c);

#endif
