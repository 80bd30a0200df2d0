// device_kernels.c: the kernel tables bound to a device. Every entry is a wrapper that completes what
// its stream still has in flight (CPU device) and opens the device's memory (guard device), calls the
// same entry of fsdp_kernels_cpu() (or fsdp_kernels_cpu_bf16()) with every argument unchanged, and
// closes the memory again: results are bit-identical to the CPU table's.
#include <pthread.h>
#include <stddef.h>

#include "device/device_cuda_impl.h"
#include "device/device_impl.h"
#include "kernels/kernels.h"

static const fsdp_kernels *base_f32, *base_bf16;  // fsdp_kernels_cpu(), fsdp_kernels_cpu_bf16()

static inline void kernel_begin(fsdp_stream *st) {
    if (st->n_pending) dev_stream_retire_all(st);  // in-order: after the stream's collectives
    else if (st->dev->progress) dev_progress(st->dev, st);  // the other streams' collectives move meanwhile
    if (st->dev->kind == FSDP_DEVICE_GUARD) dev_guard_enter(st->dev);
}

// fn_f32 and fn_bf16 for every kernel of kernels/kernel_list.h
#define FSDP_KERNEL(fn, ...)                                                 \
    static void fn##_f32(fsdp_stream *st, FSDP_KPARAMS(__VA_ARGS__)) {       \
        kernel_begin(st);                                                    \
        base_f32->fn(st, FSDP_KARGS(__VA_ARGS__));                           \
        dev_end(st);                                                         \
    }                                                                        \
    static void fn##_bf16(fsdp_stream *st, FSDP_KPARAMS(__VA_ARGS__)) {      \
        kernel_begin(st);                                                    \
        base_bf16->fn(st, FSDP_KARGS(__VA_ARGS__));                          \
        dev_end(st);                                                         \
    }
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL

static fsdp_kernels tables[2][2];  // [device: cpu, guard][bf16]
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    static const char *const names[2][2] = {{"cpu", "cpu-bf16"}, {"guard", "guard-bf16"}};
    base_f32 = fsdp_kernels_cpu();
    base_bf16 = fsdp_kernels_cpu_bf16();
    for (int dev = 0; dev < 2; dev++) {
        fsdp_kernels *t = &tables[dev][0], *b = &tables[dev][1];
#define FSDP_KERNEL(fn, ...) t->fn = fn##_f32, b->fn = fn##_bf16;
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
        t->name = names[dev][0], b->name = names[dev][1];
        t->device = b->device = FSDP_DEV_CPU;
    }
}

const struct fsdp_kernels *fsdp_dev_kernels(const fsdp_dev *d, int bf16) {
    if (d->kind == FSDP_DEVICE_CUDA) return dev_cuda_kernels(bf16 != 0);
    pthread_once(&tables_once, build_tables);
    return &tables[d->kind == FSDP_DEVICE_GUARD][bf16 != 0];
}
