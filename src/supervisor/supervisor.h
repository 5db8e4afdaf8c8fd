/* The per-sandbox supervisor: one process per running sandbox, detached
 * from the CLI that started it.  It runs the VMM as its child, waits for
 * the guest agent, copies the workspace in on the first start, answers the
 * control socket, writes the sandbox's audit records, and cleans up when the
 * guest stops. */
#ifndef KOSA8_SUPERVISOR_H
#define KOSA8_SUPERVISOR_H

#include "agentproto/wire.h" /* AGENT_VSOCK_PORT */

/* How long a start (or a rewind) waits for the agent: 300 s, nested
 * emulation is slow; KOSA8_BOOT_TIMEOUT (seconds, 10..7200) overrides it,
 * for test machines under heavy load.  The CLI waits a minute longer. */
#define SUPERVISOR_BOOT_TIMEOUT_MS supervisor_boot_timeout_ms()
int supervisor_boot_timeout_ms(void);

/* The supervisor's stdout and stderr, in the sandbox's state directory
 * (kept bounded: console_log_bound_stderr). */
#define SUPERVISOR_LOG_FILE "supervisor.log"

/* A stop gives the guest this long to power off (`kosa8 stop --time`),
 * then the host ends the VM: VMM control "stop", then SIGKILL.  No stop
 * waits on the guest's cooperation. */
#define SUPERVISOR_STOP_GRACE_MS (10 * 1000)
#define SUPERVISOR_STOP_GRACE_MAX_MS (3600 * 1000)
/* The most a stop takes on the host's side after the grace period:
 * VMM_CTL_STOP_MS + VMM_EXIT_WAIT_MS in supervisor.c, and a margin. */
#define SUPERVISOR_STOP_END_MS (15 * 1000)

/* Runs the supervisor for sandbox `name` in this process until the guest
 * stops.  ready_fd (or -1) gets one line when start-up ends: "ok\n" or
 * "error: <reason>\n".  self is the kosa8 binary (to run `kosa8 vm`).
 * memfd (or -1): a fork's first start maps this frozen memory of its
 * parent (a live fork) instead of the checkpoint's memory file. */
int supervisor_main(const char *self, const char *name, int ready_fd, int memfd);
/* The same for a template being made in dir (supervisor/template.h): boots
 * its guest, takes checkpoint c1 once the agent answers, and ends the VMM.
 * ready_fd gets "progress checkpoint\n" before the checkpoint, then the
 * one last line. */
int supervisor_make_template(const char *self, const char *dir, int ready_fd);

#endif
