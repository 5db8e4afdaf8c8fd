/* kosa8 doctor: what this host can do for kosa8 and what to fix.  Each
 * check is one line with its verdict, what was found and, when it is not
 * ok, the command or setting that fixes it.  Exit status 0 when this host
 * can run sandboxes, 1 when it cannot; warnings (limits kosa8 runs
 * without) do not change it.  Looking changes nothing: no key is created,
 * no directory made. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/kvm.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <openssl/evp.h>

#include "audit/sign.h"
#include "machine/machine.h"
#include "cli/cmd_table.h"
#include "cli/cmd_vm.h"
#include "cli/commands.h"
#include "common/util.h"
#include "image/import.h"
#include "supervisor/cgroup.h"

enum verdict { DOC_OK, DOC_WARN, DOC_FAIL };

struct check {
	const char *name;
	enum verdict v;
	char found[PATH_MAX + 256];
	char fix[PATH_MAX + 256];
};

/* Below this the state directory cannot hold a sandbox's disk delta and
 * checkpoints for long; below the warning level it soon will not. */
#define DOC_DISK_MIN (1ull << 30)
#define DOC_DISK_LOW (5ull << 30)

#define say(c, verdict, ...) ((c)->v = (verdict), snprintf((c)->found, sizeof((c)->found), __VA_ARGS__))
#define fix(c, ...) snprintf((c)->fix, sizeof((c)->fix), __VA_ARGS__)

static const char *const no_kvm_fix =
	"enable VT-x/AMD-V in the firmware and load kvm_intel or kvm_amd; in a cloud VM, pick an "
	"instance type with nested virtualization";

/* KVM: usable (hardware virtualization and /dev/kvm open to this user), a
 * software KVM such as kvm-pvm (machine_kvm_unusable decides, as every
 * sandbox command does), or none. */
static bool check_kvm(struct check *c)
{
	const char *why = machine_kvm_unusable();
	struct stat st;
	struct group *g;
	int fd, api;

	if (why) {
		say(c, DOC_FAIL, "%s: %s", access("/dev/kvm", F_OK) ? "none" : "software KVM", why);
		fix(c, "%s", no_kvm_fix);
		return false;
	}
	fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		g = stat("/dev/kvm", &st) == 0 ? getgrgid(st.st_gid) : NULL;
		say(c, DOC_FAIL, "hardware KVM, but /dev/kvm does not open for you: %s", strerror(e));
		if (e == EACCES && g)
			fix(c, "sudo usermod -aG %s \"$USER\", then log in again", g->gr_name);
		else
			fix(c, "check /dev/kvm (ls -l /dev/kvm) and the kvm modules (lsmod | grep kvm)");
		return false;
	}
	api = ioctl(fd, KVM_GET_API_VERSION, 0);
	close(fd);
	if (api != KVM_API_VERSION) {
		say(c, DOC_FAIL, "/dev/kvm answers KVM API version %d, kosa8 needs %d", api, KVM_API_VERSION);
		fix(c, "%s", no_kvm_fix);
		return false;
	}
	say(c, DOC_OK, "usable: hardware KVM, /dev/kvm read-write for you (API %d)", api);
	return true;
}

/* The first executable NAME in $PATH into buf. */
static bool in_path(const char *name, char *buf, size_t len)
{
	const char *p = getenv("PATH");
	char dirs[4096];

	if (!p || snprintf(dirs, sizeof(dirs), "%s", p) >= (int)sizeof(dirs))
		return false;
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
		if (snprintf(buf, len, "%s/%s", d, name) < (int)len && access(buf, X_OK) == 0)
			return true;
	return false;
}

/* Where KVM cannot run the guest, sandboxes run in the helper machine
 * (testbed/machine) and kosa8 vm in a helper VM (testbed/run), both under
 * QEMU: all three must be there.  Says whether the machine runs. */
static bool check_emulation(struct check *c, bool kvm_ok)
{
	char qemu[PATH_MAX], tb[PATH_MAX], dir[PATH_MAX], why[256];
	bool have_qemu = in_path("qemu-system-x86_64", qemu, sizeof(qemu));
	/* Found as the commands that run them find them, each once. */
	bool have_tb = vm_find_testbed(tb, sizeof(tb)) == 0 && access(tb, X_OK) == 0 &&
		       cli_machine_script(tb, sizeof(tb)) == 0 && access(tb, X_OK) == 0;
	enum verdict bad = kvm_ok ? DOC_OK : DOC_FAIL;
	int pid = 0, up = 0;

	if (have_qemu && have_tb) {
		if (machine_dir(dir, sizeof(dir), false, why, sizeof(why)) == 0)
			up = machine_running(dir, &pid);
		say(c, DOC_OK, "%s and the helper machine (kosa8 machine): the fallback where KVM is missing; "
			       "the machine is %s", qemu, up > 0 ? "running" : "stopped (the first sandbox command starts it)");
		return true;
	}
	if (!have_qemu) {
		say(c, bad, "no qemu-system-x86_64 in PATH: no software-emulation fallback%s",
		    kvm_ok ? " (not needed while KVM works)" : ", and no usable KVM");
		fix(c, "sudo apt-get install qemu-system-x86");
	} else {
		say(c, bad, "%s, but the helper machine (testbed/) is not installed with this kosa8%s", qemu,
		    kvm_ok ? " (not needed while KVM works)" : ", and there is no usable KVM");
		fix(c, "run kosa8 from a build tree (make), or on a host with usable KVM");
	}
	return false;
}

/* A short text file (/proc, /sys) into buf, NUL-terminated. */
static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static bool has_word(const char *text, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = text; (p = strstr(p, w)); p += n)
		if ((p == text || p[-1] == ' ') && (!p[n] || p[n] == ' ' || p[n] == '\n'))
			return true;
	return false;
}

/* cgroup v2 with the memory, pids and cpu controllers handed down to
 * where kosa8 makes its cgroups (supervisor/cgroup.h); without them
 * sandboxes run without those ceilings, so this only warns. */
static void check_cgroup(struct check *c)
{
	static const char *const need[] = {"memory", "pids", "cpu"};
	char dir[PATH_MAX], top[PATH_MAX + 32], why[PATH_MAX], ctl[512], missing[32] = "";

	if (vmm_cgroup_parent(dir, sizeof(dir), why, sizeof(why)) < 0) {
		say(c, DOC_WARN, "%s: sandboxes run without memory, CPU and process limits", why);
		fix(c, "use cgroup v2 (systemd.unified_cgroup_hierarchy=1, Debian's default) and a "
		       "systemd-logind login session");
		return;
	}
	/* kosa8/ is made on first use below top, which must hand the
	 * controllers down and be writable. */
	snprintf(top, sizeof(top), "%s", dir);
	*strrchr(top, '/') = '\0';
	if (access(top, W_OK) != 0) {
		say(c, DOC_WARN, "%s is not writable for you: sandboxes run without limits", top);
		fix(c, "run as the user systemd delegates that cgroup to, or as root");
		return;
	}
	snprintf(top + strlen(top), sizeof(top) - strlen(top), "/cgroup.controllers");
	if (read_small(top, ctl, sizeof(ctl)) < 0)
		ctl[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(need); i++)
		if (!has_word(ctl, need[i]))
			snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %s", need[i]);
	if (missing[0]) {
		say(c, DOC_WARN, "cgroup v2, but%s not offered to %s", missing, dir);
		if (geteuid() == 0)
			fix(c, "cgroup v1 holds them (a hybrid hierarchy): boot with "
			       "systemd.unified_cgroup_hierarchy=1");
		else
			fix(c, "systemctl edit user@.service: [Service] Delegate=memory pids cpu");
		return;
	}
	say(c, DOC_OK, "cgroup v2: memory, pids and cpu limits in %s", dir);
}

/* A user (not root) puts the VMM in a user and PID namespace; without
 * them the VMM runs in neither (vmm_clone.c), so this only warns.  Tried
 * for real in a child: sysctls differ between distributions. */
static void check_userns(struct check *c)
{
	pid_t pid;
	int st = 0;
	char v[16];

	if (geteuid() == 0) {
		say(c, DOC_OK, "running as root: the VMM is jailed without a user namespace");
		return;
	}
	pid = fork();
	if (pid == 0)
		_exit(unshare(CLONE_NEWUSER) == 0 ? 0 : (errno & 0x7f) ?: 1);
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) {
		say(c, DOC_WARN, "cannot tell whether unprivileged user namespaces work");
		return;
	}
	if (WEXITSTATUS(st) == 0) {
		say(c, DOC_OK, "unprivileged user namespaces work");
		return;
	}
	say(c, DOC_WARN, "unprivileged user namespaces are refused (%s): the VMM runs outside one",
	    strerror(WEXITSTATUS(st)));
	if (read_small("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", v, sizeof(v)) == 0 &&
	    v[0] == '1')
		fix(c, "sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0");
	else if (read_small("/proc/sys/kernel/unprivileged_userns_clone", v, sizeof(v)) == 0 && v[0] == '0')
		fix(c, "sudo sysctl kernel.unprivileged_userns_clone=1");
	else
		fix(c, "sudo sysctl user.max_user_namespaces=15000");
}

/* Free space where sandboxes keep their disks and checkpoints (the state
 * directory, or the nearest existing folder above it). */
static bool check_disk(struct check *c)
{
	char dir[PATH_MAX];
	struct statvfs vfs;
	unsigned long long avail;

	if (kosa8_state_dir(dir, sizeof(dir)) < 0) {
		say(c, DOC_FAIL, "no state directory (HOME unset?)");
		fix(c, "set HOME or KOSA8_STATE_DIR");
		return false;
	}
	while (statvfs(dir, &vfs) < 0) {
		if (strrchr(dir, '/') <= dir) {
			say(c, DOC_FAIL, "cannot read the free space of %s: %s", dir, strerror(errno));
			return false;
		}
		*strrchr(dir, '/') = '\0';
	}
	avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
	say(c, DOC_OK, "%llu MiB free at %s", avail >> 20, dir);
	if (avail < DOC_DISK_LOW) {
		c->v = avail < DOC_DISK_MIN ? DOC_FAIL : DOC_WARN;
		fix(c, "free space there, or point KOSA8_STATE_DIR at a larger file system (%llu MiB %s)",
		    (avail < DOC_DISK_MIN ? DOC_DISK_MIN : DOC_DISK_LOW) >> 20,
		    avail < DOC_DISK_MIN ? "needed" : "advised");
	}
	return c->v != DOC_FAIL;
}

/* path: the kernel found, for the template check. */
static bool check_kernel(struct check *c, char *path)
{
	const char *env = getenv("KOSA8_KERNEL");

	if (env && *env) {
		if (access(env, R_OK) == 0 && realpath(env, path))
			return say(c, DOC_OK, "%s (from KOSA8_KERNEL)", env), true;
		say(c, DOC_FAIL, "KOSA8_KERNEL=%s is not a readable file", env);
		fix(c, "unset KOSA8_KERNEL, or point it at a bzImage");
		return false;
	}
	if (kosa8_guest_kernel(path, PATH_MAX) == 0 && access(path, R_OK) == 0)
		return say(c, DOC_OK, "%s", path), true;
	say(c, DOC_FAIL, "not built (no bzImage installed with kosa8, no build tree kernel)");
	fix(c, "make kernel (in the build tree), or install a kosa8 release");
	return false;
}

/* The VMM every sandbox runs, found as the supervisor finds it: beside
 * kosa8, or in ../lib/kosa8 when installed. */
static bool check_vmm(struct check *c)
{
	char self[PATH_MAX], vmm[PATH_MAX], shown[PATH_MAX];

	if (realpath("/proc/self/exe", self) && kosa8_vmm_path(self, vmm, sizeof(vmm)) == 0)
		return say(c, DOC_OK, "%s", realpath(vmm, shown) ? shown : vmm), true;
	say(c, DOC_FAIL, "no executable " KOSA8_VMM_FILE " beside this kosa8 or in ../lib/kosa8");
	fix(c, "make (in the build tree), or reinstall kosa8");
	return false;
}

/* The default image, as kosa8 run finds it (guest/image/build.sh --path);
 * path: the image found, for the template check. */
static bool check_image(struct check *c, char *path)
{
	char builder[PATH_MAX], root[PATH_MAX];
	const char *argv[6] = {builder, "--arch", KOSA8_ARCH, "--path", "default", NULL};
	const char *src = getenv("KOSA8_IMAGE_SOURCE");

	if (kosa8_data_path("guest/image/build.sh", builder, sizeof(builder)) < 0) {
		say(c, DOC_FAIL, "the image builder (guest/image/build.sh) is not installed with kosa8");
		fix(c, "reinstall kosa8");
		return false;
	}
	kosa8_use_installed_agent();
	if (run_for_last_line(argv, path, PATH_MAX) == 0 && path[0] == '/')
		return say(c, DOC_OK, "default: %s", path), true;
	if (image_root(KOSA8_ARCH, root, sizeof(root)) == 0 && image_find_imported(root, "default", path, PATH_MAX) == 0)
		return say(c, DOC_OK, "default: %s (imported)", path), true;
	path[0] = 0;
	if (src && *src) {
		say(c, DOC_WARN, "default: not there yet; run and create import it from KOSA8_IMAGE_SOURCE=%s", src);
		return false;
	}
	say(c, DOC_FAIL, "default: not built");
	fix(c, "sudo kosa8 image build default (a few minutes; needs mmdebstrap), or kosa8 image import PATH-or-URL");
	return false;
}

/* The template a plain `kosa8 run` starts from (supervisor/template.h):
 * the default image with the default vCPUs and memory, this kosa8 and
 * guest kernel.  Without it the first run or create makes it, once, so
 * this only warns.  kernel or image is "" when its check failed. */
static void check_template(struct check *c, const char *kernel, const char *image)
{
	char self[PATH_MAX] = "", root[PATH_MAX], key[TEMPLATE_KEY_LEN + 1], why[PATH_MAX + 256];
	struct template_inputs in = {.kernel = kernel, .image = image, .exe = self,
				     .mem = CLI_SANDBOX_MEM, .cpus = CLI_SANDBOX_CPUS};
	const char *warm = "kosa8 image warm (boots the default image once, a minute or more; "
			   "or let the first kosa8 run make it)";
	int rc;

	if (!kernel[0] || !image[0]) {
		say(c, DOC_WARN, "none: no %s to make one from", !kernel[0] ? "guest kernel" : "default image");
		fix(c, "fix the %s line, then %s", !kernel[0] ? "kernel" : "image", warm);
		return;
	}
	if (!realpath("/proc/self/exe", self) || template_key(&in, key, why, sizeof(why)) < 0) {
		say(c, DOC_WARN, "cannot tell: %.1000s", self[0] ? why : strerror(errno));
		return;
	}
	if (template_root(root, sizeof(root), false, why, sizeof(why)) == 0 &&
	    (rc = template_check(root, key, why, sizeof(why))) != -ENOENT) {
		if (rc == 0) {
			say(c, DOC_OK, "%.12s for the default image (%d vCPU, %llu MiB) and this kosa8: "
				       "new sandboxes start from it", key, CLI_SANDBOX_CPUS,
			    (unsigned long long)(CLI_SANDBOX_MEM / MiB));
			return;
		}
		say(c, DOC_WARN, "%s", why);
		fix(c, "kosa8 image prune, then %s", warm);
		return;
	}
	say(c, DOC_WARN, "none yet for the default image (%d vCPU, %llu MiB) and this kosa8 (%.12s): "
			 "the first sandbox boots one and checkpoints it", CLI_SANDBOX_CPUS,
	    (unsigned long long)(CLI_SANDBOX_MEM / MiB), key);
	fix(c, "%s", warm);
}

/* The audit signing key and its public half, as `kosa8 audit verify
 * --pubkey` and trusted-keys take it; a key others may read is refused by
 * the audit writer, so that is a failure. */
static bool check_audit_key(struct check *c)
{
	char dir[PATH_MAX], hex[AUDIT_PUBKEY_LEN * 2 + 1];
	uint8_t pub[AUDIT_PUBKEY_LEN];
	EVP_PKEY *k = NULL;
	int err;

	if (audit_key_dir(dir, sizeof(dir)) < 0)
		return say(c, DOC_FAIL, "no config directory (HOME unset?)"), false;
	err = audit_key_load(NULL, &k);
	if (!err)
		err = audit_key_public(k, pub);
	EVP_PKEY_free(k);
	if (err == -ENOENT)
		return say(c, DOC_OK, "none yet: the first sandbox creates it in %s", dir), true;
	if (err == -EPERM) {
		say(c, DOC_FAIL, "%s/%s is not yours alone", dir, AUDIT_KEY_FILE);
		fix(c, "chmod 600 %s/%s (and check who else could have read it)", dir, AUDIT_KEY_FILE);
		return false;
	}
	if (err) {
		say(c, DOC_FAIL, "%s/%s: %s", dir, AUDIT_KEY_FILE,
		    err == -EINVAL ? "not an Ed25519 private key" : strerror(-err));
		fix(c, "move it away; kosa8 makes a new key (old logs then verify only with --pubkey)");
		return false;
	}
	for (size_t i = 0; i < AUDIT_PUBKEY_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", pub[i]);
	say(c, DOC_OK, "ed25519 %s in %s", hex, dir);
	return true;
}

static const char *const verdict_name[] = {"ok", "warn", "FAIL"};

static void print_text(const struct check *cs, size_t n, bool ready)
{
	for (size_t i = 0; i < n; i++) {
		printf("%-4s  %-10s %s\n", verdict_name[cs[i].v], cs[i].name, cs[i].found);
		if (cs[i].v != DOC_OK && cs[i].fix[0])
			printf("      %-10s fix: %s\n", "", cs[i].fix);
	}
	printf(ready ? "This host can run kosa8 sandboxes.\n"
		     : "This host cannot run kosa8 sandboxes yet: fix the FAIL lines above.\n");
}

static int print_json(const struct check *cs, size_t n, bool ready)
{
	static const char *const lower[] = {"ok", "warn", "fail"};
	cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "checks");
	char *s;

	cJSON_AddBoolToObject(root, "ready", ready);
	cJSON_AddStringToObject(root, "version", cli_version());
	for (size_t i = 0; i < n; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "check", cs[i].name);
		cJSON_AddStringToObject(o, "status", lower[cs[i].v]);
		cJSON_AddStringToObject(o, "found", cs[i].found);
		if (cs[i].v != DOC_OK && cs[i].fix[0])
			cJSON_AddStringToObject(o, "fix", cs[i].fix);
		cJSON_AddItemToArray(arr, o);
	}
	s = cJSON_Print(root);
	cJSON_Delete(root);
	if (!s)
		return -ENOMEM;
	puts(s);
	free(s);
	return 0;
}

int cmd_doctor(int argc, char **argv)
{
	struct check cs[] = {
		{.name = "kvm"},  {.name = "emulation"}, {.name = "cgroup"}, {.name = "userns"},
		{.name = "disk"}, {.name = "kernel"},	 {.name = "image"},  {.name = "template"},
		{.name = "audit-key"}, {.name = "vmm"},
	};
	char kernel[PATH_MAX] = "", image[PATH_MAX] = "";
	bool json = false, kvm, emu, ready, k, img;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json")) {
			fprintf(stderr, "kosa8 doctor: unexpected '%s'\n", argv[i]);
			return cli_usage_error("doctor", NULL);
		}
		json = true;
	}
	kvm = check_kvm(&cs[0]);
	emu = check_emulation(&cs[1], kvm);
	/* With a working fallback a missing KVM is slow, not fatal. */
	if (!kvm && emu)
		cs[0].v = DOC_WARN;
	check_cgroup(&cs[2]);
	check_userns(&cs[3]);
	/* '&', not '&&': every check runs and prints its line. */
	k = check_kernel(&cs[5], kernel);
	img = check_image(&cs[6], image);
	if (!k)
		kernel[0] = '\0';
	if (!img)
		image[0] = '\0';
	check_template(&cs[7], kernel, image);
	ready = (kvm || emu) & check_disk(&cs[4]) & k & img & check_audit_key(&cs[8]) & check_vmm(&cs[9]);
	fflush(stdout);
	if (json) {
		if (print_json(cs, ARRAY_SIZE(cs), ready) < 0)
			return 2;
	} else {
		print_text(cs, ARRAY_SIZE(cs), ready);
	}
	return ready ? 0 : 1;
}
