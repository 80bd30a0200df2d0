// device.c: opening devices, the default device, and the CPU device: memory from fsdp_alloc, copies
// and memsets run when they are called, streams that hold collectives in flight (device_impl.h), events.
// The guard device shares all of this; its memory is device_guard.c's.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "device/device_cuda_impl.h"
#include "device/device_impl.h"
#include "core/tunables.h"

static const char *const kind_names[] = {"cpu", "guard", "cuda"};

// ---------------------------------------------------------------------------------------------
// Streams: collectives in flight

static void note_error(fsdp_stream *s, fsdp_status st) {
    if (st == FSDP_OK || s->err != FSDP_OK) return;
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", fsdp_last_error());
}

static fsdp_status take_error(fsdp_stream *s) {
    if (s->err == FSDP_OK) return FSDP_OK;
    fsdp_status st = s->err;
    s->err = FSDP_OK;
    return fsdp_error(st, "%s", s->err_msg);
}

static int deferred_ready(const fsdp_dev *d, const dev_deferred *f) {
    for (int i = 0; i < FSDP_STREAM_COUNT; i++)
        if (d->streams[i].retired < f->after[i]) return 0;
    return 1;
}

static void release_deferred(fsdp_dev *d) {
    for (int i = 0; i < d->n_deferred;)
        if (deferred_ready(d, &d->deferred[i])) {
            fsdp_free(d->deferred[i].p);
            d->deferred[i] = d->deferred[--d->n_deferred];
        } else {
            i++;
        }
}

static void retire_oldest(fsdp_stream *s) {
    dev_pending *p = &s->pending[s->head];
    fsdp_comm_request *req = p->req;
    s->retired = p->tag;
    s->head = (s->head + 1) % DEV_MAX_PENDING;
    s->n_pending--;
    note_error(s, fsdp_comm_wait(req));
    if (s->dev->n_deferred) release_deferred(s->dev);
}

void dev_stream_retire_all(fsdp_stream *s) {
    while (s->n_pending) retire_oldest(s);
}

void dev_progress(fsdp_dev *d, const fsdp_stream *except) {
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        fsdp_stream *s = &d->streams[i];
        if (s == except) continue;
        for (int k = 0; k < s->n_pending; k++) {  // oldest first, up to the first one still running
            int done = 0;
            fsdp_status st = fsdp_comm_test(s->pending[(s->head + k) % DEV_MAX_PENDING].req, &done);
            note_error(s, st);
            if (st != FSDP_OK || !done) break;
        }
    }
}

fsdp_status dev_stream_complete(fsdp_stream *s, uint64_t tag) {
    while (s->n_pending && s->pending[s->head].tag <= tag) retire_oldest(s);
    return take_error(s);
}

// Byte ranges a (na,) and b (nb,) share a byte.
static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

fsdp_status dev_stream_order(fsdp_stream *s, const void *rd, size_t rd_bytes, const void *wr, size_t wr_bytes) {
    uint64_t through = 0;  // the newest collective this operation depends on
    for (int i = 0; i < s->n_pending; i++) {
        const dev_pending *p = &s->pending[(s->head + i) % DEV_MAX_PENDING];
        if (overlap(wr, wr_bytes, p->rd, p->rd_bytes) || overlap(wr, wr_bytes, p->wr, p->wr_bytes) ||
            overlap(rd, rd_bytes, p->wr, p->wr_bytes))
            through = p->tag;
    }
    return dev_stream_complete(s, through);
}

fsdp_status dev_stream_push(fsdp_stream *s, fsdp_comm_request *req, const void *rd, size_t rd_bytes,
                            const void *wr, size_t wr_bytes) {
    int done = 0;
    fsdp_status st = fsdp_comm_test(req, &done);
    if (st != FSDP_OK || done) {  // local and shared-memory backends: already complete
        fsdp_status w = fsdp_comm_wait(req);
        return st != FSDP_OK ? st : w;
    }
    if (s->n_pending == DEV_MAX_PENDING) retire_oldest(s);
    s->pending[(s->head + s->n_pending) % DEV_MAX_PENDING] =
        (dev_pending){.req = req, .tag = ++s->started, .rd = rd, .wr = wr, .rd_bytes = rd_bytes, .wr_bytes = wr_bytes};
    s->n_pending++;
    return take_error(s);
}

// ---------------------------------------------------------------------------------------------
// Devices

// "cpu", "guard", "cuda" (the local rank's GPU: *ordinal -1) or "cuda:N"
static int parse_kind(const char *name, fsdp_device_kind *kind, int *ordinal) {
    *ordinal = -1;
    if (strcasecmp(name, "cpu") == 0) *kind = FSDP_DEVICE_CPU;
    else if (strcasecmp(name, "guard") == 0) *kind = FSDP_DEVICE_GUARD;
    else if (strcasecmp(name, "cuda") == 0) *kind = FSDP_DEVICE_CUDA;
    else if (strncasecmp(name, "cuda:", 5) == 0) {
        char *end;
        long n = strtol(name + 5, &end, 10);
        if (end == name + 5 || *end || n < 0 || n > 1024) return 0;
        *kind = FSDP_DEVICE_CUDA, *ordinal = (int)n;
    } else {
        return 0;
    }
    return 1;
}

// FSDP_COMM_PROGRESS: "poll" (the default: an MPI_Test between kernels moves the collectives in flight)
// or "none" (they move only when waited for; for measuring what the polls buy). *on: the setting.
static fsdp_status progress_setting(int *on) {
    const char *v = fsdp_tunable(FSDP_ENV_COMM_PROGRESS);
    *on = 1;
    if (!v || !*v || strcasecmp(v, "poll") == 0) return FSDP_OK;
    if (strcasecmp(v, "none") == 0) {
        *on = 0;
        return FSDP_OK;
    }
    return fsdp_error(FSDP_ERR_INVALID_ARG, "FSDP_COMM_PROGRESS=%s: expected poll or none", v);
}

fsdp_status fsdp_dev_open(const char *name, fsdp_dev **out) {
    *out = NULL;
    int progress;
    FSDP_CHECK(progress_setting(&progress));
    if (!name || !*name) name = fsdp_tunable(FSDP_ENV_DEVICE);
    if (!name || !*name) name = "cpu";
    fsdp_device_kind kind;
    int ordinal;
    if (!parse_kind(name, &kind, &ordinal))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "unknown device '%s' (expected cpu, guard, cuda or cuda:N)", name);
    fsdp_dev *d = calloc(1, sizeof *d);
    if (!d) return fsdp_error(FSDP_ERR_NOMEM, "out of memory opening device %s", name);
    d->kind = kind;
    d->progress = progress;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) {
        d->streams[i].dev = d;
        d->streams[i].id = (fsdp_stream_id)i;
    }
    d->cuda_ordinal = -1;
    fsdp_status st = FSDP_OK;
    if (kind == FSDP_DEVICE_GUARD) st = dev_guard_open(d);
    if (kind == FSDP_DEVICE_CUDA && (st = dev_cuda_open(d, ordinal)) != FSDP_OK) {
        char msg[DEV_ERR_MSG];
        snprintf(msg, sizeof msg, "%s", fsdp_last_error());
        dev_cuda_close(d);
        fsdp_error(st, "%s", msg);
    }
    if (st != FSDP_OK) {
        free(d);
        return st;
    }
    *out = d;
    return FSDP_OK;
}

void fsdp_dev_close(fsdp_dev *d) {
    if (!d) return;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) dev_stream_retire_all(&d->streams[i]);
    release_deferred(d);
    if (d->kind == FSDP_DEVICE_GUARD) dev_guard_close(d);
    if (d->kind == FSDP_DEVICE_CUDA) dev_cuda_close(d);
    free(d);
}

static fsdp_dev *default_dev;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void open_default(void) {
    const char *env = fsdp_tunable(FSDP_ENV_DEVICE);
    fsdp_device_kind kind;
    int ordinal;
    if (env && *env && !parse_kind(env, &kind, &ordinal)) {
        fprintf(stderr, "fsdp: FSDP_DEVICE=%s: unknown device (expected cpu, guard, cuda or cuda:N)\n", env);
        abort();
    }
    if (fsdp_dev_open(env, &default_dev) != FSDP_OK) {
        fprintf(stderr, "fsdp: FSDP_DEVICE=%s: %s\n", env ? env : "", fsdp_last_error());
        abort();
    }
}

fsdp_dev *fsdp_dev_default(void) {
    pthread_once(&default_once, open_default);
    return default_dev;
}

const char *fsdp_dev_name(const fsdp_dev *d) { return kind_names[d->kind]; }
fsdp_device_kind fsdp_dev_kind(const fsdp_dev *d) { return d->kind; }
int fsdp_dev_host_addressable(const fsdp_dev *d) { return d->kind == FSDP_DEVICE_CPU; }

void fsdp_dev_enter(fsdp_dev *d) {
    if (d->kind == FSDP_DEVICE_GUARD) dev_guard_enter(d);
}

void fsdp_dev_leave(fsdp_dev *d) {
    if (d->kind == FSDP_DEVICE_GUARD) dev_guard_leave(d);
}

// ---------------------------------------------------------------------------------------------
// Memory

void *fsdp_dev_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    if (d->kind == FSDP_DEVICE_CUDA) return dev_cuda_alloc(d, bytes, cat);
    return d->kind == FSDP_DEVICE_GUARD ? dev_guard_alloc(d, bytes, cat) : fsdp_alloc(bytes, cat);
}

// fsdp_free(p) now, or once the collectives now in flight on d's streams are complete (one of them may
// still read or write p).
static void free_after_streams(fsdp_dev *d, void *p) {
    int busy = 0;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) busy |= d->streams[i].n_pending;
    if (!busy) {
        fsdp_free(p);
        return;
    }
    if (d->n_deferred == DEV_MAX_DEFERRED)  // full: complete the streams' work (releases every entry)
        for (int i = 0; i < FSDP_STREAM_COUNT; i++) dev_stream_retire_all(&d->streams[i]);
    dev_deferred *f = &d->deferred[d->n_deferred++];
    f->p = p;
    for (int i = 0; i < FSDP_STREAM_COUNT; i++) f->after[i] = d->streams[i].started;
    release_deferred(d);  // the streams may have just emptied
}

void fsdp_dev_free(fsdp_dev *d, void *p) {
    if (!p) return;
    if (d->kind == FSDP_DEVICE_CUDA) dev_cuda_free(d, p);
    else if (d->kind == FSDP_DEVICE_GUARD) dev_guard_free(d, p);
    else free_after_streams(d, p);
}

void *fsdp_dev_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) {
    if (d->kind == FSDP_DEVICE_CUDA) return dev_cuda_host_alloc(d, bytes, cat);
    return fsdp_alloc(bytes, cat);
}

void fsdp_dev_host_free(fsdp_dev *d, void *p) {
    if (!p) return;
    if (d->kind == FSDP_DEVICE_CUDA) dev_cuda_host_free(d, p);
    else free_after_streams(d, p);  // the CPU device lets collectives run on host memory too
}

fsdp_status fsdp_dev_register(fsdp_dev *d, void *p, size_t bytes, const char *what) {
    long page = sysconf(_SC_PAGESIZE);
    if (!p || (uintptr_t)p % (uintptr_t)page || !bytes)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_register(%s): %p (%zu bytes) is not a page-aligned region",
                          what ? what : "?", p, bytes);
    if (d->kind == FSDP_DEVICE_CUDA) return dev_cuda_register(d, p, bytes);
    return d->kind == FSDP_DEVICE_GUARD ? dev_guard_register(d, p, bytes, what ? what : "?") : FSDP_OK;
}

void fsdp_dev_unregister(fsdp_dev *d, void *p) {
    if (p && d->kind == FSDP_DEVICE_GUARD) dev_guard_unregister(d, p);
    if (p && d->kind == FSDP_DEVICE_CUDA) dev_cuda_unregister(d, p);
}

// ---------------------------------------------------------------------------------------------
// Streams and events

fsdp_stream *fsdp_dev_stream(fsdp_dev *d, fsdp_stream_id which) {
    FSDP_ASSERT(which >= 0 && which < FSDP_STREAM_COUNT);
    return &d->streams[which];
}

fsdp_dev *fsdp_stream_device(const fsdp_stream *s) { return s->dev; }

int fsdp_stream_in_flight(const fsdp_stream *s) { return s->n_pending; }

fsdp_status fsdp_stream_synchronize(fsdp_stream *s) {
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_stream_synchronize(s);
    return dev_stream_complete(s, s->started);
}

fsdp_status fsdp_event_create(fsdp_dev *d, fsdp_event **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return fsdp_error(FSDP_ERR_NOMEM, "out of memory creating an event");
    (*out)->dev = d;
    if (d->kind == FSDP_DEVICE_CUDA) {
        fsdp_status st = dev_cuda_event_create(*out);
        if (st != FSDP_OK) {
            free(*out);
            *out = NULL;
            return st;
        }
    }
    return FSDP_OK;
}

void fsdp_event_destroy(fsdp_event *e) {
    if (e && e->dev->kind == FSDP_DEVICE_CUDA) dev_cuda_event_destroy(e);
    free(e);
}

fsdp_status fsdp_event_record(fsdp_event *e, fsdp_stream *s) {
    if (s->dev != e->dev)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_event_record: the event belongs to another device than the stream");
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_event_record(e, s);
    e->stream = s;
    e->tag = s->started;
    return FSDP_OK;
}

fsdp_status fsdp_event_synchronize(fsdp_event *e) {
    if (e->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_event_synchronize(e);
    return e->stream ? dev_stream_complete(e->stream, e->tag) : FSDP_OK;
}

// The host devices run every stream's work when it is enqueued: s's later work is ordered after e
// once e is complete, so the host completes e now.
fsdp_status fsdp_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    if (s->dev != e->dev)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_stream_wait_event: the event belongs to another device than the stream");
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_stream_wait_event(s, e);
    return fsdp_event_synchronize(e);
}

int fsdp_event_query(fsdp_event *e) {
    if (e->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_event_query(e);
    fsdp_stream *s = e->stream;
    while (s && s->n_pending && s->pending[s->head].tag <= e->tag) {
        int done = 0;
        fsdp_status st = fsdp_comm_test(s->pending[s->head].req, &done);
        note_error(s, st);
        if (st == FSDP_OK && !done) return 0;
        retire_oldest(s);  // complete: its wait returns at once (and applies AVG's scaling)
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// Copies and memsets: run now, after what they depend on

fsdp_status fsdp_copy_h2d(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_copy(s, dst, src, bytes);
    FSDP_CHECK(dev_begin(s, src, bytes, dst, bytes));
    if (bytes) memcpy(dst, src, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status fsdp_copy_d2h(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_copy(s, dst, src, bytes);
    FSDP_CHECK(dev_begin(s, src, bytes, dst, bytes));
    if (bytes) memcpy(dst, src, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status fsdp_copy_d2d(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_copy(s, dst, src, bytes);
    FSDP_CHECK(dev_begin(s, src, bytes, dst, bytes));
    if (bytes && dst != src) memmove(dst, src, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status fsdp_dev_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_memset(s, dst, byte, bytes);
    FSDP_CHECK(dev_begin(s, NULL, 0, dst, bytes));
    if (bytes) memset(dst, byte, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status fsdp_copy_d2h_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    if (rows && (dpitch < row_bytes || spitch < row_bytes))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_copy_d2h_2d: rows of %zu bytes with pitches %zu (dst) and %zu (src)",
                          row_bytes, dpitch, spitch);
    if (s->dev->kind == FSDP_DEVICE_CUDA) return dev_cuda_copy_2d(s, dst, dpitch, src, spitch, row_bytes, rows);
    size_t src_span = rows ? spitch * (rows - 1) + row_bytes : 0, dst_span = rows ? dpitch * (rows - 1) + row_bytes : 0;
    FSDP_CHECK(dev_begin(s, src, src_span, dst, dst_span));
    unsigned char *d = dst;        // (rows, dpitch)
    const unsigned char *q = src;  // (rows, spitch)
    for (size_t r = 0; r < rows; r++) memcpy(d + r * dpitch, q + r * spitch, row_bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status fsdp_dev_read(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    FSDP_CHECK(fsdp_copy_d2h(s, dst, src, bytes));  // CPU devices: runs now, the value is there
    return s->dev->kind == FSDP_DEVICE_CUDA ? fsdp_stream_synchronize(s) : FSDP_OK;
}
