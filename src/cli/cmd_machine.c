/* kosa8 machine start|stop|status|rm, and the forwarding of sandbox
 * commands to the helper machine where this host's KVM cannot run the
 * guests (src/machine/machine.h, docs/machine.md). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cmd_table.h"
#include "cli/commands.h"
#include "common/util.h"
#include "machine/machine.h"

/* testbed/machine's status when another start got there first. */
#define START_RACED 3
#define READY_TIMEOUT_MS (300 * 1000)
#define STOP_GRACE_MS (30 * 1000)

/* The commands that run sandboxes, or talk to their supervisors, and so
 * need KVM; everything else (audit, secret, policy, image...) reads and
 * writes the host's files directly. */
static const char *const forwarded[] = {
	"run", "create", "start", "stop", "rm", "ps", "exec", "shell", "cp", "diff", "export", "logs",
	"checkpoint", "checkpoints", "rewind", "fork", "approvals", "__ui-state",
};

/* Of those, the ones that only read or remove a sandbox's state: while the
 * machine is stopped no sandbox runs, so they run here and start nothing. */
static const char *const local_when_stopped[] = {"ps", "logs", "checkpoints", "rm", "__ui-state"};

static bool listed(const char *const *list, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i], name))
			return true;
	return false;
}

/* Needs KVM: a command of the list, or `image warm`, which boots a guest
 * to make a template (the rest of `image` builds and reads files here).
 * argv is the whole command line: global options, then the command. */
static bool needs_kvm(const char *name, int argc, char **argv)
{
	if (strcmp(name, "image"))
		return listed(forwarded, ARRAY_SIZE(forwarded), name);
	for (int i = 1; i + 1 < argc; i++)
		if (argv[i][0] != '-')
			return !strcmp(argv[i], "image") && !strcmp(argv[i + 1], "warm");
	return false;
}

int cli_machine_script(char *buf, size_t len)
{
	const char *env = getenv("KOSA8_MACHINE_SCRIPT");

	if (env && *env)
		return snprintf(buf, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	return kosa8_data_path("testbed/machine", buf, len);
}

static int wait_ready(const char *dir, int timeout_ms)
{
	uint64_t end = mono_ms() + (uint64_t)timeout_ms;
	int pid;

	while (!machine_ready(dir)) {
		if (machine_running(dir, &pid) != 1 || mono_ms() > end)
			return -1;
		usleep(100 * 1000);
	}
	return 0;
}

/* Boots the machine through testbed/machine and waits until it serves. */
static int machine_start(const char *dir)
{
	char script[PATH_MAX], exe[PATH_MAX], uid[16], gid[16];
	int st, pid;
	pid_t child;

	if (machine_running(dir, &pid) == 1) {
		if (wait_ready(dir, READY_TIMEOUT_MS) == 0)
			return 0;
		return cli_fail("machine", "the helper machine (QEMU pid %d) runs but does not serve; "
					   "see %s/console.log and %s/share/err", pid, dir, dir);
	}
	if (cli_machine_script(script, sizeof(script)) < 0)
		return cli_fail("machine", "testbed/machine, which boots the helper machine, is not installed");
	if (!realpath("/proc/self/exe", exe))
		return cli_fail("machine", "cannot name this program: %s", strerror(errno));
	snprintf(uid, sizeof(uid), "%u", (unsigned)getuid());
	snprintf(gid, sizeof(gid), "%u", (unsigned)getgid());
	child = fork();
	if (child < 0)
		return cli_fail("machine", "fork: %s", strerror(errno));
	if (child == 0) {
		/* Its QEMU daemon lives as long as the machine: none of this
		 * command's files (a caller's lock, a pipe it reads to its end)
		 * may stay open with it. */
		close_range(3, ~0U, 0);
		execl(script, script, dir, exe, uid, gid, (char *)NULL);
		fprintf(stderr, "kosa8 machine: cannot run %s: %s\n", script, strerror(errno));
		_exit(1);
	}
	if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st))
		return cli_fail("machine", "%s did not finish", script);
	if (WEXITSTATUS(st) == START_RACED)
		return wait_ready(dir, READY_TIMEOUT_MS) == 0 ? 0 : cli_fail("machine", "the helper machine another command started does not serve");
	return WEXITSTATUS(st) ? 1 : 0;
}

static bool running_now(const char *dir)
{
	int pid;

	return machine_running(dir, &pid) == 1;
}

/* Asks the machine to power off (its server sees "stop"; the machine
 * stops its sandboxes' processes and syncs), then ends QEMU from here if
 * it has not gone within the grace period. */
static int machine_stop(const char *dir)
{
	char path[PATH_MAX + 16];
	uint64_t end;
	int pid, fd;

	if (machine_running(dir, &pid) != 1) {
		printf("the helper machine is not running\n");
		return 0;
	}
	snprintf(path, sizeof(path), "%s/stop", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0)
		close(fd);
	for (end = mono_ms() + STOP_GRACE_MS; running_now(dir) && mono_ms() < end;)
		usleep(200 * 1000);
	if (running_now(dir) && pid > 1) {
		fprintf(stderr, "kosa8 machine: the machine did not power off in %d s; ending QEMU (pid %d)\n",
			STOP_GRACE_MS / 1000, pid);
		kill(pid, SIGTERM);
		for (end = mono_ms() + 10000; running_now(dir) && mono_ms() < end;)
			usleep(200 * 1000);
		if (running_now(dir))
			kill(pid, SIGKILL);
	}
	unlink(path);
	snprintf(path, sizeof(path), "%s/ready", dir);
	unlink(path);
	printf("the helper machine stopped\n");
	return 0;
}

static int machine_status(const char *dir)
{
	char path[PATH_MAX + 16], when[64] = "";
	struct stat st;
	int pid, rc = machine_running(dir, &pid);

	if (rc < 0)
		return cli_fail("machine", "%s: %s", dir, strerror(-rc));
	if (rc == 0) {
		printf("stopped\n");
		return 3;
	}
	snprintf(path, sizeof(path), "%s/owner.lock", dir);
	if (stat(path, &st) == 0)
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", localtime(&st.st_mtime));
	printf("%s (QEMU pid %d, since %s)\n", machine_ready(dir) ? "running" : "starting", pid, when);
	printf("why: %s\n", machine_kvm_unusable() ? machine_kvm_unusable() : "forced (this host's KVM works)");
	printf("console: %s/console.log\nlog: %s/share/err\n", dir, dir);
	return 0;
}

int cmd_machine(int argc, char **argv)
{
	char dir[PATH_MAX], why[PATH_MAX + 160];
	int err;

	if (argc != 2)
		return cli_usage_error("machine", NULL);
	if ((err = machine_dir(dir, sizeof(dir), true, why, sizeof(why))))
		return cli_fail("machine", "%s", why);
	if (!strcmp(argv[1], "start"))
		return machine_start(dir);
	if (!strcmp(argv[1], "stop"))
		return machine_stop(dir);
	if (!strcmp(argv[1], "status"))
		return machine_status(dir);
	if (!strcmp(argv[1], "rm")) {
		if ((err = machine_stop(dir)))
			return err;
		if ((err = cli_remove_tree(dir)))
			return cli_fail("machine", "cannot remove %s: %s", dir, strerror(-err));
		return 0;
	}
	return cli_usage_error("machine", NULL);
}

/* Inside the machine (started by testbed/init): DIR UID GID RUNDIR. */
int cmd_machine_serve(int argc, char **argv)
{
	int err;

	if (argc != 5)
		return 2;
	err = machine_serve(argv[1], (unsigned)strtoul(argv[2], NULL, 10), (unsigned)strtoul(argv[3], NULL, 10),
			    argv[4]);
	if (err)
		fprintf(stderr, "kosa8 machine serve: %s\n", strerror(-err));
	return err ? 1 : 0;
}

const char *cli_machine_why(void)
{
	const char *why = getenv("KOSA8_MACHINE");

	if (getenv("KOSA8_IN_MACHINE"))
		return NULL;
	/* KOSA8_MACHINE=always: through the machine even where KVM works;
	 * never: here, whatever KVM can do (tests of the CLI's own checks). */
	if (why && !strcmp(why, "never"))
		return NULL;
	return why && !strcmp(why, "always") ? "KOSA8_MACHINE=always" : machine_kvm_unusable();
}

bool cli_machine_dispatch(const char *name, int argc, char **argv, bool no_emulate, int *status)
{
	char dir[PATH_MAX], msg[PATH_MAX + 160];
	const char *why;
	int pid;

	if (!needs_kvm(name, argc, argv) || !(why = cli_machine_why()))
		return false;
	if (no_emulate || (getenv("KOSA8_NO_EMULATE") && strcmp(getenv("KOSA8_NO_EMULATE"), "0"))) {
		fprintf(stderr, "kosa8 %s: %s; sandboxes need KVM, and --no-emulate (or KOSA8_NO_EMULATE) "
				"forbids running them in the helper machine under software emulation\n", name, why);
		*status = 125;
		return true;
	}
	if (machine_dir(dir, sizeof(dir), true, msg, sizeof(msg))) {
		cli_fail(name, "%s", msg);
		*status = 125;
		return true;
	}
	if (machine_running(dir, &pid) != 1 && listed(local_when_stopped, ARRAY_SIZE(local_when_stopped), name))
		return false;
	if (machine_running(dir, &pid) != 1 || !machine_ready(dir)) {
		/* Before the server starts: it would run what killed clients
		 * left waiting. */
		machine_sweep_requests(dir);
		if (machine_running(dir, &pid) != 1)
			fprintf(stderr, "kosa8: %s; sandboxes run in kosa8's helper machine, under software "
					"emulation (slow). Starting it; 'kosa8 machine stop' ends it.\n", why);
		if (machine_start(dir)) {
			*status = 125;
			return true;
		}
	}
	*status = machine_forward(dir, argc, argv);
	return true;
}
