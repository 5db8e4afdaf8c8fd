#!/usr/bin/env bash
# Builds and runs kosa8's libFuzzer targets.
#
#   fuzz/run.sh SECONDS [TARGET...]
#
# TARGET is a file fuzz/fuzz_TARGET.c (default: every one).  The library
# sources (src/*/*.c except src/cli and src/agent) are compiled once into
# build-fuzz/obj with coverage and ASan+UBSan, then each target is linked
# with -fsanitize=fuzzer and runs SECONDS on its seed corpus
# fuzz/corpus/TARGET/ (read only: new inputs go to build-fuzz/corpus/TARGET/).
# A crash leaves its input in build-fuzz/artifacts/.  Prints, per target, the
# executions run and the outcome; exits non-zero if any target crashed or did
# not build.  FUZZ_DIR overrides build-fuzz; FUZZ_JOBS the make -j (2).
set -u
cd "$(dirname "$0")/.."

if [ $# -lt 1 ] || ! [ "$1" -ge 0 ] 2>/dev/null; then
	echo "usage: fuzz/run.sh SECONDS [TARGET...]" >&2
	exit 2
fi
secs=$1
shift
out=${FUZZ_DIR:-build-fuzz}
CC=${FUZZ_CC:-clang}
# FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION: the usual libFuzzer convention,
# lets a parser skip checks a fuzzer cannot pass (e.g. checksums).
CFLAGS="-std=gnu11 -g -O1 -fno-omit-frame-pointer -Isrc -D_GNU_SOURCE -pthread \
-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -fsanitize=address,undefined \
-fno-sanitize-recover=undefined"
LIBS="-lcjson -lssl -lcrypto -lseccomp -lz -lmicrohttpd -lpsl -larchive -lcurl -lpthread"

if [ $# -eq 0 ]; then
	set -- $(for f in fuzz/fuzz_*.c; do [ -e "$f" ] && basename "$f" .c | sed 's/^fuzz_//'; done)
fi
if [ $# -eq 0 ]; then
	echo "fuzz: no targets (fuzz/fuzz_*.c)" >&2
	exit 2
fi

# The library, once: make keeps it incremental (header changes included).
# The VMM's architecture folder is this host's (x86-64): the common VMM
# code calls into it (control -> vm -> arch_*).
srcs=$(ls src/*/*.c src/vmm/x86/*.c 2>/dev/null | grep -v -e '^src/cli/' -e '^src/agent/' | tr '\n' ' ')
mkdir -p "$out"
# Several runs may share build-fuzz (people fuzzing their own targets at
# once): one builds the library at a time, the others wait.
exec 9>"$out/.build-lock"
flock 9
make -s -j"${FUZZ_JOBS:-2}" -f - OUT="$out" CC="$CC" CFLAGS="$CFLAGS" SRCS="$srcs" <<'EOF' || exit 1
OBJS := $(patsubst %.c,$(OUT)/obj/%.o,$(SRCS))
$(OUT)/libkosa8-fuzz.a: $(OBJS)
	@rm -f $@
	@ar rcs $@ $^
$(OUT)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
-include $(OBJS:.o=.d)
EOF

# Link every target while still holding the lock (the library must not be
# rebuilt under a link), then run them without it.
failed=0
summary=()
runnable=()
for t in "$@"; do
	src=fuzz/fuzz_$t.c
	if [ ! -f "$src" ]; then
		summary+=("$t: no such target ($src)")
		failed=1
	elif ! $CC $CFLAGS -fsanitize=fuzzer "$src" "$out/libkosa8-fuzz.a" $LIBS -o "$out/fuzz_$t"; then
		summary+=("$t: BUILD FAILED")
		failed=1
	else
		runnable+=("$t")
	fi
done
flock -u 9

for t in "${runnable[@]+"${runnable[@]}"}"; do
	bin=$out/fuzz_$t
	seeds=fuzz/corpus/$t
	[ -d "$seeds" ] || echo "fuzz: $t has no seed corpus ($seeds)" >&2
	mkdir -p "$out/corpus/$t" "$out/artifacts"
	log=$out/fuzz_$t.log
	"$bin" -max_total_time="$secs" -timeout=25 -print_final_stats=1 \
		-artifact_prefix="$out/artifacts/$t-" "$out/corpus/$t" \
		$( [ -d "$seeds" ] && echo "$seeds" ) >"$log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
	if [ $rc -eq 0 ]; then
		summary+=("$t: ${execs:-?} executions in ${secs}s, ${cov:-cov: ?}, no crash")
	else
		art=$(grep -o "$out/artifacts/$t-[^ ]*" "$log" | tail -1)
		summary+=("$t: CRASHED after ${execs:-?} executions (exit $rc; input ${art:-?}; log $log)")
		grep -m1 -E 'ERROR: |runtime error:|==ERROR' "$log" | sed 's/^/    /' >&2
		failed=1
	fi
done

echo "fuzz summary (${secs}s per target):"
for s in "${summary[@]}"; do
	echo "  $s"
done
exit $failed
