# The sandbox's disk under a real guest (sourced by tests/vm/run-all; uses
# its sb, ok, not_ok, $WORK).  Issue 3: the Linux virtio-blk driver on the
# layered copy-on-write disk, data verified, and what the guest flushed
# surviving a SIGKILL of the VMM.
# - fio writes 256 MiB at random offsets with O_DIRECT in three block sizes
#   at once (4 KiB, 64 KiB, 1 MiB; queue depth 16) to files on the root file
#   system (ext4 on /dev/vda, the delta over the base image) and reads every
#   block back against its CRC32C (--verify=crc32c, fatal on the first bad
#   one); the files are fsynced at the end of each job.
# - While a guest process keeps rewriting a file of 4 KiB blocks with
#   O_DIRECT and never flushes, the guest writes a 16 MiB file and fsyncs it
#   and its folder; then the host kills the VMM with SIGKILL.  The delta must
#   open cleanly (kosa8 disk info), the sandbox must start again, the
#   fsynced file must hash as before, every block of the unflushed file must
#   be one whole generation that was written (lost writes are allowed, torn
#   or foreign blocks are not), and fio's files must still verify.  (The
#   rewritten blocks overwrite clusters the delta already has; the new
#   clusters of the fsynced file and of fio's files are the ones whose map
#   entries the flush must have written.)
# Both run in one sandbox, in this order (the second uses the first's files).

DISK_SB=dsk
DISK_FIO_DIR=/var/tmp/fio
DISK_BLOCKS=/var/tmp/blocks.bin
DISK_NBLOCKS=4096

# fio's job: the same file again with --verify_only checks what is there.
DISK_FIO_JOB="[global]
ioengine=libaio
direct=1
iodepth=16
rw=randwrite
randrepeat=1
verify=crc32c
verify_fatal=1
end_fsync=1
directory=$DISK_FIO_DIR
[bs4k]
bs=4k
size=32m
[bs64k]
bs=64k
size=96m
[bs1m]
bs=1m
size=128m"

# Blocks of 4 KiB that say which block and which generation they are, and
# carry a payload derived from both: a torn, misplaced or garbage block can
# not pass.  init writes generation 0 and fsyncs; churn rewrites every block
# with O_DIRECT, generation after generation, never flushing, and notes the
# generation it is on in /dev/shm; check reads them all back.
DISK_BLOCKS_PY='
import hashlib, mmap, os, struct, sys
BS = 4096
MAGIC = b"K8BLOCK\0"
def block(i, gen):
    head = struct.pack("<8sQQ", MAGIC, i, gen)
    seed = hashlib.sha256(head).digest()
    return head + (seed * (BS // len(seed)))[:BS - len(head)]
mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "init":
    with open(path, "wb") as f:
        for i in range(n):
            f.write(block(i, 0))
        f.flush()
        os.fsync(f.fileno())
    d = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(d)
elif mode == "churn":
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, BS)
    gen = 1
    while True:
        order = list(range(n))
        # A different order each generation: neighbours of a cluster get
        # different generations in flight.
        order = order[gen % 7::7] + [i for i in order if i % 7 != gen % 7]
        for i in order:
            buf[:] = block(i, gen)
            os.pwrite(fd, buf, i * BS)
        with open("/dev/shm/churn-gen", "w") as f:
            f.write(str(gen))
        gen += 1
else:
    gens = {}
    bad = []
    with open(path, "rb") as f:
        for i in range(n):
            b = f.read(BS)
            magic, idx, gen = struct.unpack("<8sQQ", b[:24]) if len(b) == BS else (b"", 0, 0)
            if magic != MAGIC or idx != i or b != block(i, gen):
                bad.append(i)
            else:
                gens[gen] = gens.get(gen, 0) + 1
    print("blocks=%d bad=%d gens=%s" % (n, len(bad), ",".join("%d:%d" % g for g in sorted(gens.items()))))
    if bad:
        print("first bad blocks: %s" % bad[:10])
        sys.exit(1)
'

disk_fail() { not_ok "$1" "$2"; sb rm -f "$DISK_SB" >/dev/null 2>&1; }
disk_root() { sb exec -u root "$DISK_SB" -- "$@"; }

test_sandbox_disk() {
	local name=sandbox-disk-setup t0 want got vmm st delta
	st=${KOSA8_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/kosa8}
	delta=$st/sandboxes/$DISK_SB/disk.k8d
	sb rm -f "$DISK_SB" >/dev/null 2>&1
	sb create --name "$DISK_SB" --mem 512M >"$WORK/out" 2>&1 || { not_ok "$name" "create failed"; return; }
	sb start "$DISK_SB" >>"$WORK/out" 2>&1 || { disk_fail "$name" "start failed"; return; }

	# 1. fio with verification.
	name=sandbox-disk-fio-verify-crc32c
	t0=$SECONDS
	disk_root sh -c "mkdir -p $DISK_FIO_DIR && printf '%s\n' \"\$1\" >/var/tmp/verify.fio &&
		fio --output-format=terse --terse-version=3 /var/tmp/verify.fio >/var/tmp/fio.terse; rc=\$?
		cat /var/tmp/fio.terse; exit \$rc" sh "$DISK_FIO_JOB" >"$WORK/out" 2>&1
	rc=$?
	echo "# fio randwrite + verify, 256 MiB in 4k/64k/1m jobs at once, O_DIRECT, qd 16: $((SECONDS - t0)) s"
	# Terse v3: 3 job, 5 error, 6-8 read KiB, KiB/s, IOPS (the verify
	# pass), 47-49 the same for writes.
	awk -F';' 'NF > 49 { printf "#   %s: error %s, wrote %s KiB at %s KiB/s (%s IOPS), verified %s KiB at %s KiB/s\n",
		$3, $5, $47, $48, $49, $6, $7 }' "$WORK/out"
	if [ "$rc" -ne 0 ]; then disk_fail "$name" "fio exited $rc"; return; fi
	ok "$name"

	# 2. SIGKILL of the VMM after an fsync, with unflushed writes in flight.
	name=sandbox-disk-sigkill-keeps-fsynced-data
	disk_root python3 -c "$DISK_BLOCKS_PY" init "$DISK_BLOCKS" "$DISK_NBLOCKS" >"$WORK/out" 2>&1 ||
		{ disk_fail "$name" "writing the block file failed"; return; }
	disk_root sh -c 'rm -f /dev/shm/churn-gen; setsid -f python3 -c "$1" churn "$2" "$3" </dev/null >/dev/null 2>&1' \
		sh "$DISK_BLOCKS_PY" "$DISK_BLOCKS" "$DISK_NBLOCKS" >>"$WORK/out" 2>&1 ||
		{ disk_fail "$name" "starting the rewriting process failed"; return; }
	for _ in $(seq 1 120); do
		got=$(disk_root cat /dev/shm/churn-gen 2>/dev/null)
		[ "${got:-0}" -ge 2 ] && break
		sleep 1
	done
	[ "${got:-0}" -ge 2 ] || { disk_fail "$name" "the rewriting process did not get through two generations"; return; }
	want=$(disk_root sh -c 'head -c 16777216 /dev/urandom >/var/tmp/durable.bin && sync /var/tmp/durable.bin /var/tmp &&
		sha256sum </var/tmp/durable.bin | cut -c1-64' 2>>"$WORK/out")
	vmm=$(pgrep -f -- "kosa8-vmm .*--jail.*/sandboxes/$DISK_SB/" | head -1)
	if [ -z "$want" ] || [ -z "$vmm" ]; then disk_fail "$name" "no fsynced file hash ('$want') or no VMM pid ('$vmm')"; return; fi
	kill -KILL "$vmm"
	for _ in $(seq 1 30); do
		sb ps | grep -q "^$DISK_SB .*stopped" && break
		sleep 1
	done
	sb ps | grep -q "^$DISK_SB .*stopped" || { disk_fail "$name" "the sandbox is not stopped 30 s after its VMM was killed"; return; }
	echo "# killed the VMM while the guest rewrote blocks (generation >= $got)"
	build/kosa8 disk info "$delta" >>"$WORK/out" 2>&1 || { disk_fail "$name" "the delta does not open after SIGKILL"; return; }
	sb start "$DISK_SB" >>"$WORK/out" 2>&1 || { disk_fail "$name" "start after SIGKILL failed"; return; }
	got=$(disk_root sh -c 'sha256sum </var/tmp/durable.bin | cut -c1-64' 2>>"$WORK/out")
	if [ "$got" != "$want" ]; then disk_fail "$name" "the fsynced file hashes '$got', want '$want'"; return; fi
	disk_root python3 -c "$DISK_BLOCKS_PY" check "$DISK_BLOCKS" "$DISK_NBLOCKS" >"$WORK/out" 2>&1
	rc=$?
	echo "# unflushed block file after SIGKILL: $(head -1 "$WORK/out")"
	if [ "$rc" -ne 0 ]; then disk_fail "$name" "blocks of the unflushed file are torn or foreign"; return; fi
	t0=$SECONDS
	disk_root sh -c 'fio --verify_only --output-format=terse --terse-version=3 /var/tmp/verify.fio >/var/tmp/fio.terse 2>/var/tmp/fio.err
		rc=$?; cat /var/tmp/fio.err; exit $rc' >"$WORK/out" 2>&1
	rc=$?
	echo "# fio --verify_only after SIGKILL and restart: $((SECONDS - t0)) s"
	if [ "$rc" -ne 0 ]; then disk_fail "$name" "fio's fsynced files no longer verify (exit $rc)"; return; fi
	ok "$name"
	sb rm -f "$DISK_SB" >>"$WORK/out" 2>&1 || not_ok sandbox-disk-cleanup "rm -f $DISK_SB failed"
}
