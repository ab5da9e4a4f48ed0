# ckptkit: two commands on a fresh Debian 12 machine.
#   make demo   installs the Debian packages it needs, builds, runs synth -> validate -> convert -> validate --reference -> inspect -> ckpt-gpu verify
#   make test   the GoogleTest suite twice: a normal build and an AddressSanitizer + UBSan build
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
DEMO_DIR   ?= demo-out
DEB_PACKAGES = cmake g++ make pkg-config libcli11-dev libsimdjson-dev libxxhash-dev libssl-dev \
               libtbb-dev libgtest-dev python3-jsonschema hipcc
SUDO := $(shell [ "$$(id -u)" -eq 0 ] || echo sudo)

SLURM_PACKAGES = slurmctld slurmd slurm-client munge

.PHONY: all deps deps-slurm build asan-build demo test test-normal asan bench golden-update clean

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

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS)

asan-build: deps
	cmake -S . -B $(ASAN_BUILD) -DCKPT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(ASAN_BUILD) -j$(JOBS)

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
	@echo "reports: $(DEMO_DIR)/report.json $(DEMO_DIR)/convert.json"

test-normal: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# max_allocation_size_mb=96: any single allocation above 96 MiB (the 100,000,000-byte
# safetensors header limit) aborts the sanitizer run, so no crafted length can size one.
asan: asan-build
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:max_allocation_size_mb=96 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure -j$(JOBS)

test: test-normal asan

bench: build
	bash bench/run.sh $(BUILD)/ckpt

# Regenerates golden/*.json (expected hash manifests of the fixtures' conversions) and
# prints the diff to review before committing.
golden-update: build
	bash golden/update.sh $(BUILD)/ckpt

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(DEMO_DIR)
