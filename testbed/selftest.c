// Proves that /dev/kvm works: runs a real-mode guest that writes a byte to an
// I/O port EXITS times and halts, and checks every exit KVM reports.  Used as
// `testbed/run testbed/selftest` (testbed/selftest compiles this file).
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { MEM_SIZE = 0x10000, CODE_ADDR = 0x1000, PORT = 0x10, EXITS = 1000, BYTE = 'K' };

// mov al, BYTE; mov cx, EXITS; 1: out PORT, al; loop 1b; hlt
static const uint8_t guest_code[] = {
	0xb0, BYTE, 0xb9, EXITS & 0xff, EXITS >> 8, 0xe6, PORT, 0xe2, 0xfc, 0xf4,
};

struct vm {
	int kvm, vm, vcpu;
	uint8_t *mem;
	struct kvm_run *run;
	size_t run_size;
};

static int vm_setup(struct vm *v)
{
	struct kvm_userspace_memory_region region = { 0 };
	struct kvm_sregs sregs;
	struct kvm_regs regs = { .rip = CODE_ADDR, .rflags = 0x2 };
	int api, size;

	v->kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (v->kvm < 0)
		return -errno;
	api = ioctl(v->kvm, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION)
		return api < 0 ? -errno : -EPROTO;
	v->vm = ioctl(v->kvm, KVM_CREATE_VM, 0);
	if (v->vm < 0)
		return -errno;
	v->mem = mmap(NULL, MEM_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (v->mem == MAP_FAILED)
		return -errno;
	memcpy(v->mem + CODE_ADDR, guest_code, sizeof(guest_code));
	region.memory_size = MEM_SIZE;
	region.userspace_addr = (uintptr_t)v->mem;
	if (ioctl(v->vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
		return -errno;
	v->vcpu = ioctl(v->vm, KVM_CREATE_VCPU, 0);
	if (v->vcpu < 0)
		return -errno;
	size = ioctl(v->kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (size < (int)sizeof(*v->run))
		return size < 0 ? -errno : -EPROTO;
	v->run_size = (size_t)size;
	v->run = mmap(NULL, v->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->vcpu, 0);
	if (v->run == MAP_FAILED)
		return -errno;
	// Real mode from address 0: the reset state has CS based at 0xffff0000.
	if (ioctl(v->vcpu, KVM_GET_SREGS, &sregs) < 0)
		return -errno;
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	if (ioctl(v->vcpu, KVM_SET_SREGS, &sregs) < 0 || ioctl(v->vcpu, KVM_SET_REGS, &regs) < 0)
		return -errno;
	return 0;
}

// Returns the number of port writes seen before HLT, or -errno / -EPROTO on
// anything but the expected exits.
static int vm_run(struct vm *v)
{
	struct kvm_run *r = v->run;
	int outs = 0;

	for (;;) {
		if (ioctl(v->vcpu, KVM_RUN, 0) < 0)
			return -errno;
		if (r->exit_reason == KVM_EXIT_HLT)
			return outs;
		if (r->exit_reason != KVM_EXIT_IO || r->io.direction != KVM_EXIT_IO_OUT ||
		    r->io.port != PORT || r->io.size != 1 || r->io.count != 1 ||
		    ((uint8_t *)r)[r->io.data_offset] != BYTE) {
			fprintf(stderr, "selftest: unexpected exit %u (port 0x%x) after %d writes\n",
				r->exit_reason, r->io.port, outs);
			return -EPROTO;
		}
		outs++;
	}
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(void)
{
	struct vm v = { .kvm = -1, .vm = -1, .vcpu = -1, .mem = MAP_FAILED, .run = MAP_FAILED };
	struct kvm_regs regs;
	double start;
	int ret;

	ret = vm_setup(&v);
	if (ret < 0) {
		fprintf(stderr, "selftest: setting up a KVM guest failed: %s\n", strerror(-ret));
		goto out;
	}
	start = now();
	ret = vm_run(&v);
	if (ret < 0) {
		fprintf(stderr, "selftest: running the guest failed: %s\n", strerror(-ret));
		goto out;
	}
	if (ret != EXITS || ioctl(v.vcpu, KVM_GET_REGS, &regs) < 0 ||
	    regs.rip != CODE_ADDR + sizeof(guest_code) || (regs.rcx & 0xffff) != 0) {
		fprintf(stderr, "selftest: guest halted after %d of %d writes, or in the wrong place\n",
			ret, EXITS);
		ret = -EPROTO;
		goto out;
	}
	printf("selftest: ok: KVM API %d, real-mode guest made %d port-I/O exits then HLT, %.1f us per exit\n",
	       KVM_API_VERSION, ret, (now() - start) * 1e6 / EXITS);
	ret = 0;
out:
	if (v.run != MAP_FAILED)
		munmap(v.run, v.run_size);
	if (v.mem != MAP_FAILED)
		munmap(v.mem, MEM_SIZE);
	if (v.vcpu >= 0)
		close(v.vcpu);
	if (v.vm >= 0)
		close(v.vm);
	if (v.kvm >= 0)
		close(v.kvm);
	return ret < 0 ? 1 : 0;
}
