// device_comm.c: device_comm.h's collectives, each through the backend table of the stream's device
// (cpu: in flight on the stream; guard: complete inside the call; cuda: cuda/cuda_comm.c).
#include <string.h>

#include "device/backend_impl.h"
#include "device/device_comm.h"

fsdp_status fsdp_dev_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    return s->dev->iface->all_gather(s, c, send, recv, count, dt);
}

fsdp_status fsdp_dev_all_gather_shared(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, const size_t (*copy)[2], size_t n_copy) {
    if (!s->dev->iface->all_gather_shared)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_dev_all_gather_shared: shared-memory windows are host memory; "
                                                "the %s device gathers with fsdp_dev_all_gather", s->dev->iface->name);
    return s->dev->iface->all_gather_shared(s, c, send, recv, count, dt, copy, n_copy);
}

fsdp_status fsdp_dev_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                    fsdp_dtype dt, fsdp_reduce_op op) {
    return s->dev->iface->reduce_scatter(s, c, send, recv, count, dt, op);
}

fsdp_status fsdp_dev_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    return s->dev->iface->all_reduce(s, c, buf, count, dt, op);
}

fsdp_status fsdp_dev_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    return s->dev->iface->broadcast(s, c, buf, count, dt, root);
}

fsdp_status fsdp_dev_all_reduce_double(fsdp_stream *s, fsdp_comm *c, double *host_value) {
    FSDP_CHECK(s->dev->iface->stream_status(s));  // a failure noted on s comes first
    return fsdp_all_reduce_double(c, host_value);
}

fsdp_status fsdp_dev_comm_check(const fsdp_dev *d, const char *mode) {
    if (!mode || !strcmp(mode, "auto") || !strcmp(mode, "host")) return FSDP_OK;
    if (d->iface->comm_check) return d->iface->comm_check(d, mode);
    return fsdp_error(FSDP_ERR_INVALID_ARG, "the %s device has no %s transport: its collectives run on host memory "
                      "(MPI, shared memory): --comm auto or host", d->iface->name, mode);
}

static int zero_copy_shared(const fsdp_dev *d) {
    fsdp_dev_caps caps;
    fsdp_dev_capabilities(d, &caps);
    return caps.zero_copy_shared;
}

void *fsdp_dev_alloc_shared(fsdp_dev *d, fsdp_comm *c, size_t bytes) {
    return zero_copy_shared(d) ? fsdp_comm_alloc_shared(c, bytes) : NULL;
}

void fsdp_dev_free_shared(fsdp_dev *d, fsdp_comm *c, void *p) {
    (void)d;
    if (p) fsdp_comm_free_shared(c, p);
}

const void *fsdp_dev_shared_at(const fsdp_dev *d, const fsdp_comm *c, const void *p, int q) {
    return zero_copy_shared(d) ? fsdp_comm_shared_at(c, p, q) : NULL;
}

const void *fsdp_dev_shared_concat(const fsdp_dev *d, const fsdp_comm *c, const void *p, size_t bytes) {
    return zero_copy_shared(d) ? fsdp_comm_shared_concat(c, p, bytes) : NULL;
}
