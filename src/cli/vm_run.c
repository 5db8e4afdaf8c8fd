/* The VMM's run, shared by `kosa8 vm` and the kosa8-vmm executable
 * (vmm_main.c): its options, the jail, the terminal and signals around
 * vm_run.  Nothing here reaches the rest of kosa8's commands, so that
 * kosa8-vmm links only the VMM's parts (no OpenSSL). */
#include "cli/cmd_vm.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "disk/disk.h"
#include "vmm/accel.h"
#include "vmm/jail.h"
#include "vmm/snapshot.h"
#include "vmm/snapshot_mem.h"
#include "vmm/seccomp.h"
#include "vmm/vm.h"

#define DEFAULT_MEM (512 * MiB)

/* "UID:GID", neither 0 (the point is to leave root) nor -1 (no id). */
static int parse_ids(const char *s, uint32_t *uid, uint32_t *gid)
{
	unsigned long long u, g;
	char *end;

	errno = 0;
	u = strtoull(s, &end, 10);
	if (errno || end == s || *end != ':')
		return -EINVAL;
	s = end + 1;
	g = strtoull(s, &end, 10);
	if (errno || end == s || *end || u == 0 || g == 0 || u >= 0xffffffffULL || g >= 0xffffffffULL)
		return -EINVAL;
	*uid = (uint32_t)u;
	*gid = (uint32_t)g;
	return 0;
}

int vm_args_parse(int argc, char **argv, struct vm_args *a, const char **why)
{
	static const struct option opts[] = {
		{"kernel", required_argument, NULL, 'k'},
		{"initrd", required_argument, NULL, 'i'},
		{"mem", required_argument, NULL, 'm'},
		{"cpus", required_argument, NULL, 'c'},
		{"cmdline", required_argument, NULL, 'a'},
		{"disk", required_argument, NULL, 'd'},
		{"disk-ro", required_argument, NULL, 'D'},
		{"vsock", required_argument, NULL, 'v'},
		{"cid", required_argument, NULL, 'C'},
		{"control", required_argument, NULL, 'x'},
		{"restore", required_argument, NULL, 'r'},
		{"restore-memfd", required_argument, NULL, 'M'},
		{"checkpoint-dir", required_argument, NULL, 'K'},
		{"emulate", no_argument, NULL, 'E'},
		{"no-emulate", no_argument, NULL, 'N'},
		{"no-seccomp", no_argument, NULL, 'S'},
		{"jail", no_argument, NULL, 'J'},
		{"jail-probe", no_argument, NULL, 'P'},
		{"jail-user", required_argument, NULL, 'U'},
		{"seccomp-rules", no_argument, NULL, 'R'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	char *end;
	long n;
	int c;

	memset(a, 0, sizeof(*a));
	a->mem = DEFAULT_MEM;
	a->cpus = 1;
	a->cid = VM_DEFAULT_VSOCK_CID;
	a->restore_memfd = -1;
	optind = 0; /* reset getopt: it may have run before in this process */
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
		switch (c) {
		case 'k': a->kernel = optarg; break;
		case 'i': a->initrd = optarg; break;
		case 'a': a->cmdline = optarg; break;
		case 'd': a->disk = optarg; a->disk_ro = false; break;
		case 'D': a->disk = optarg; a->disk_ro = true; break;
		case 'v': a->vsock = optarg; break;
		case 'x': a->control = optarg; break;
		case 'r': a->restore = optarg; break;
		case 'M':
			errno = 0;
			n = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || n < 0 || n > INT_MAX ||
			    fcntl((int)n, F_GETFD) < 0) {
				*why = "--restore-memfd takes the number of an open file descriptor";
				return -EINVAL;
			}
			a->restore_memfd = (int)n;
			break;
		case 'K': a->ckpt_dir = optarg; break;
		case 'C':
			errno = 0;
			a->cid = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || a->cid < 3 || a->cid > 0xfffffffeULL) {
				*why = "--cid takes a number from 3 to 4294967294";
				return -EINVAL;
			}
			break;
		case 'E': a->emulate = EMULATE_ALWAYS; break;
		case 'N': a->emulate = EMULATE_NEVER; break;
		case 'S': a->no_seccomp = true; break;
		case 'J': a->jail = true; break;
		case 'P': a->jail = a->jail_probe = true; break;
		case 'U':
			if (parse_ids(optarg, &a->jail_uid, &a->jail_gid) < 0) {
				*why = "--jail-user takes UID:GID, two numbers from 1 to 4294967294";
				return -EINVAL;
			}
			a->jail_user = true;
			break;
		case 'R': a->seccomp_rules = true; return 0;
		case 'h': a->help = true; return 0;
		case 'm':
			if (parse_size(optarg, &a->mem) < 0) {
				*why = "--mem takes a size such as 512M or 2G";
				return -EINVAL;
			}
			a->mem_set = true;
			break;
		case 'c':
			errno = 0;
			n = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || n < 1 || n > VM_MAX_VCPUS) {
				*why = "--cpus takes a number from 1 to 254";
				return -EINVAL;
			}
			a->cpus = (int)n;
			a->cpus_set = true;
			break;
		default:
			*why = "unknown option or missing value (see 'kosa8 vm --help')";
			return -EINVAL;
		}
	}
	if (optind < argc) {
		*why = "unexpected argument (see 'kosa8 vm --help')";
		return -EINVAL;
	}
	if (a->restore && (a->kernel || a->initrd || a->cmdline || a->mem_set || a->cpus_set)) {
		*why = "--restore takes the kernel, memory and vCPUs from the checkpoint: leave out --kernel, --initrd, --cmdline, --mem and --cpus";
		return -EINVAL;
	}
	/* A checkpoint writes files and a new disk delta: in the jail only
	 * --checkpoint-dir is writable for them.  A restore's new delta must be
	 * made before (the supervisor does) for the jail to bind it. */
	if (a->jail && !a->jail_probe && a->control && !a->ckpt_dir) {
		*why = "--jail with --control needs --checkpoint-dir (where checkpoints may be written)";
		return -EINVAL;
	}
	if (a->jail_user && (!a->jail || geteuid() != 0)) {
		*why = "--jail-user is for root with --jail (as a user the jail maps only that user)";
		return -EINVAL;
	}
	if (a->ckpt_dir && !a->jail) {
		*why = "--checkpoint-dir is for --jail (without it the VMM may write anywhere)";
		return -EINVAL;
	}
	if (a->restore_memfd >= 0 && !a->restore) {
		*why = "--restore-memfd goes with --restore DIR (the checkpoint whose memory it is)";
		return -EINVAL;
	}
	if (!a->kernel && !a->restore) {
		*why = "--kernel is required (build one with 'make kernel')";
		return -EINVAL;
	}
	return 0;
}

/* ---- terminal: raw while the guest owns it, restored on every exit path ---- */

static struct termios saved_termios;
static volatile sig_atomic_t termios_saved;
static struct vm *running_vm;

static void term_restore(void)
{
	if (termios_saved)
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
}

static void on_stop_signal(int sig)
{
	if (running_vm)
		vm_request_stop(running_vm, VM_STOP_HOST);
}

static void on_fatal_signal(int sig)
{
	/* Give the user their terminal back.  SA_RESETHAND has restored the
	 * default action, so returning re-runs the faulting instruction (or
	 * abort() raises again) and the process dies of the same signal,
	 * without a system call the seccomp filter would refuse. */
	term_restore();
}

static void install_signals(void)
{
	static const int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	static const int fatal_sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_stop_signal;
	for (size_t i = 0; i < ARRAY_SIZE(stop_sigs); i++)
		sigaction(stop_sigs[i], &sa, NULL);
	sa.sa_handler = on_fatal_signal;
	sa.sa_flags = SA_RESETHAND;
	for (size_t i = 0; i < ARRAY_SIZE(fatal_sigs); i++)
		sigaction(fatal_sigs[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void term_raw(void)
{
	struct termios t;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_termios) < 0)
		return;
	termios_saved = 1;
	atexit(term_restore);
	t = saved_termios;
	cfmakeraw(&t);
	tcsetattr(STDIN_FILENO, TCSAFLUSH, &t);
}

static int exit_status(enum vm_stop stop)
{
	switch (stop) {
	case VM_STOP_POWEROFF: return VM_EXIT_POWEROFF;
	case VM_STOP_RESET:
		log_info("guest rebooted");
		return VM_EXIT_REBOOT;
	case VM_STOP_HOST: return VM_EXIT_HOST_STOP;
	default: return VM_EXIT_CRASH;
	}
}

/* ---- the jail (vmm/jail.h) ---- */

/* Adds the disk's layers: all read-only but a writable top. */
static int jail_disk(struct jail *j, const struct vm_config *cfg)
{
	struct disk *d = NULL;
	char err[256];
	int rc;

	if ((rc = disk_open(&d, cfg->disk_path, DISK_RDONLY, err, sizeof(err))) < 0)
		return rc;
	for (unsigned i = 0; i < disk_layer_count(d) && rc == 0; i++) {
		const char *layer = disk_layer_path(d, i);
		char side[PATH_MAX];
		rc = jail_add(j, layer, !cfg->disk_read_only && i + 1 == disk_layer_count(d));
		/* A raw base's identity cache, which the open above has just
		 * checked or written: without it the VMM would hash the whole
		 * image again inside the jail (minutes for 1 GiB nested). */
		if (!rc && snprintf(side, sizeof(side), "%s" DISK_BASE_ID_SUFFIX, layer) < (int)sizeof(side) &&
		    access(side, R_OK) == 0)
			rc = jail_add(j, side, false);
	}
	disk_close(d);
	return rc;
}

/* A checkpoint whose memory is a layer needs the checkpoints under it
 * (read-only, like itself). */
static int jail_memory_layers(struct jail *j, const char *restore_dir, const char **why)
{
	static char err[512];
	struct snapmem_chain c;
	int rc;

	if ((rc = snapmem_chain_load(restore_dir, &c, err, sizeof(err)))) {
		*why = err;
		return rc;
	}
	for (int i = 1; i < c.n && !rc; i++)
		rc = jail_add(j, c.l[i].dir, false);
	snapmem_chain_free(&c);
	return rc;
}

/* Paths are made absolute first: the jail's working directory is its root. */
static int abs_path(const char **p, char *buf)
{
	if (!*p)
		return 0;
	if (!realpath(*p, buf))
		return -errno;
	*p = buf;
	return 0;
}

/* The vsock device creates its socket in that directory, and connects to
 * its U_<port> siblings there. */
static int jail_vsock(struct jail *j, const char **uds, char *buf)
{
	const char *slash = strrchr(*uds, '/');
	const char *base = slash ? slash + 1 : *uds;
	size_t dlen = slash ? (size_t)(slash - *uds) : 0, n;
	char dir[PATH_MAX];
	int rc;

	if (dlen >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, *uds, dlen);
	dir[dlen] = 0;
	if (!realpath(!slash ? "." : dlen ? dir : "/", buf))
		return -errno;
	if ((rc = jail_add(j, buf, true)))
		return rc;
	n = strlen(buf);
	if (n + 1 + strlen(base) >= PATH_MAX)
		return -ENAMETOOLONG;
	buf[n] = '/';
	memcpy(buf + n + 1, base, strlen(base) + 1);
	*uds = buf;
	return 0;
}

static int enter_jail(struct vm_config *cfg, const struct vm_args *a, const char **why)
{
	const char *ckpt_dir = a->ckpt_dir;
	bool probe_only = a->jail_probe;
	static char kernel[PATH_MAX], initrd[PATH_MAX], disk[PATH_MAX], vsock[PATH_MAX],
		restore[PATH_MAX];
	static struct jail j;
	int rc;

	*why = "a file the VM needs is missing";
	if ((rc = abs_path(&cfg->kernel_path, kernel)) || (rc = abs_path(&cfg->initrd_path, initrd)) ||
	    (rc = abs_path(&cfg->disk_path, disk)) || (rc = abs_path(&cfg->restore_dir, restore)))
		return rc;
	*why = "too many files for the jail, or one cannot be found";
	if ((cfg->kernel_path && (rc = jail_add(&j, cfg->kernel_path, false))) ||
	    (cfg->initrd_path && (rc = jail_add(&j, cfg->initrd_path, false))) ||
	    (cfg->restore_dir && (rc = jail_add(&j, cfg->restore_dir, false))))
		return rc;
	*why = "too many files for the jail";
	if (cfg->restore_dir && (rc = jail_memory_layers(&j, cfg->restore_dir, why)))
		return rc;
	*why = "cannot open the disk to find its layers";
	if (cfg->disk_path && (rc = jail_disk(&j, cfg)))
		return rc;
	*why = "the vsock socket's directory cannot be found";
	if (cfg->vsock_uds && (rc = jail_vsock(&j, &cfg->vsock_uds, vsock)))
		return rc;
	*why = "the checkpoint directory cannot be found";
	if (ckpt_dir && (rc = jail_add(&j, ckpt_dir, true)))
		return rc;
	if (!probe_only && (rc = accel_preopen(why)))
		return rc;
	/* Checkpoints of a restored VM, or of one after a live fork, read it. */
	*why = "cannot open /proc/self/pagemap (checkpoints of a restored or forked VM read it)";
	if (!probe_only && cfg->control_path && (rc = snapshot_preopen_pagemap()))
		return rc;
	j.set_user = a->jail_user;
	j.uid = a->jail_uid;
	j.gid = a->jail_gid;
	return jail_enter(&j, why);
}

/* --jail-probe (for the tests): what a process in the jail can reach.
 * One line per probe, "jail: NAME reached" or "jail: NAME refused (why)". */
static void probe(const char *name, int rc)
{
	printf("jail: %s %s%s%s\n", name, rc >= 0 ? "reached" : "refused (",
	       rc >= 0 ? "" : strerror(-rc), rc >= 0 ? "" : ")");
}

static int probe_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int probe_connect(int family, const void *addr, socklen_t len)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = 0;

	if (fd < 0)
		return -errno;
	if (connect(fd, addr, len) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int jail_probe(void)
{
	struct sockaddr_in lo = {.sin_family = AF_INET, .sin_port = htons(22),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in out = {.sin_family = AF_INET, .sin_port = htons(53),
				  .sin_addr.s_addr = htonl(0x08080808)};
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	DIR *root = opendir("/");
	struct dirent *e;

	probe("/etc/passwd", probe_open("/etc/passwd"));
	probe("/proc/self/status", probe_open("/proc/self/status"));
	probe("/dev/null", probe_open("/dev/null"));
	probe("tcp-127.0.0.1:22", probe_connect(AF_INET, &lo, sizeof(lo)));
	probe("tcp-8.8.8.8:53", probe_connect(AF_INET, &out, sizeof(out)));
	probe("mkdir-/x", mkdir("/x", 0700) < 0 ? -errno : 0);
	probe("setuid-0", setuid(0) < 0 ? -errno : 0);
	printf("jail: ids uid=%u gid=%u groups=%d\n", (unsigned)getuid(), (unsigned)getgid(),
	       getgroups(0, NULL));
	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d) == 0)
		printf("jail: capabilities %08x%08x\n", d[1].effective | d[1].permitted,
		       d[0].effective | d[0].permitted);
	while (root && (e = readdir(root)))
		if (e->d_name[0] != '.')
			printf("jail: root has /%s\n", e->d_name);
	if (root)
		closedir(root);
	return 0;
}


int vm_args_config(const struct vm_args *a, struct vm_config *cfg, const char **why)
{
	*cfg = (struct vm_config){
		.kernel_path = a->kernel, .initrd_path = a->initrd, .cmdline = a->cmdline,
		.mem_size = a->mem, .ncpus = a->cpus,
		.console_in = STDIN_FILENO, .console_out = STDOUT_FILENO,
		.console_escape = isatty(STDIN_FILENO),
		.disk_path = a->disk, .disk_read_only = a->disk_ro,
		.vsock_uds = a->vsock, .vsock_cid = a->cid,
		.restore_dir = a->restore, .control_path = a->control,
		.has_restore_memfd = a->restore_memfd >= 0, .restore_memfd = a->restore_memfd,
		/* The checkpoint's system calls are in the seccomp table for a
		 * jailed VMM, where only --checkpoint-dir is writable; outside a
		 * jail a VM with a control socket runs unfiltered (it could
		 * create files anywhere the user can). */
		.seccomp = !a->no_seccomp && (!a->control || a->jail),
	};
	return a->restore ? 0 : vm_check_config(cfg, why);
}

int vm_args_run(const struct vm_args *a, struct vm_config *cfg, const char *prog)
{
	static struct vm vm;
	const char *why = NULL;
	enum vm_stop stop;
	int err;

	if (a->jail && (err = enter_jail(cfg, a, &why)) < 0) {
		fprintf(stderr, "%s: jail: %s: %s\n", prog, why, strerror(-err));
		return VM_EXIT_ERROR;
	}
	if (a->jail_probe)
		return jail_probe();
	if (vm_create(&vm, cfg, &why) < 0) {
		fprintf(stderr, "%s: %s\n", prog, why);
		return VM_EXIT_ERROR;
	}
	install_signals();
	running_vm = &vm;
	term_raw();
	stop = vm_run(&vm);
	running_vm = NULL;
	term_restore();
	vm_destroy(&vm);
	return exit_status(stop);
}
