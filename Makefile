# kosa8 build.  Plain GNU make: every rule is here, nothing generated.
#
#   make               release build        -> build/kosa8, build/kosa8-vmm (the VMM),
#                                              build/kosa8-tools (ui, image import/export)
#   make san           ASan+UBSan build     -> build-san/kosa8
#   make check         unit tests (both builds) + VM tests (KVM or helper VM)
#   make unit          unit tests only, both builds (and make layers)
#   make layers        the include and call order of src/ by folder (scripts/check-layers)
#   make fuzz          every fuzz target for FUZZ_SECONDS each (clang, libFuzzer)
#   make kernel        the guest kernel, cached under ~/.cache/kosa8
#   make image         the default Debian rootfs image (root), cached likewise
#   make kernel-arm64 image-arm64   the same for arm64 guests (cross-built)
#   make deps          Debian packages the build and tests need (root)
#   make arm64         the VMM cross-built for aarch64 -> build-arm64/kosa8-vmm
#   make man           man pages from the command table -> build/man/man1/
#   make completion    bash, zsh and fish completions -> build/completion/
#   make deb           the Debian package -> build/dist/ (lintian-checked)
#   make dist          a signed release -> build/dist/: tarball, .deb, install.sh,
#                      SHA256SUMS(.sig); RELEASE_KEY=key.pem (docs/release.md)
#
# Sources are found by folder: each folder under src/ is one part of the
# architecture (see README.md), and adding a .c file there is all it takes.

CC      ?= cc
CSTD    := -std=gnu11
WARN    := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wvla -Wno-unused-parameter \
           -Wmissing-prototypes -Wstrict-prototypes
CFLAGS_COMMON := $(CSTD) $(WARN) -Isrc -D_GNU_SOURCE -pthread -g
LIBS    := -lcjson -lssl -lcrypto -lseccomp -lz -lmicrohttpd -lpsl -larchive -lcurl -lpthread
# The VMM (kosa8-vmm) links only these: every library it maps stays
# resident in each sandbox's VMM (bench/results/memory.md).
VMM_LIBS := -lcjson -lseccomp -lpthread
TESTLIBS := -lcmocka -lfdt

# Parts linked into the kosa8 binary (and into unit tests).
# src/cli is in the library too (minus main.c) so unit tests reach its parsers.
LIB_DIRS := src/common src/oci src/hw src/vmm src/vmm/x86 src/virtio src/devices src/disk src/audit src/sandbox src/supervisor src/proxy src/machine src/ui src/image src/cli src/agentproto
LIB_SRCS := $(filter-out src/cli/main.c src/cli/vmm_main.c,$(foreach d,$(LIB_DIRS),$(wildcard $(d)/*.c)))
CLI_SRCS := src/cli/main.c
# kosa8-tools: the same main, with the objects kosa8 leaves out (tools.c).
TOOLS_SRCS := src/cli/main.c src/cli/cmd_ui.c src/cli/cmd_image_io.c
VMM_SRCS := src/cli/vmm_main.c
AGENT_SRCS := $(wildcard src/agent/*.c)
UNIT_SRCS := $(wildcard tests/unit/test_*.c)

# What 'kosa8 --version' says: the commit when built in this project's own
# git tree (not in a tarball unpacked inside another repository), else
# "unknown".  Only src/cli/version.c sees it; its stamp file changes when
# the commit does, so a new commit rebuilds that one object.
KOSA8_VERSION := 0.1.0
GIT_COMMIT := $(shell [ "$$(git rev-parse --show-toplevel 2>/dev/null)" = "$(CURDIR)" ] && \
                git describe --always --dirty 2>/dev/null || echo unknown)
version_stamp = $(shell mkdir -p $(1) && { echo '$(KOSA8_VERSION) $(GIT_COMMIT)' | cmp -s - $(1)/version.stamp || \
                  echo '$(KOSA8_VERSION) $(GIT_COMMIT)' >$(1)/version.stamp; })

# Two flavours built side by side from the same sources.
REL_DIR ?= build
SAN_DIR ?= build-san
REL_CFLAGS := $(CFLAGS_COMMON) -O2 -D_FORTIFY_SOURCE=2 -fstack-protector-strong
SAN_CFLAGS := $(CFLAGS_COMMON) -O1 -fno-omit-frame-pointer \
              -fsanitize=address,undefined -fno-sanitize-recover=undefined
SAN_LDFLAGS := -fsanitize=address,undefined

.PHONY: all san unit layers check vmtest fuzz kernel initramfs image deps clean bench man completion deb dist
all: $(REL_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(REL_DIR)/kosa8-agent

define flavour
$(1)/obj/%.o: %.c
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $$(VERSION_DEFS) -MMD -MP -c $$< -o $$@

$$(call version_stamp,$(1))
$(1)/obj/src/cli/version.o: $(1)/version.stamp
$(1)/obj/src/cli/version.o: VERSION_DEFS = -DKOSA8_VERSION='"$(KOSA8_VERSION)"' \
	-DKOSA8_COMMIT='"$(GIT_COMMIT)"' -DKOSA8_FLAVOUR='"$(4)"'

$(1)/libkosa8.a: $$(patsubst %.c,$(1)/obj/%.o,$$(LIB_SRCS))
	@rm -f $$@
	ar rcs $$@ $$^

# kosa8 leaves out the commands that need libmicrohttpd, libcurl and
# libarchive (weak in commands.h): --as-needed then drops those libraries,
# and kosa8-tools, which names their objects, runs those commands
# (src/cli/tools.c says why).
# kosa8 is whole only with it: every target that builds kosa8 builds both.
$(1)/kosa8: $$(patsubst %.c,$(1)/obj/%.o,$$(CLI_SRCS)) $(1)/libkosa8.a | $(1)/kosa8-tools
	$$(CC) $(3) -Wl,--as-needed -o $$@ $$(filter-out $(1)/kosa8-tools,$$^) $$(LIBS)

$(1)/kosa8-tools: $$(patsubst %.c,$(1)/obj/%.o,$$(TOOLS_SRCS)) $(1)/libkosa8.a
	$$(CC) $(3) -o $$@ $$^ $$(LIBS)

# The VMM: the same archive, of which the linker takes only what
# vmm_main.c reaches; --as-needed drops a library nothing in it uses.
$(1)/kosa8-vmm: $$(patsubst %.c,$(1)/obj/%.o,$$(VMM_SRCS)) $(1)/libkosa8.a
	$$(CC) $(3) -Wl,--as-needed -o $$@ $$^ $$(VMM_LIBS)

$(1)/tests/%: $(1)/obj/tests/unit/%.o $(1)/libkosa8.a
	@mkdir -p $$(dir $$@)
	$$(CC) $(3) -o $$@ $$^ $$(LIBS) $$(TESTLIBS)

$(1)/unit-tests: $$(patsubst tests/unit/%.c,$(1)/tests/%,$$(UNIT_SRCS))
endef

# The console's page is built into this object (.incbin): -MMD cannot see it.
$(REL_DIR)/obj/src/ui/assets.o $(SAN_DIR)/obj/src/ui/assets.o: $(wildcard src/ui/assets/*)

$(eval $(call flavour,$(REL_DIR),$(REL_CFLAGS),,release))
$(eval $(call flavour,$(SAN_DIR),$(SAN_CFLAGS),$(SAN_LDFLAGS),san))

san: $(SAN_DIR)/kosa8 $(SAN_DIR)/kosa8-vmm

# The guest agent: libc only.  Static in the release build (it runs in a
# minimal guest); the sanitizer build links it dynamically (ASan cannot be
# static) so that tests drive an instrumented agent too.
AGENT_ALL := $(AGENT_SRCS) src/agentproto/proto.c src/agentproto/conn.c src/agentproto/tree.c \
             src/common/guarded.c src/common/fileio.c
AGENT_HDRS := $(wildcard src/agent/*.h src/agentproto/*.h) src/common/guarded.h src/common/fileio.h
$(REL_DIR)/kosa8-agent: $(AGENT_ALL) $(AGENT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -static -o $@ $(AGENT_ALL)
$(SAN_DIR)/kosa8-agent: $(AGENT_ALL) $(AGENT_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(SAN_CFLAGS) $(SAN_LDFLAGS) -o $@ $(AGENT_ALL)

# The escape tests' guest program (tests/security): static, like the agent,
# copied into a running sandbox.
$(REL_DIR)/virtq-attack: tests/security/virtq-attack.c
	@mkdir -p $(dir $@)
	$(CC) $(REL_CFLAGS) -static -o $@ $<

# The browser test's supervisor stand-in (tests/ui/run): the real
# approvals queue behind a sandbox's control socket.
$(REL_DIR)/ui-ask-supervisor: tests/ui/ask_supervisor.c tests/unit/served_approvals.h $(REL_DIR)/libkosa8.a
	$(CC) $(REL_CFLAGS) -Itests/unit -o $@ $< $(REL_DIR)/libkosa8.a $(LIBS)

# Unit tests: every tests/unit/test_*.c is one cmocka binary, run in both
# flavours.  tests/run prints cmocka's summaries and one closing total.
unit: $(REL_DIR)/kosa8 $(SAN_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(SAN_DIR)/kosa8-vmm \
      $(REL_DIR)/kosa8-agent $(SAN_DIR)/kosa8-agent \
      $(patsubst tests/unit/%.c,$(REL_DIR)/tests/%,$(UNIT_SRCS)) \
      $(patsubst tests/unit/%.c,$(SAN_DIR)/tests/%,$(UNIT_SRCS))
	REL_DIR=$(REL_DIR) SAN_DIR=$(SAN_DIR) tests/run unit

layers: $(REL_DIR)/libkosa8.a
	scripts/check-layers --objs $(REL_DIR)/obj
	scripts/check-file-loops $(REL_DIR)/obj/src

# make check: what the tests need, built side by side as make -j allows
# (the kernel and the image are the long ones), each part timed into
# CHECK_TIMES; then tests/run all, which adds its own phases to that file and
# prints them all as a table at its end.  A CHECK_TIMES from the environment
# (.ci/run's, with make deps in it) is added to, not emptied.
CHECK_TIMES ?= $(abspath $(REL_DIR))/check-times
TIMED = scripts/timed $(CHECK_TIMES)
check:
	@mkdir -p $(dir $(CHECK_TIMES))
	$(if $(filter environment,$(origin CHECK_TIMES)),,@: >$(CHECK_TIMES))
	$(MAKE) --no-print-directory check-built
	CHECK_TIMES=$(CHECK_TIMES) tests/run all

# The kernel first: the longest part (7-8 min on 2 idle cores), started
# before the C builds take make's job slots (it runs make -j itself); the
# image as soon as the release build is done (it needs its kosa8 and agent).
check-built: check-kernel check-release check-image check-san check-initramfs check-arm64
check-release:
	$(TIMED) "release build" $(MAKE) --no-print-directory $(REL_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(REL_DIR)/kosa8-agent \
		$(REL_DIR)/virtq-attack $(REL_DIR)/ui-ask-supervisor $(REL_DIR)/unit-tests
check-san:
	$(TIMED) "sanitizer build" $(MAKE) --no-print-directory $(SAN_DIR)/kosa8 $(SAN_DIR)/kosa8-vmm $(SAN_DIR)/kosa8-agent \
		$(SAN_DIR)/unit-tests
check-kernel:
	$(TIMED) kernel guest/kernel/build.sh
check-initramfs:
	$(TIMED) initramfs guest/initramfs/build.sh
# The arm64 VMM is only cross-built here (its tests need the aarch64 helper,
# tests/run arm64): built in every check so the split stays whole.
check-arm64:
	$(TIMED) "arm64 build" $(MAKE) --no-print-directory arm64
check-image: check-release
	$(TIMED) image $(MAKE) --no-print-directory image
.PHONY: check-built check-release check-san check-kernel check-initramfs check-image check-arm64

unit-bins: $(REL_DIR)/kosa8 $(SAN_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(SAN_DIR)/kosa8-vmm \
      $(REL_DIR)/kosa8-agent $(SAN_DIR)/kosa8-agent \
      $(patsubst tests/unit/%.c,$(REL_DIR)/tests/%,$(UNIT_SRCS)) \
      $(patsubst tests/unit/%.c,$(SAN_DIR)/tests/%,$(UNIT_SRCS))
.PHONY: unit-bins

vmtest: unit-bins $(REL_DIR)/virtq-attack kernel initramfs image
	tests/run vm

kernel:
	guest/kernel/build.sh

initramfs:
	guest/initramfs/build.sh

# The default Debian rootfs with this agent (root: mmdebstrap); cached.
# Through kosa8 image build, which also records the image's identity next to
# it (<image>.kosa8-id): without that file every sandbox disk open, the
# jailed VMM's included, hashes the whole image (minutes in the helper VM).
image: $(REL_DIR)/kosa8 $(REL_DIR)/kosa8-agent
	$(REL_DIR)/kosa8 image build --agent $(REL_DIR)/kosa8-agent default

# The arm64 guest (docs/arm64-guest.md): kernel, agent and image cross-built with
# Debian's aarch64-linux-gnu toolchain; the image's packages run under
# qemu-user-static through binfmt_misc.
ARM64_CC ?= aarch64-linux-gnu-gcc
$(REL_DIR)/arm64/kosa8-agent: $(AGENT_ALL) $(AGENT_HDRS)
	@mkdir -p $(dir $@)
	$(ARM64_CC) $(REL_CFLAGS) -static -o $@ $(AGENT_ALL)

kernel-arm64:
	guest/kernel/build.sh --arch arm64

image-arm64: $(REL_DIR)/arm64/kosa8-agent
	guest/image/build.sh --arch arm64 --agent $(REL_DIR)/arm64/kosa8-agent default
.PHONY: kernel-arm64 image-arm64

deps:
	scripts/deps.sh

# Generated by the built kosa8 from its command table (src/cli/cmd_table.c).
man: $(REL_DIR)/kosa8
	@mkdir -p $(REL_DIR)/man/man1
	$(REL_DIR)/kosa8 help --man >$(REL_DIR)/man/man1/kosa8.1
	for c in $$($(REL_DIR)/kosa8 help --commands); do \
		$(REL_DIR)/kosa8 help --man $$c >$(REL_DIR)/man/man1/kosa8-$$c.1 || exit 1; done

completion: $(REL_DIR)/kosa8
	@mkdir -p $(REL_DIR)/completion
	for s in bash zsh fish; do \
		$(REL_DIR)/kosa8 completion $$s >$(REL_DIR)/completion/kosa8.$$s || exit 1; done

# Releases (packaging/release.sh, docs/release.md): the kernel comes from
# the cache (make kernel builds it when missing).
DIST_DIR ?= $(REL_DIR)/dist
deb: $(REL_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(REL_DIR)/kosa8-agent kernel
	REL_DIR=$(REL_DIR) packaging/release.sh deb $(DIST_DIR)

dist: $(REL_DIR)/kosa8 $(REL_DIR)/kosa8-vmm $(REL_DIR)/kosa8-agent kernel
	REL_DIR=$(REL_DIR) packaging/release.sh dist $(DIST_DIR)

FUZZ_SECONDS ?= 60
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)

bench: $(REL_DIR)/kosa8
	@echo "benchmarks: see bench/README.md"

# The VMM for arm64, cross-built with Debian's aarch64 toolchain against the
# arm64 libraries that scripts/arm64-sysroot unpacks into the cache (they run
# beside it: testbed/run-arm64 ships them).  Only the VMM's folders: the
# rest of kosa8 runs on the host.
ARM64_DIR ?= build-arm64
KOSA8_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kosa8
ARM64_SYSROOT ?= $(KOSA8_CACHE_DIR)/arm64-sysroot
ARM64_LIBDIR := $(ARM64_SYSROOT)/usr/lib/aarch64-linux-gnu
ARM64_SRCS := $(foreach d,src/common src/hw src/vmm src/vmm/arm64 src/virtio src/devices src/disk,\
                $(wildcard $(d)/*.c)) src/cli/vm_run.c
ARM64_CFLAGS := $(CFLAGS_COMMON) -O2 -D_FORTIFY_SOURCE=2 -fstack-protector-strong \
                -isystem $(ARM64_SYSROOT)/usr/include -isystem $(ARM64_SYSROOT)/usr/include/aarch64-linux-gnu
ARM64_LDFLAGS := -L$(ARM64_LIBDIR) -Wl,-rpath-link,$(ARM64_LIBDIR)
.PHONY: arm64 arm64-cli
arm64: $(ARM64_DIR)/kosa8-vmm

# The whole kosa8 for an arm64 host (make arm64-cli -> build-arm64/kosa8,
# with the VMM and the agent beside it): every part of the host's build
# with vmm/arm64 for vmm/x86.  Not in make check: tests/arm64/run builds it
# (its libraries make the sysroot a few times larger, docs/arm64.md).
ARM64_CLI_DIRS := $(filter-out src/vmm/x86,$(LIB_DIRS)) src/vmm/arm64
ARM64_CLI_SRCS := $(filter-out src/cli/main.c src/cli/vmm_main.c,$(foreach d,$(ARM64_CLI_DIRS),$(wildcard $(d)/*.c)))
# What only the CLI includes: the sysroot's second set of libraries.
ARM64_CLI_ONLY := $(filter-out $(ARM64_SRCS),$(ARM64_CLI_SRCS)) $(CLI_SRCS)
arm64-cli: $(ARM64_DIR)/kosa8 $(ARM64_DIR)/kosa8-tools $(ARM64_DIR)/kosa8-vmm $(ARM64_DIR)/kosa8-agent

$(ARM64_LIBDIR)/libfdt.so:
	scripts/arm64-sysroot $(ARM64_SYSROOT)
$(ARM64_LIBDIR)/libcurl.so:
	scripts/arm64-sysroot $(ARM64_SYSROOT)

$(ARM64_DIR)/obj/%.o: %.c | $(ARM64_LIBDIR)/libfdt.so
	@mkdir -p $(dir $@)
	$(ARM64_CC) $(ARM64_CFLAGS) -MMD -MP -c $< -o $@
$(patsubst %.c,$(ARM64_DIR)/obj/%.o,$(ARM64_CLI_ONLY)): | $(ARM64_LIBDIR)/libcurl.so

# The console's page is built into this object (.incbin), as on the host.
$(ARM64_DIR)/obj/src/ui/assets.o: $(wildcard src/ui/assets/*)
$(ARM64_DIR)/obj/src/cli/version.o: $(REL_DIR)/version.stamp
$(ARM64_DIR)/obj/src/cli/version.o: ARM64_CFLAGS += -DKOSA8_VERSION='"$(KOSA8_VERSION)"' \
	-DKOSA8_COMMIT='"$(GIT_COMMIT)"' -DKOSA8_FLAVOUR='"release"'

$(ARM64_DIR)/libkosa8.a: $(patsubst %.c,$(ARM64_DIR)/obj/%.o,$(ARM64_CLI_SRCS))
	@rm -f $@
	aarch64-linux-gnu-ar rcs $@ $^

# As on the host: kosa8 without the heavy libraries, kosa8-tools with them
# (src/cli/tools.c).
$(ARM64_DIR)/kosa8: $(patsubst %.c,$(ARM64_DIR)/obj/%.o,$(CLI_SRCS)) $(ARM64_DIR)/libkosa8.a
	$(ARM64_CC) $(ARM64_LDFLAGS) -Wl,--as-needed -o $@ $^ $(LIBS) -lfdt
$(ARM64_DIR)/kosa8-tools: $(patsubst %.c,$(ARM64_DIR)/obj/%.o,$(TOOLS_SRCS)) $(ARM64_DIR)/libkosa8.a
	$(ARM64_CC) $(ARM64_LDFLAGS) -o $@ $^ $(LIBS) -lfdt

$(ARM64_DIR)/kosa8-agent: $(REL_DIR)/arm64/kosa8-agent
	cp $< $@

$(ARM64_DIR)/libkosa8-vmm.a: $(patsubst %.c,$(ARM64_DIR)/obj/%.o,$(ARM64_SRCS))
	@rm -f $@
	aarch64-linux-gnu-ar rcs $@ $^

$(ARM64_DIR)/kosa8-vmm: $(ARM64_DIR)/obj/src/cli/vmm_main.o $(ARM64_DIR)/libkosa8-vmm.a
	$(ARM64_CC) -Wl,--as-needed $(ARM64_LDFLAGS) -o $@ $^ -lcjson -lseccomp -lfdt -lpthread

clean:
	rm -rf $(REL_DIR) $(SAN_DIR) $(ARM64_DIR) build-fuzz

-include $(shell find $(REL_DIR) $(SAN_DIR) $(ARM64_DIR) -name '*.d' 2>/dev/null)
.SECONDARY:
