// device_impl.h: the structs behind device.h's handles and the helpers the layer's own files share
// (device.c, device_guard.c, device_kernels.c, device_comm.c). Not part of the API.
//
// In flight (CPU device): a stream holds the collectives it started and has not completed yet, oldest
// first, each tagged with the stream's collective number (1, 2, ...) and the byte ranges it reads and
// writes. A later operation on the stream first completes the ones its buffers depend on (kernels, whose
// buffers the layer does not know: all of them), so results are those of in-order execution. An event
// recorded on the stream holds the number of the last collective started; it is complete once the
// stream has completed that one. Nothing allocates per operation: DEV_MAX_PENDING slots per stream.
#pragma once
#include <pthread.h>
#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"

#define DEV_MAX_PENDING 8    // collectives in flight per stream; one more completes the oldest first
#define DEV_MAX_DEFERRED 32  // fsdp_dev_free calls waiting for collectives in flight
#define DEV_ERR_MSG 512

typedef struct {
    fsdp_comm_request *req;
    uint64_t tag;                  // the stream's collective number
    const unsigned char *rd, *wr;  // rd (rd_bytes,), wr (wr_bytes,): the bytes it reads and writes
    size_t rd_bytes, wr_bytes;
} dev_pending;

struct fsdp_stream {
    fsdp_dev *dev;
    fsdp_stream_id id;
    dev_pending pending[DEV_MAX_PENDING];  // ring: pending[(head + i) % DEV_MAX_PENDING], i < n_pending
    int head, n_pending;
    uint64_t started;           // collectives put in flight so far (the last tag)
    uint64_t retired;           // tag of the last one completed (tags complete in order)
    fsdp_status err;            // the first failure found where no status could be returned (a kernel)
    char err_msg[DEV_ERR_MSG];  // its message, returned by the stream's next call that returns a status
    // CUDA device only (device_cuda.c): the native handles, and kernel scratch (scratch_bytes,)
    void *cu, *cublas;  // cudaStream_t, cublasHandle_t
    void *workspace;               // the cuBLAS workspace (device memory)
    void *scratch;                 // (scratch_bytes,) device memory, fsdp_cuda_scratch
    size_t scratch_bytes;
    void *stage;                   // (stage_bytes,) pinned host memory the stream's collectives stage through
    size_t stage_bytes;
};

struct fsdp_event {
    fsdp_dev *dev;
    fsdp_stream *stream;  // where it was last recorded; NULL: never recorded (complete)
    uint64_t tag;         // stream->started when it was recorded
    void *cu;             // CUDA device: the cudaEvent_t
};

// Guard device memory: one reserved arena, PROT_NONE outside the layer's calls.
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

// CUDA device: one allocation, for accounting and freeing.
typedef struct {
    void *p;       // (bytes,) device memory (cudaMalloc) or pinned host memory (cudaHostAlloc)
    size_t bytes;  // as requested (accounted)
    int cat;       // fsdp_mem_category
    int pinned;    // 1: host memory
} dev_cuda_alloc_rec;

typedef struct {
    void *p;                             // fsdp_alloc'ed
    uint64_t after[FSDP_STREAM_COUNT];   // freed once every stream has retired these tags
} dev_deferred;

struct fsdp_dev {
    fsdp_device_kind kind;
    fsdp_stream streams[FSDP_STREAM_COUNT];
    dev_deferred deferred[DEV_MAX_DEFERRED];  // (n_deferred,)
    int n_deferred;
    dev_guard guard;  // FSDP_DEVICE_GUARD only
    int progress;     // poll collectives in flight between kernels (FSDP_COMM_PROGRESS, default on)
    // CUDA device only (device_cuda.c)
    int cuda_ordinal;
    dev_cuda_alloc_rec *cuda_allocs;  // (cuda_n_allocs,) live allocations
    int cuda_n_allocs, cuda_cap_allocs;
};

// device.c: the stream bookkeeping.
// Completes what s has in flight that an operation reading rd (rd_bytes,) and writing wr (wr_bytes,)
// depends on, and returns the first failure (also one noted earlier by a kernel).
fsdp_status dev_stream_order(fsdp_stream *s, const void *rd, size_t rd_bytes, const void *wr, size_t wr_bytes);
// Completes everything s has in flight; failures are noted for the stream's next status.
void dev_stream_retire_all(fsdp_stream *s);
// Completes through tag `tag` and returns the first failure (also one noted earlier).
fsdp_status dev_stream_complete(fsdp_stream *s, uint64_t tag);
// Progress for the collectives in flight on d's streams other than `except` (MPI moves no data in the
// background here): MPI_Test on each, oldest first, up to the first one still running. Completed ones
// stay queued (their stream retires them in order); a failure is noted for that stream's next status.
// The kernel wrappers call it before every kernel when d->progress is on.
void dev_progress(fsdp_dev *d, const fsdp_stream *except);
// Keeps a started request in flight on s (completes it at once when it already is).
fsdp_status dev_stream_push(fsdp_stream *s, fsdp_comm_request *req, const void *rd, size_t rd_bytes,
                            const void *wr, size_t wr_bytes);

// device_guard.c
fsdp_status dev_guard_open(fsdp_dev *d);
void dev_guard_close(fsdp_dev *d);
void *dev_guard_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
void dev_guard_free(fsdp_dev *d, void *p);
fsdp_status dev_guard_register(fsdp_dev *d, void *p, size_t bytes, const char *what);
void dev_guard_unregister(fsdp_dev *d, void *p);
void dev_guard_enter(fsdp_dev *d);
void dev_guard_leave(fsdp_dev *d);

// Brackets an operation on s that reads rd (rd_bytes,) and writes wr (wr_bytes,): after what it
// depends on, with the guard device's memory open. The fast path is two tests.
static inline fsdp_status dev_begin(fsdp_stream *s, const void *rd, size_t rd_bytes, const void *wr,
                                    size_t wr_bytes) {
    if (s->n_pending || s->err) FSDP_CHECK(dev_stream_order(s, rd, rd_bytes, wr, wr_bytes));
    if (s->dev->kind == FSDP_DEVICE_GUARD) dev_guard_enter(s->dev);
    return FSDP_OK;
}

static inline void dev_end(fsdp_stream *s) {
    if (s->dev->kind == FSDP_DEVICE_GUARD) dev_guard_leave(s->dev);
}
