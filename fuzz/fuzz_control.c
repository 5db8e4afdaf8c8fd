/* libFuzzer target: the control hops' messages as a peer sends them
 * (common/jsonl.c, vmm/vm_control.c): what the VMM reads from the
 * supervisor and what the supervisor reads back, both untrusted.
 *
 * The first byte picks the stream's size limit; the rest goes through a
 * real socketpair into jsonl_recv (framing, the one-message rule, the
 * version), and each line of it through jsonl_parse and both decoders.
 * Whatever decodes must encode and decode again to the same request or
 * reply; every refusal says why; no refusal leaves a descriptor open.
 * Anything else aborts.
 *
 *   fuzz/run.sh 60 control */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/jsonl.h"
#include "vmm/vm_control.h"

static struct vm_control_req req, req2;

static void check_request(const cJSON *msg)
{
	const char *why = NULL;
	cJSON *again;

	if (vm_control_req_decode(msg, &req, &why)) {
		if (!why)
			abort();
		return;
	}
	if (req.op == VMCTL_CHECKPOINT && (!req.dir[0] || strlen(req.dir) >= sizeof(req.dir)))
		abort();
	if (!(again = vm_control_req_encode(&req)))
		return;
	if (vm_control_req_decode(again, &req2, &why) || memcmp(&req, &req2, sizeof(req)))
		abort();
	cJSON_Delete(again);
}

static void check_reply(const cJSON *msg)
{
	struct vm_control_reply rep, rep2;
	const char *why = NULL;
	cJSON *again;

	if (vm_control_reply_decode(msg, &rep, &why)) {
		if (!why)
			abort();
		return;
	}
	if (strlen(rep.text) >= sizeof(rep.text) || rep.paused_ms < 0)
		abort();
	if (!(again = vm_control_reply_encode(&rep)))
		return;
	if (vm_control_reply_decode(again, &rep2, &why) || memcmp(&rep, &rep2, sizeof(rep)))
		abort();
	cJSON_Delete(again);
}

static void each_line(const char *data, size_t size, size_t max)
{
	while (size) {
		const char *nl = memchr(data, '\n', size);
		size_t len = nl ? (size_t)(nl - data) : size;
		const char *why = NULL;
		cJSON *msg = NULL;

		if (jsonl_parse(data, len, max, &msg, &why)) {
			if (!why || msg)
				abort();
		} else {
			check_request(msg);
			check_reply(msg);
			cJSON_Delete(msg);
		}
		data += len + (nl ? 1 : 0);
		size -= len + (nl ? 1 : 0);
	}
}

/* The stream through a socketpair, as a client reads its one reply. */
static void stream(const uint8_t *data, size_t size, size_t max)
{
	const char *why = NULL;
	cJSON *msg = NULL;
	int sv[2], fd = 5, err;

	if (size > 64 * 1024 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		return;
	if (size && write(sv[0], data, size) != (ssize_t)size)
		abort();
	close(sv[0]);
	err = jsonl_recv(sv[1], max, 1000, &msg, &fd, &why);
	if (fd != -1 || (err && (!why || msg)) || (!err && !cJSON_IsObject(msg)))
		abort();
	cJSON_Delete(msg);
	close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t max;

	if (!size)
		return 0;
	/* Small limits reach the edges; 0xff means the VMM's own. */
	max = data[0] == 0xff ? VM_CONTROL_MAX_LINE : data[0];
	stream(data + 1, size - 1, max);
	each_line((const char *)data + 1, size - 1, max);
	return 0;
}
