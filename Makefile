# pfl — build with `make`, test with `make test`, sanitizers with `make asan-test`.
#
# Everything lands in $(BUILD) (default build/); BUILD=build-asan with
# SANITIZE=1 gives an AddressSanitizer + UndefinedBehaviorSanitizer tree.

CC      ?= cc
BUILD   ?= build
SANITIZE ?= 0

# BLAS: OpenBLAS, found through its own pkg-config module (Debian's
# libopenblas-dev), whose include directory has OpenBLAS's cblas.h. Any other
# CBLAS (Debian's reference libblas-dev installs a cblas.h and libblas too)
# is several times slower, so the build refuses to fall back to one: ask for
# it with `make BLAS=generic` (links `pkg-config --libs blas`, or -lblas).
BLAS ?= openblas
ifeq ($(BLAS),openblas)
BLAS_PC     := openblas
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null)
ifeq ($(BLAS_LIBS),)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(error OpenBLAS not found: pkg-config has no 'openblas' module. Install it (apt-get install libopenblas-dev, or run scripts/setup.sh), or build with another CBLAS on purpose: make BLAS=generic (several times slower))
endif
endif
else ifeq ($(BLAS),generic)
BLAS_PC     := $(shell pkg-config --exists blas 2>/dev/null && echo blas)
BLAS_CFLAGS := -DPFL_BLAS_GENERIC $(shell pkg-config --cflags blas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs blas 2>/dev/null || echo -lblas)
$(warning BLAS=generic: building against a CBLAS other than OpenBLAS ($(BLAS_LIBS)); training will be several times slower)
else
$(error BLAS=$(BLAS): expected openblas (the default) or generic)
endif

# LAPACK (FedKD's truncated SVD, sgesdd): Debian's OpenBLAS carries it in
# libopenblas, so nothing more is linked; an OpenBLAS built without it, or a
# generic CBLAS, takes the reference LAPACK (liblapack-dev's lapack.pc).
ifeq ($(BLAS),openblas)
OPENBLAS_LIBDIR := $(shell pkg-config --variable=libdir openblas 2>/dev/null)
LAPACK_LIBS := $(shell nm -D $(OPENBLAS_LIBDIR)/libopenblas.so 2>/dev/null | grep -q ' T sgesdd_' || \
                 pkg-config --libs lapack 2>/dev/null || echo -llapack)
else
LAPACK_LIBS := $(shell pkg-config --libs lapack 2>/dev/null || echo -llapack)
endif

# Dataset libraries: libmatio reads SVHN's .mat files, libjpeg decodes
# Tiny-ImageNet. Each is optional: without it pfl still builds, says so here,
# and loading that dataset fails with "pfl was built without ...".
MATIO_LIBS := $(shell pkg-config --libs matio 2>/dev/null)
JPEG_LIBS  := $(shell pkg-config --libs libjpeg 2>/dev/null || (test -f /usr/include/jpeglib.h && echo -ljpeg))
JPEG_PC    := $(shell pkg-config --exists libjpeg 2>/dev/null && echo libjpeg)
ifeq ($(MATIO_LIBS),)
DATA_FLAGS += -DPFL_NO_MATIO
$(warning libmatio not found (apt-get install libmatio-dev): building without the svhn dataset)
else
DATA_FLAGS += $(shell pkg-config --cflags matio 2>/dev/null)
endif
ifeq ($(JPEG_LIBS),)
DATA_FLAGS += -DPFL_NO_JPEG
$(warning libjpeg not found (apt-get install libjpeg-dev): building without the tinyimagenet dataset)
endif

# libhdf5 (Debian's libhdf5-dev, the serial build, through its own
# hdf5-serial.pc) writes PFLlib's results files: pfl export --results-h5,
# which PFLlib's result scripts read. Optional: without it pfl builds, says
# so here, and pfl export --results-h5 fails with "pfl was built without
# libhdf5".
HDF5_PC := $(firstword $(foreach p,hdf5-serial hdf5,$(shell pkg-config --exists $(p) 2>/dev/null && echo $(p))))
ifeq ($(HDF5_PC),)
DATA_FLAGS += -DPFL_NO_HDF5
$(warning libhdf5 not found (apt-get install libhdf5-dev): building without pfl export --results-h5)
else
DATA_FLAGS += $(patsubst -I%,-isystem %,$(shell pkg-config --cflags $(HDF5_PC)))
HDF5_LIBS  := $(shell pkg-config --libs $(HDF5_PC))
endif

# Reading what runs wrote and what presets say: libjansson (JSON: a
# multi-seed run's summary, resuming's metrics.jsonl, pfl table and pfl
# plot) and libyaml (configs/*.yaml, pfl run --config), both through their
# own pkg-config modules (libjansson-dev's jansson.pc, libyaml-dev's
# yaml-0.1.pc). Required: a parser is not worth writing by hand.
JANSSON_LIBS := $(shell pkg-config --libs jansson 2>/dev/null)
YAML_LIBS    := $(shell pkg-config --libs yaml-0.1 2>/dev/null)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
ifeq ($(JANSSON_LIBS),)
$(error libjansson not found: pkg-config has no 'jansson' module. Install it: apt-get install libjansson-dev (or run scripts/setup.sh))
endif
ifeq ($(YAML_LIBS),)
$(error libyaml not found: pkg-config has no 'yaml-0.1' module. Install it: apt-get install libyaml-dev (or run scripts/setup.sh))
endif
endif
PARSE_CFLAGS := $(shell pkg-config --cflags jansson yaml-0.1 2>/dev/null)

# SHA-256 (fingerprints of models, of the data a checkpoint binds, of
# metrics rows): OpenSSL's libcrypto through its own pkg-config module
# (libssl-dev's libcrypto.pc), with the CPU's SHA instructions where there
# are some. Required.
CRYPTO_LIBS := $(shell pkg-config --libs libcrypto 2>/dev/null)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
ifeq ($(CRYPTO_LIBS),)
$(error libcrypto not found: pkg-config has no 'libcrypto' module. Install it: apt-get install libssl-dev (or run scripts/setup.sh))
endif
endif
PARSE_CFLAGS += $(shell pkg-config --cflags libcrypto 2>/dev/null)

# MPI (Open MPI from Debian: libopenmpi-dev, openmpi-bin) lets `mpirun -np P
# pfl run ...` spread the clients over processes and machines. Optional:
# without it (or with MPI=0) pfl builds, says so here, runs in one process,
# and refuses to run as several copies under mpirun. Only src/fl/transport.c
# includes mpi.h.
MPI ?= 1
ifneq ($(MPI),0)
MPI_PC     := $(firstword $(foreach p,ompi-c mpi-c,$(shell pkg-config --exists $(p) 2>/dev/null && echo $(p))))
endif
ifeq ($(MPI_PC),)
$(if $(filter 0,$(MPI)),,$(warning Open MPI not found (apt-get install libopenmpi-dev openmpi-bin): building without mpirun support))
else
DATA_FLAGS += -DPFL_MPI
MPI_CFLAGS := $(patsubst -I%,-isystem %,$(shell pkg-config --cflags $(MPI_PC)))
MPI_LIBS   := $(shell pkg-config --libs $(MPI_PC))
endif

# CUDA (docs/architecture.md, "The CUDA backend"): with nvcc on PATH or in
# /usr/local/cuda/bin (or NVCC=path) the CUDA backend, src/backend/cuda.cu, is built into the same
# pfl and libpfl, and `pfl run --device cuda` trains on the GPU; CUDA=0
# builds without it, as does a machine without nvcc. The CUDA runtime is
# linked statically and cuBLAS opened at run time, so the binary still
# starts on a machine without a GPU or CUDA's libraries (where --device cuda
# says why it cannot run). Convolutions are im2col + cuBLAS GEMMs: cuDNN is
# not used. CUDA_ARCH picks the GPUs' machine code (Hopper, sm_90, by
# default, and PTX the driver compiles for later ones).
NVCC     ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc),nvcc)
CUDA     ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifeq ($(SANITIZE),fuzz)
CUDA := 0
endif
ifeq ($(CUDA),1)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v $(NVCC))))
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart_static.a $(CUDA_HOME)/lib/libcudart_static.a \
                 $(CUDA_HOME)/targets/x86_64-linux/lib/libcudart_static.a))
ifeq ($(CUDA_LIBDIR),)
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(error CUDA: nvcc found ($(NVCC)) but not libcudart_static.a under $(CUDA_HOME): set CUDA_HOME, or build without the CUDA backend: make CUDA=0)
endif
endif
DATA_FLAGS += -DPFL_CUDA
CUDA_LIBS  := -L$(dir $(CUDA_LIBDIR)) -lcudart_static -ldl -lrt -lpthread
CUDA_OBJ   := $(BUILD)/src/backend/cuda.o
$(info CUDA backend: built ($(NVCC), $(CUDA_HOME)); convolutions by im2col + cuBLAS (cuDNN is not used))
else
$(info CUDA backend: not built ($(if $(filter 0,$(CUDA)),CUDA=0,no nvcc on PATH)): pfl runs on the CPU only)
endif
# nvcc's own warnings, and the host compiler's, are errors as in C
NVFLAGS := -std=c++20 -O3 -g $(CUDA_ARCH) -Werror all-warnings \
           -Xcompiler -fPIC,-Wall,-Wextra,-Werror,-Wshadow,-fno-semantic-interposition,-fno-exceptions,-fno-threadsafe-statics -Isrc

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
CFLAGS  := -std=c11 -D_POSIX_C_SOURCE=200809L -O3 -g -fopenmp $(WARN) -Isrc $(BLAS_CFLAGS) $(DATA_FLAGS) $(PARSE_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := $(BLAS_LIBS) $(LAPACK_LIBS) $(MATIO_LIBS) $(JPEG_LIBS) $(HDF5_LIBS) $(MPI_LIBS) $(JANSSON_LIBS) $(YAML_LIBS) $(CRYPTO_LIBS) $(CUDA_LIBS) -lz -lm -fopenmp
ifeq ($(SANITIZE),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDLIBS  += -fsanitize=address,undefined
endif
# SANITIZE=fuzz (with CC=clang; scripts/fuzz.sh sets both): the library
# instrumented for libFuzzer, with ASan and UBSan, for the fuzz_* targets.
ifeq ($(SANITIZE),fuzz)
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
LDLIBS  += -fsanitize=address,undefined
endif

LIB_SRC  := $(filter-out src/cli/%,$(wildcard src/*/*.c))
CLI_SRC  := $(wildcard src/cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CUDA_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# the CUDA backend against the CPU (tests/gpu/): built with the backend, skipped without a GPU
ifeq ($(CUDA),1)
TESTS    += $(BUILD)/tests/test_cuda_ops
endif
# Fuzzing (fuzz/, README "Robustness"): every harness fuzz/<name>.c is linked
# with fuzz/replay.c into $(BUILD)/fuzz/replay_<name>, part of `all`, with
# which the test suite replays the committed inputs (tests/e2e/fuzz_replay.sh);
# and, by scripts/fuzz.sh (`make fuzz`), with libFuzzer into
# build-fuzz/fuzz/fuzz_<name>.
FUZZ_SUPPORT := fuzz/fuzz_util.c fuzz/replay.c fuzz/make_seeds.c
FUZZ_NAMES   := $(patsubst fuzz/%.c,%,$(filter-out $(FUZZ_SUPPORT),$(wildcard fuzz/*.c)))
REPLAYS      := $(FUZZ_NAMES:%=$(BUILD)/fuzz/replay_%)
FUZZ_DEPS    := $(wildcard fuzz/*.c fuzz/*.h tests/*.h) $(BUILD)/libpfl.a
FUZZ_SECONDS ?= 60
FUZZ_TIMEOUT ?= 10

# libpfl for other programs (README "Using pfl as a library"): the library
# objects are position-independent so that the same objects make libpfl.a
# and libpfl.so (-fno-semantic-interposition: calls inside the library are
# inlined and bound as in an executable). pfl.h, the one public header, is
# made from the headers below and what they include
# (scripts/make-header.sh); libpfl.so exports the pfl_ names pfl.h
# declares and nothing else (libpfl.map).
PUBLIC_HEADERS := util/version.h util/err.h run/run.h algos/algos.h algos/prox.h
VERSION   := $(shell sed -n 's/.*define PFL_VERSION "\(.*\)"/\1/p' src/util/version.h)
SOVERSION := $(firstword $(subst ., ,$(VERSION)))
PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
PUBLIC    := $(BUILD)/include/pfl.h $(BUILD)/libpfl.so

.PHONY: all test unit-test e2e-test asan-test clean data fuzz install
all: $(BUILD)/pfl $(TESTS) $(REPLAYS) $(PUBLIC)

$(BUILD)/libpfl.a: $(LIB_OBJ)
	ar rcs $@ $^

PIC_FLAGS := -fPIC -fno-semantic-interposition
$(LIB_OBJ): CFLAGS += $(PIC_FLAGS)

# Objects are rebuilt when the compiler or its flags change ($(BUILD)/cflags
# holds them): a tree built before the library became position-independent,
# or with other EXTRA_CFLAGS, is rebuilt rather than linked stale.
FLAGS_STAMP := $(BUILD)/cflags
ifeq ($(filter clean,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD) && printf '%s\n' '$(CC) $(CFLAGS) $(PIC_FLAGS) $(if $(CUDA_OBJ),$(NVCC) $(NVFLAGS))' | cmp -s - $(FLAGS_STAMP) || \
        printf '%s\n' '$(CC) $(CFLAGS) $(PIC_FLAGS) $(if $(CUDA_OBJ),$(NVCC) $(NVFLAGS))' >$(FLAGS_STAMP))
endif
$(LIB_OBJ) $(CLI_OBJ): $(FLAGS_STAMP)

$(BUILD)/include/pfl.h: scripts/make-header.sh $(wildcard src/*/*.h)
	@mkdir -p $(dir $@)
	scripts/make-header.sh $(PUBLIC_HEADERS) >$@.tmp && mv $@.tmp $@

# The version script: every name pfl.h spells that the library defines.
$(BUILD)/libpfl.map: $(BUILD)/include/pfl.h $(BUILD)/libpfl.a
	nm -g --defined-only $(BUILD)/libpfl.a | awk 'NF == 3 { print $$3 }' | sort -u >$@.defined
	{ echo '{ global:'; grep -ow 'pfl_[A-Za-z0-9_]*' $< | sort -u | comm -12 - $@.defined | sed 's/.*/  &;/'; \
	  echo 'local: *; };'; } >$@.tmp && rm $@.defined && mv $@.tmp $@

$(BUILD)/libpfl.so: $(LIB_OBJ) $(BUILD)/libpfl.map
	$(CC) $(CFLAGS) -shared -Wl,-soname,libpfl.so.$(SOVERSION) -Wl,--version-script=$(BUILD)/libpfl.map \
	    -o $@ $(LIB_OBJ) $(LDLIBS)

# make install [PREFIX=/usr/local] [LIBDIR=PREFIX/lib] [DESTDIR=staging]:
# the pfl command, libpfl.a, libpfl.so, pfl.h and pfl.pc, whose Libs are
# -lpfl (libpfl.so names its dependencies) and whose Requires.private and
# Libs.private list what linking libpfl.a needs (pkg-config --static). A
# sanitized build (SANITIZE=1) puts the sanitizers in Libs: its libpfl
# needs their run-time libraries.
PC_REQUIRES := $(strip $(BLAS_PC) $(if $(MATIO_LIBS),matio) $(JPEG_PC) $(HDF5_PC) $(MPI_PC) jansson yaml-0.1 libcrypto)
PC_PRIVATE  := $(strip $(if $(BLAS_PC),,$(BLAS_LIBS)) $(LAPACK_LIBS) $(if $(JPEG_PC),,$(JPEG_LIBS)) $(CUDA_LIBS) -lz -lm -fopenmp)
comma       := ,
PC_LIBS     := -L$${libdir} -lpfl$(if $(filter 1,$(SANITIZE)), -fsanitize=address$(comma)undefined)
install: $(BUILD)/pfl $(BUILD)/libpfl.a $(PUBLIC)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 755 $(BUILD)/pfl $(DESTDIR)$(PREFIX)/bin/pfl
	install -m 644 $(BUILD)/include/pfl.h $(DESTDIR)$(PREFIX)/include/pfl.h
	install -m 644 $(BUILD)/libpfl.a $(DESTDIR)$(LIBDIR)/libpfl.a
	install -m 755 $(BUILD)/libpfl.so $(DESTDIR)$(LIBDIR)/libpfl.so.$(VERSION)
	ln -sf libpfl.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libpfl.so.$(SOVERSION)
	ln -sf libpfl.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libpfl.so
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))' 'includedir=$${prefix}/include' '' 'Name: pfl' \
	    'Description: personalized federated learning: methods, models and the round loop of pfl' \
	    'Version: $(VERSION)' 'Requires.private: $(PC_REQUIRES)' 'Cflags: -I$${includedir}' \
	    'Libs: $(PC_LIBS)' 'Libs.private: $(PC_PRIVATE)' >$(DESTDIR)$(LIBDIR)/pkgconfig/pfl.pc

$(BUILD)/pfl: $(CLI_OBJ) $(BUILD)/libpfl.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libpfl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libpfl.a $(LDLIBS)

$(BUILD)/tests/test_cuda_ops: tests/gpu/test_cuda_ops.c $(BUILD)/libpfl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libpfl.a $(LDLIBS)

$(BUILD)/fuzz/replay_%: $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Ifuzz -o $@ fuzz/$*.c fuzz/fuzz_util.c fuzz/replay.c $(BUILD)/libpfl.a $(LDLIBS)

$(BUILD)/fuzz/fuzz_%: $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -Itests -Ifuzz -o $@ fuzz/$*.c fuzz/fuzz_util.c $(BUILD)/libpfl.a $(LDLIBS)

# Seeds for fuzz/corpus/ (written by libmatio, libjpeg and pfl's own writers)
$(BUILD)/fuzz/make_seeds: $(FUZZ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -Ifuzz -o $@ fuzz/make_seeds.c fuzz/fuzz_util.c $(BUILD)/libpfl.a $(LDLIBS)

# Runs every harness for FUZZ_SECONDS each (one at a time), or those in FUZZ
# (make fuzz FUZZ="svhn idx_plain" FUZZ_SECONDS=600); see scripts/fuzz.sh.
fuzz:
	FUZZ_TIMEOUT=$(FUZZ_TIMEOUT) scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ)

# Micro-benchmarks (bench/*.c), built on demand: make build/bench/step_bench
$(BUILD)/bench/%: bench/%.c src/nn/model.c $(BUILD)/libpfl.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libpfl.a $(LDLIBS)

$(BUILD)/src/fl/transport.o: CFLAGS += $(MPI_CFLAGS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/src/backend/cuda.o: src/backend/cuda.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(DATA_FLAGS) -MD -MF $(@:.o=.d) -MP -c -o $@ $<

# Unit tests, then end-to-end tests of the pfl command (tests/e2e/*.sh).
test: all
	@PFL=$(BUILD)/pfl BUILD=$(BUILD) PFL_SANITIZED=$(SANITIZE) tests/run-tests.sh

asan-test:
	$(MAKE) BUILD=build-asan SANITIZE=1 test

data:
	scripts/fetch-data.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
