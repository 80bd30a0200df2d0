// device_kernels.c: the kernel tables bound to a device. Every entry is a wrapper that completes what
// its stream still has in flight (CPU device) and opens the device's memory (guard device), calls the
// same entry of fsdp_kernels_cpu() (or fsdp_kernels_cpu_bf16()) with every argument unchanged, and
// closes the memory again: results are bit-identical to the CPU table's.
#include <pthread.h>
#include <stddef.h>

#include "device/device_cuda_impl.h"
#include "device/device_impl.h"
#include "kernels/kernels.h"

// Every kernel of struct fsdp_kernels: its name and its parameter types after the stream (kernels.h).
// A wrapper whose types differ from the member's fails to compile where the table is filled in.
#define DK_KERNELS(X)                                                                                        \
    X(gemm, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int)      \
    X(gemm_b16, int, int, int, int, int, float, const float *, int, const fsdp_bf16 *, int, float, float *, int) \
    X(gemm_a16, int, int, int, int, int, float, const fsdp_bf16 *, int, const float *, int, float, float *, int) \
    X(gemm_a16_b16, int, int, int, int, int, float, const fsdp_bf16 *, int, const fsdp_bf16 *, int, float,   \
      float *, int)                                                                                           \
    X(gemm_b16_bias, int, int, int, int, const float *, int, const fsdp_bf16 *, int, const float *, float *, int) \
    X(gemm_a16_b16_bias, int, int, int, int, const fsdp_bf16 *, int, const fsdp_bf16 *, int, const float *,   \
      float *, int)                                                                                           \
    X(gemm_b16_dbias, int, int, int, const float *, const fsdp_bf16 *, int, float, float *, int, float *)       \
    X(gemm_a16_dbias, int, int, int, const fsdp_bf16 *, int, const float *, float, float *, int, float *)       \
    X(layernorm_forward, float *, fsdp_bf16 *, float *, float *, const float *, const float *, const float *, int, \
      int, float)                                                                                             \
    X(residual_layernorm_forward, float *, float *, fsdp_bf16 *, float *, float *, const float *, const float *, \
      float, fsdp_rng, const float *, const float *, int, int, float)                                         \
    X(layernorm_backward, float *, float *, float *, const float *, const float *, const float *, const float *, \
      const float *, const float *, int, int)                                                                 \
    X(attention_forward, float *, float *, const float *, const fsdp_attention_dims *)                        \
    X(attention_backward, float *, const float *, const float *, const float *, const float *,              \
      const fsdp_attention_dims *)                                                                            \
    X(relu_forward, float *, const float *, size_t)                                                           \
    X(relu_backward, float *, const float *, const float *, size_t)                                           \
    X(gelu_forward, float *, const float *, size_t, int)                                                      \
    X(gelu_backward, float *, const float *, const float *, size_t, int)                                      \
    X(dropout_forward, float *, const float *, size_t, float, fsdp_rng)                                       \
    X(dropout_backward, float *, const float *, size_t, float, fsdp_rng)                                      \
    X(bias_act_dropout_forward, float *, float *, fsdp_bf16 *, const float *, int, int, fsdp_activation, float, \
      fsdp_rng)                                                                                               \
    X(act_dropout_backward, float *, const float *, const float *, size_t, fsdp_activation, float, fsdp_rng)  \
    X(relu_dropout_backward, float *, const float *, const float *, size_t, float)                            \
    X(add, float *, const float *, const float *, size_t)                                                     \
    X(add_inplace, float *, const float *, size_t)                                                            \
    X(add_inplace_b16, float *, const fsdp_bf16 *, size_t)                                                    \
    X(scale, float *, float, size_t)                                                                          \
    X(bias_add, float *, const float *, int, int)                                                             \
    X(fill_rows, float *, const float *, int, int)                                                            \
    X(bias_backward, float *, const float *, int, int)                                                        \
    X(f32_to_bf16, fsdp_bf16 *, const float *, size_t)                                                        \
    X(bf16_to_f32, float *, const fsdp_bf16 *, size_t)                                                        \
    X(f32_to_bf16_in_place, void *, size_t)                                                                   \
    X(embedding_forward, float *, const int32_t *, const float *, int, int, int)                              \
    X(embedding_forward_b16, float *, const int32_t *, const fsdp_bf16 *, int, int, int)                      \
    X(embedding_backward, float *, const float *, const int32_t *, int, int)                                  \
    X(cross_entropy_forward, double *, float *, float *, const float *, const int32_t *, int, int)           \
    X(cross_entropy_backward, float *, const float *, const float *, const int32_t *, float, int, int)        \
    X(abs_mean_forward, double *, const float *, size_t)                                                      \
    X(abs_mean_backward, float *, const float *, size_t, float)                                               \
    X(adamw_update, float *, const float *, float *, float *, size_t, float, float, float, float, float, float, \
      float)                                                                                                  \
    X(sgd_update, float *, const float *, float *, size_t, float, float, float, float, int, int)              \
    X(sum_squares, double *, const float *, size_t)                                                          \
    X(fixed_quantize, float *, const float *, size_t, size_t, const fsdp_fixed_format *)                     \
    X(fixed_finalize, float *, const float *, size_t, const fsdp_fixed_format *, double)                     \
    X(sum_squares_exact, int64_t *, const float *, size_t)

// Parameter lists from type lists: DK_PARAMS(int, float) is `int a1, float a2`, DK_ARGS(int, float) is
// `a1, a2` (positional, so no argument can be dropped or swapped).
#define DK_NARGS(...) DK_NARGS_(__VA_ARGS__, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define DK_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, n, ...) n
#define DK_CAT(a, b) DK_CAT_(a, b)
#define DK_CAT_(a, b) a##b
#define DK_PARAMS(...) DK_CAT(DK_P, DK_NARGS(__VA_ARGS__))(__VA_ARGS__)
#define DK_ARGS(...) DK_CAT(DK_A, DK_NARGS(__VA_ARGS__))
#define DK_P1(t1) t1 a1
#define DK_P2(t1, t2) DK_P1(t1), t2 a2
#define DK_P3(t1, t2, t3) DK_P2(t1, t2), t3 a3
#define DK_P4(t1, t2, t3, t4) DK_P3(t1, t2, t3), t4 a4
#define DK_P5(t1, t2, t3, t4, t5) DK_P4(t1, t2, t3, t4), t5 a5
#define DK_P6(t1, t2, t3, t4, t5, t6) DK_P5(t1, t2, t3, t4, t5), t6 a6
#define DK_P7(t1, t2, t3, t4, t5, t6, t7) DK_P6(t1, t2, t3, t4, t5, t6), t7 a7
#define DK_P8(t1, t2, t3, t4, t5, t6, t7, t8) DK_P7(t1, t2, t3, t4, t5, t6, t7), t8 a8
#define DK_P9(t1, t2, t3, t4, t5, t6, t7, t8, t9) DK_P8(t1, t2, t3, t4, t5, t6, t7, t8), t9 a9
#define DK_P10(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10) DK_P9(t1, t2, t3, t4, t5, t6, t7, t8, t9), t10 a10
#define DK_P11(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11) DK_P10(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10), t11 a11
#define DK_P12(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12) \
    DK_P11(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11), t12 a12
#define DK_P13(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13) \
    DK_P12(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12), t13 a13
#define DK_P14(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14) \
    DK_P13(t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13), t14 a14
#define DK_A1 a1
#define DK_A2 DK_A1, a2
#define DK_A3 DK_A2, a3
#define DK_A4 DK_A3, a4
#define DK_A5 DK_A4, a5
#define DK_A6 DK_A5, a6
#define DK_A7 DK_A6, a7
#define DK_A8 DK_A7, a8
#define DK_A9 DK_A8, a9
#define DK_A10 DK_A9, a10
#define DK_A11 DK_A10, a11
#define DK_A12 DK_A11, a12
#define DK_A13 DK_A12, a13
#define DK_A14 DK_A13, a14

static const fsdp_kernels *base_f32, *base_bf16;  // fsdp_kernels_cpu(), fsdp_kernels_cpu_bf16()

static inline void kernel_begin(fsdp_stream *st) {
    if (st->n_pending) dev_stream_retire_all(st);  // in-order: after the stream's collectives
    else if (st->dev->progress) dev_progress(st->dev, st);  // the other streams' collectives move meanwhile
    if (st->dev->kind == FSDP_DEVICE_GUARD) dev_guard_enter(st->dev);
}

#define DK_WRAP(fn, ...)                                                     \
    static void fn##_f32(fsdp_stream *st, DK_PARAMS(__VA_ARGS__)) {          \
        kernel_begin(st);                                                    \
        base_f32->fn(st, DK_ARGS(__VA_ARGS__));                              \
        dev_end(st);                                                         \
    }                                                                        \
    static void fn##_bf16(fsdp_stream *st, DK_PARAMS(__VA_ARGS__)) {         \
        kernel_begin(st);                                                    \
        base_bf16->fn(st, DK_ARGS(__VA_ARGS__));                             \
        dev_end(st);                                                         \
    }
DK_KERNELS(DK_WRAP)

#define DK_ONE(fn, ...) +1
enum { DK_COUNT = 0 DK_KERNELS(DK_ONE) };
_Static_assert(sizeof(fsdp_kernels) == offsetof(fsdp_kernels, gemm) + DK_COUNT * sizeof(void (*)(void)),
               "a member of struct fsdp_kernels (kernels/kernels.h) is missing from DK_KERNELS (device_kernels.c)");

static fsdp_kernels tables[2][2];  // [device: cpu, guard][bf16]
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    static const char *const names[2][2] = {{"cpu", "cpu-bf16"}, {"guard", "guard-bf16"}};
    base_f32 = fsdp_kernels_cpu();
    base_bf16 = fsdp_kernels_cpu_bf16();
    for (int dev = 0; dev < 2; dev++) {
        fsdp_kernels *t = &tables[dev][0], *b = &tables[dev][1];
#define DK_SET(fn, ...) t->fn = fn##_f32, b->fn = fn##_bf16;
        DK_KERNELS(DK_SET)
#undef DK_SET
        t->name = names[dev][0], b->name = names[dev][1];
        t->device = b->device = FSDP_DEV_CPU;
    }
}

const struct fsdp_kernels *fsdp_dev_kernels(const fsdp_dev *d, int bf16) {
    if (d->kind == FSDP_DEVICE_CUDA) return dev_cuda_kernels(bf16 != 0);
    pthread_once(&tables_once, build_tables);
    return &tables[d->kind == FSDP_DEVICE_GUARD][bf16 != 0];
}
