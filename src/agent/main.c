/* kosa8-agent: listens for the host (vsock in the guest, a unix socket in
 * tests) and serves each connection in its own process.  As PID 1 it also
 * does what an init must: mount the API filesystems, reap every orphan, and
 * power the machine off or reboot it cleanly when asked. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/vm_sockets.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KILL_GRACE_MS 5000

struct agent_cfg agent_cfg = { .default_user = "kosa8" };

uint64_t boottime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#define STR_(x) #x
#define STR(x) STR_(x)
#define DEFAULT_LISTEN "vsock:" STR(AGENT_VSOCK_PORT)

static void usage(FILE *f)
{
	fprintf(f, "usage: kosa8-agent [--listen vsock:PORT|unix:PATH] [--default-user NAME]\n"
		   "       kosa8-agent --egress-only [--egress-upstream PREFIX] [--egress-tcp A:P] [--egress-dns A:P]\n"
		   "  --listen           where to accept the host (default " DEFAULT_LISTEN ")\n"
		   "  --default-user     user that runs commands when a request names none (default kosa8)\n"
		   "  --egress-only      run only the egress relay (tests; PID 1 runs it as a child)\n"
		   "  --egress-upstream  reach host port P at unix socket PREFIX_P instead of vsock CID 2\n"
		   "  --egress-tcp       where redirected TCP arrives (default 127.0.0.1:1081)\n"
		   "  --egress-dns       DNS listener, UDP and TCP (default 127.0.0.53:53)\n");
}

/* ---- the egress relay: a child of PID 1, started again if it dies ---- */

static pid_t net_pid = -1;
static uint64_t net_started_ms;
static bool stopping, net_enabled;
static int net_keep_out[2] = { -1, -1 };   /* PID 1's own fds, closed in the relay */

static void net_start(void)
{
	/* A relay that keeps dying is not restarted in a tight loop. */
	if (!net_enabled || net_pid > 0 || stopping || (net_started_ms && boottime_ms() - net_started_ms < 1000))
		return;
	net_started_ms = boottime_ms();
	net_pid = fork();
	if (net_pid == 0) {
		sigset_t none;
		for (int i = 0; i < 2; i++)
			if (net_keep_out[i] >= 0)
				close(net_keep_out[i]);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		_exit(net_serve() < 0 ? 1 : 0);
	}
	if (net_pid < 0)
		fprintf(stderr, "kosa8-agent: egress: fork: %s\n", strerror(errno));
}

/* ---- PID 1 ---- */

static void mount_one(const char *src, const char *dst, const char *type, unsigned long fl, const char *opt)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, fl, opt) < 0 && errno != EBUSY)
		fprintf(stderr, "kosa8-agent: mount %s on %s: %s\n", type, dst, strerror(errno));
}

static void set_hostname_from_cmdline(void)
{
	char buf[4096], *tok, *save;
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		if (strncmp(tok, "kosa8.hostname=", 15))
			continue;
		const char *h = tok + 15;
		size_t len = strlen(h);
		if (!ap_hostname_valid(h, len))
			fprintf(stderr, "kosa8-agent: ignoring invalid kosa8.hostname=%s\n", h);
		else if (sethostname(h, len) < 0)
			fprintf(stderr, "kosa8-agent: sethostname: %s\n", strerror(errno));
	}
}

/* Whether the kernel command line holds word (a whole word). */
static bool cmdline_has(const char *word)
{
	char buf[4096], *tok, *save;
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	for (tok = strtok_r(buf, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save))
		if (!strcmp(tok, word))
			return true;
	return false;
}

static void init_pid1(void)
{
	const unsigned long safe = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	mount_one("proc", "/proc", "proc", safe, NULL);
	mount_one("sysfs", "/sys", "sysfs", safe, NULL);
	mount_one("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	mount_one("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=620,ptmxmode=666");
	mount_one("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_one("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	mount_one("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" }, { "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" }, { "/proc/self/fd/2", "/dev/stderr" },
	};
	for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			fprintf(stderr, "kosa8-agent: %s: %s\n", links[i][1], strerror(errno));
	set_hostname_from_cmdline();
}

static void reap_all(void)
{
	pid_t pid;

	while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
		if (pid == net_pid)
			net_pid = -1;
}

/* PID 1: stop everything, then power off or reboot.  Otherwise just exit. */
static void power(int how)
{
	if (getpid() != 1)
		exit(0);
	stopping = true;
	sync();
	kill(-1, SIGTERM);
	uint64_t deadline = boottime_ms() + KILL_GRACE_MS;
	while (boottime_ms() < deadline) {
		pid_t r = waitpid(-1, NULL, WNOHANG);
		if (r < 0 && errno == ECHILD)
			break;
		if (r == 0)
			usleep(20000);
	}
	kill(-1, SIGKILL);
	reap_all();
	sync();
	reboot(how);
	fprintf(stderr, "kosa8-agent: reboot: %s\n", strerror(errno));
	for (;;)
		pause();   /* PID 1 must never exit: that panics the kernel */
}

/* ---- listening ---- */

static int listen_on(const char *spec)
{
	int fd;
	if (!strncmp(spec, "unix:", 5)) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		struct stat sb;
		if (strlen(spec + 5) >= sizeof(a.sun_path) || !spec[5])
			return -ENAMETOOLONG;
		strcpy(a.sun_path, spec + 5);
		if (lstat(a.sun_path, &sb) == 0 && S_ISSOCK(sb.st_mode))
			unlink(a.sun_path);   /* a stale socket from an earlier run */
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			goto fail;
	} else if (!strncmp(spec, "vsock:", 6)) {
		char *end;
		unsigned long port = strtoul(spec + 6, &end, 10);
		if (!spec[6] || *end || port > 0xffffffffUL)
			return -EINVAL;
		struct sockaddr_vm a = { .svm_family = AF_VSOCK, .svm_cid = VMADDR_CID_ANY,
					 .svm_port = (unsigned)port };
		fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			goto fail;
	} else {
		return -EINVAL;
	}
	if (listen(fd, 64) < 0)
		goto fail;
	return fd;
fail:;
	int e = errno;
	if (fd >= 0)
		close(fd);
	return -e;
}

static void serve(int lfd, int sfd, const sigset_t *old)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		close(lfd);
		close(sfd);
		sigprocmask(SIG_SETMASK, old, NULL);
		session_run(fd);
		_exit(0);
	}
	if (pid < 0)
		fprintf(stderr, "kosa8-agent: fork: %s\n", strerror(errno));
	close(fd);
}

static int on_signal(int sfd)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGCHLD:
			reap_all();
			if (net_pid < 0)
				net_start();
			break;
		case SIGUSR1:
			power(RB_POWER_OFF);
			break;
		case SIGUSR2:
			power(RB_AUTOBOOT);
			break;
		default:   /* SIGTERM, SIGINT: only a plain process stops on them */
			if (getpid() != 1)
				return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *spec = DEFAULT_LISTEN;
	bool egress_only = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
			spec = argv[++i];
		} else if (!strcmp(argv[i], "--default-user") && i + 1 < argc) {
			agent_cfg.default_user = argv[++i];
		} else if (!strcmp(argv[i], "--egress-only")) {
			egress_only = true;
		} else if (!strcmp(argv[i], "--egress-upstream") && i + 1 < argc) {
			net_opts.upstream = argv[++i];
		} else if (!strcmp(argv[i], "--egress-tcp") && i + 1 < argc) {
			net_opts.tcp_listen = argv[++i];
		} else if (!strcmp(argv[i], "--egress-dns") && i + 1 < argc) {
			net_opts.dns_listen = argv[++i];
		} else if (!strcmp(argv[i], "--version")) {
			printf("%s (protocol %d.%d)\n", AP_AGENT_VERSION, AP_VERSION_MAJOR, AP_VERSION_MINOR);
			return 0;
		} else if (getpid() != 1) {
			/* The kernel passes unknown command-line words to init: as
			 * PID 1 those are not ours to refuse. */
			usage(!strcmp(argv[i], "--help") ? stdout : stderr);
			return strcmp(argv[i], "--help") ? 2 : 0;
		}
	}
	agent_cfg.main_pid = getpid();
	agent_cfg.start_ms = boottime_ms();
	if (egress_only && getpid() != 1)
		return net_serve() < 0 ? 1 : 0;
	/* The guest network only where the supervisor asks for it: an agent
	 * that is PID 1 of a mere PID namespace (tests) shares its host's
	 * network, which must never get these rules and routes. */
	if (getpid() == 1)
		init_pid1();   /* mounts /proc, where the command line is read */
	bool net = getpid() == 1 && cmdline_has("kosa8.net=on");
	if (net)
		net_setup();   /* the rules are in place before the host can run anything */

	sigset_t set, old;
	sigemptyset(&set);
	int sigs[] = { SIGCHLD, SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaddset(&set, sigs[i]);
	sigprocmask(SIG_BLOCK, &set, &old);
	signal(SIGPIPE, SIG_IGN);   /* write errors come back as EPIPE */
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	int lfd = listen_on(spec);
	if (sfd < 0 || lfd < 0) {
		fprintf(stderr, "kosa8-agent: cannot listen on %s: %s\n", spec,
			strerror(lfd < 0 ? -lfd : errno));
		if (getpid() == 1)
			power(RB_POWER_OFF);
		return 1;
	}
	fprintf(stderr, "kosa8-agent: listening on %s\n", spec);
	net_enabled = net;
	net_keep_out[0] = lfd;
	net_keep_out[1] = sfd;
	net_start();
	for (;;) {
		struct pollfd p[2] = { { .fd = lfd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
		/* A relay that died too soon after its last start is started
		 * again once the second has passed. */
		if (poll(p, 2, net_enabled && net_pid < 0 ? 1000 : -1) < 0 && errno != EINTR)
			break;
		if (net_pid < 0)
			net_start();
		if (p[1].revents && on_signal(sfd))
			break;
		if (p[0].revents)
			serve(lfd, sfd, &old);
	}
	close(lfd);
	return 0;
}
