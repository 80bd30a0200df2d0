// device_comm.c: collectives on streams (device_comm.h). The CPU device keeps the nonblocking ones in
// flight on the stream (device_impl.h); the guard device runs them inside one enter/leave; the CUDA
// device stages them through pinned host memory (the stream's work first, the bytes to the host, the
// host collective, the result back), complete when the call returns; with one rank in the group a
// collective is the identity and stays on the stream (a device copy where recv is not send; nothing
// else), as NCCL's would: no host round trip, no synchronization.
#include <stdio.h>

#include "device/device_comm.h"
#include "device/device_cuda_impl.h"
#include "device/device_impl.h"

static int on_cuda(const fsdp_stream *s) { return s->dev->kind == FSDP_DEVICE_CUDA; }

// CUDA and a group of one: the collective's result is its input
static int cuda_alone(const fsdp_stream *s, const fsdp_comm *c) { return on_cuda(s) && fsdp_comm_size(c) == 1; }

// CUDA, a group of one: recv (bytes,) = send (bytes,) after s's work so far (nothing when they are one)
static fsdp_status identity(fsdp_stream *s, const void *send, void *recv, size_t bytes) {
    if (send == recv || bytes == 0) return dev_cuda_stream_status(s);
    return dev_cuda_copy(s, recv, send, bytes);
}

// CUDA: pinned host memory *in (in_bytes,) followed by *out (out_bytes,) (256-byte aligned), *in holding
// dev_in (in_bytes,) after s's work so far.
static fsdp_status stage_in(fsdp_stream *s, const void *dev_in, size_t in_bytes, size_t out_bytes,
                            unsigned char **in, unsigned char **out) {
    size_t off = (in_bytes + 255) & ~(size_t)255;
    unsigned char *h = dev_cuda_stage(s, off + out_bytes);
    if (!h) return FSDP_ERR_NOMEM;
    FSDP_CHECK(dev_cuda_copy(s, h, dev_in, in_bytes));
    FSDP_CHECK(dev_cuda_stream_synchronize(s));
    *in = h, *out = h + off;
    return FSDP_OK;
}

// CUDA: host bytes (bytes,) to dev_out, complete on return (the stage is reused by the next collective).
static fsdp_status stage_out(fsdp_stream *s, void *dev_out, const void *host, size_t bytes) {
    FSDP_CHECK(dev_cuda_copy(s, dev_out, host, bytes));
    return dev_cuda_stream_synchronize(s);
}

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
    if (cuda_alone(s, c)) return identity(s, send, recv, bytes);
    if (on_cuda(s)) {  // staged in place: the send at this rank's place in the host recv
        unsigned char *hrecv = dev_cuda_stage(s, all);  // (all,)
        if (!hrecv) return FSDP_ERR_NOMEM;
        unsigned char *hsend = hrecv + bytes * (size_t)fsdp_comm_rank(c);
        FSDP_CHECK(dev_cuda_copy(s, hsend, send, bytes));
        FSDP_CHECK(dev_cuda_stream_synchronize(s));
        FSDP_CHECK(fsdp_all_gather(c, hsend, hrecv, count, dt));
        return stage_out(s, recv, hrecv, all);
    }
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
    if (on_cuda(s))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_all_gather_shared: shared-memory windows are host memory; "
                                                "the cuda device gathers with fsdp_dev_all_gather");
    FSDP_CHECK(dev_begin(s, send, bytes, recv, all));
    fsdp_status st = fsdp_all_gather_shared(c, send, recv, count, dt, copy, n_copy);
    dev_end(s);
    return st;
}

fsdp_status fsdp_dev_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                    fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    if (cuda_alone(s, c)) return identity(s, send, recv, bytes);  // a sum, mean, max or min of one
    if (on_cuda(s)) {
        unsigned char *hsend, *hrecv;
        FSDP_CHECK(stage_in(s, send, all, bytes, &hsend, &hrecv));
        FSDP_CHECK(fsdp_reduce_scatter(c, hsend, hrecv, count, dt, op));
        return stage_out(s, recv, hrecv, bytes);
    }
    FSDP_CHECK(dev_begin(s, send, all, recv, bytes));
    if (guarded(s)) return done_guarded(s, fsdp_reduce_scatter(c, send, recv, count, dt, op));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_ireduce_scatter(c, send, recv, count, dt, op, &req);
    if (st != FSDP_OK) return start_failed(st, req);
    return dev_stream_push(s, req, send, all, recv, bytes);
}

fsdp_status fsdp_dev_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt);
    if (cuda_alone(s, c)) return identity(s, buf, buf, bytes);
    if (on_cuda(s)) {
        unsigned char *h, *unused;
        FSDP_CHECK(stage_in(s, buf, bytes, 0, &h, &unused));
        FSDP_CHECK(fsdp_all_reduce(c, h, count, dt, op));
        return stage_out(s, buf, h, bytes);
    }
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    if (guarded(s)) return done_guarded(s, fsdp_all_reduce(c, buf, count, dt, op));
    fsdp_comm_request *req = NULL;
    fsdp_status st = fsdp_iall_reduce(c, buf, count, dt, op, &req);
    if (st != FSDP_OK) return start_failed(st, req);
    return dev_stream_push(s, req, buf, bytes, buf, bytes);
}

fsdp_status fsdp_dev_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    size_t bytes = count * fsdp_dtype_size(dt);
    if (cuda_alone(s, c)) return identity(s, buf, buf, bytes);
    if (on_cuda(s)) {
        unsigned char *h, *unused;
        FSDP_CHECK(stage_in(s, buf, bytes, 0, &h, &unused));
        FSDP_CHECK(fsdp_broadcast(c, h, count, dt, root));
        return stage_out(s, buf, h, bytes);
    }
    FSDP_CHECK(dev_begin(s, buf, bytes, buf, bytes));
    fsdp_status st = fsdp_broadcast(c, buf, count, dt, root);
    dev_end(s);
    return st;
}

fsdp_status fsdp_dev_all_reduce_double(fsdp_stream *s, fsdp_comm *c, double *host_value) {
    if (on_cuda(s)) FSDP_CHECK(dev_cuda_stream_status(s));
    if (s->err) FSDP_CHECK(dev_stream_order(s, NULL, 0, NULL, 0));  // a failure noted on s comes first
    return fsdp_all_reduce_double(c, host_value);
}
