#!/usr/bin/python3
"""containerd's CRI (the Kubernetes Container Runtime Interface, gRPC on
containerd's socket) driven as the kubelet drives it, with kosa8 as the
pod's runtime handler: docs/kubernetes.md's wiring, tested.

Debian has no CRI client (no crictl, no kubelet), so this is one: Debian's
python3-grpcio and python3-protobuf, with tests/oci/cri.proto, the part
of the CRI's api.proto this test calls, written here (no Debian package
ships the CRI's own), compiled by Debian's protoc at run time.

One pod on the node's network (no CNI plugin needed), its sandbox image
and the container's image imported into containerd beforehand (no
registry): RunPodSandbox, CreateContainer and StartContainer (output in
the CRI log), ExecSync (output, exit status, the pod's io.kosa8.allow
annotation opening a host, another host denied, the read-only root not
writable), StopContainer and ContainerStatus (the process's TERM trap's
exit code), the audit record naming the container and the pod, then
StopPodSandbox and RemovePodSandbox.

tests/oci/docker_test.sh runs it in the helper VM, with containerd up:

  cri_test.py SOCKET WORKDIR IMAGE SANDBOX_IMAGE
      KOSA8: the kosa8 binary; KOSA8_CRI_GET: a shell function get HOST,
      as in docker_test.sh
One line per check, "ok NAME" or "not ok NAME: why"; status 1 on any failure.
"""
import json, os, socket, subprocess, sys, time

import checks
from checks import check, not_ok, ok, step

K8 = os.path.abspath(os.environ.get("KOSA8", "build/kosa8"))
HERE = os.path.dirname(os.path.abspath(__file__))
# Every call is bounded; creating a container (a sandbox from its template
# plus the image copied in) took up to 49 s in a loaded helper VM.
SLOW = 600


def load_cri(work):
    """grpc, protobuf's json_format and the module protoc makes of cri.proto."""
    import grpc
    from google.protobuf import json_format

    out = os.path.join(work, "cri-proto")
    os.makedirs(out, exist_ok=True)
    subprocess.run(["protoc", "-I", HERE, "--python_out", out, "cri.proto"], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sys.path.insert(0, out)
    import cri_pb2
    return grpc, json_format, cri_pb2


class Cri:
    """Calls by method name: the request a dict in the proto's field names,
    the answer a message (a grpc.RpcError when containerd says no)."""

    def __init__(self, grpc, json_format, pb, socket):
        self.grpc, self.json_format, self.pb = grpc, json_format, pb
        self.channel = grpc.insecure_channel("unix://" + socket)

    def __call__(self, method, request=None, timeout=60):
        for svc in self.pb.DESCRIPTOR.services_by_name.values():
            m = svc.methods_by_name.get(method)
            if m:
                break
        req_type = getattr(self.pb, m.input_type.name)
        resp_type = getattr(self.pb, m.output_type.name)
        req = self.json_format.ParseDict(request or {}, req_type())
        rpc = self.channel.unary_unary("/%s/%s" % (svc.full_name, method),
                                       request_serializer=req_type.SerializeToString,
                                       response_deserializer=resp_type.FromString)
        return rpc(req, timeout=timeout)


def attempt(name, fn):
    """fn()'s answer, or None with a failed check saying what containerd said."""
    try:
        return fn()
    except Exception as e:  # grpc.RpcError and the rest: the check says which
        detail = e.details() if hasattr(e, "details") else repr(e)
        not_ok(name, detail[-1500:])
        return None


def wait_for(what, timeout, interval=1):
    """what()'s first true answer within timeout s (an exception counts as false)."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = what()
        except Exception:
            v = None
        if v or time.monotonic() > end:
            return v
        time.sleep(interval)


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def bundle_annotations(work, cid):
    """What containerd wrote into the container's config.json (to say why)."""
    path = os.path.join(work, "containerd-state/io.containerd.runtime.v2.task/k8s.io", cid, "config.json")
    try:
        with open(path) as f:
            return json.load(f).get("annotations")
    except (OSError, ValueError) as e:
        return repr(e)


def audit_lines(word):
    out = subprocess.run([K8, "audit", "show"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         timeout=120).stdout.decode(errors="replace")
    return [line[-300:] for line in out.splitlines() if word in line][-4:]


def main():
    checks.part = "cri"
    sock, work, image, sandbox_image = sys.argv[1:5]
    get = os.environ.get("KOSA8_CRI_GET", "")
    try:
        cri = Cri(*load_cri(work), sock)
    except Exception as e:
        not_ok("cri-client", "no CRI client: %r (make deps installs python3-grpcio, "
               "python3-protobuf and protobuf-compiler)" % e)
        return 1

    v = attempt("cri-version", lambda: cri("Version", {"version": "v1"}))
    if v is None:
        return 1
    check("cri-version", v.runtime_name == "containerd", "runtime %r" % v.runtime_name)
    step("%s %s, CRI %s" % (v.runtime_name, v.runtime_version, v.runtime_api_version))

    # ctr's import reaches the CRI's image list through containerd's events
    for check_name, name in (("cri-image-present", image), ("cri-sandbox-image-present", sandbox_image)):
        have = wait_for(lambda: cri("ImageStatus", {"image": {"image": name}}).image.id, 60)
        check(check_name, have, "%s not seen by the CRI" % name)

    logs = os.path.join(work, "pod-logs")
    os.makedirs(logs, exist_ok=True)
    # No hostname: the kubelet gives none to a pod on the node's network
    # (runc refuses one without a UTS namespace of the pod's own), and
    # containerd writes the node's into the pod's /etc/hostname.
    pod = {
        "metadata": {"name": "agent", "uid": "kosa8-cri-test", "namespace": "default"},
        "log_directory": logs,
        "annotations": {"io.kosa8.allow": "other.test"},
        "linux": {"security_context": {"namespace_options": {"network": "NODE"}}},
    }
    step("RunPodSandbox")
    t0 = time.monotonic()
    r = attempt("cri-run-pod-sandbox", lambda: cri("RunPodSandbox", {"config": pod, "runtime_handler": "kosa8"},
                                                   timeout=SLOW))
    if r is None:
        return 1
    pod_id = r.pod_sandbox_id
    step("pod %s up in %.0f s" % (pod_id[:12], time.monotonic() - t0))
    st = cri("PodSandboxStatus", {"pod_sandbox_id": pod_id}).status
    check("cri-pod-ready", st.state == cri.pb.SANDBOX_READY and st.runtime_handler == "kosa8",
          "state %d handler %r" % (st.state, st.runtime_handler))

    container = {
        "metadata": {"name": "agent"},
        "image": {"image": image},
        "command": ["sh", "-c", "trap 'echo got-term; exit 42' TERM; cat /etc/marker; echo up; "
                    "while :; do sleep 1; done"],
        "log_path": "agent.log",
        "linux": {"security_context": {"readonly_rootfs": True, "apparmor": {"profile_type": "Unconfined"}}},
    }
    step("CreateContainer, StartContainer")
    t0 = time.monotonic()
    r = attempt("cri-create-container", lambda: cri("CreateContainer", {
        "pod_sandbox_id": pod_id, "config": container, "sandbox_config": pod}, timeout=SLOW))
    cid = r.container_id if r else ""
    if cid and attempt("cri-start-container", lambda: cri("StartContainer", {"container_id": cid},
                                                          timeout=SLOW)) is not None:
        ok("cri-start-container")
        log = os.path.join(logs, "agent.log")
        wait_for(lambda: "stdout F up\n" in read(log), SLOW)
        step("container %s up in %.0f s" % (cid[:12], time.monotonic() - t0))
        check("cri-container-output", "from-the-image" in read(log), repr(read(log)[-500:]))
        st = cri("ContainerStatus", {"container_id": cid}).status
        check("cri-container-running", st.state == cri.pb.CONTAINER_RUNNING, "state %d" % st.state)

        step("ExecSync")
        r = attempt("cri-exec-sync", lambda: cri("ExecSync", {"container_id": cid, "timeout": 300, "cmd": [
            "sh", "-c", get + 'cat /etc/marker /etc/hostname; echo "other: $(get other.test)"\n'
            'if get denied.test >/dev/null; then echo DENIED-REACHED; else echo denied-denied; fi\n'
            'if (echo x >/written) 2>/dev/null; then echo ROOT-WRITTEN; else echo root-read-only; fi\n'
            'ls /dev/null /proc/self/stat >/dev/null && echo mounts-seen\n'
            'echo exec-err >&2; exit 5']}, timeout=SLOW))
        if r is not None:
            out, err = r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
            check("cri-exec-sync-exit-code", r.exit_code == 5, "exit code %d" % r.exit_code)
            check("cri-exec-sync-output", "from-the-image" in out and socket.gethostname() in out and "exec-err" in err,
                  "stdout %r stderr %r" % (out[-500:], err[-300:]))
            check("cri-pod-annotation-allows-host", "other: hello from other.test" in out,
                  "%r; the bundle's annotations: %s; audit: %s" % (out[-300:], bundle_annotations(work, cid),
                                                                    audit_lines("other.test")))
            check("cri-readonly-rootfs", "root-read-only" in out and "ROOT-WRITTEN" not in out and
                  "mounts-seen" in out, repr(out[-500:]))
            check("cri-denied-host", "denied-denied" in out and "DENIED-REACHED" not in out, repr(out[-500:]))

        step("StopContainer")
        if attempt("cri-stop-container", lambda: cri("StopContainer", {"container_id": cid, "timeout": 120},
                                                     timeout=SLOW)) is not None:
            st = cri("ContainerStatus", {"container_id": cid}).status
            check("cri-container-exit-code", st.state == cri.pb.CONTAINER_EXITED and st.exit_code == 42,
                  "state %d exit code %d reason %r" % (st.state, st.exit_code, st.reason))
            check("cri-stop-term", "got-term" in read(log), repr(read(log)[-500:]))
        audit = subprocess.run([K8, "audit", "show", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=120).stdout.decode(errors="replace")
        audit = audit.replace(" ", "")
        check("cri-audit-names-container", '"container":"%s"' % cid in audit and
              '"container":"%s"' % pod_id in audit, "no oci.create record naming %s and pod %s" % (cid, pod_id))
        if attempt("cri-remove-container", lambda: cri("RemoveContainer", {"container_id": cid},
                                                       timeout=SLOW)) is not None:
            ok("cri-remove-container")

    step("StopPodSandbox, RemovePodSandbox")
    if attempt("cri-stop-pod", lambda: cri("StopPodSandbox", {"pod_sandbox_id": pod_id}, timeout=SLOW)) is not None:
        st = cri("PodSandboxStatus", {"pod_sandbox_id": pod_id}).status
        check("cri-stop-pod", st.state == cri.pb.SANDBOX_NOTREADY, "state %d" % st.state)
    if attempt("cri-remove-pod", lambda: cri("RemovePodSandbox", {"pod_sandbox_id": pod_id},
                                             timeout=SLOW)) is not None:
        left = cri("ListPodSandbox", {"filter": {"id": pod_id}}).items
        check("cri-remove-pod", not left, "still listed: %r" % left)
        # the pod's two VMs: none left (the Docker and ctr ones went before)
        ps = lambda: subprocess.run([K8, "ps", "-q"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    timeout=60).stdout.decode(errors="replace")
        gone = wait_for(lambda: "oci-" not in ps(), 120)
        check("cri-pod-vms-removed", gone, "kosa8 ps: %r" % ps()[-500:])
    return 1 if checks.failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a status query refused midway: say so, as a failure
        not_ok("cri-test", repr(e)[-1500:])
        sys.exit(1)
