// guard_memory.h: the guard device's memory (guard_memory.c): one reserved arena, PROT_NONE outside
// the layer's calls, and the host regions registered with it. For guard_device.c only.
#pragma once
#include <pthread.h>
#include <stddef.h>

#include "device/backend_impl.h"

typedef struct {
    size_t off, len;  // page-rounded span in the arena
    size_t bytes;     // requested (accounted) bytes; 0 for a free block
    int cat;          // fsdp_mem_category; -1: free
} guard_block;

typedef struct {
    unsigned char *p;  // (len,) page-aligned host mapping
    size_t len;        // page-rounded
    size_t bytes;      // as registered
    int prot;          // protection while open (PROT_READ | PROT_WRITE, or PROT_READ for a read-only map)
    char what[96];     // the caller's label, for the fault report
} guard_region;

typedef struct {
    unsigned char *base;    // (reserved,) the arena
    size_t reserved, page;
    void *map;          // the whole reservation as mmap returned it (base is its first 2 MiB boundary)
    size_t map_len;
    size_t top;             // end of the last block: [base, base + top) is what enter opens
    guard_block *blocks;    // (n_blocks,) sorted by offset, covering [0, top); the last one is live
    int n_blocks, cap_blocks;
    guard_region *regions;  // (n_regions,) fsdp_dev_register'ed host memory
    int n_regions, cap_regions;
    int depth;              // fsdp_dev_enter nesting
    pthread_mutex_t lock;   // blocks, regions, depth
} dev_guard;

// d->ctx is the device's dev_guard (made by dev_guard_open, released by dev_guard_close).
fsdp_status dev_guard_open(fsdp_dev *d);
void dev_guard_close(fsdp_dev *d);
void *dev_guard_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void dev_guard_free(fsdp_dev *d, void *p);
fsdp_status dev_guard_register(fsdp_dev *d, void *p, size_t bytes, const char *what);
void dev_guard_unregister(fsdp_dev *d, void *p);
void dev_guard_enter(fsdp_dev *d);
void dev_guard_leave(fsdp_dev *d);
