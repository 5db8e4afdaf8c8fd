/* The OCI config.json parser (oci/spec.h): what Docker and containerd
 * write parses to the process, sizes and mounts kosa8 runs; every field of
 * a wrong type, every bound and every mount kosa8 cannot give is refused
 * with a message naming it; unknown fields are ignored. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "oci/spec.h"

#define MiB (1024ULL * 1024)

static int parse(const char *text, struct oci_spec *s, char *err)
{
	return oci_spec_parse(text, strlen(text), s, err, 512);
}

/* A config shaped as `docker run` writes it (trimmed), with fields kosa8
 * does not read left in. */
static const char docker_like[] =
	"{\"ociVersion\":\"1.1.0\",\"process\":{\"user\":{\"uid\":1000,\"gid\":100,"
	"\"additionalGids\":[100]},\"args\":[\"cat\",\"/etc/os-release\"],"
	"\"env\":[\"PATH=/usr/bin:/bin\",\"HOSTNAME=abc\"],\"cwd\":\"/work\","
	"\"capabilities\":{\"bounding\":[\"CAP_CHOWN\"]},\"apparmorProfile\":\"docker-default\","
	"\"oomScoreAdj\":0},\"root\":{\"path\":\"rootfs\",\"readonly\":true},\"hostname\":\"abc\","
	"\"mounts\":[{\"destination\":\"/proc\",\"type\":\"proc\",\"source\":\"proc\","
	"\"options\":[\"nosuid\",\"noexec\",\"nodev\"]},"
	"{\"destination\":\"/dev\",\"type\":\"tmpfs\",\"source\":\"tmpfs\",\"options\":[\"nosuid\",\"strictatime\",\"mode=755\",\"size=65536k\"]},"
	"{\"destination\":\"/dev/shm\",\"type\":\"tmpfs\",\"source\":\"shm\",\"options\":[\"size=65536k\"]},"
	"{\"destination\":\"/etc/resolv.conf\",\"type\":\"bind\",\"source\":\"/var/lib/docker/x/resolv.conf\",\"options\":[\"rbind\",\"rprivate\"]},"
	"{\"destination\":\"/etc/hosts\",\"type\":\"bind\",\"source\":\"/var/lib/docker/x/hosts\",\"options\":[\"rbind\",\"rprivate\"]}],"
	"\"linux\":{\"resources\":{\"cpu\":{\"quota\":150000,\"period\":100000,\"shares\":512},"
	"\"memory\":{\"limit\":300000000}},\"namespaces\":[{\"type\":\"pid\"}],\"seccomp\":{}},"
	"\"annotations\":{\"io.kosa8.allow\":\"example.com,*.debian.org:443\",\"io.kosa8.secret\":\"GH_TOKEN\","
	"\"io.kosa8.policy\":\"ci-default\",\"org.opencontainers.image.ref.name\":\"bookworm\"},"
	"\"someFutureField\":{\"x\":[1,2,3]}}";

static void test_docker_like(void **state)
{
	struct oci_spec s;
	char err[512];

	assert_int_equal(parse(docker_like, &s, err), 0);
	assert_int_equal(s.nargs, 2);
	assert_string_equal(s.args[0], "cat");
	assert_null(s.args[2]);
	assert_int_equal(s.nenv, 2);
	assert_string_equal(s.cwd, "/work");
	assert_int_equal(s.uid, 1000);
	assert_int_equal(s.gid, 100);
	assert_false(s.terminal);
	assert_string_equal(s.hostname, "abc");
	assert_string_equal(s.root, "rootfs");
	assert_true(s.root_readonly);
	assert_int_equal(s.cpus, 2);                 /* ceil(150000 / 100000) */
	assert_int_equal(s.mem, 384 * MiB);          /* 286 MiB up to 128 MiB steps */
	assert_int_equal(s.nmounts, 5);
	assert_int_equal(s.mounts[0].kind, OCI_MOUNT_GUEST);
	assert_string_equal(s.mounts[0].options, "nosuid,noexec,nodev");
	assert_int_equal(s.mounts[3].kind, OCI_MOUNT_DNS);
	assert_int_equal(s.mounts[4].kind, OCI_MOUNT_FILE);
	assert_int_equal(s.nallow, 2);
	assert_string_equal(s.allow[1], "*.debian.org:443");
	assert_int_equal(s.nsecrets, 1);
	assert_string_equal(s.secrets[0], "GH_TOKEN");
	assert_string_equal(s.policy, "ci-default");
	assert_string_equal(oci_spec_annotation(&s, "org.opencontainers.image.ref.name"), "bookworm");
	assert_null(oci_spec_annotation(&s, "nope"));
	oci_spec_free(&s);
}

/* What containerd's CRI writes for a pod's sandbox (pause) container and
 * its containers (trimmed): /dev/shm bound from the pod's host tmpfs (or
 * the host's, for host IPC) becomes a tmpfs of the guest's, read-only
 * where the bind was; the hostname, hosts and resolv.conf binds are
 * taken as Docker's. */
static void test_cri_like(void **state)
{
	static const char cri_like[] =
		"{\"ociVersion\":\"1.0.2-dev\",\"process\":{\"args\":[\"/bin/sleep\",\"1d\"]},"
		"\"root\":{\"path\":\"rootfs\",\"readonly\":true},\"mounts\":["
		"{\"destination\":\"/dev/shm\",\"type\":\"bind\",\"source\":\"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/ab/shm\",\"options\":[\"rbind\",\"ro\"]},"
		"{\"destination\":\"/dev/shm\",\"type\":\"bind\",\"source\":\"/dev/shm\",\"options\":[\"rbind\",\"rprivate\",\"rw\"]},"
		"{\"destination\":\"/etc/hostname\",\"type\":\"bind\",\"source\":\"/run/x/hostname\",\"options\":[\"rbind\",\"rprivate\",\"rw\"]},"
		"{\"destination\":\"/etc/resolv.conf\",\"type\":\"bind\",\"source\":\"/run/x/resolv.conf\",\"options\":[\"rbind\",\"ro\"]}],"
		"\"annotations\":{\"io.kubernetes.cri.container-type\":\"sandbox\"}}";
	struct oci_spec s;
	char err[512];

	assert_int_equal(parse(cri_like, &s, err), 0);
	assert_int_equal(s.nmounts, 4);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(s.mounts[i].kind, OCI_MOUNT_GUEST);
		assert_string_equal(s.mounts[i].type, "tmpfs");
		assert_string_equal(s.mounts[i].source, "shm");
	}
	assert_string_equal(s.mounts[0].options, "nosuid,nodev,noexec,mode=1777,size=65536k,ro");
	assert_string_equal(s.mounts[1].options, "nosuid,nodev,noexec,mode=1777,size=65536k");
	assert_int_equal(s.mounts[2].kind, OCI_MOUNT_FILE);
	assert_int_equal(s.mounts[3].kind, OCI_MOUNT_DNS);
	assert_true(s.root_readonly);
	oci_spec_free(&s);
}

static void test_defaults_and_sizes(void **state)
{
	struct oci_spec s;
	char err[512], buf[512];
	static const struct { const char *res; int cpus; unsigned long long mem; } cases[] = {
		{"{}", 1, 1024 * MiB},
		{"{\"cpu\":{\"shares\":2}}", 1, 1024 * MiB},          /* Kubernetes: no request */
		{"{\"cpu\":{\"shares\":2048}}", 2, 1024 * MiB},
		{"{\"cpu\":{\"shares\":1025}}", 2, 1024 * MiB},
		{"{\"cpu\":{\"quota\":-1,\"shares\":1024}}", 1, 1024 * MiB},
		{"{\"cpu\":{\"quota\":50000}}", 1, 1024 * MiB},       /* period defaults to 100 ms */
		{"{\"cpu\":{\"quota\":400000,\"period\":100000,\"shares\":8192}}", 4, 1024 * MiB},
		{"{\"memory\":{\"limit\":1}}", 1, 256 * MiB},
		{"{\"memory\":{\"limit\":536870912}}", 1, 512 * MiB},
		{"{\"memory\":{\"limit\":536870913}}", 1, 640 * MiB},
		{"{\"memory\":{\"limit\":-1}}", 1, 1024 * MiB},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"ociVersion\":\"1.0.2\",\"process\":{\"args\":[\"sh\"]},"
			 "\"root\":{\"path\":\"r\"},\"linux\":{\"resources\":%s}}", cases[i].res);
		assert_int_equal(parse(buf, &s, err), 0);
		assert_int_equal(s.cpus, cases[i].cpus);
		assert_int_equal(s.mem, cases[i].mem);
		assert_string_equal(s.cwd, "/");
		assert_int_equal(s.uid, 0);
		oci_spec_free(&s);
	}
}

static void refused(const char *body, int want, const char *needle)
{
	struct oci_spec s;
	char err[512], buf[4096];

	snprintf(buf, sizeof(buf), "{\"ociVersion\":\"1.0.2\",%s}", body);
	int rc = parse(buf, &s, err);
	if (rc != want || !strstr(err, needle))
		fail_msg("%s: got %d '%s', want %d '%s'", body, rc, err, want, needle);
	oci_spec_free(&s);
}

#define P "\"process\":{\"args\":[\"sh\"]},\"root\":{\"path\":\"r\"}"

static void test_refusals(void **state)
{
	refused("\"process\":{\"args\":[]},\"root\":{\"path\":\"r\"}", -EINVAL, "process.args");
	refused("\"process\":{\"args\":\"sh\"},\"root\":{\"path\":\"r\"}", -EINVAL, "args must be an array");
	refused("\"process\":{\"args\":[1]},\"root\":{\"path\":\"r\"}", -EINVAL, "only strings");
	refused("\"process\":{\"args\":[\"sh\"],\"env\":[\"NOEQUALS\"]},\"root\":{\"path\":\"r\"}", -EINVAL, "NAME=value");
	refused("\"process\":{\"args\":[\"sh\"],\"cwd\":\"rel\"},\"root\":{\"path\":\"r\"}", -EINVAL, "absolute");
	refused("\"process\":{\"args\":[\"sh\"],\"terminal\":1},\"root\":{\"path\":\"r\"}", -EINVAL, "true or false");
	refused("\"process\":{\"args\":[\"sh\"],\"user\":{\"uid\":-1}},\"root\":{\"path\":\"r\"}", -EINVAL, "uid");
	refused("\"process\":{\"args\":[\"sh\"],\"user\":{\"uid\":1.5}},\"root\":{\"path\":\"r\"}", -EINVAL, "whole number");
	refused("\"process\":{\"args\":[\"sh\"]}", -EINVAL, "root is missing");
	refused("\"root\":{\"path\":\"r\"}", -EINVAL, "process is missing");
	refused(P ",\"hostname\":\"a b\"", -EINVAL, "hostname");
	refused(P ",\"hostname\":7", -EINVAL, "hostname must be a string");
	refused(P ",\"linux\":{\"resources\":{\"cpu\":{\"quota\":6500000}}}", -E2BIG, "65 CPUs");
	refused(P ",\"linux\":{\"resources\":{\"cpu\":{\"period\":0}}}", -EINVAL, "period");
	refused(P ",\"linux\":{\"resources\":{\"memory\":{\"limit\":\"1G\"}}}", -EINVAL, "limit must be a number");
	refused(P ",\"linux\":{\"resources\":{\"memory\":{\"limit\":99999999999999}}}", -E2BIG, "64 GiB");
	refused(P ",\"mounts\":[{\"destination\":\"/data\",\"type\":\"bind\",\"source\":\"/home\",\"options\":[\"rbind\"]}]",
		-ENOTSUP, "does not bind host paths");
	refused(P ",\"mounts\":[{\"destination\":\"/data\",\"type\":\"none\",\"source\":\"/home\",\"options\":[\"bind\"]}]",
		-ENOTSUP, "/home at /data");
	refused(P ",\"mounts\":[{\"destination\":\"/n\",\"type\":\"nfs\",\"source\":\"h:/x\"}]", -ENOTSUP, "'nfs'");
	refused(P ",\"mounts\":[{\"destination\":\"rel\",\"type\":\"tmpfs\"}]", -EINVAL, "absolute path");
	refused(P ",\"mounts\":[{\"destination\":\"/a/../../b\",\"type\":\"tmpfs\"}]", -EINVAL, "'..'");
	refused(P ",\"mounts\":[{\"destination\":\"/a/..\",\"type\":\"tmpfs\"}]", -EINVAL, "'..'");
	refused(P ",\"mounts\":[{\"destination\":\"/t\",\"type\":\"tmpfs\",\"options\":[\"a,b\"]}]", -E2BIG, "comma");
	refused(P ",\"mounts\":[\"x\"]", -EINVAL, "mounts[0] must be an object");
	refused(P ",\"annotations\":{\"io.kosa8.policy\":\"../../etc/shadow\"}", -EINVAL, "io.kosa8.policy");
	refused(P ",\"annotations\":{\"io.kosa8.secret\":\"A B\"}", -EINVAL, "'A B'");
	refused(P ",\"annotations\":{\"io.kosa8.allow\":\"a b\"}", -EINVAL, "io.kosa8.allow");
	refused(P ",\"annotations\":{\"io.kosa8.alow\":\"x\"}", -EINVAL, "unknown kosa8 annotation");
	refused(P ",\"annotations\":{\"a\":1}", -EINVAL, "must be a string");
	refused(P ",\"annotations\":[]", -EINVAL, "annotations must be an object");
	refused("\"process\":{\"args\":[\"sh\"]},\"root\":{\"path\":\"\"}", -EINVAL, "root.path");
}

static void test_whole_file(void **state)
{
	struct oci_spec s;
	char err[512];

	assert_int_equal(parse("[]", &s, err), -EINVAL);
	assert_non_null(strstr(err, "one JSON object"));
	assert_int_equal(parse("{\"ociVersion\":\"2.0\"}", &s, err), -EINVAL);
	assert_int_equal(parse("{", &s, err), -EINVAL);
	assert_non_null(strstr(err, "not valid JSON"));
	assert_int_equal(oci_spec_parse("{\"a\":\"\0\"}", 9, &s, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "NUL"));
	assert_int_equal(oci_spec_parse("{}", OCI_SPEC_MAX + 1, &s, err, sizeof(err)), -E2BIG);
	oci_spec_free(&s);
}

/* Counts and the byte budget of argv + env (one 64 KiB agent frame). */
static void test_bounds(void **state)
{
	struct oci_spec s;
	char err[512];
	size_t cap = 64 * 1024 + 4 * (OCI_ARGS_MAX + 2) * 4 + 1024;
	char *buf = malloc(cap);
	size_t n;

	n = (size_t)snprintf(buf, cap, "{\"ociVersion\":\"1.0.2\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[");
	for (int i = 0; i <= OCI_ARGS_MAX; i++)
		n += (size_t)snprintf(buf + n, cap - n, "%s\"a\"", i ? "," : "");
	snprintf(buf + n, cap - n, "]}}");
	assert_int_equal(parse(buf, &s, err), -E2BIG);
	assert_non_null(strstr(err, "more than 1024"));
	oci_spec_free(&s);

	n = (size_t)snprintf(buf, cap, "{\"ociVersion\":\"1.0.2\",\"root\":{\"path\":\"r\"},\"process\":{\"args\":[\"");
	memset(buf + n, 'x', OCI_ARGV_ENV_BYTES);
	n += OCI_ARGV_ENV_BYTES;
	snprintf(buf + n, cap - n, "\"]}}");
	assert_int_equal(parse(buf, &s, err), -E2BIG);
	assert_non_null(strstr(err, "exceed"));
	oci_spec_free(&s);
	free(buf);
}

/* exec's --process file: the process object alone, as the shim writes it
 * for `docker exec`, with config.json's checks. */
static void test_process_file(void **state)
{
	static const char shim[] =
		"{\"user\":{\"uid\":0,\"gid\":0},\"args\":[\"cat\",\"/etc/marker\"],"
		"\"env\":[\"PATH=/bin\"],\"cwd\":\"/\",\"terminal\":true,"
		"\"capabilities\":{\"bounding\":[\"CAP_KILL\"]}}";
	static const char *const bad[][2] = {
		{"[]", "one JSON object"},
		{"{\"args\":[]}", "process.args"},
		{"{\"args\":[\"sh\"],\"cwd\":\"rel\"}", "process.cwd"},
		{"{\"args\":[\"sh\"],\"env\":[\"NOEQUALS\"]}", "process.env"},
		{"{\"args\":[\"sh\"],\"user\":{\"uid\":-1}}", "process.user.uid"},
		{"{\"args\":\"sh\"}", "process.args"},
	};
	struct oci_spec s;
	char err[512];

	assert_int_equal(oci_process_parse(shim, strlen(shim), &s, err, sizeof(err)), 0);
	assert_int_equal(s.nargs, 2);
	assert_string_equal(s.args[1], "/etc/marker");
	assert_null(s.args[2]);
	assert_true(s.terminal);
	assert_string_equal(s.cwd, "/");
	oci_spec_free(&s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		if (oci_process_parse(bad[i][0], strlen(bad[i][0]), &s, err, sizeof(err)) == 0)
			fail_msg("accepted %s", bad[i][0]);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: '%s' does not name %s", bad[i][0], err, bad[i][1]);
		oci_spec_free(&s);
	}
	assert_int_not_equal(oci_process_parse("{\"args\":[\"a\"]}\0", 15, &s, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "process file"));
	oci_spec_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_docker_like),
		cmocka_unit_test(test_cri_like),
		cmocka_unit_test(test_defaults_and_sizes),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_whole_file),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_process_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
