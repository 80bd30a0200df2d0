// tunables.h: every FSDP_* environment variable the library and the tools read, in one registry: its
// name, its default and its meaning (NCCL's NCCL_PARAM idea). Code reads a variable only through
// fsdp_tunable(), the tools warn once about an FSDP_* variable that is not registered (a misspelt
// tunable would otherwise be ignored in silence), and `--env` on any tool prints this table
// (docs/flags.md holds it). Values are read when asked for, so a test may set one while it runs.
#pragma once
#include <stdio.h>

// X(ID, default as written, meaning): the variable is FSDP_<ID>.
#define FSDP_TUNABLE_LIST(X)                                                                                  \
    X(DEVICE, "cpu", "the device when --device is not given: cpu, guard, cuda or cuda:N")                    \
    X(GEMM, "avx512", "the fp32 GEMM: avx512 (ours, where the CPU has AVX-512; else OpenBLAS) or openblas") \
    X(GEMM_BF16, "the best the CPU has", "the bf16 GEMM's micro-kernel: amx, avx512bf16 or emulate (fp32 "  \
      "products of bf16-rounded copies)")                                                                    \
    X(DEBUG, "off", "INFO: the sharding layout on rank 0's stderr at start-up; DETAIL: also every "         \
      "collective logged and the ranks' collective sequences checked against each other")                   \
    X(COMM_ALGO, "auto", "reduce-scatter and all-reduce across hosts: auto, p2p (point to point) or mpi "    \
      "(MPI's own collectives)")                                                                             \
    X(COMM_NO_SHM, "unset", "1: no shared-memory collectives between ranks of a node (plain MPI)")          \
    X(COMM_RANKS_PER_HOST, "unset", "k: treat each k consecutive ranks as one host (tests of the "          \
      "hierarchical paths on one machine)")                                                                  \
    X(COMM_MAX_COUNT, "2147483647", "the most elements one MPI call carries (larger ones are split; tests " \
      "lower it)")                                                                                           \
    X(COMM_P2P_CHUNK_BYTES, "1048576", "the message size of the point-to-point collectives")                 \
    X(COMM_PROGRESS, "poll", "poll: collectives in flight are progressed between kernels; none: not")       \
    X(ALLOW_TF32, "unset", "1: CUDA fp32 products on TF32 tensor cores")                   \
    X(DEVICE_COMM, "auto", "the device's collectives when --comm is not given: auto (NCCL on cuda where "   \
      "each rank has its own GPU, else staged through host memory), nccl or host")                         \
    X(NCCL_LIBRARY, "libnccl.so.2", "the NCCL library file the cuda device loads (e.g. a Python wheel's "   \
      "nvidia/nccl/lib/libnccl.so.2); unset: the loader's libnccl.so.2, then the build's")                 \
    X(CUDA_SYNC, "unset", "1: synchronize after every CUDA kernel (an asynchronous fault is reported at "   \
      "the kernel that made it)")                                                                            \
    X(TEST_CRASH_IN_SAVE, "unset", "test hook (core/fault_inject.h): K: every rank dies after its shard of " \
      "the step-K checkpoint")                                                                               \
    X(TEST_TORN_SHARD, "unset", "test hook: K:R: rank R dies half-way through its step-K shard")            \
    X(TEST_CRASH_IN_ROTATE, "unset", "test hook: K:P: the rotation after step K dies at point P")           \
    X(TEST_CRASH_IN_ARCHIVE, "unset", "test hook: 1: archiving dies once its journal is written")           \
    X(TEST_DESYNC, "unset", "test hook: R:U[:K]: rank R issues a stray all-reduce before unit U's "         \
      "all-gathers")                                                                                         \
    X(TEST_NAN_LOSS, "unset", "test hook: K[:R]: step K's loss reads as NaN")                               \
    X(TEST_NAN_GRAD, "unset", "test hook: K[:R]: step K's backward makes every gradient NaN")                \
    X(TEST_NAN_SHARD, "unset", "test hook: K[:R]: one element of a reduced gradient shard becomes NaN")     \
    X(TEST_SLOW_VIEWS, "unset", "test hook: R:MS: rank R sleeps MS ms each time it binds a unit in place")   \
    X(TEST_MARKER_FULL, "unset", "test hook: 1: the completion marker DONE is written to /dev/full")       \
    X(TEST_MEM_AVAILABLE, "unset", "test hook: BYTES: the memory the host can give, for the memory check")

typedef enum {
#define FSDP_TUNABLE_ID(id, dflt, meaning) FSDP_ENV_##id,
    FSDP_TUNABLE_LIST(FSDP_TUNABLE_ID)
#undef FSDP_TUNABLE_ID
    FSDP_ENV_COUNT
} fsdp_tunable_id;

// The variable's value, or NULL when it is unset or empty.
const char *fsdp_tunable(fsdp_tunable_id id);
// Its name, "FSDP_<ID>".
const char *fsdp_tunable_name(fsdp_tunable_id id);
// One line "PROG: warning: FSDP_X is set but is no variable fsdp.c reads (did you mean FSDP_Y?)" on
// stderr for each unregistered FSDP_* variable of the environment, once per process.
void fsdp_tunables_warn_unknown(const char *prog);
// The registry as a Markdown table (name, default, meaning).
void fsdp_tunables_print(FILE *f);
