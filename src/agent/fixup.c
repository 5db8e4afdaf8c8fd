/* AP_FIXUP: a guest run from a checkpoint holds the checkpoint's RNG state,
 * clock and (a fork) identity: two forks would draw the same random numbers
 * and share a host name and machine-id.  Put right here, in the agent's own
 * code, with system calls only: no guest program runs (guest root may have
 * replaced any of them with one that never ends), and no file is opened in
 * a way that can block (a FIFO planted at the path fails, not waits). */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

/* O_NONBLOCK: a FIFO put in the file's place fails to open (ENXIO) or
 * returns at once, never waits for a reader. */
static int open_nb(const char *path, int flags, mode_t ftype)
{
	struct stat st;
	int fd = open(path, flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != ftype) {
		close(fd);
		return -EINVAL;
	}
	return fd;
}

/* The host's bytes credited to the pool, then the CRNG reseeded from it:
 * what the guest draws from now on differs from every other copy's. */
static int reseed(const struct ap_fixup_req *q, unsigned *done)
{
	uint32_t raw[2 + AP_FIXUP_SEED_MAX / 4];
	struct rand_pool_info *info = (struct rand_pool_info *)raw;
	struct stat st;
	int fd = open_nb("/dev/urandom", O_WRONLY, S_IFCHR), rc = 0;

	if (fd < 0)
		return fd;
	/* Only the kernel's random device takes these ioctls for real. */
	if (fstat(fd, &st) < 0 || major(st.st_rdev) != 1 || (minor(st.st_rdev) != 8 && minor(st.st_rdev) != 9)) {
		close(fd);
		return -EINVAL;
	}
	info->entropy_count = (int)(q->seed_len * 8);
	info->buf_size = (int)q->seed_len;
	memcpy(info->buf, q->seed, q->seed_len);
	if (ioctl(fd, RNDADDENTROPY, info) < 0)
		rc = -errno;
	else
		*done |= AP_FIX_ENTROPY;
	if (rc == 0 && ioctl(fd, RNDRESEEDCRNG) < 0)
		rc = -errno;
	else if (rc == 0)
		*done |= AP_FIX_RESEED;
	explicit_bzero(raw, sizeof(raw));
	close(fd);
	return rc;
}

static int write_small(const char *path, const char *text)
{
	int fd = open_nb(path, O_WRONLY | O_CREAT | O_TRUNC, S_IFREG), rc;

	if (fd < 0)
		return fd;
	rc = write_all(fd, text, strlen(text));
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

static int set_identity(const struct ap_fixup_req *q, unsigned *done)
{
	char line[AP_HOSTNAME_MAX + 2], mid[2 * sizeof(q->machine_id) + 2];
	int rc;

	if (sethostname(q->hostname, strlen(q->hostname)) < 0)
		return -errno;
	snprintf(line, sizeof(line), "%s\n", q->hostname);
	if ((rc = write_small("/etc/hostname", line)))
		return rc;
	*done |= AP_FIX_HOSTNAME;
	for (size_t i = 0; i < sizeof(q->machine_id); i++)
		snprintf(mid + 2 * i, 3, "%02x", q->machine_id[i]);
	strcat(mid, "\n");
	if ((rc = write_small("/etc/machine-id", mid)))
		return rc;
	*done |= AP_FIX_MACHINE_ID;
	return 0;
}

/* Stock kernels make boot_id read-only (mode 0444, even for root): this
 * only succeeds on a kernel patched to allow it. */
static void renew_boot_id(unsigned *done)
{
	uint8_t b[17];
	char uuid[40];
	int fd = open("/proc/sys/kernel/random/boot_id", O_WRONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return;
	/* Drawn after the reseed: nothing of the host's seed shows. */
	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		close(fd);
		return;
	}
	snprintf(uuid, sizeof(uuid), "%02x%02x%02x%02x-%02x%02x-4%x%02x-%x%x%02x-%02x%02x%02x%02x%02x%02x\n",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6] & 15, b[7], 8 | (b[8] & 3), b[9] & 15, b[10],
		 b[11], b[12], b[13], b[14], b[15], b[16]);
	if (write(fd, uuid, strlen(uuid)) == (ssize_t)strlen(uuid))
		*done |= AP_FIX_BOOT_ID;
	close(fd);
}

int fixup_run(struct ap_conn *c, uint32_t chan, const uint8_t *p, size_t len)
{
	struct ap_fixup_req q;
	struct timespec ts;
	unsigned done = 0;
	const char *step = "the RNG reseed";
	uint8_t b[4];
	int rc;

	if (ap_fixup_req_decode(p, len, &q))
		return -EBADMSG;
	ts.tv_sec = (time_t)(q.time_ns / 1000000000u);
	ts.tv_nsec = (long)(q.time_ns % 1000000000u);
	if ((rc = reseed(&q, &done)) == 0) {
		step = "setting the clock";
		rc = clock_settime(CLOCK_REALTIME, &ts) < 0 ? -errno : 0;
		done |= rc ? 0 : AP_FIX_CLOCK;
	}
	if (rc == 0 && q.identity) {
		step = "setting the host name and machine-id";
		rc = set_identity(&q, &done);
	}
	if (rc == 0)
		renew_boot_id(&done);
	explicit_bzero(&q, sizeof(q));
	if (rc)
		return ap_conn_send_error(c, chan, -rc, "%s: %s", step, strerror(-rc));
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)(done >> (8 * i));
	return ap_conn_send(c, AP_OK, chan, b, sizeof(b));
}
