// cuda_comm.c: the cuda backend's collectives (cuda_backend.h): through NCCL on the stream where the
// group's path is NCCL (cuda_nccl.h: comm.h's call on the group, which comm.c routes to the NCCL
// transport), else staged through pinned host memory.
#include "device/cuda/cuda_backend.h"

#ifdef FSDP_HAVE_CUDA

#include "device/cuda/cuda_nccl.h"

// Runs `call` (comm.h's collective on c, on the device buffers) through NCCL on s when c's path is NCCL;
// returns from the enclosing function then, or on a failure deciding the path; falls through when staged.
#define VIA_NCCL(s, c, coll, call)                                               \
    do {                                                                         \
        fsdp_status nccl_st_;                                                    \
        cuda_nccl_group *nccl_g_ = cuda_nccl_begin((s), (c), (coll), &nccl_st_); \
        if (nccl_g_) return cuda_nccl_end(nccl_g_, (call));                      \
        if (nccl_st_ != FSDP_OK) return nccl_st_;                                \
    } while (0)

// A group of one rank: recv (bytes,) = send (bytes,) after s's work so far (nothing when they are one)
static fsdp_status identity(fsdp_stream *s, const void *send, void *recv, size_t bytes) {
    if (send == recv || bytes == 0) return dev_cuda_stream_status(s);
    return dev_cuda_copy(s, recv, send, bytes);
}

// Pinned host memory *in (in_bytes,) followed by *out (out_bytes,) (256-byte aligned), *in holding
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

// Host bytes (bytes,) to dev_out, complete on return (the stage is reused by the next collective).
static fsdp_status stage_out(fsdp_stream *s, void *dev_out, const void *host, size_t bytes) {
    FSDP_CHECK(dev_cuda_copy(s, dev_out, host, bytes));
    return dev_cuda_stream_synchronize(s);
}

fsdp_status cuda_all_gather(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    VIA_NCCL(s, c, "all_gather", fsdp_all_gather(c, send, recv, count, dt));
    if (fsdp_comm_size(c) == 1) return identity(s, send, recv, bytes);
    unsigned char *hrecv = dev_cuda_stage(s, all);  // (all,): the send staged at this rank's place in it
    if (!hrecv) return FSDP_ERR_NOMEM;
    unsigned char *hsend = hrecv + bytes * (size_t)fsdp_comm_rank(c);
    FSDP_CHECK(dev_cuda_copy(s, hsend, send, bytes));
    FSDP_CHECK(dev_cuda_stream_synchronize(s));
    FSDP_CHECK(fsdp_all_gather(c, hsend, hrecv, count, dt));
    return stage_out(s, recv, hrecv, all);
}

fsdp_status cuda_reduce_scatter(fsdp_stream *s, fsdp_comm *c, const void *send, void *recv, size_t count,
                                fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt), all = bytes * (size_t)fsdp_comm_size(c);
    VIA_NCCL(s, c, "reduce_scatter", fsdp_reduce_scatter(c, send, recv, count, dt, op));
    if (fsdp_comm_size(c) == 1) return identity(s, send, recv, bytes);  // a sum, mean, max or min of one
    unsigned char *hsend, *hrecv;
    FSDP_CHECK(stage_in(s, send, all, bytes, &hsend, &hrecv));
    FSDP_CHECK(fsdp_reduce_scatter(c, hsend, hrecv, count, dt, op));
    return stage_out(s, recv, hrecv, bytes);
}

fsdp_status cuda_all_reduce(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    size_t bytes = count * fsdp_dtype_size(dt);
    VIA_NCCL(s, c, "all_reduce", fsdp_all_reduce(c, buf, count, dt, op));
    if (fsdp_comm_size(c) == 1) return identity(s, buf, buf, bytes);
    unsigned char *h, *unused;
    FSDP_CHECK(stage_in(s, buf, bytes, 0, &h, &unused));
    FSDP_CHECK(fsdp_all_reduce(c, h, count, dt, op));
    return stage_out(s, buf, h, bytes);
}

fsdp_status cuda_broadcast(fsdp_stream *s, fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    size_t bytes = count * fsdp_dtype_size(dt);
    VIA_NCCL(s, c, "broadcast", fsdp_broadcast(c, buf, count, dt, root));
    if (fsdp_comm_size(c) == 1) return identity(s, buf, buf, bytes);
    unsigned char *h, *unused;
    FSDP_CHECK(stage_in(s, buf, bytes, 0, &h, &unused));
    FSDP_CHECK(fsdp_broadcast(c, h, count, dt, root));
    return stage_out(s, buf, h, bytes);
}

#endif  // FSDP_HAVE_CUDA
