# blockspec: plain Makefile.
#   make              library + `blockspec` program, tuned for this machine class (x86-64-v3: AVX2/FMA)
#   make PORTABLE=1   baseline x86-64 build; fast kernels are still chosen at run time where the CPU has them
#   make test         build and run the whole test suite (prints "N passed, N failed")
#   make asan         the same suite under AddressSanitizer + UBSan (+ float-cast-overflow; separate build dir)
#   make fuzz         every libFuzzer harness for FUZZ_SECONDS each (clang)
#   make cuda         add the CUDA backend and the GPU trainer (needs nvcc + cuBLAS; sm_90a + PTX)
CC      ?= cc
BUILD   ?= build
OPT     ?= -O3
ifeq ($(PORTABLE),1)
ARCH    ?= -march=x86-64 -mtune=generic
else
ARCH    ?= -march=x86-64-v3
endif
CFLAGS  ?= $(OPT) $(ARCH) -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -Wno-missing-field-initializers -fno-strict-aliasing -Wno-format-zero-length \
           -Iinclude -Isrc -I. -D_GNU_SOURCE
LDLIBS  += -lcjson -lonig -lutf8proc -lmicrohttpd -lpthread -lm
# For machines where the Debian libraries live elsewhere (e.g. unpacked .debs on the GPU machine).
CFLAGS  += $(EXTRA_CFLAGS)
LDLIBS  := $(EXTRA_LDFLAGS) $(LDLIBS)

# Every .c under src/ is part of the library; CUDA sources are added only by `make cuda`.
LIB_SRC  := $(shell find src -name '*.c' | sort)
# The HTTP server (server/) is an application of the public API, linked into the program beside cli/.
CLI_SRC  := $(wildcard cli/*.c) $(wildcard server/*.c)
TEST_SRC := $(wildcard tests/*.c)
BENCH_SRC:= $(wildcard bench/*.c)

ifeq ($(CUDA),1)
NVCC     ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
CUDA_SRC := $(shell find src/backend/cuda src/train/cuda -name '*.cu' | sort)
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CFLAGS   += -DBS_WITH_CUDA
NVFLAGS  ?= -O3 -std=c++17 -Iinclude -Isrc -I. -Xcompiler -Wall -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC
CUDA_LIB ?= $(firstword $(wildcard /usr/local/cuda/lib64) $(dir $(NVCC))../lib64)
LDLIBS   += -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcublas -lcublasLt -lcudart -lstdc++
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libblockspec.a

all: $(BUILD)/blockspec
$(LIB): $(LIB_OBJ) ; @rm -f $@ && ar rcs $@ $^
$(BUILD)/blockspec: $(CLI_OBJ) $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/run_tests: $(TEST_OBJ) $(filter-out $(BUILD)/cli/main.o,$(CLI_OBJ)) $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# Decode-shaped timings of a backend (bench/backend_bench.c): built by `make cuda` and `make bench-tools`.
$(BUILD)/backend_bench: $(BUILD)/bench/backend_bench.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# One CPU matmul with its weights streamed vs cached (bench/cpu_mm_stream.c): `make bench-tools`.
$(BUILD)/cpu_mm_stream: $(BUILD)/bench/cpu_mm_stream.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# Memory read rates in the orders the CPU kernels use (bench/cpu_read_orders.c): `make bench-tools`.
$(BUILD)/cpu_read_orders: $(BUILD)/bench/cpu_read_orders.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# One matmul kernel call on cached operands, one thread (bench/cpu_mm_kernel.c): `make bench-tools`.
$(BUILD)/cpu_mm_kernel: $(BUILD)/bench/cpu_mm_kernel.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# One layer's attention, K/V cached vs streamed (bench/cpu_attention_stream.c): `make bench-tools`.
$(BUILD)/cpu_attention_stream: $(BUILD)/bench/cpu_attention_stream.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# One CPU training step of a random Qwen3 target, forward + backward (bench/train_step.c): `make bench-tools`.
$(BUILD)/train_step: $(BUILD)/bench/train_step.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# BF16 vs affine 4/8-bit matmul rows (bench/cpu_mm_quant.c): `make bench-tools`.
$(BUILD)/cpu_mm_quant: $(BUILD)/bench/cpu_mm_quant.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
bench-tools: $(BUILD)/cpu_mm_quant $(BUILD)/train_step $(BUILD)/backend_bench $(BUILD)/cpu_mm_stream $(BUILD)/cpu_read_orders $(BUILD)/cpu_mm_kernel $(BUILD)/cpu_attention_stream
# Qwen3 target pre-training on the GPU, standalone (bench/train_target_cuda.c): built by `make cuda`.
$(BUILD)/train_target_cuda: $(BUILD)/bench/train_target_cuda.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# Drafter training throughput on the GPU against a random ~30M target (bench/train_drafter_cuda.c): built by `make cuda`.
$(BUILD)/train_drafter_cuda: $(BUILD)/bench/train_drafter_cuda.o $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
# What a dependent link between GPU kernels costs, handed over by PDL, a counter or flags (bench/cuda_link_latency.cu).
build-cuda/cuda_link_latency: bench/cuda_link_latency.cu ; @mkdir -p build-cuda && $(NVCC) $(NVFLAGS) -o $@ $<
# AdamW's update loop vectorises only when sqrtf need not set errno (its argument is never negative).
$(BUILD)/src/train/optim.o: CFLAGS += -fno-math-errno
# RoPE tables round every step as PyTorch does (no fused multiply-adds: src/model/rope.c)
$(BUILD)/src/model/rope.o: CFLAGS += -ffp-contract=off
$(BUILD)/%.o: %.c ; @mkdir -p $(dir $@) && $(CC) $(CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/%.o: %.cu ; @mkdir -p $(dir $@) && $(NVCC) $(NVFLAGS) -MMD -MP -c -o $@ $<

# The tests find the reference vectors in ../shared/fixtures (override with BS_FIXTURES=dir).
test: $(BUILD)/run_tests $(BUILD)/blockspec
	BS_BIN=$(BUILD)/blockspec ./$(BUILD)/run_tests $(T)

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all" test

cuda: ; $(MAKE) CUDA=1 BUILD=build-cuda all build-cuda/run_tests build-cuda/backend_bench build-cuda/cuda_link_latency build-cuda/train_target_cuda build-cuda/train_drafter_cuda

# Everything a fresh Debian 12 machine needs (run as root): compilers, the Debian libraries blockspec
# links, and the npm packages the tokenizer tests compare against.
deps:
	@if ! dpkg -s libcjson-dev libonig-dev libutf8proc-dev libmicrohttpd-dev curl build-essential clang >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq build-essential clang libcjson-dev libonig-dev libutf8proc-dev libmicrohttpd-dev curl; fi
	@printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' > /tmp/bs_fuzz_probe.c && \
	  clang -fsanitize=fuzzer,address,undefined /tmp/bs_fuzz_probe.c -o /tmp/bs_fuzz_probe && rm -f /tmp/bs_fuzz_probe /tmp/bs_fuzz_probe.c || \
	  { echo "make deps: clang cannot link -fsanitize=fuzzer (libFuzzer runtime missing)"; exit 1; }
	@# gnuplot draws the training loss plot (optional at run time: without it the plot is skipped with a note)
	@if ! command -v gnuplot >/dev/null; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox || echo "gnuplot-nox not installed: training runs will skip the loss plot"; fi
	@if [ -f tests/node/package.json ] && command -v npm >/dev/null; then npm ci --prefix tests/node --no-audit --no-fund --loglevel=error; fi

# The baseline x86-64 build (no AVX2 assumed at compile time) with the scalar kernels forced: the
# fallback a CPU without AVX2 gets, held to the fixtures and to greedy losslessness.
portable-check:
	$(MAKE) PORTABLE=1 BUILD=build-portable build-portable/run_tests build-portable/blockspec
	BS_CPU_KERNELS=scalar BS_BIN=build-portable/blockspec ./build-portable/run_tests fixture
	BS_CPU_KERNELS=scalar BS_BIN=build-portable/blockspec ./build-portable/run_tests spec_greedy

# The whole check: the suite, the suite under sanitizers, the portable build, and (where nvcc exists) a
# CUDA compile. The full suite's "N passed, N failed" line is printed last.
test-all:
	$(MAKE) portable-check
	$(MAKE) asan
	$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_CI_SECONDS)
	@if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then $(MAKE) cuda-compile; else echo "CUDA compile skipped: no nvcc on this machine"; fi
	$(MAKE) test

# libFuzzer harnesses (clang; ASan + UBSan with float-cast-overflow), one per parser or text path:
# tests/fuzz/fuzz_NAME.c, seeded by tests/fuzz/seed.sh NAME. Adding one = adding NAME to this list.
# `make fuzz` runs each for FUZZ_SECONDS (docs/reliability.md); test-all runs each for FUZZ_CI_SECONDS.
FUZZ_HARNESSES := safetensors checkpoint_dir draft_vocab json config tokenizer_load tokenize chat cli_ids bpe_train calibration corpus train_state request
FUZZ_SECONDS ?= 30
FUZZ_CI_SECONDS ?= 12
FUZZ_SAN := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all
# The BPE merge loop's comparisons (heap keys, merge ranks, hash probes) are between vocabulary values, not
# input bytes: trace-cmp there gives libFuzzer nothing to mutate towards but was ~35% of the tokenize harness's
# time. The same holds for the trainer (pair counts, symbol ids, heap and hash-table probes: 13% of bpe_train's
# time) and the string hash map (hashes, lengths, slots: 8%); where they compare input bytes they call memcmp or
# memmem, whose libFuzzer hooks stay. Edge coverage and the sanitizers stay (docs/reliability.md, "what was slow").
build-fuzz/src/io/tokenizer_bpe.o build-fuzz/src/train/bpe_train.o build-fuzz/src/io/tok_map.o: CFLAGS += -fno-sanitize-coverage=trace-cmp
fuzz-build:
	$(MAKE) BUILD=build-fuzz CC=clang OPT="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link $(FUZZ_SAN)" build-fuzz/libblockspec.a build-fuzz/blockspec
	@for h in $(FUZZ_HARNESSES); do \
	  clang -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer $(FUZZ_SAN) -Iinclude -Isrc -I. -D_GNU_SOURCE \
	        tests/fuzz/fuzz_$$h.c cli/args.c server/request.c server/response.c build-fuzz/libblockspec.a $(LDLIBS) -o build-fuzz/fuzz_$$h || exit 1; done
fuzz: fuzz-build
	@for h in $(FUZZ_HARNESSES); do BS_BIN=build-fuzz/blockspec tests/fuzz/run.sh $$h $(FUZZ_SECONDS) || exit 1; done

# Mutation check, on demand (not part of `make test`): each mutation in tests/mutants/mutants.txt applied
# alone to a scratch copy, rebuilt, and its tests run; fails if any mutant survives (docs/reliability.md).
mutants: ; tests/mutants/run.sh

# CI has nvcc but no GPU: compile everything CUDA (the GPU tests then SKIP with the reason printed).
cuda-compile: cuda

clean: ; rm -rf build build-asan build-cuda build-portable build-fuzz
.PHONY: all test asan cuda clean deps test-all cuda-compile fuzz fuzz-build portable-check bench-tools mutants
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
