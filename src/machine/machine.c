/* The helper machine's directory and whether it runs (machine.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "machine/machine.h"
#include "sandbox/owner.h"
#include "vmm/accel.h"

const char *machine_kvm_unusable(void)
{
	if (access("/dev/kvm", F_OK) != 0)
		return "no /dev/kvm here";
	if (!accel_hw_virt())
		return "the /dev/kvm here has no hardware virtualization under it (no vmx/svm CPU flag: "
		       "a software KVM, which cannot run kosa8's guest)";
	return NULL;
}

int machine_dir(char *buf, size_t len, bool create, char *why, size_t whylen)
{
	const char *env = getenv("KOSA8_MACHINE_DIR");
	char state[PATH_MAX];
	int err;

	/* One machine for several state directories (the tests use one
	 * per group): an absolute path of the user's own, checked as below. */
	if (env && *env) {
		if (env[0] != '/')
			return snprintf(why, whylen, "KOSA8_MACHINE_DIR=%s is not an absolute path", env), -EINVAL;
		if (snprintf(buf, len, "%s", env) >= (int)len)
			return snprintf(why, whylen, "KOSA8_MACHINE_DIR is too long"), -ENAMETOOLONG;
		return create ? private_dir(buf, true, why, whylen) : 0;
	}
	if ((err = kosa8_state_dir(state, sizeof(state))))
		return snprintf(why, whylen, "state directory: %s", strerror(-err)), err;
	if (snprintf(buf, len, "%s/machine", state) >= (int)len)
		return snprintf(why, whylen, "state directory path too long"), -ENAMETOOLONG;
	if (!create)
		return 0;
	if ((err = mkdir_p(state, 0700)))
		return snprintf(why, whylen, "cannot create %s: %s", state, strerror(-err)), err;
	return private_dir(buf, true, why, whylen);
}

int machine_running(const char *dir, int *pid)
{
	struct sandbox_owner who;
	int rc = sandbox_owner_probe(dir, &who);

	*pid = rc == 1 ? (int)who.pid : 0;
	return rc;
}

int machine_ready(const char *dir)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/ready", dir) >= (int)sizeof(path))
		return 0;
	return access(path, F_OK) == 0;
}
