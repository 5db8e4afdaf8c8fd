/* Linux KVM backend of the accelerator interface (accel.h): what is the
 * same on every architecture.  The rest is in vmm/ARCH/accel_kvm.c. */
#include "vmm/accel_kvm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"

/* The signal used to kick a vCPU thread out of KVM_RUN. */
#define KICK_SIGNAL SIGUSR1

static void kick_handler(int sig) { (void)sig; }

/* KVM's data words of an internal error, in hex: for an emulation failure
 * they hold the instruction bytes and the exit that led to it (reason,
 * info1/info2: for a nested page fault its error code and address). */
static void internal_error_detail(const struct kvm_run *r, char *buf, size_t len)
{
	uint32_t n = r->internal.ndata;
	size_t used = 0;

	buf[0] = '\0';
	if (n > sizeof(r->internal.data) / sizeof(r->internal.data[0]))
		n = sizeof(r->internal.data) / sizeof(r->internal.data[0]);
	for (uint32_t i = 0; i < n && used + 1 < len; i++) {
		int w = snprintf(buf + used, len - used, "%s%llx", i ? " " : "data ",
				 (unsigned long long)r->internal.data[i]);
		if (w < 0)
			break;
		used += (size_t)w;
	}
}

static int install_kick_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = kick_handler; /* no SA_RESTART: KVM_RUN must return EINTR */
	sigemptyset(&sa.sa_mask);
	return sigaction(KICK_SIGNAL, &sa, NULL) < 0 ? -errno : 0;
}

static int kvm_check_caps(struct accel_vm *vm, const char **err_msg)
{
	static const struct { int cap; const char *name; } needed[] = {
		{KVM_CAP_USER_MEMORY, "user memory"},
		{KVM_CAP_IMMEDIATE_EXIT, "immediate exit"},
	};
	int n;

	for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
		if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, needed[i].cap) <= 0) {
			log_err("KVM lacks %s", needed[i].name);
			*err_msg = "this kernel's KVM lacks a capability kosa8 needs (see the line above); use a newer host kernel";
			return -ENOTSUP;
		}
	}
	n = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
	if (n <= 0)
		n = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
	vm->caps.max_vcpus = n > 0 ? n : 1;
	return kvm_arch_check_caps(vm, err_msg);
}

/* /dev/kvm opened ahead of a jail that will hide it (accel_preopen). */
static int preopened_kvm_fd = -1;

static int open_kvm(int *fd, const char **err_msg)
{
	int err;

	*fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (*fd >= 0)
		return 0;
	err = -errno;
	if (err == -ENOENT)
		*err_msg = "/dev/kvm does not exist: enable virtualization (VT-x/AMD-V) and load kvm_intel or kvm_amd, or use --emulate (slow, software emulation)";
	else if (err == -EACCES || err == -EPERM)
		*err_msg = "no permission to open /dev/kvm: add yourself to the 'kvm' group (then log in again)";
	else
		*err_msg = "cannot open /dev/kvm: KVM is not usable on this host; use --emulate (slow, software emulation)";
	return err;
}

int accel_preopen(const char **err_msg)
{
	return preopened_kvm_fd >= 0 ? 0 : open_kvm(&preopened_kvm_fd, err_msg);
}

int accel_open(struct accel_vm **out, const char **err_msg)
{
	struct accel_vm *vm;
	int err;

	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return -ENOMEM;
	vm->vm_fd = -1;
	if (preopened_kvm_fd >= 0) {
		vm->kvm_fd = preopened_kvm_fd;
		preopened_kvm_fd = -1;
	} else if ((err = open_kvm(&vm->kvm_fd, err_msg))) {
		goto fail;
	}
	if (ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION) {
		*err_msg = "/dev/kvm speaks an unknown KVM API version";
		err = -ENOTSUP;
		goto fail;
	}
	err = kvm_check_caps(vm, err_msg);
	if (err)
		goto fail;
	vm->run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (vm->run_size < (int)sizeof(struct kvm_run)) {
		*err_msg = "KVM reports a bad vCPU mmap size";
		err = -EINVAL;
		goto fail;
	}
	vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0) {
		err = -errno;
		*err_msg = "KVM could not create a VM (out of memory, or too many VMs)";
		goto fail;
	}
	if ((err = kvm_arch_vm_init(vm, err_msg)))
		goto fail;
	err = install_kick_handler();
	if (err)
		goto fail;
	*out = vm;
	return 0;
fail:
	accel_close(vm);
	return err;
}

void accel_close(struct accel_vm *vm)
{
	if (!vm)
		return;
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	if (vm->kvm_fd >= 0)
		close(vm->kvm_fd);
	kvm_arch_vm_free(vm);
	free(vm);
}

void accel_caps(struct accel_vm *vm, struct accel_caps *caps) { *caps = vm->caps; }

int accel_map_memory(struct accel_vm *vm, uint32_t slot, uint64_t gpa,
		     uint64_t size, void *hva, bool log_dirty)
{
	struct kvm_userspace_memory_region r = {
		.slot = slot,
		.flags = log_dirty ? KVM_MEM_LOG_DIRTY_PAGES : 0,
		.guest_phys_addr = gpa,
		.memory_size = size,
		.userspace_addr = (uint64_t)(uintptr_t)hva,
	};

	return ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0 ? -errno : 0;
}

/* Without KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2 (not enabled) the call both
 * returns the bitmap and write-protects the pages again: one ioctl per
 * slot per checkpoint. */
int accel_dirty_log(struct accel_vm *vm, uint32_t slot, uint64_t *bitmap)
{
	struct kvm_dirty_log log = {.slot = slot, .dirty_bitmap = bitmap};

	return ioctl(vm->vm_fd, KVM_GET_DIRTY_LOG, &log) < 0 ? -errno : 0;
}

int accel_mmio_doorbell(struct accel_vm *vm, uint64_t gpa, uint32_t len, uint64_t value, int fd)
{
	struct kvm_ioeventfd io = {.datamatch = value, .addr = gpa, .len = len, .fd = fd,
				   .flags = KVM_IOEVENTFD_FLAG_DATAMATCH};

	return ioctl(vm->vm_fd, KVM_IOEVENTFD, &io) < 0 ? -errno : 0;
}

int accel_vcpu_create(struct accel_vm *vm, int id, struct accel_vcpu **out)
{
	struct accel_vcpu *v;
	int err;

	v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->vm = vm;
	v->id = id;
	v->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, id);
	if (v->fd < 0) {
		err = -errno;
		free(v);
		return err;
	}
	v->run = mmap(NULL, (size_t)vm->run_size, PROT_READ | PROT_WRITE, MAP_SHARED, v->fd, 0);
	if (v->run == MAP_FAILED) {
		err = -errno;
		close(v->fd);
		free(v);
		return err;
	}
	*out = v;
	return 0;
}

void accel_vcpu_destroy(struct accel_vcpu *v)
{
	if (!v)
		return;
	munmap(v->run, (size_t)v->vm->run_size);
	close(v->fd);
	free(v);
}

static void decode_exit(struct accel_vcpu *v, struct vcpu_exit *e)
{
	struct kvm_run *r = v->run;

	memset(e, 0, sizeof(*e));
	if (kvm_arch_decode_exit(r, e))
		return;
	switch (r->exit_reason) {
	case KVM_EXIT_MMIO:
		e->kind = VCPU_EXIT_MMIO;
		e->mmio.addr = r->mmio.phys_addr;
		e->mmio.len = r->mmio.len;
		e->mmio.write = r->mmio.is_write;
		e->mmio.data = r->mmio.data;
		break;
	case KVM_EXIT_HLT:
		e->kind = VCPU_EXIT_HLT;
		break;
	case KVM_EXIT_SYSTEM_EVENT:
		e->code = r->system_event.type;
		e->kind = r->system_event.type == KVM_SYSTEM_EVENT_SHUTDOWN ?
				  VCPU_EXIT_SYSTEM_OFF : VCPU_EXIT_SYSTEM_RESET;
		break;
	case KVM_EXIT_FAIL_ENTRY:
		e->kind = VCPU_EXIT_FAIL;
		e->code = r->fail_entry.hardware_entry_failure_reason;
		break;
	case KVM_EXIT_INTERNAL_ERROR:
		e->kind = VCPU_EXIT_FAIL;
		e->code = 0x10000u | r->internal.suberror;
		internal_error_detail(r, e->detail, sizeof(e->detail));
		break;
	case KVM_EXIT_INTR:
		e->kind = VCPU_EXIT_INTR;
		break;
	default:
		e->kind = VCPU_EXIT_OTHER;
		e->code = r->exit_reason;
		break;
	}
}

int accel_vcpu_run(struct accel_vcpu *v, struct vcpu_exit *e)
{
	if (!v->thread_set) {
		v->thread = pthread_self();
		__atomic_store_n(&v->thread_set, 1, __ATOMIC_RELEASE);
	}
	kvm_arch_complete_exit(v->run, e);
	if (ioctl(v->fd, KVM_RUN, 0) < 0) {
		if (errno == EINTR || errno == EAGAIN) {
			v->run->immediate_exit = 0;
			memset(e, 0, sizeof(*e));
			e->kind = VCPU_EXIT_INTR;
			return 0;
		}
		return -errno;
	}
	decode_exit(v, e);
	return 0;
}

void accel_vcpu_kick(struct accel_vcpu *v)
{
	/* immediate_exit covers the window before the thread enters KVM_RUN;
	 * the signal covers a thread already inside it. */
	__atomic_store_n(&v->run->immediate_exit, 1, __ATOMIC_RELEASE);
	if (__atomic_load_n(&v->thread_set, __ATOMIC_ACQUIRE))
		pthread_kill(v->thread, KICK_SIGNAL);
}

int accel_vcpu_settle(struct accel_vcpu *v, struct vcpu_exit *prev)
{
	__atomic_store_n(&v->run->immediate_exit, 1, __ATOMIC_RELEASE);
	return accel_vcpu_run(v, prev);
}
