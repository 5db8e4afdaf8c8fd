/* A sandbox's supervisor as far as approvals go, for tests that have no
 * VM: the sandbox on disk (sandbox.json), its owner lock held, and its
 * control socket served with the supervisor's own approvals queue
 * (control_serve_approvals, approvals_ask), so that `kosa8 approvals` and
 * `kosa8 ui` see and answer a real request.  Header-only: included by
 * tests/unit/test_ui.c and tests/ui/ask_supervisor.c. */
#ifndef KOSA8_TESTS_SERVED_APPROVALS_H
#define KOSA8_TESTS_SERVED_APPROVALS_H

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "common/util.h"
#include "proxy/policy.h"
#include "sandbox/owner.h"
#include "sandbox/sandbox.h"
#include "supervisor/approvals.h"
#include "supervisor/control.h"

struct served {
	struct policy *policy;
	struct approvals *a;
	int listen_fd, owner_fd;
	char sock[PATH_MAX + 16];
	volatile bool stop;
	pthread_t t;
};

static inline void *served_loop(void *arg)
{
	struct served *s = arg;

	while (!s->stop) {
		struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
		cJSON *req = NULL;
		int fd;
		if (poll(&p, 1, 100) <= 0 || (fd = control_accept(s->listen_fd)) < 0)
			continue;
		if (control_recv(fd, &req, 2000) == 0 && !control_serve_approvals(s->a, fd, req)) {
			cJSON *r = cJSON_Parse("{\"ok\":false,\"error\":\"unknown op\"}");
			control_send(fd, r, -1);
			cJSON_Delete(r);
		}
		cJSON_Delete(req);
		close(fd);
	}
	return NULL;
}

/* Makes sandbox name (in the kosa8 folders of the environment) and serves
 * it.  0 or -1. */
static inline int served_start(struct served *s, const char *name)
{
	struct sandbox_cfg cfg = {.mem = 256 << 20, .cpus = 1};
	struct sandbox_owner who;
	char sdir[PATH_MAX], rdir[PATH_MAX];

	snprintf(cfg.name, sizeof(cfg.name), "%s", name);
	if (sandbox_state_dir(name, sdir, sizeof(sdir)) || mkdir_p(sdir, 0700) || sandbox_cfg_save(sdir, &cfg) ||
	    (s->owner_fd = sandbox_owner_take(sdir, "supervisor", &who)) < 0 ||
	    policy_new(&s->policy) || approvals_new(s->policy, 60000, &s->a) ||
	    sandbox_run_dir(name, rdir, sizeof(rdir)) || mkdir_p(rdir, 0700))
		return -1;
	snprintf(s->sock, sizeof(s->sock), "%s/control.sock", rdir);
	if ((s->listen_fd = control_listen(s->sock)) < 0)
		return -1;
	return pthread_create(&s->t, NULL, served_loop, s) ? -1 : 0;
}

static inline void served_stop(struct served *s)
{
	s->stop = true;
	pthread_join(s->t, NULL);
	close(s->listen_fd);
	unlink(s->sock);
	approvals_free(s->a);
	policy_free(s->policy);
	close(s->owner_fd);
}

#endif
