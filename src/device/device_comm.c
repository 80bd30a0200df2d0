// device_comm.c: collectives on streams (device_comm.h). The CPU device keeps the nonblocking ones in
// flight on the stream (device_impl.h); the guard device runs them inside one enter/leave.
#include <stdio.h>

#include "device/device_comm.h"
#include "device/device_impl.h"

// A start that failed: frees its request, keeping the start's message.
static fsdp_status start_failed(fsdp_status st, fsdp_comm_request *req) {
    char msg[DEV_ERR_MSG];
    snprintf(msg, sizeof msg, "%s", fsdp_last_error());
    if (req) (void)fsdp_comm_wait(req);
    return fsdp_error(st, "%s", msg);
}

static int guarded(const fsdp_stream *s) { return s->dev->kind == FSDP_DEVICE_GUARD; }

static fsdp_status done_guarded(fsdp_stream *s, fsdp_status st) {
    dev_end(s);
    return st;
}

fsdp_status fsdp_dev_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    if (guarded(s)) return done_guarded(s, fsdp_all_gather(c, send, recv, count, dt));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_iall_gather(c, send, recv, count, dt, &req);
    if (st != FSDP_OK) return start_failed(st, req);
    return dev_stream_push(s, req, send, bytes, recv, all);
}

fsdp_status fsdp_dev_all_gather_shared(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    fsdp_status st = fsdp_all_gather_shared(c, send, recv, count, dt, copy, n_copy);
    dev_end(s);
    return st;
}

fsdp_status fsdp_dev_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                    fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    FSDP_CHECK(dev_begin(s, send, all, recv, bytes));
    if (guarded(s)) return done_guarded(s, fsdp_reduce_scatter(c, send, recv, count, dt, op));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_ireduce_scatter(c, send, recv, count, dt, op, &req);
    if (st != FSDP_OK) return start_failed(st, req);
    return dev_stream_push(s, req, send, all, recv, bytes);
}

fsdp_status fsdp_dev_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt);
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    if (guarded(s)) return done_guarded(s, fsdp_all_reduce(c, buf, count, dt, op));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_iall_reduce(c, buf, count, dt, op, &req);
    if (st != FSDP_OK) return start_failed(st, req);
    return dev_stream_push(s, req, buf, bytes, buf, bytes);
}

fsdp_status fsdp_dev_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    size_t bytes = count * fsdp_dtype_size(dt);
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    fsdp_status st = fsdp_broadcast(c, buf, count, dt, root);
    dev_end(s);
    return st;
}

fsdp_status fsdp_dev_all_reduce_double(fsdp_stream *s, fsdp_comm *c, double *host_value) {
    if (s->err) FSDP_CHECK(dev_stream_order(s, NULL, 0, NULL, 0));  // a failure noted on s comes first
    return fsdp_all_reduce_double(c, host_value);
}
