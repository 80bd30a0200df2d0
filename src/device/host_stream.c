// host_stream.c: the streams of the backends that run their work on the host when it is called (cpu,
// guard; backend_impl.h): collectives in flight, their ordering against later work, events, frees
// deferred until the collectives that may use the memory are done, and the copies and memsets.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/backend_impl.h"

// ---------------------------------------------------------------------------------------------
// Failures noted on a stream

void dev_note_error(fsdp_stream *s, fsdp_status st) {
    if (st == FSDP_OK || s->err != FSDP_OK) return;
    s->err = st;
    snprintf(s->err_msg, sizeof s->err_msg, "%s", fsdp_last_error());
}

fsdp_status dev_take_error(fsdp_stream *s) {
    if (s->err == FSDP_OK) return FSDP_OK;
    fsdp_status st = s->err;
    s->err = FSDP_OK;
    return fsdp_error(st, "%s", s->err_msg);
}

fsdp_status dev_start_failed(fsdp_status st, fsdp_comm_request *req) {
    char msg[DEV_ERR_MSG];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    if (req) (void)fsdp_comm_wait(req);
    return fsdp_error(st, "%s", msg);
}

// ---------------------------------------------------------------------------------------------
// Collectives in flight

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
    dev_note_error(s, fsdp_comm_wait(req));
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
            dev_note_error(s, st);
            if (st != FSDP_OK || !done) break;
        }
    }
}

fsdp_status dev_stream_complete(fsdp_stream *s, uint64_t tag) {
    while (s->n_pending && s->pending[s->head].tag <= tag) retire_oldest(s);
    return dev_take_error(s);
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
    return dev_take_error(s);
}

void dev_free_after_streams(fsdp_dev *d, void *p) {
    if (!p) return;
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

// ---------------------------------------------------------------------------------------------
// Streams and events

fsdp_status dev_host_stream_synchronize(fsdp_stream *s) { return dev_stream_complete(s, s->started); }

// (dev_stream_order with no buffers completes nothing: it returns the failure noted, once)
fsdp_status dev_host_stream_status(fsdp_stream *s) {
    return s->err ? dev_stream_order(s, NULL, 0, NULL, 0) : FSDP_OK;
}

int dev_host_stream_in_flight(const fsdp_stream *s) { return s->n_pending; }

fsdp_status dev_host_event_record(fsdp_event *e, fsdp_stream *s) {
    e->stream = s;
    e->tag = s->started;
    return FSDP_OK;
}

fsdp_status dev_host_event_synchronize(fsdp_event *e) {
    return e->stream ? dev_stream_complete(e->stream, e->tag) : FSDP_OK;
}

// The host devices run every stream's work when it is enqueued: s's later work is ordered after e
// once e is complete, so the host completes e now.
fsdp_status dev_host_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    (void)s;
    return dev_host_event_synchronize(e);
}

int dev_host_event_query(fsdp_event *e) {
    fsdp_stream *s = e->stream;
    while (s && s->n_pending && s->pending[s->head].tag <= e->tag) {
        int done = 0;
        fsdp_status st = fsdp_comm_test(s->pending[s->head].req, &done);
        dev_note_error(s, st);
        if (st == FSDP_OK && !done) return 0;
        retire_oldest(s);  // complete: its wait returns at once (and applies AVG's scaling)
    }
    return 1;
}

// ---------------------------------------------------------------------------------------------
// Copies and memsets: run now, after what they depend on

fsdp_status dev_host_copy(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    FSDP_CHECK(dev_begin(s, src, bytes, dst, bytes));
    if (bytes && dst != src) memmove(dst, src, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status dev_host_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    FSDP_CHECK(dev_begin(s, NULL, 0, dst, bytes));
    if (bytes) memset(dst, byte, bytes);
    dev_end(s);
    return FSDP_OK;
}

fsdp_status dev_host_copy_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    size_t src_span = rows ? spitch * (rows - 1) + row_bytes : 0, dst_span = rows ? dpitch * (rows - 1) + row_bytes : 0;
    FSDP_CHECK(dev_begin(s, src, src_span, dst, dst_span));
    unsigned char *d = dst;        // (rows, dpitch)
    const unsigned char *q = src;  // (rows, spitch)
    for (size_t r = 0; r < rows; r++) memcpy(d + r * dpitch, q + r * spitch, row_bytes);
    dev_end(s);
    return FSDP_OK;
}

// ---------------------------------------------------------------------------------------------
// The collectives every host backend runs to completion in the call

fsdp_status dev_host_all_gather_shared(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    fsdp_status st = fsdp_all_gather_shared(c, send, recv, count, dt, copy, n_copy);
    dev_end(s);
    return st;
}

fsdp_status dev_host_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    size_t bytes = count * fsdp_dtype_size(dt);
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    fsdp_status st = fsdp_broadcast(c, buf, count, dt, root);
    dev_end(s);
    return st;
}
