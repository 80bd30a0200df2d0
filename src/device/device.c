// device.c: device.h's calls, each through the device's backend table (backend_impl.h), with the
// checks every backend shares. Opening and the default device: device_open.c.
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/backend_impl.h"

const char *fsdp_dev_name(const fsdp_dev *d) { return d->iface->name; }
fsdp_device_kind fsdp_dev_kind(const fsdp_dev *d) { return d->iface->kind; }

void fsdp_dev_capabilities(const fsdp_dev *d, fsdp_dev_caps *out) {
    *out = (fsdp_dev_caps){0};
    d->iface->capabilities(d, out);
}

int fsdp_dev_host_addressable(const fsdp_dev *d) {
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(d, &caps);
    return caps.host_addressable;
}

fsdp_status fsdp_dev_mem_info(fsdp_dev *d, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return d->iface->mem_info(d, free_bytes, total_bytes);
}

void fsdp_dev_enter(fsdp_dev *d) {
    if (d->iface->enter) d->iface->enter(d);
}

void fsdp_dev_leave(fsdp_dev *d) {
    if (d->iface->leave) d->iface->leave(d);
}

const struct fsdp_kernels *fsdp_dev_kernels(const fsdp_dev *d, int bf16) { return d->iface->kernels(d, bf16 != 0); }

// ---------------------------------------------------------------------------------------------
// Memory

void *fsdp_dev_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) { return d->iface->alloc(d, bytes, cat); }

void fsdp_dev_free(fsdp_dev *d, void *p) {
    if (p) d->iface->free(d, p);
}

void *fsdp_dev_host_alloc(fsdp_dev *d, size_t bytes, fsdp_mem_category cat) { return d->iface->host_alloc(d, bytes, cat); }

void fsdp_dev_host_free(fsdp_dev *d, void *p) {
    if (p) d->iface->host_free(d, p);
}

fsdp_status fsdp_dev_register(fsdp_dev *d, void *p, size_t bytes, const char *what) {
    long page = sysconf(_SC_PAGESIZE);
    if (!p || (uintptr_t)p % (uintptr_t)page || !bytes)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_register(%s): %p (%zu bytes) is not a page-aligned region",
                          what ? what : "?", p, bytes);
    return d->iface->register_host(d, p, bytes, what ? what : "?");
}

void fsdp_dev_unregister(fsdp_dev *d, void *p) {
    if (p) d->iface->unregister_host(d, p);
}

// ---------------------------------------------------------------------------------------------
// Streams and events

fsdp_stream *fsdp_dev_stream(fsdp_dev *d, fsdp_stream_id which) {
    FSDP_ASSERT(which >= 0 && which < FSDP_STREAM_COUNT);
    return &d->streams[which];
}

fsdp_dev *fsdp_stream_device(const fsdp_stream *s) { return s->dev; }
int fsdp_stream_in_flight(const fsdp_stream *s) { return s->dev->iface->stream_in_flight(s); }
fsdp_status fsdp_stream_synchronize(fsdp_stream *s) { return s->dev->iface->stream_synchronize(s); }

fsdp_status fsdp_event_create(fsdp_dev *d, fsdp_event **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return fsdp_error(FSDP_ERR_NOMEM, "out of memory creating an event");
    (*out)->dev = d;
    fsdp_status st = d->iface->event_create ? d->iface->event_create(*out) : FSDP_OK;
    if (st != FSDP_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

void fsdp_event_destroy(fsdp_event *e) {
    if (e && e->dev->iface->event_destroy) e->dev->iface->event_destroy(e);
    free(e);
}

fsdp_status fsdp_event_record(fsdp_event *e, fsdp_stream *s) {
    if (s->dev != e->dev)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_event_record: the event belongs to another device than the stream");
    return s->dev->iface->event_record(e, s);
}

fsdp_status fsdp_event_synchronize(fsdp_event *e) { return e->dev->iface->event_synchronize(e); }

fsdp_status fsdp_stream_wait_event(fsdp_stream *s, fsdp_event *e) {
    if (s->dev != e->dev)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_stream_wait_event: the event belongs to another device than the stream");
    return s->dev->iface->stream_wait_event(s, e);
}

int fsdp_event_query(fsdp_event *e) { return e->dev->iface->event_query(e); }

// ---------------------------------------------------------------------------------------------
// Copies and memsets

fsdp_status fsdp_copy_h2d(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    return s->dev->iface->copy(s, dst, src, bytes);
}

fsdp_status fsdp_copy_d2h(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    return s->dev->iface->copy(s, dst, src, bytes);
}

fsdp_status fsdp_copy_d2d(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    return s->dev->iface->copy(s, dst, src, bytes);
}

fsdp_status fsdp_dev_memset(fsdp_stream *s, void *dst, int byte, size_t bytes) {
    return s->dev->iface->memset(s, dst, byte, bytes);
}

fsdp_status fsdp_copy_d2h_2d(fsdp_stream *s, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t row_bytes, size_t rows) {
    if (rows && (dpitch < row_bytes || spitch < row_bytes))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_copy_d2h_2d: rows of %zu bytes with pitches %zu (dst) and %zu (src)",
                          row_bytes, dpitch, spitch);
    return s->dev->iface->copy_2d(s, dst, dpitch, src, spitch, row_bytes, rows);
}

fsdp_status fsdp_dev_read(fsdp_stream *s, void *dst, const void *src, size_t bytes) {
    FSDP_CHECK(fsdp_copy_d2h(s, dst, src, bytes));
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(s->dev, &caps);
    return caps.runs_at_call ? FSDP_OK : fsdp_stream_synchronize(s);  // host devices: the value is there
}
