/* The kosa8 command line: one subcommand per file (cmd_*.c), each with a
 * main-like entry point listed in the command table (cmd_table.c). */
#ifndef KOSA8_CLI_COMMANDS_H
#define KOSA8_CLI_COMMANDS_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "agentproto/tree.h"
#include "supervisor/template.h"

int cmd_vm(int argc, char **argv);
int cmd_audit(int argc, char **argv);
int cmd_disk(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_start(int argc, char **argv);
int cmd_stop(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_ps(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_shell(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_supervise(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_secret(int argc, char **argv);
int cmd_policy(int argc, char **argv);
int cmd_approvals(int argc, char **argv);
/* Weak: kosa8-tools links these, kosa8 leaves them out and execs it
 * (tools.c). */
#define CLI_TOOLS_ONLY __attribute__((weak))
int cmd_ui(int argc, char **argv) CLI_TOOLS_ONLY;
int cmd_ui_state(int argc, char **argv);
int cmd_vmctl(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
int cmd_checkpoints(int argc, char **argv);
int cmd_rewind(int argc, char **argv);
int cmd_fork(int argc, char **argv);
int cmd_machine(int argc, char **argv);
int cmd_machine_serve(int argc, char **argv);

/* Where this host's KVM cannot run guests, runs command name (argv: the
 * whole command line) in the helper machine, starting it if need be, or
 * refuses (no_emulate, KOSA8_NO_EMULATE): true then, with its exit status
 * in *status.  False when the command runs here (cmd_machine.c). */
/* Why sandbox commands run in the helper machine here, or NULL when they
 * run on this host. */
const char *cli_machine_why(void);
bool cli_machine_dispatch(const char *name, int argc, char **argv, bool no_emulate, int *status);
/* The helper machine's script: $KOSA8_MACHINE_SCRIPT, else testbed/machine
 * of this kosa8's tree or installation; -ENOENT if neither. */
int cli_machine_script(char *buf, size_t len);
int cmd_doctor(int argc, char **argv);

/* Shared by the sandbox commands (cmd_sandbox.c): start NAME's supervisor
 * and wait until the sandbox runs; copy a policy file into a state dir;
 * rm -rf a state dir.  The first prints its error and returns 1. */
int cli_start_sandbox(const char *cmd, const char *name, int memfd);
int cli_copy_policy(const char *from, const char *dir);
int cli_remove_tree(const char *dir);
/* In a forked child that becomes a supervisor: stdin from /dev/null,
 * stdout and stderr appended to DIR's supervisor.log. */
void cli_child_stdio_to_log(const char *dir);

/* The template a new sandbox restores (cli/template.c, supervisor/template.h):
 * found, or made with progress on stderr.  On success t->lock holds the
 * template (prune waits) until the caller closes it, once the sandbox's
 * pin is written; on failure it printed why and returns 1. */
struct sandbox_cfg;
/* A new sandbox's memory and vCPUs unless --mem and --cpus say otherwise
 * (the template `kosa8 doctor` looks for). */
#define CLI_SANDBOX_MEM (1024 * MiB)
#define CLI_SANDBOX_CPUS 1
struct cli_template {
	char root[PATH_MAX], dir[PATH_MAX + TEMPLATE_KEY_LEN + 2];
	char key[TEMPLATE_KEY_LEN + 1], name[TEMPLATE_NAME_LEN];
	int lock;
};
int cli_template_ensure(const char *cmd, const struct sandbox_cfg *cfg, struct cli_template *t);
/* Removes the templates whose inputs are gone or changed (all: every one
 * no sandbox stands on), one line each; 0 or 1. */
int cli_template_prune(bool all);
int cmd_template(int argc, char **argv);
int cli_image_warm(int argc, char **argv);
/* cmd_image_io.c: kosa8 image export and import, their options parsed
 * (cmd_image.c); print their result or error, return the exit status. */
struct image_import_opts;
int cli_image_export_run(const char *what, const char *file, bool sums) CLI_TOOLS_ONLY;
int cli_image_import_run(struct image_import_opts *o) CLI_TOOLS_ONLY;
/* kosa8-tools __image-from-source CMD NAME: cli_image_from_source's
 * import, the disk's path on stdout. */
int cmd_image_from_source(int argc, char **argv) CLI_TOOLS_ONLY;
/* The image `kosa8 run --image NAME` boots (cmd_sandbox.c): the build of
 * NAME's recipe for this agent (guest/image/build.sh --path), else the
 * newest imported image of NAME.  0 or -ENOENT. */
int cli_image_lookup(const char *name, char *out, size_t len);
/* The image NAME imported from $KOSA8_IMAGE_SOURCE ($KOSA8_IMAGE_SHA256:
 * its checksum, or "none"), with progress, by kosa8-tools: 0 and its disk
 * in path, -ENOENT when the variable is not set, else -errno (said on
 * stderr). */
int cli_image_from_source(const char *cmd, const char *name, char *path, size_t len);
/* The supervisor did not answer (err): says "busy" when it still owns the
 * sandbox, "not running" when nobody does.  Returns 1. */
int cli_unanswered(const char *cmd, const char *name, int err);

/* An agent session with running sandbox NAME through its supervisor
 * (what: the request's audit details, taken), *env the secrets'
 * placeholders (NULL-terminated, malloc'd) when env is not NULL; 0, or 1
 * after printing why (cmd_sandbox.c). */
struct agent_client;
int cli_agent_session(const char *cmd, const char *name, cJSON *what, struct agent_client **c, char ***env);
int cmd_oci(int argc, char **argv);
/* tools.c: the command line main was given (cli_main sets it), and the
 * exec of kosa8-tools with it for a command this binary leaves out; returns
 * only on failure (127, said on stderr). */
extern char **cli_argv;
int cli_exec_tools(void);
/* main: the command table's dispatch (cli_main.c), for kosa8 and
 * kosa8-tools alike. */
int cli_main(int argc, char **argv);

/* Copying out of a guest (copy_out.c): the guarded writer's options for
 * this user (modes without special bits, under the umask; under sudo the
 * files go to SUDO_UID:SUDO_GID; bounds from KOSA8_COPY_OUT_MAX and
 * KOSA8_COPY_OUT_FILES), 1 after printing an error; and the notes after a
 * copy (special bits dropped, which bound was hit). */
int cli_copy_out_opts(const char *cmd, struct gw_opts *o);
void cli_copy_out_report(const char *cmd, int err, const struct ap_tree_stats *st);

/* "kosa8 CMD: <message>" on stderr; returns 1 (the commands' error status). */
__attribute__((format(printf, 2, 3)))
int cli_fail(const char *cmd, const char *fmt, ...);

#endif
