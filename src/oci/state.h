/* A container's state under the runtime's root (runc's --root), one
 * folder per container id:
 *
 *   ROOT/ID/            0700
 *     lock              flock'ed by every command that reads and changes state
 *     state.json        what `kosa8 oci state` prints from, written whole (rename)
 *     monitor.sock      the container's monitor: start and kill requests
 *
 * The monitor (cli/cmd_oci.c) is the pid `create` writes to --pid-file: it
 * owns the sandbox and lives as long as the container.  Which command may
 * run in which status is decided by oci_check_op, one table, tested on
 * its own. */
#ifndef KOSA8_OCI_STATE_H
#define KOSA8_OCI_STATE_H

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define OCI_ID_MAX 128
#define OCI_DEFAULT_ROOT "/run/kosa8-oci"
#define OCI_STATE_MAX (512 * 1024)

enum oci_status { OCI_CREATING, OCI_CREATED, OCI_RUNNING, OCI_STOPPED };
enum oci_op { OCI_OP_START, OCI_OP_KILL, OCI_OP_DELETE, OCI_OP_DELETE_FORCE, OCI_OP_EXEC };

struct oci_state {
	char id[OCI_ID_MAX + 1];
	char bundle[PATH_MAX];
	char sandbox[64];
	enum oci_status status;
	pid_t pid;               /* the monitor */
	uint64_t pid_start;      /* its start time (/proc/PID/stat field 22): pid reuse */
	int exit_status;         /* once stopped: the process's, as a shell gives it */
	int64_t created;         /* unix seconds */
	cJSON *annotations;      /* an object, owned; NULL for none */
};

/* runc's rule, less "." and "..": 1-128 of [A-Za-z0-9_+.-]. */
bool oci_id_valid(const char *id);
int oci_container_dir(const char *root, const char *id, char *buf, size_t len);
const char *oci_status_name(enum oci_status s);

/* 0 if op may run on a container in status s, else -errno with why. */
int oci_check_op(enum oci_status s, enum oci_op op, char *why, size_t len);

/* An exclusive flock on DIR/lock (made if missing): the fd, or -errno. */
int oci_lock(const char *dir);

int oci_state_save(const char *dir, const struct oci_state *st);
/* Reads DIR/state.json (bounded, every field checked). */
int oci_state_load(const char *dir, struct oci_state *st);
void oci_state_free(struct oci_state *st);
/* The status now: created or running whose monitor is gone (or its pid
 * reused) is stopped. */
enum oci_status oci_state_now(const struct oci_state *st);
/* runc's `state` object. */
cJSON *oci_state_json(const struct oci_state *st);

/* The start time of pid (clock ticks since boot), or 0 if it is gone. */
uint64_t oci_pid_start(pid_t pid);
/* "KILL", "SIGKILL", "9", "sigterm": the number, or -EINVAL. */
int oci_signal_parse(const char *s);

#endif
