# blockspec: plain Makefile.
#   make              library + `blockspec` program, tuned for this machine class (x86-64-v3: AVX2/FMA)
#   make PORTABLE=1   baseline x86-64 build; fast kernels are still chosen at run time where the CPU has them
#   make test         build and run the whole test suite (prints "N passed, N failed")
#   make asan         the same suite under AddressSanitizer + UBSan (separate build dir)
#   make cuda         add the CUDA backend (needs nvcc; sm_90a + PTX)
CC      ?= cc
BUILD   ?= build
OPT     ?= -O3
ifeq ($(PORTABLE),1)
ARCH    ?= -march=x86-64 -mtune=generic
else
ARCH    ?= -march=x86-64-v3
endif
CFLAGS  ?= $(OPT) $(ARCH) -g
CFLAGS  += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -fno-strict-aliasing -Wno-format-zero-length \
           -Iinclude -Isrc -I. -D_GNU_SOURCE
LDLIBS  += -lcjson -lonig -lutf8proc -lpthread -lm
# For machines where the Debian libraries live elsewhere (e.g. unpacked .debs on the GPU machine).
CFLAGS  += $(EXTRA_CFLAGS)
LDLIBS  := $(EXTRA_LDFLAGS) $(LDLIBS)

# Every .c under src/ is part of the library; CUDA sources are added only by `make cuda`.
LIB_SRC  := $(shell find src -name '*.c' | sort)
CLI_SRC  := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/*.c)
BENCH_SRC:= $(wildcard bench/*.c)

ifeq ($(CUDA),1)
NVCC     ?= nvcc
CUDA_SRC := $(shell find src/backend/cuda -name '*.cu' | sort)
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CFLAGS   += -DBS_WITH_CUDA
NVFLAGS  ?= -O3 -std=c++17 -Iinclude -Isrc -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 -Xcompiler -fPIC
LDLIBS   += -L/usr/local/cuda/lib64 -lcudart -lcublasLt -lcublas -lstdc++
endif

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libblockspec.a

all: $(BUILD)/blockspec
$(LIB): $(LIB_OBJ) ; @rm -f $@ && ar rcs $@ $^
$(BUILD)/blockspec: $(CLI_OBJ) $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/run_tests: $(TEST_OBJ) $(filter-out $(BUILD)/cli/main.o,$(CLI_OBJ)) $(LIB) ; $(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/%.o: %.c ; @mkdir -p $(dir $@) && $(CC) $(CFLAGS) -MMD -MP -c -o $@ $<
$(BUILD)/%.o: %.cu ; @mkdir -p $(dir $@) && $(NVCC) $(NVFLAGS) -c -o $@ $<

# The tests find the reference vectors in ../shared/fixtures (override with BS_FIXTURES=dir).
test: $(BUILD)/run_tests $(BUILD)/blockspec
	BS_BIN=$(BUILD)/blockspec ./$(BUILD)/run_tests $(T)

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" test

cuda: ; $(MAKE) CUDA=1 BUILD=build-cuda all $(BUILD)-cuda/run_tests

clean: ; rm -rf build build-asan build-cuda build-portable
.PHONY: all test asan cuda clean
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
