// backend_impl.h: what a backend implements, and the structs behind device.h's handles. Not part of the
// API: for the device layer's own files (src/device/*.c, and each backend's folder cpu/, guard/, cuda/).
//
// A backend is one fsdp_backend_i (a table of function pointers, as ggml's ggml_backend_i) plus its
// own state in fsdp_dev.ctx / fsdp_stream.ctx / fsdp_event.native. device.c and device_comm.c turn
// every call of device.h and device_comm.h into a call through the table, and nothing outside the
// backends' folders asks which backend a device is: code above asks for capabilities (device.h).
//
// The generic half, written once for every backend that runs its work on the host when it is called
// (cpu, guard): host_stream.c keeps the collectives a stream has in flight (a ring of requests tagged
// with the stream's collective number and the byte ranges they read and write; a later operation first
// completes the ones its buffers depend on, kernels all of them, so results are those of in-order
// execution), its events (the tag of the last collective started when recorded), the frees deferred
// until those collectives are done, progress polling between kernels, and the copies and memsets;
// host_kernels.c binds a backend's kernel table to those streams. Nothing allocates per operation.
#pragma once
#include <pthread.h>
#include <stdint.h>

#include "comm/comm.h"
#include "device/device.h"
#include "kernels/kernels.h"

#define DEV_MAX_PENDING 8    // collectives in flight per stream; one more completes the oldest first
#define DEV_MAX_DEFERRED 32  // fsdp_dev_free calls waiting for collectives in flight
#define DEV_ERR_MSG 512

// The table every backend fills (cpu/cpu_device.c, guard/guard_device.c, cuda/cuda_device.c). Each
// entry has the contract of the device.h / device_comm.h call of the same name; arguments are checked
// there (a 2-D copy's pitches, a register's alignment) before the entry is called. Entries marked
// "may be NULL" are skipped when they are.
typedef struct fsdp_backend_i {
    const char *name;       // "cpu", "guard", "cuda": what fsdp_dev_name returns
    fsdp_device_kind kind;  // what fsdp_dev_kind returns (for tests and the user; the layer never branches on it)
    // Makes d usable: d->ctx, the streams' ctx, d's bound kernel tables. ordinal: N of "cuda:N" (-1: the
    // backend's default). On failure it has released what it made (close is not called).
    fsdp_status (*open)(fsdp_dev *d, int ordinal);
    // After the streams' work is complete: releases what open made and what the device still holds.
    void (*close)(fsdp_dev *d);
    void (*capabilities)(const fsdp_dev *d, fsdp_dev_caps *out);
    fsdp_status (*mem_info)(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes);

    // memory
    void *(*alloc)(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
    void (*free)(fsdp_dev *d, void *p);
    void *(*host_alloc)(fsdp_dev *d, size_t bytes, fsdp_mem_category cat);
    void (*host_free)(fsdp_dev *d, void *p);
    fsdp_status (*register_host)(fsdp_dev *d, void *p, size_t bytes, const char *what);
    void (*unregister_host)(fsdp_dev *d, void *p);
    // Bracket a call that touches device memory (fsdp_dev_enter / leave); may be NULL.
    void (*enter)(fsdp_dev *d);
    void (*leave)(fsdp_dev *d);

    // streams and events
    fsdp_status (*stream_synchronize)(fsdp_stream *s);
    fsdp_status (*stream_status)(fsdp_stream *s);  // the first failure noted on s and not returned yet, once
    int (*stream_in_flight)(const fsdp_stream *s);
    fsdp_status (*event_create)(fsdp_event *e);    // may be NULL (nothing native to make)
    void (*event_destroy)(fsdp_event *e);          // may be NULL
    fsdp_status (*event_record)(fsdp_event *e, fsdp_stream *s);
    fsdp_status (*event_synchronize)(fsdp_event *e);
    fsdp_status (*stream_wait_event)(fsdp_stream *s, fsdp_event *e);
    int (*event_query)(fsdp_event *e);

    // copies (any direction device.h allows), memsets, enqueued on s
    fsdp_status (*copy)(fsdp_stream *s, void *dst, const void *src, size_t bytes);
    fsdp_status (*copy_2d)(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                           size_t row_bytes, size_t rows);
    fsdp_status (*memset)(fsdp_stream *s, void *dst, int byte, size_t bytes);

    // collectives on device buffers (device_comm.h); all_gather_shared may be NULL (no shared windows)
    fsdp_status (*all_gather)(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
    fsdp_status (*all_gather_shared)(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                     fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy);
    fsdp_status (*reduce_scatter)(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                  fsdp_dtype dt, fsdp_reduce_op op);
    fsdp_status (*all_reduce)(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
    fsdp_status (*broadcast)(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root);

    // the kernel table (kernels/kernels.h), fp32 or bf16 mixed precision
    const struct fsdp_kernels *(*kernels)(const fsdp_dev *d, int bf16);
    // fsdp_dev_comm_check's answer for a mode other than auto and host (e.g. "nccl"), naming what is
    // missing; may be NULL (the device's collectives are the host's only)
    fsdp_status (*comm_check)(const fsdp_dev *d, const char *mode);
} fsdp_backend_i;

typedef struct {
    fsdp_comm_request *req;
    uint64_t tag;                  // the stream's collective number
    const unsigned char *rd, *wr;  // rd (rd_bytes,), wr (wr_bytes,): the bytes it reads and writes
    size_t rd_bytes, wr_bytes;
} dev_pending;

struct fsdp_stream {
    fsdp_dev *dev;
    fsdp_stream_id id;
    // host streams (host_stream.c): the collectives in flight
    dev_pending pending[DEV_MAX_PENDING];  // ring: pending[(head + i) % DEV_MAX_PENDING], i < n_pending
    int head, n_pending;
    uint64_t started;           // collectives put in flight so far (the last tag)
    uint64_t retired;           // tag of the last one completed (tags complete in order)
    fsdp_status err;            // the first failure found where no status could be returned (a kernel)
    char err_msg[DEV_ERR_MSG];  // its message, returned by the stream's next call that returns a status
    void *ctx;                  // the backend's per-stream state (cuda: its native stream and handles)
};

struct fsdp_event {
    fsdp_dev *dev;
    fsdp_stream *stream;  // where it was last recorded; NULL: never recorded (complete)
    uint64_t tag;         // host streams: stream->started when it was recorded
    void *native;         // the backend's handle (cuda: the cudaEvent_t)
};

typedef struct {
    void *p;                             // fsdp_alloc'ed
    uint64_t after[FSDP_STREAM_COUNT];   // freed once every stream has retired these tags
} dev_deferred;

struct fsdp_dev {
    const fsdp_backend_i *iface;
    void *ctx;        // the backend's state (guard: its arena; cuda: its GPU, handles, allocations)
    fsdp_stream streams[FSDP_STREAM_COUNT];
    int progress;     // poll collectives in flight between kernels (FSDP_COMM_PROGRESS, default on)
    // host streams: fsdp_dev_free calls waiting for collectives in flight (n_deferred,)
    dev_deferred deferred[DEV_MAX_DEFERRED];
    int n_deferred;
    // host_kernels.c: the tables a host backend's kernels come from, and the tables bound to d's streams
    const struct fsdp_kernels *host_base[2];  // [bf16]
    struct fsdp_kernels host_table[2];        // [bf16]: what fsdp_dev_kernels returns
};

// ---------------------------------------------------------------------------------------------
// The generic half for host backends (host_stream.c); each is an entry a backend may put in its table
// or call from its own.

// Notes st (with fsdp_last_error's message) as s's failure unless one is noted already.
void dev_note_error(fsdp_stream *s, fsdp_status st);
// The failure noted on s, returned (with its message) and cleared; FSDP_OK when none.
fsdp_status dev_take_error(fsdp_stream *s);
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
// The bound kernels call it before every kernel when d->progress is on.
void dev_progress(fsdp_dev *d, const fsdp_stream *except);
// Keeps a started request in flight on s (completes it at once when it already is).
fsdp_status dev_stream_push(fsdp_stream *s, fsdp_comm_request *req, const void *rd, size_t rd_bytes,
                            const void *wr, size_t wr_bytes);
// fsdp_free(p) now, or once the collectives now in flight on d's streams are complete.
void dev_free_after_streams(fsdp_dev *d, void *p);
// A start that failed: completes its request (if any), keeping the start's message.
fsdp_status dev_start_failed(fsdp_status st, fsdp_comm_request *req);

// Table entries of host streams: work runs when it is enqueued, after what it depends on.
fsdp_status dev_host_stream_synchronize(fsdp_stream *s);
fsdp_status dev_host_stream_status(fsdp_stream *s);
int dev_host_stream_in_flight(const fsdp_stream *s);
fsdp_status dev_host_event_record(fsdp_event *e, fsdp_stream *s);
fsdp_status dev_host_event_synchronize(fsdp_event *e);
fsdp_status dev_host_stream_wait_event(fsdp_stream *s, fsdp_event *e);
int dev_host_event_query(fsdp_event *e);
fsdp_status dev_host_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes);
fsdp_status dev_host_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows);
fsdp_status dev_host_memset(fsdp_stream *s, void *dst, int byte, size_t bytes);
fsdp_status dev_host_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root);
fsdp_status dev_host_all_gather_shared(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy);

// The table entries every host backend shares: its streams, events, copies and memsets are these.
#define DEV_HOST_STREAM_ENTRIES                             \
    .stream_synchronize = dev_host_stream_synchronize,      \
    .stream_status = dev_host_stream_status,                \
    .stream_in_flight = dev_host_stream_in_flight,          \
    .event_record = dev_host_event_record,                  \
    .event_synchronize = dev_host_event_synchronize,        \
    .stream_wait_event = dev_host_stream_wait_event,        \
    .event_query = dev_host_event_query,                    \
    .copy = dev_host_copy,                                  \
    .copy_2d = dev_host_copy_2d,                            \
    .memset = dev_host_memset

// host_kernels.c: binds base_f32 / base_bf16 (tables of kernels that run on the host when called) to
// d's streams as d->host_table[0] / [1], named name_f32 / name_bf16: every entry completes what its
// stream has in flight (or polls the other streams' collectives), brackets the call with the backend's
// enter / leave, and calls the base entry with every argument unchanged (the same bits).
void dev_host_kernels_bind(fsdp_dev *d, const struct fsdp_kernels *base_f32, const struct fsdp_kernels *base_bf16,
                           const char *name_f32, const char *name_bf16);
const struct fsdp_kernels *dev_host_kernels(const fsdp_dev *d, int bf16);

// Brackets an operation on s that reads rd (rd_bytes,) and writes wr (wr_bytes,): after what it
// depends on, with the device's memory open (the backend's enter). The fast path is two tests.
static inline fsdp_status dev_begin(fsdp_stream *s, const void *rd, size_t rd_bytes, const void *wr,
                                    size_t wr_bytes) {
    if (s->n_pending || s->err) FSDP_CHECK(dev_stream_order(s, rd, rd_bytes, wr, wr_bytes));
    if (s->dev->iface->enter) s->dev->iface->enter(s->dev);
    return FSDP_OK;
}

static inline void dev_end(fsdp_stream *s) {
    if (s->dev->iface->leave) s->dev->iface->leave(s->dev);
}
