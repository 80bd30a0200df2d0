// alloc.h: 64-byte aligned allocation with memory accounting by category.
// Every byte the library holds for model state goes through fsdp_alloc so that the profiler can
// report current and peak bytes for parameters, gradients, optimizer state, activations and
// communication buffers, and compare them with the OS's peak RSS.
#pragma once
#include <stddef.h>

#include "core/status.h"

typedef enum {
    FSDP_MEM_PARAMS = 0,   // parameters a rank keeps (under FSDP: its fp32 shards)
    FSDP_MEM_UNSHARDED,    // FSDP's gathered (unsharded) parameter and gradient buffers
    FSDP_MEM_GRADS,        // gradients a rank keeps (under FSDP: its gradient shards)
    FSDP_MEM_OPTIM,
    FSDP_MEM_ACTIVATIONS,
    FSDP_MEM_COMM,
    FSDP_MEM_OTHER,
    FSDP_MEM_NCATEGORIES,
} fsdp_mem_category;

#define FSDP_ALIGNMENT 64

// Keeps glibc from returning freed memory to the kernel (first-touch page faults are expensive on
// these machines) and from serving large blocks with mmap. Idempotent; call once at start-up.
void fsdp_mem_init(void);

// Returns zero-filled, FSDP_ALIGNMENT-aligned memory of `bytes`, or NULL (with fsdp_error set).
void *fsdp_alloc(size_t bytes, fsdp_mem_category cat);
void fsdp_free(void *ptr);  // NULL is fine

// Accounts `bytes` of memory obtained elsewhere (e.g. MPI shared-memory windows): +1 on allocation,
// -1 on release.
void fsdp_mem_track(fsdp_mem_category cat, size_t bytes, int sign);

const char *fsdp_mem_category_name(fsdp_mem_category cat);
size_t fsdp_mem_current(fsdp_mem_category cat);
size_t fsdp_mem_peak(fsdp_mem_category cat);
size_t fsdp_mem_current_total(void);
size_t fsdp_mem_peak_total(void);
void fsdp_mem_reset_peaks(void);  // peaks := current
size_t fsdp_mem_os_peak_rss(void);  // from getrusage, bytes
