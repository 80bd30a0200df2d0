// host_kernels.c: the kernel tables of the host backends (cpu, guard) bound to their streams
// (backend_impl.h, dev_host_kernels_bind). Every entry completes what its stream still has in flight
// (else polls the other streams' collectives), opens the device's memory (the backend's enter), calls
// the same entry of the backend's base table with every argument unchanged, and closes the memory
// again: results are bit-identical to the base table's.
#include <stddef.h>

#include "device/backend_impl.h"

static inline void kernel_begin(fsdp_stream *st) {
    if (st->n_pending) dev_stream_retire_all(st);  // in-order: after the stream's collectives
    else if (st->dev->progress) dev_progress(st->dev, st);  // the other streams' collectives move meanwhile
    if (st->dev->iface->enter) st->dev->iface->enter(st->dev);
}

// fn_f32 and fn_bf16 for every kernel of kernels/kernel_list.h
#define FSDP_KERNEL(fn, ...)                                                 \
    static void fn##_f32(fsdp_stream *st, FSDP_KPARAMS(__VA_ARGS__)) {       \
        kernel_begin(st);                                                    \
        st->dev->host_base[0]->fn(st, FSDP_KARGS(__VA_ARGS__));              \
        dev_end(st);                                                         \
    }                                                                        \
    static void fn##_bf16(fsdp_stream *st, FSDP_KPARAMS(__VA_ARGS__)) {      \
        kernel_begin(st);                                                    \
        st->dev->host_base[1]->fn(st, FSDP_KARGS(__VA_ARGS__));              \
        dev_end(st);                                                         \
    }
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL

void dev_host_kernels_bind(fsdp_dev *d, const fsdp_kernels *base_f32, const fsdp_kernels *base_bf16,
                           const char *name_f32, const char *name_bf16) {
    fsdp_kernels *t = &d->host_table[0], *b = &d->host_table[1];
    d->host_base[0] = base_f32, d->host_base[1] = base_bf16;
#define FSDP_KERNEL(fn, ...) t->fn = fn##_f32, b->fn = fn##_bf16;
#include "kernels/kernel_list.h"
#undef FSDP_KERNEL
    t->name = name_f32, b->name = name_bf16;
    t->device = base_f32->device, b->device = base_bf16->device;
}

const fsdp_kernels *dev_host_kernels(const fsdp_dev *d, int bf16) { return &d->host_table[bf16 != 0]; }
