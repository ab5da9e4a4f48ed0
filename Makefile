# ckptkit: two commands on a fresh Debian 12 machine.
#   make demo   installs the Debian packages it needs, builds, runs synth -> validate -> convert -> validate --reference -> inspect -> ckpt-gpu verify
#   make test   the GoogleTest suite twice: a normal build (GCC, the GPU compilers too; llama.cpp
#               from npm first, outside the clone, for real_client_llama) and one
#               clang 14 build with AddressSanitizer + UBSan that also holds the libFuzzer
#               targets (asan), then every libFuzzer target for a fixed number of runs (fuzz-smoke)
#   make ci-extra   (CI, after make test) the Release build with its whole test suite (the
#               packaged configuration is the tested one), the .deb built from that build,
#               installed and run, and a find_package(ckptkit) consumer (see ci-extra below)
BUILD      ?= build
# The sanitizer build: clang 14, ASan + UBSan, the tests and the libFuzzer targets
# (CKPT_FUZZ implies CKPT_SANITIZE); make asan and make fuzz-smoke both use it.
ASAN_BUILD ?= build-asan
ASAN_CXX   ?= clang++-14
JOBS       ?= $(shell nproc)
DEMO_DIR   ?= demo-out
DEB_PACKAGES = cmake g++ make pkg-config libcli11-dev libsimdjson-dev libxxhash-dev libssl-dev \
               libtbb-dev libgtest-dev python3-jsonschema python3-cryptography hipcc
# clang + libFuzzer for the fuzz targets (tests/fuzz), installed by fuzz-smoke / fuzz only.
DEB_PACKAGES_FUZZ = clang-14 libclang-rt-14-dev
RELEASE_BUILD ?= build-release
CLANG_BUILD   ?= build-clang
CLANG_CXX     ?= clang++-14
# Warnings are errors here and in CI (a developer setting; the package build does not force it).
WERROR        ?= -DCKPT_WERROR=ON
FUZZ_BUILD   ?= $(ASAN_BUILD)
FUZZ_TARGETS = safetensors_header index_json config_dsv4 config_tensors gguf_header ggml_dequant expert_pack_manifest hash_manifest hub_list json_walk oms_bundle
# The documented limits: 2 GiB RSS, no single allocation over 96 MiB (what the ASan suite
# allows; the 100,000,000-byte safetensors header is the largest legitimate one), 1 s per input.
FUZZ_LIMITS  = -rss_limit_mb=2048 -malloc_limit_mb=96 -timeout=1
FUZZ_RUNS    ?= 30000
TARGET       ?= safetensors_header
SECONDS      ?= 600
FUZZ_FORK    ?= 0
SHELL := /bin/bash
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

SLURM_PACKAGES = slurmctld slurmd slurm-client munge

.PHONY: all deps deps-slurm deps-fuzz build asan-build fuzz-build fuzz-smoke fuzz demo test test-normal asan bench golden-update clean llama-client \
        release-build test-release clang-build deb deb-check ci-extra install-check

all: build

# Idempotent: installs only what is missing.
deps:
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# The Slurm end-to-end test (slurm_e2e) starts a one-node cluster from these; idempotent.
# The packages' own services are not needed (the test starts private daemons).
deps-slurm:
	@missing=""; for p in $(SLURM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

deps-fuzz: deps
	@missing=""; for p in $(DEB_PACKAGES_FUZZ); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(WERROR)
	cmake --build $(BUILD) -j$(JOBS)

# One configuration for the sanitizer suite, the clang suite and the fuzz targets.
ASAN_CONFIGURE = cmake -S . -B $(FUZZ_BUILD_DIR) -DCMAKE_CXX_COMPILER=$(ASAN_CXX) -DCKPT_SANITIZE=ON -DCKPT_FUZZ=ON \
                   -DCMAKE_BUILD_TYPE=RelWithDebInfo $(WERROR)
asan-build: FUZZ_BUILD_DIR = $(ASAN_BUILD)
asan-build: deps-fuzz
	$(ASAN_CONFIGURE)
	cmake --build $(ASAN_BUILD) -j$(JOBS)

DEMO_FP8 = tests/fixtures/families/qwen3moe-fp8/in
demo: build
	rm -rf $(DEMO_DIR)
	./$(BUILD)/ckpt synth deepseek-v4-flash-0731 $(DEMO_DIR)/dsv4-tiny --tiny
	./$(BUILD)/ckpt validate --deep --sha256 --json $(DEMO_DIR)/report.json $(DEMO_DIR)/dsv4-tiny
	./$(BUILD)/ckpt convert $(DEMO_DIR)/dsv4-tiny $(DEMO_DIR)/dsv4-tiny.bf16 --json $(DEMO_DIR)/convert.json
	./$(BUILD)/ckpt validate --deep --reference $(DEMO_DIR)/dsv4-tiny $(DEMO_DIR)/dsv4-tiny.bf16
	./$(BUILD)/ckpt inspect $(DEMO_DIR)/dsv4-tiny.bf16
	@# The GPU runner: on the device when one is present (exit 4 means none), else the kernels' arithmetic on the host.
	./$(BUILD)/ckpt-gpu verify $(DEMO_DIR)/dsv4-tiny.bf16 --reference $(DEMO_DIR)/dsv4-tiny; rc=$$?; \
	  if [ $$rc -eq 4 ]; then ./$(BUILD)/ckpt-gpu verify --backend emulate $(DEMO_DIR)/dsv4-tiny.bf16 --reference $(DEMO_DIR)/dsv4-tiny; \
	  else exit $$rc; fi
	@# Will it load at TP=2? A Qwen3-MoE block-FP8 checkpoint: no (exit 1, and the fix);
	@# ckpt relayout makes one that does, exactly (scales re-blocked, FP8 bytes unchanged).
	./$(BUILD)/ckpt preflight --tp 2 $(DEMO_FP8); test $$? -eq 1
	./$(BUILD)/ckpt relayout --tp 2 $(DEMO_FP8) $(DEMO_DIR)/qwen3moe.tp2
	./$(BUILD)/ckpt preflight -q --tp 2 $(DEMO_DIR)/qwen3moe.tp2
	./$(BUILD)/ckpt validate --deep --reference $(DEMO_FP8) $(DEMO_DIR)/qwen3moe.tp2
	@echo "reports: $(DEMO_DIR)/report.json $(DEMO_DIR)/convert.json"

test-normal: build llama-client
	cd $(BUILD) && CKPT_LLAMA_DIR=$(LLAMA_DIR) ctest --output-on-failure -j$(JOBS)

# The GGUF real client of the real_client_llama test: llama.cpp from npm (node-llama-cpp,
# pinned by tests/real_client/llama/package-lock.json) into $(LLAMA_DIR), outside the clone;
# kept when already installed from the same lock file. Where npm cannot reach its registry
# it says so and the test skips, unless CKPT_REQUIRE_LLAMA=1 (CI), which fails here.
LLAMA_DIR ?= $(HOME)/.cache/ckptkit/llama-3.22.1
llama-client:
	@CKPT_LLAMA_DIR=$(LLAMA_DIR) bash tests/real_client/llama/install.sh; rc=$$?; \
	  if [ $$rc -eq 77 ]; then echo "llama-client: not installed; real_client_llama will be skipped"; \
	  elif [ $$rc -ne 0 ]; then exit $$rc; fi

# max_allocation_size_mb=96: any single allocation above 96 MiB (the 100,000,000-byte
# safetensors header limit) aborts the sanitizer run, so no crafted length can size one.
asan: asan-build
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:max_allocation_size_mb=96 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS)

# libFuzzer targets: the library built with clang, -fsanitize=fuzzer-no-link,address,undefined,
# in the sanitizer build's directory (only the fuzz targets are built here; after make asan
# they are already there).
fuzz-build: FUZZ_BUILD_DIR = $(FUZZ_BUILD)
fuzz-build: deps-fuzz
	$(ASAN_CONFIGURE)
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))

# Every target for FUZZ_RUNS inputs (FUZZ_TARGETS must name every tests/fuzz/fuzz_*.cpp, and a
# missing binary fails), starting from a temporary copy of its seed corpus
# (the tree is never written); any crash, leak, timeout or over-limit allocation fails.
fuzz-smoke: fuzz-build
	@listed="$(sort $(FUZZ_TARGETS))"; found="$$(ls tests/fuzz/fuzz_*.cpp | sed 's|.*/fuzz_||; s|\.cpp$$||' | LC_ALL=C sort | xargs)"; \
	  if [ "$$listed" != "$$found" ]; then \
	    echo "fuzz-smoke: FUZZ_TARGETS ($$listed) differs from tests/fuzz/fuzz_*.cpp ($$found)"; exit 1; fi
	@set -e; for t in $(FUZZ_TARGETS); do \
	  work=$$(mktemp -d); cp -r tests/fuzz/corpus/$$t/. $$work/; \
	  echo "fuzz-smoke: $$t ($(FUZZ_RUNS) runs)"; \
	  if ! ./$(FUZZ_BUILD)/fuzz_$$t $(FUZZ_LIMITS) -runs=$(FUZZ_RUNS) -seed=1 -print_final_stats=1 \
	       -dict=tests/fuzz/dict/$$t.dict -artifact_prefix=$(FUZZ_BUILD)/smoke-$$t- $$work \
	       > $(FUZZ_BUILD)/smoke-$$t.log 2>&1; then \
	    tail -40 $(FUZZ_BUILD)/smoke-$$t.log; rm -rf $$work; echo "fuzz-smoke: $$t FAILED"; exit 1; fi; \
	  grep -E '^#[0-9]+[[:space:]]+DONE' $(FUZZ_BUILD)/smoke-$$t.log || true; rm -rf $$work; \
	done; echo "fuzz-smoke: all $(words $(FUZZ_TARGETS)) targets passed"

# One target for long: make fuzz TARGET=gguf_header SECONDS=3600 [FUZZ_FORK=2]. The corpus
# grows in $(FUZZ_BUILD)/corpus/TARGET (seeded from tests/fuzz/corpus/TARGET), crashes land in
# $(FUZZ_BUILD)/artifacts/TARGET/, the log in $(FUZZ_BUILD)/fuzz-TARGET.log.
fuzz: fuzz-build
	mkdir -p $(FUZZ_BUILD)/corpus/$(TARGET) $(FUZZ_BUILD)/artifacts/$(TARGET)
	cp -rn tests/fuzz/corpus/$(TARGET)/. $(FUZZ_BUILD)/corpus/$(TARGET)/
	./$(FUZZ_BUILD)/fuzz_$(TARGET) $(FUZZ_LIMITS) -max_total_time=$(SECONDS) -print_final_stats=1 \
	  -fork=$(FUZZ_FORK) -dict=tests/fuzz/dict/$(TARGET).dict -artifact_prefix=$(FUZZ_BUILD)/artifacts/$(TARGET)/ \
	  $(FUZZ_BUILD)/corpus/$(TARGET) 2>&1 | tee $(FUZZ_BUILD)/fuzz-$(TARGET).log; exit $${PIPESTATUS[0]}

test: test-normal asan fuzz-smoke

bench: build
	bash bench/run.sh $(BUILD)/ckpt

# Regenerates golden/*.json (expected hash manifests of the fixtures' conversions) and
# prints the diff to review before committing.
golden-update: build
	bash golden/update.sh $(BUILD)/ckpt

# --- CI extras (.ci/run calls `make ci-extra` after `make test`; each step can run alone) ---
# What a packager builds: Release (-O3), the GPU backend as found; here with the tests, which
# change nothing in what is installed (CKPT_BUILD_TESTS only adds test targets), so the .deb
# comes from the build the suite ran on.
release-build: deps
	cmake -S . -B $(RELEASE_BUILD) -DCMAKE_BUILD_TYPE=Release -DCKPT_BUILD_TESTS=ON $(WERROR)
	cmake --build $(RELEASE_BUILD) -j$(JOBS)

# The whole suite on the Release build (the Slurm recipe test does not depend on the
# compiler's optimisation and already ran in make test).
RELEASE_CTEST ?= -E '^slurm_e2e$$'
test-release: release-build
	cd $(RELEASE_BUILD) && ctest -j$(JOBS) --output-on-failure $(RELEASE_CTEST)

# Not in CI: the sanitizer build (make asan) is the clang 14 build there; it compiles
# everything (tests included) warning-free and runs the whole suite, which catches
# compiler-dependent results (clang commuted an AVX2 add that GCC kept in order:
# GgmlDequantIsa). This is the same without sanitizers, for a developer who wants clang's
# optimized code as a user gets it. No GPU compiler (the normal build covers the kernels);
# the Slurm recipe test does not depend on the compiler.
CLANG_CTEST ?= -E '^(slurm_e2e|real_client_transformers)$$'
clang-build: deps-fuzz
	cmake -S . -B $(CLANG_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=$(CLANG_CXX) \
	  -DCKPT_GPU=OFF -DCKPT_GPU_COMPILE_ALL=OFF $(WERROR)
	cmake --build $(CLANG_BUILD) -j$(JOBS)
	cd $(CLANG_BUILD) && ctest -j$(JOBS) --output-on-failure $(CLANG_CTEST)

deb: release-build
	cd $(RELEASE_BUILD) && rm -f ckptkit_*.deb && cpack -G DEB

# The .deb unpacked into a fresh root and run there (and, as root on a throwaway CI machine,
# installed with dpkg -i); cmake --install into a second prefix and a find_package(ckptkit)
# consumer built against it (tools/check_install.sh says what it checks).
deb-check: deb
	bash tools/check_install.sh $(RELEASE_BUILD)

install-check: deb-check

ci-extra: test-release deb-check

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(RELEASE_BUILD) $(CLANG_BUILD) $(DEMO_DIR) build-fuzz  # build-fuzz: the fuzz build before it moved into build-asan
