#include "devices/virtio_vsock.h"

#include <endian.h>
#include <errno.h>
#include <linux/virtio_vsock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "devices/vsock_int.h"

/* ---- the event queue: a TRANSPORT_RESET owed after a reset or restore ---- */

static void event_deliver(struct virtio_vsock *v)
{
	struct virtio_mmio *t = &v->mmio;
	struct virtq *q = &t->s.queues[EVQ];
	uint32_t id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	int got;

	if (!v->event_pending || !virtio_mmio_driver_ok(t) || !q->ready)
		return;
	if ((got = virtq_pop(q, v->txc)) < 0)
		virtio_mmio_fail(t, "malformed descriptor chain on the event queue");
	if (got <= 0)
		return;
	if (v->txc->nout || v->txc->in_bytes < sizeof(id)) {
		virtio_mmio_fail(t, "event buffer read-only or too short");
		return;
	}
	virtq_write_in(v->txc, 0, &id, sizeof(id));
	virtq_push(q, v->txc, sizeof(id));
	v->pushed[EVQ] = true;
	v->event_pending = false;
	v->stats.transport_resets++;
}

/* ---- the loop ---- */

static void dispatch(struct virtio_vsock *v, const struct epoll_event *e)
{
	uint64_t tag = e->data.u64, cnt;
	struct vsock_conn *c;

	if (tag == TAG_KICK) {
		if (read(v->kick_fd, &cnt, sizeof(cnt)) < 0) {
			/* already drained by an earlier turn */
		}
	} else if (tag == TAG_LISTEN) {
		vsock_host_accept(v);
	} else if ((c = v->conns[(tag & 0xffff) % v->opts.max_conns]) && c->serial == tag >> 16) {
		vsock_conn_event(v, c, e->events); /* else: closed earlier in this turn */
	}
}

void virtio_vsock_poll(struct virtio_vsock *v, int timeout_ms)
{
	struct epoll_event ev[LOOP_EVENTS];
	struct virtio_mmio *t = &v->mmio;
	int n, wait = v->wait_ms;

	if (timeout_ms >= 0 && (wait < 0 || wait > timeout_ms))
		wait = timeout_ms;
	n = epoll_wait(v->epoll_fd, ev, LOOP_EVENTS, wait);
	pthread_mutex_lock(&t->lock);
	while (v->paused && !v->opts.no_thread && !__atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&v->resumed, &t->lock);
	if (v->paused || __atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE)) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	/* A reset or restore since the last turn: the guest forgot every connection. */
	if (v->generation != v->seen_generation)
		vsock_drop_all(v);
	v->more_work = false;
	for (int i = 0; i < n; i++)
		dispatch(v, &ev[i]);
	vsock_check_deadlines(v); /* expired ones may owe the guest an RST: send it now */
	vsock_tx_process(v);
	event_deliver(v);
	vsock_rx_pump(v);
	for (uint16_t q = 0; q < 3; q++)
		if (v->pushed[q]) {
			v->pushed[q] = false;
			virtio_mmio_notify_used(t, q);
		}
	v->wait_ms = vsock_check_deadlines(v);
	if (v->more_work)
		v->wait_ms = 0;
	pthread_mutex_unlock(&t->lock);
}

static void *vsock_thread(void *arg)
{
	struct virtio_vsock *v = arg;

	while (!__atomic_load_n(&v->stopping, __ATOMIC_ACQUIRE))
		virtio_vsock_poll(v, -1);
	return NULL;
}

static void kick(struct virtio_vsock *v)
{
	if (v->kick_fd >= 0)
		eventfd_ring(v->kick_fd);
}

/* ---- transport callbacks (mmio.lock held, vCPU thread) ---- */

static void vsock_config_read(struct virtio_mmio *t, uint32_t off, uint8_t *data, uint32_t size)
{
	struct virtio_vsock *v = t->dev;
	uint64_t cid = htole64(v->guest_cid);

	if (off + size <= sizeof(cid))
		memcpy(data, (uint8_t *)&cid + off, size);
}

static void vsock_notify(struct virtio_mmio *t, uint16_t q) { kick(t->dev); }
static void vsock_activate(struct virtio_mmio *t) { kick(t->dev); }

static void vsock_reset(struct virtio_mmio *t)
{
	struct virtio_vsock *v = t->dev;

	v->generation++;
	v->event_pending = false;
	kick(v);
}

static const struct virtio_dev_ops vsock_ops = {
	.name = "virtio-vsock",
	.device_id = VIRTIO_ID_VSOCK_DEVICE,
	.features = 1ULL << VIRTIO_F_INDIRECT_BIT,
	.nqueues = 3,
	.config_len = sizeof(struct virtio_vsock_config),
	.config_read = vsock_config_read,
	.notify = vsock_notify,
	.activate = vsock_activate,
	.reset = vsock_reset,
};

/* ---- life cycle ---- */

static int set_opts(struct virtio_vsock *v, const struct virtio_vsock_opts *o)
{
	v->opts = o ? *o : (struct virtio_vsock_opts){0};
	if (!v->opts.max_conns)
		v->opts.max_conns = VSOCK_DEFAULT_MAX_CONNS;
	if (!v->opts.buf_alloc)
		v->opts.buf_alloc = VSOCK_DEFAULT_BUF_ALLOC;
	if (!v->opts.handshake_ms)
		v->opts.handshake_ms = VSOCK_DEFAULT_HANDSHAKE_MS;
	if (!v->opts.close_ms)
		v->opts.close_ms = VSOCK_DEFAULT_CLOSE_MS;
	return v->opts.max_conns > 0xffff || v->opts.buf_alloc > 64 * 1024 * 1024 ? -EINVAL : 0;
}

int virtio_vsock_init(struct virtio_vsock *v, uint64_t guest_cid, const char *uds_path,
		      const struct virtio_vsock_opts *opts, const struct guest_mem *mem,
		      uint64_t base, uint32_t gsi,
		      void (*set_irq)(void *ctx, uint32_t gsi, int level), void *irq_ctx)
{
	struct epoll_event kev = {.events = EPOLLIN, .data.u64 = TAG_KICK};
	struct epoll_event lev = {.events = EPOLLIN, .data.u64 = TAG_LISTEN};
	int err;

	memset(v, 0, sizeof(*v));
	v->epoll_fd = v->kick_fd = v->listen_fd = -1;
	v->wait_ms = -1;
	v->next_host_port = HOST_PORT_FIRST;
	v->guest_cid = guest_cid;
	pthread_cond_init(&v->resumed, NULL);
	virtio_mmio_init(&v->mmio, &vsock_ops, v, mem, base, gsi, set_irq, irq_ctx);
	v->inited = true;
	/* CIDs 0-2 are reserved, and Linux keeps CIDs in 32 bits (-1 = any). */
	if (guest_cid < 3 || guest_cid >= UINT32_MAX || (err = set_opts(v, opts)))
		goto fail_inval;
	if (!uds_path || !*uds_path || strlen(uds_path) >= sizeof(v->uds_path)) {
		err = -ENAMETOOLONG;
		goto fail;
	}
	memcpy(v->uds_path, uds_path, strlen(uds_path) + 1);
	v->conns = calloc(v->opts.max_conns, sizeof(*v->conns));
	v->rsts = calloc(RST_BACKLOG, sizeof(*v->rsts));
	v->txc = malloc(sizeof(*v->txc));
	v->rxc = malloc(sizeof(*v->rxc));
	err = -ENOMEM;
	if (!v->conns || !v->rsts || !v->txc || !v->rxc)
		goto fail;
	v->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	v->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (v->epoll_fd < 0 || v->kick_fd < 0 ||
	    epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, v->kick_fd, &kev) < 0) {
		err = -errno;
		goto fail;
	}
	if ((err = vsock_open_listener(v)))
		goto fail;
	if (epoll_ctl(v->epoll_fd, EPOLL_CTL_ADD, v->listen_fd, &lev) < 0) {
		err = -errno;
		goto fail;
	}
	if (!v->opts.no_thread) {
		if (thread_start(&v->thread, vsock_thread, v) < 0) {
			err = -EAGAIN;
			goto fail;
		}
		v->thread_started = true;
	}
	return 0;
fail_inval:
	err = -EINVAL;
fail:
	virtio_vsock_destroy(v);
	return err;
}

void virtio_vsock_destroy(struct virtio_vsock *v)
{
	if (!v->inited)
		return;
	if (v->thread_started) {
		pthread_mutex_lock(&v->mmio.lock);
		__atomic_store_n(&v->stopping, 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&v->resumed);
		pthread_mutex_unlock(&v->mmio.lock);
		kick(v);
		pthread_join(v->thread, NULL);
		v->thread_started = false;
	}
	if (v->conns)
		vsock_drop_all(v);
	virtio_mmio_destroy(&v->mmio);
	if (v->listen_fd >= 0) {
		close(v->listen_fd);
		unlink(v->uds_path);
	}
	if (v->kick_fd >= 0)
		close(v->kick_fd);
	if (v->epoll_fd >= 0)
		close(v->epoll_fd);
	free(v->conns);
	free(v->rsts);
	free(v->txc);
	free(v->rxc);
	pthread_cond_destroy(&v->resumed);
	v->inited = false;
}

void virtio_vsock_pause(struct virtio_vsock *v)
{
	/* The loop holds the lock for a whole turn: once we have it, no turn is
	 * under way, and the next one waits for resume. */
	pthread_mutex_lock(&v->mmio.lock);
	v->paused = true;
	pthread_mutex_unlock(&v->mmio.lock);
}

void virtio_vsock_resume(struct virtio_vsock *v)
{
	pthread_mutex_lock(&v->mmio.lock);
	v->paused = false;
	pthread_cond_broadcast(&v->resumed);
	pthread_mutex_unlock(&v->mmio.lock);
	kick(v);
}

void virtio_vsock_save(struct virtio_vsock *v, struct virtio_vsock_state *out)
{
	memset(out, 0, sizeof(*out));
	out->version = VIRTIO_VSOCK_STATE_VERSION;
	out->guest_cid = v->guest_cid;
	virtio_mmio_save(&v->mmio, &out->mmio);
}

int virtio_vsock_restore(struct virtio_vsock *v, const struct virtio_vsock_state *in)
{
	bool was_paused;
	int err;

	if (in->version != VIRTIO_VSOCK_STATE_VERSION)
		return -EINVAL;
	/* Paused throughout, so that no turn of the loop sees the new queues
	 * with the old connections. */
	pthread_mutex_lock(&v->mmio.lock);
	was_paused = v->paused;
	v->paused = true;
	pthread_mutex_unlock(&v->mmio.lock);
	err = virtio_mmio_restore(&v->mmio, &in->mmio);
	pthread_mutex_lock(&v->mmio.lock);
	if (!err) {
		v->generation++;
		v->event_pending = true;
		v->prev_cid = in->guest_cid != v->guest_cid ? in->guest_cid : 0;
	}
	v->paused = was_paused;
	pthread_cond_broadcast(&v->resumed);
	pthread_mutex_unlock(&v->mmio.lock);
	kick(v);
	return err;
}

void virtio_vsock_get_stats(struct virtio_vsock *v, struct virtio_vsock_stats *out)
{
	pthread_mutex_lock(&v->mmio.lock);
	*out = v->stats;
	pthread_mutex_unlock(&v->mmio.lock);
}

/* ---- in the VMM's device table (hw/device.h) ---- */

static bool dev_wanted(const struct vm_config *cfg) { return cfg->vsock_uds != NULL; }

static int dev_create(const struct device_env *env, void **dev, const char **why)
{
	struct virtio_vsock *v = malloc(sizeof(*v));
	int err;

	if (!v)
		return -ENOMEM;
	err = virtio_vsock_init(v, env->cfg->vsock_cid, env->cfg->vsock_uds, NULL, env->mem,
				env->mmio_base, env->gsi, env->set_irq, env->ctx);
	if (err) {
		snprintf(env->err, env->err_len,
			 "cannot start vsock on %.300s: %s (a non-socket file there, or a bad --cid)",
			 env->cfg->vsock_uds, strerror(-err));
		*why = env->err;
		free(v);
		return err;
	}
	if ((err = virtio_mmio_attach(&v->mmio, env, v->kick_fd))) {
		*why = "cannot register the vsock device";
		virtio_vsock_destroy(v);
		free(v);
		return err;
	}
	*dev = v;
	return 0;
}

static void dev_destroy(void *dev)
{
	virtio_vsock_destroy(dev);
	free(dev);
}

static void dev_pause(void *dev) { virtio_vsock_pause(dev); }
static void dev_resume(void *dev) { virtio_vsock_resume(dev); }
static void dev_save(void *dev, void *state) { virtio_vsock_save(dev, state); }
/* Open connections are not in a checkpoint: the guest gets a transport
 * reset and connects again (virtio 1.2, 5.10.6.6). */
static int dev_restore(void *dev, const void *state) { return virtio_vsock_restore(dev, state); }

const struct device_ops virtio_vsock_device = {
	.name = "vsock",
	.what = "virtio-vsock",
	.wanted = dev_wanted,
	.option = "--vsock PATH",
	.create = dev_create,
	.destroy = dev_destroy,
	.pause = dev_pause,
	.resume = dev_resume,
	.state_len = sizeof(struct virtio_vsock_state),
	.save = dev_save,
	.restore = dev_restore,
	.resync_irq = virtio_device_resync_irq,
	.cmdline = virtio_device_cmdline,
};
