/* libFuzzer target: a delta file (header and map) from arbitrary bytes.
 *
 * The bytes become a memfd that is opened as a lone layer, read-only and
 * then writable.  Whatever opens must then behave: reads stay in bounds,
 * and on the writable copy a write reads back and a discard reads as zeros
 * (anything else aborts, which libFuzzer reports).  Built with
 * -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION so that checksums do not stop
 * the fuzzer at the door.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc -D_GNU_SOURCE \
 *     -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION fuzz/fuzz_disk.c \
 *     src/disk/[a-z]*.c src/common/[a-z]*.c -lssl -lcrypto -lpthread -o fuzz_disk
 *   ./fuzz_disk fuzz/corpus/disk */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/util.h"
#include "disk/disk.h"
#include "disk/layer.h"

#define PROBE (64 * 1024)

static uint8_t buf[PROBE], want[PROBE];

static int input_fd(const uint8_t *data, size_t size)
{
	int fd = memfd_create("fuzz-disk", MFD_CLOEXEC);

	if (fd < 0)
		abort();
	if (write_all(fd, data, size) < 0)
		abort();
	return fd;
}

/* Offsets worth probing: the start, the end, and one the input picks. */
static void probes(const struct disk *d, const uint8_t *data, size_t size, uint64_t off[3],
		   size_t len[3])
{
	uint64_t sz = disk_size(d), pick = 0;

	memcpy(&pick, data + (size > 8 ? size - 8 : 0), size >= 8 ? 8 : 0);
	off[0] = 0;
	off[1] = sz > PROBE ? sz - PROBE : 0;
	off[2] = pick % sz;
	for (int i = 0; i < 3; i++)
		len[i] = sz - off[i] < PROBE ? (size_t)(sz - off[i]) : PROBE;
}

static void read_only(const uint8_t *data, size_t size)
{
	char err[DISK_ERR_LEN];
	struct disk_stats st = {0};
	struct disk_layer *l;
	struct disk *d;
	uint64_t off[3];
	size_t len[3];
	int fd = input_fd(data, size);

	if (disk_layer_open_fd(&l, fd, "fuzz", false, false, &st, err, sizeof(err))) {
		close(fd);
		return;
	}
	if (disk_open_layer_alone(&d, l)) {
		disk_layer_free(l);
		return;
	}
	probes(d, data, size, off, len);
	for (int i = 0; i < 3; i++)
		disk_read(d, buf, len[i], off[i]);
	if (disk_write(d, buf, 1, 0) != -EROFS)
		abort();
	disk_close(d);
}

static void writable(const uint8_t *data, size_t size)
{
	char err[DISK_ERR_LEN];
	struct disk_stats st = {0};
	struct disk_layer *l;
	struct disk *d;
	uint64_t off[3];
	size_t len[3];
	int fd = input_fd(data, size);

	if (disk_layer_open_fd(&l, fd, "fuzz", true, false, &st, err, sizeof(err))) {
		close(fd);
		return;
	}
	if (disk_open_layer_alone(&d, l)) {
		disk_layer_free(l);
		return;
	}
	probes(d, data, size, off, len);
	for (int i = 0; i < 3; i++) {
		memset(want, 0xA5 ^ i, len[i]);
		if (disk_write(d, want, len[i], off[i]) == 0 &&
		    (disk_read(d, buf, len[i], off[i]) || memcmp(buf, want, len[i])))
			abort(); /* a write that succeeded must read back */
	}
	if (disk_discard(d, off[2], len[2]) == 0 && disk_flush(d) == 0) {
		memset(want, 0, len[2]);
		if (disk_read(d, buf, len[2], off[2]) || memcmp(buf, want, len[2]))
			abort(); /* a discarded range reads as zeros */
	}
	disk_close(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	read_only(data, size);
	writable(data, size);
	return 0;
}
