#include "vmm/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "vmm/arch.h"
#include "vmm/seccomp.h"

#define MAX_KERNEL_BYTES (256 * MiB)
#define MAX_INITRD_BYTES (2 * GiB)
#define CONSOLE_ESCAPE 0x01 /* Ctrl-A, then 'x' */
#define CONSOLE_CHUNK 64    /* bytes read from the host at a time, at most */

void vm_request_stop(struct vm *vm, enum vm_stop reason)
{
	int expected = VM_STOP_NONE;
	char b = 1;

	/* The first reason wins: a reset racing a poweroff is reported once. */
	__atomic_compare_exchange_n(&vm->stop_reason, &expected, (int)reason, false,
				    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	if (write(vm->stop_pipe[1], &b, 1) < 0) {
		/* Pipe full means a wake-up is already pending. */
	}
}

static bool vm_stopping(struct vm *vm)
{
	return __atomic_load_n(&vm->stop_reason, __ATOMIC_ACQUIRE) != VM_STOP_NONE;
}

int host_available_memory(uint64_t *bytes)
{
	char line[256];
	unsigned long long v, avail = 0, swap = 0;
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemAvailable: %llu kB", &v) == 1)
			avail = v;
		else if (sscanf(line, "SwapFree: %llu kB", &v) == 1)
			swap = v;
	}
	fclose(f);
	*bytes = (avail + swap) * 1024;
	return avail ? 0 : -ENODATA;
}

static int setup_devices(struct vm *vm, const char **why)
{
	int err = vm_devices_create(vm, why);

	/* Console input goes to the UART, when the VM has one. */
	vm->console = arch_console(vm);
	return err;
}

static const char *file_error(int err, const char *what_missing)
{
	switch (err) {
	case -ENOENT: return what_missing;
	case -EFBIG: return "kernel file is too large to be a kernel (over 256 MiB)";
	case -EINVAL: return "kernel path is not a regular file";
	default: return "cannot read the kernel file";
	}
}

/* Reads and validates the kernel up front, so a wrong file is reported at
 * once, before any KVM or emulation set-up. */
static int check_kernel_file(const char *path, const char **why)
{
	uint8_t *k = NULL;
	size_t len;
	int err;

	mallopt(M_MMAP_THRESHOLD, 128 * 1024); /* see vm_create() */
	err = read_file(path, MAX_KERNEL_BYTES, &k, &len);
	if (err) {
		*why = file_error(err, "kernel file not found; check --kernel");
		return err;
	}
	err = arch_check_kernel(k, len, why);
	free(k);
	return err;
}

static int load_images(struct vm *vm, const char **why)
{
	uint8_t *kernel = NULL, *initrd = NULL;
	size_t klen = 0, ilen = 0;
	char cmdline[4096], devs[384];
	int err;

	err = read_file(vm->cfg.kernel_path, MAX_KERNEL_BYTES, &kernel, &klen);
	if (err) {
		*why = file_error(err, "kernel file not found; check --kernel");
		goto out;
	}
	if (vm->cfg.initrd_path) {
		err = read_file(vm->cfg.initrd_path, MAX_INITRD_BYTES, &initrd, &ilen);
		if (err) {
			*why = err == -ENOENT ? "initrd file not found; check --initrd" :
			       err == -EFBIG  ? "initrd is larger than 2 GiB" :
						"cannot read the initrd file";
			goto out;
		}
	}
	devs[0] = '\0';
	if (arch_devices_on_cmdline && (err = vm_devices_cmdline(vm, devs, sizeof(devs)))) {
		*why = "the devices' kernel command line is too long";
		goto out;
	}
	if (snprintf(cmdline, sizeof(cmdline), "%s %s%s%s", VM_DEFAULT_CMDLINE, devs,
		     vm->cfg.cmdline ? " " : "", vm->cfg.cmdline ? vm->cfg.cmdline : "") >=
	    (int)sizeof(cmdline)) {
		*why = "kernel command line is too long";
		err = -E2BIG;
		goto out;
	}
	err = arch_load(vm, kernel, klen, initrd, ilen, cmdline, why);
out:
	free(kernel);
	free(initrd);
	return err;
}

/* vCPUs and memory: checked again by vm_create, cheaply. */
static int check_limits(const struct vm_config *cfg, const char **why)
{
	uint64_t avail;

	if (cfg->ncpus < 1) {
		*why = "a VM needs at least 1 vCPU (--cpus)";
		return -EINVAL;
	}
	if (cfg->ncpus > VM_MAX_VCPUS) {
		*why = "too many vCPUs: kosa8 supports at most 254 (--cpus)";
		return -EINVAL;
	}
	if (cfg->mem_size < arch_min_ram) {
		*why = "guest memory must be at least 32M (--mem)";
		return -EINVAL;
	}
	if (host_available_memory(&avail) == 0 && cfg->mem_size > avail) {
		*why = "guest memory (--mem) is larger than this host can give now (MemAvailable + free swap); ask for less";
		return -ENOMEM;
	}
	return 0;
}

int vm_check_config(const struct vm_config *cfg, const char **why)
{
	int err;

	if ((err = check_limits(cfg, why)))
		return err;
	if ((err = check_kernel_file(cfg->kernel_path, why)))
		return err;
	if (cfg->initrd_path && access(cfg->initrd_path, R_OK) < 0) {
		*why = errno == ENOENT ? "initrd file not found; check --initrd" :
					 "cannot read the initrd file";
		return -errno;
	}
	return 0;
}

int vm_create(struct vm *vm, const struct vm_config *cfg, const char **why)
{
	struct accel_caps caps;
	int err;

	memset(vm, 0, sizeof(*vm));
	vm->cfg = *cfg;
	vm->stop_pipe[0] = vm->stop_pipe[1] = -1;
	pthread_mutex_init(&vm->gate_lock, NULL);
	pthread_cond_init(&vm->gate_cond, NULL);
	vm->mem.memfd = -1;
	vm->control_fd = vm->control_client = -1;
	pthread_mutex_init(&vm->pause_lock, NULL);
	pthread_cond_init(&vm->pause_cond, NULL);
	if (cfg->disk_path)
		snprintf(vm->disk_top, sizeof(vm->disk_top), "%s", cfg->disk_path);
	/* From a checkpoint, memory and vCPUs are the checkpoint's. */
	if (cfg->restore_dir && (err = vm_restore_load(vm, why)))
		goto fail;
	cfg = &vm->cfg;
	/* The kernel and initrd are read and checked once, by load_images(). */
	if ((err = check_limits(cfg, why)))
		goto fail;
	if (pipe2(vm->stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		*why = "cannot create a pipe";
		err = -errno;
		goto fail;
	}
	if ((err = accel_open(&vm->accel, why)))
		goto fail;
	accel_caps(vm->accel, &caps);
	if (cfg->ncpus > caps.max_vcpus) {
		*why = "too many vCPUs for this host's KVM (--cpus)";
		err = -EINVAL;
		goto fail;
	}
	if (cfg->restore_dir) {
		if ((err = vm_restore_memory(vm, why)))
			goto fail;
	} else if ((err = guest_mem_create(&vm->mem, cfg->mem_size))) {
		*why = "cannot allocate guest memory";
		goto fail;
	}
	/* A VM that can be checkpointed logs the pages written to it from the
	 * start, so that every checkpoint after the first is a layer. */
	if (cfg->control_path && (err = guest_mem_track(&vm->mem))) {
		*why = "cannot allocate the dirty-page map";
		goto fail;
	}
	for (int i = 0; i < vm->mem.nregions; i++) {
		const struct guest_region *r = &vm->mem.regions[i];
		if ((err = accel_map_memory(vm->accel, (uint32_t)i, r->gpa, r->size, r->host,
					    cfg->control_path != NULL))) {
			*why = "KVM refused the guest memory";
			goto fail;
		}
	}
	if ((err = arch_vm_init(vm, why)))
		goto fail;
	if ((err = setup_devices(vm, why)))
		goto fail;
	if (cfg->control_path && (err = vm_control_open(vm, cfg->control_path, why)))
		goto fail;
	/* The kernel and initrd buffers are copied into guest RAM and freed:
	 * keep such big buffers out of the heap (glibc would otherwise raise its
	 * mmap threshold after the first one and leave megabytes resident). */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	if (!cfg->restore_dir && (err = load_images(vm, why)))
		goto fail;
	malloc_trim(0);
	if ((err = arch_vcpus_create(vm, cfg->restore_dir != NULL, why)))
		goto fail;
	if (cfg->restore_dir && (err = vm_restore_state(vm, why)))
		goto fail;
	return 0;
fail:
	vm_destroy(vm);
	return err;
}

static void handle_io(struct vm *vm, struct vcpu_exit *e)
{
	uint8_t *p = e->io.data;

	/* String I/O (rep outsb/insb) arrives as count accesses back to back. */
	for (uint32_t i = 0; i < e->io.count; i++, p += e->io.size)
		bus_access(&vm->pio, e->io.port, p, e->io.size, e->io.write);
}

static void handle_msr(struct vcpu_exit *e)
{
	log_once(0x4d5352, ((uint64_t)e->msr.write << 32) | e->msr.index,
		 "guest %s unhandled MSR 0x%x: injecting #GP (logged once)",
		 e->msr.write ? "wrote" : "read", e->msr.index);
	/* What real hardware does for an MSR it does not have. */
	e->msr.error = true;
	e->msr.data = 0;
}

static void vcpu_crash(struct vm_vcpu *v, const char *what, uint64_t code)
{
	log_err("vCPU %d: %s (code 0x%llx); stopping the VM", v->id, what,
		(unsigned long long)code);
	v->vm->crash_code = code;
	vm_request_stop(v->vm, VM_STOP_CRASH);
}

static void gate_set(struct vm *vm, int state)
{
	pthread_mutex_lock(&vm->gate_lock);
	vm->gate = state;
	pthread_cond_broadcast(&vm->gate_cond);
	pthread_mutex_unlock(&vm->gate_lock);
}

/* Waits for the main thread to finish the process-wide set-up, then puts
 * the vCPU's own filter on this thread.  False: do not run the guest. */
static bool vcpu_gate(struct vm_vcpu *v)
{
	struct vm *vm = v->vm;
	int state, err;

	pthread_mutex_lock(&vm->gate_lock);
	while (!(state = vm->gate))
		pthread_cond_wait(&vm->gate_cond, &vm->gate_lock);
	pthread_mutex_unlock(&vm->gate_lock);
	if (state < 0)
		return false;
	if (vm->cfg.seccomp && (err = vmm_seccomp_enter_vcpu())) {
		vcpu_crash(v, "cannot install the vCPU seccomp filter", (uint64_t)-err);
		return false;
	}
	return true;
}

static void vcpu_park(struct vm_vcpu *v)
{
	struct vm *vm = v->vm;

	pthread_mutex_lock(&vm->pause_lock);
	vm->parked++;
	pthread_cond_broadcast(&vm->pause_cond);
	while (vm->pause_req && !vm_stopping(vm))
		pthread_cond_wait(&vm->pause_cond, &vm->pause_lock);
	vm->parked--;
	pthread_mutex_unlock(&vm->pause_lock);
}

static void *vcpu_thread(void *arg)
{
	struct vm_vcpu *v = arg;
	struct vm *vm = v->vm;
	struct vcpu_exit e;
	int err;

	memset(&e, 0, sizeof(e));
	if (!vcpu_gate(v))
		return NULL;
	while (!vm_stopping(vm)) {
		/* Asked to pause: enter once more with immediate exit, which
		 * completes the last exit's I/O without running guest code; the
		 * vCPU parks when that returns as interrupted (a string I/O may
		 * need more exits first, handled as usual). */
		bool pausing = __atomic_load_n(&vm->pause_req, __ATOMIC_ACQUIRE);
		err = pausing ? accel_vcpu_settle(v->accel, &e) : accel_vcpu_run(v->accel, &e);
		if (err) {
			vcpu_crash(v, "run failed", (uint64_t)-err);
			break;
		}
		switch (e.kind) {
		case VCPU_EXIT_IO:
			handle_io(vm, &e);
			break;
		case VCPU_EXIT_MMIO:
			bus_access(&vm->mmio, e.mmio.addr, e.mmio.data, e.mmio.len, e.mmio.write);
			break;
		case VCPU_EXIT_MSR:
			handle_msr(&e);
			break;
		case VCPU_EXIT_SHUTDOWN:      /* triple fault: a PC resets */
		case VCPU_EXIT_SYSTEM_RESET:
			if (e.kind == VCPU_EXIT_SHUTDOWN)
				__atomic_store_n(&vm->triple_fault_vcpu, v->id + 1, __ATOMIC_RELEASE);
			vm_request_stop(vm, VM_STOP_RESET);
			break;
		case VCPU_EXIT_SYSTEM_OFF:
			vm_request_stop(vm, VM_STOP_POWEROFF);
			break;
		case VCPU_EXIT_HLT:
			break;
		case VCPU_EXIT_INTR:
			if (pausing)
				vcpu_park(v);
			break;
		case VCPU_EXIT_FAIL:
			if (e.detail[0])
				log_err("vCPU %d: %s", v->id, e.detail);
			vcpu_crash(v, "the accelerator failed to run the guest", e.code);
			break;
		case VCPU_EXIT_OTHER:
			log_once(0x455854, e.code, "vCPU %d: unexpected exit %llu (logged once)",
				 v->id, (unsigned long long)e.code);
			break;
		}
	}
	return NULL;
}

/* Console input: host bytes into the UART, respecting its FIFO so nothing
 * typed is dropped.  Ctrl-A x stops the VM when console_escape is on. */
static void *input_thread(void *arg)
{
	struct vm *vm = arg;
	uint8_t buf[CONSOLE_CHUNK];
	bool escape = false;

	while (!vm_stopping(vm)) {
		struct pollfd pfd = {.fd = vm->cfg.console_in, .events = POLLIN};
		size_t space = arch_console_wait_space(vm->console, 100);
		ssize_t n;

		/* Typed-ahead input waits in the host until the guest listens. */
		if (!arch_console_rx_enabled(vm->console)) {
			usleep(50 * 1000);
			continue;
		}
		if (space == 0 || poll(&pfd, 1, 100) <= 0)
			continue;
		n = read(vm->cfg.console_in, buf, space < sizeof(buf) ? space : sizeof(buf));
		if (n <= 0) {
			if (n < 0 && (errno == EINTR || errno == EAGAIN))
				continue;
			break; /* end of input: the guest keeps running without it */
		}
		for (ssize_t i = 0; i < n; i++) {
			if (vm->cfg.console_escape && escape) {
				escape = false;
				if (buf[i] == 'x') {
					vm_request_stop(vm, VM_STOP_HOST);
					return NULL;
				}
			} else if (vm->cfg.console_escape && buf[i] == CONSOLE_ESCAPE) {
				escape = true;
				continue;
			}
			while (!arch_console_receive(vm->console, &buf[i], 1) && !vm_stopping(vm))
				arch_console_wait_space(vm->console, 100);
		}
	}
	return NULL;
}

static void block_host_signals(sigset_t *old)
{
	sigset_t set;

	/* Process-directed signals go to the main thread, not to vCPUs. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGQUIT);
	pthread_sigmask(SIG_BLOCK, &set, old);
}

/* A CPU that resets itself (triple fault) is a guest kernel's crash with
 * no message of its own: say so, with where it was, so that a sandbox that
 * stops while booting can be told apart from one that asked to reboot.
 * Main thread, after the vCPU threads are gone (the vCPU filter has no
 * register reads). */
static void report_triple_fault(struct vm *vm)
{
	int id = __atomic_load_n(&vm->triple_fault_vcpu, __ATOMIC_ACQUIRE) - 1;
	char regs[320] = "registers unreadable";

	if (id < 0 || id >= vm->cfg.ncpus)
		return;
	accel_vcpu_describe(vm->vcpus[id].accel, regs, sizeof(regs));
	log_warn("vCPU %d: triple fault, the guest's CPU reset itself: %s", id, regs);
}

enum vm_stop vm_run(struct vm *vm)
{
	const char *why;
	sigset_t old;
	char buf[64];
	int err;

	block_host_signals(&old);
	for (int i = 0; i < vm->cfg.ncpus; i++) {
		if (thread_start(&vm->vcpus[i].thread, vcpu_thread, &vm->vcpus[i]) == 0) {
			vm->vcpus[i].started = 1;
			vm->nrunning++;
		} else
			vm_request_stop(vm, VM_STOP_CRASH);
	}
	if (vm->cfg.console_in >= 0 && vm->console &&
	    thread_start(&vm->input_thread, input_thread, vm) == 0)
		vm->input_started = 1;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* Every thread exists and is past its start-up now (thread_start), so
	 * one TSYNC load covers them all. */
	if (vm->cfg.seccomp && (err = vmm_seccomp_install(&why))) {
		log_err("%s: %s", why, strerror(-err));
		vm_request_stop(vm, VM_STOP_CRASH);
		gate_set(vm, -1);
	} else {
		gate_set(vm, 1);
	}

	while (!vm_stopping(vm)) {
		struct pollfd pfd[3] = {{.fd = vm->stop_pipe[0], .events = POLLIN}};
		int n = 1 + vm_control_pollfds(vm, pfd + 1);
		if (poll(pfd, (nfds_t)n, -1) <= 0)
			continue;
		if (pfd[0].revents)
			while (read(vm->stop_pipe[0], buf, sizeof(buf)) > 0)
				;
		vm_control_serve(vm, pfd + 1, n - 1);
	}
	/* Parked vCPUs wake up and see the stop. */
	pthread_mutex_lock(&vm->pause_lock);
	__atomic_store_n(&vm->pause_req, 0, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&vm->pause_cond);
	pthread_mutex_unlock(&vm->pause_lock);
	for (int i = 0; i < vm->cfg.ncpus; i++)
		if (vm->vcpus[i].started)
			accel_vcpu_kick(vm->vcpus[i].accel);
	for (int i = 0; i < vm->cfg.ncpus; i++) {
		if (vm->vcpus[i].started) {
			pthread_join(vm->vcpus[i].thread, NULL);
			vm->vcpus[i].started = 0;
		}
	}
	if (vm->input_started) {
		pthread_join(vm->input_thread, NULL);
		vm->input_started = 0;
	}
	report_triple_fault(vm);
	return (enum vm_stop)vm->stop_reason;
}

void vm_exit_describe(int ws, char *buf, size_t len)
{
	static const char *const what[] = {
		[VM_EXIT_POWEROFF] = "the guest powered off",
		[VM_EXIT_ERROR] = "the VMM failed (its error is in the console log)",
		[VM_EXIT_USAGE] = "the VMM was started with bad arguments",
		[VM_EXIT_REBOOT] = "the guest rebooted or its CPU reset (triple fault)",
		[VM_EXIT_CRASH] = "the accelerator could not run the guest",
		[VM_EXIT_HOST_STOP] = "stopped by the host",
		[VM_EXIT_SECCOMP] = "killed by its seccomp filter",
	};
	int code;

	if (WIFSIGNALED(ws)) {
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
		return;
	}
	code = WIFEXITED(ws) ? WEXITSTATUS(ws) : -1;
	snprintf(buf, len, "exit %d: %s", code,
		 code >= 0 && code < (int)ARRAY_SIZE(what) && what[code] ? what[code] : "unknown status");
}

void vm_destroy(struct vm *vm)
{
	vm_control_close(vm);
	free(vm->snap_buf);
	vm->snap_buf = NULL;
	snapshot_free(&vm->snap);
	for (int i = 0; i < VM_MAX_VCPUS; i++) {
		if (vm->vcpus[i].accel)
			accel_vcpu_destroy(vm->vcpus[i].accel);
		vm->vcpus[i].accel = NULL;
	}
	vm_devices_destroy(vm);
	vm->console = NULL;
	if (vm->mem.base || vm->mem.memfd >= 0)
		guest_mem_destroy(&vm->mem);
	accel_close(vm->accel);
	vm->accel = NULL;
	for (int i = 0; i < 2; i++) {
		if (vm->stop_pipe[i] >= 0)
			close(vm->stop_pipe[i]);
		vm->stop_pipe[i] = -1;
	}
}
