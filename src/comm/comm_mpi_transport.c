// comm_mpi_transport.c: the MPI transport: collectives as MPI's own (comm_mpi.c's calls with 64-bit
// counts). fp32 sums are in MPI's order; bf16 has no MPI sum, so the payloads travel as bf16 (an
// all-to-all of the slices for a reduce-scatter, an all-gather for an all-reduce) and each rank sums
// them in fp32 in rank order, rounding once: the same values as the shared-memory transport. AVG is
// MPI's sum scaled by 1/size here, after it completes.
#include "comm/comm_mpi_transport.h"

#include <stdlib.h>

#include "comm/comm_mpi.h"
#include "comm/comm_sum.h"
#include "core/alloc.h"

static float average_scale(const fsdp_comm *c, fsdp_reduce_op op) { return op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f; }

static void scale_f32(void *buf, size_t n, float s) {
    float *x = buf;  // (n,)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

// The scratch of the bf16 exchanges grows to the largest payload and is kept (accounted as
// communication memory).
static fsdp_bf16 *bf16_scratch(size_t count) {
    static fsdp_bf16 *buf;  // (cap,)
    static size_t cap;
    if (count > cap) {
        fsdp_free(buf);
        buf = fsdp_alloc(sizeof(fsdp_bf16) * count, FSDP_MEM_COMM);
        cap = buf ? count : 0;
    }
    return buf;
}

// dst (count,) = the scaled fp32 sum of n slices (n, count), rounded once
static void sum_bf16_slices(fsdp_bf16 *dst, const fsdp_bf16 *slices, size_t count, int n, float scale) {
    const fsdp_bf16 *src[n];
    for (int r = 0; r < n; r++) src[r] = slices + (size_t)r * count;
    comm_sum_bf16(dst, src, n, count, scale);
}

static fsdp_status reduce_scatter_bf16(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_reduce_op op) {
    fsdp_bf16 *slices = bf16_scratch(count * (size_t)c->size);  // (size, count) every rank's slice of mine
    if (!slices) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a bf16 reduce-scatter of %zu values", count);
    fsdp_status s = comm_mpi_alltoall(send, slices, count, sizeof(fsdp_bf16), MPI_UINT16_T, c->mpi);
    if (s == FSDP_OK) sum_bf16_slices(recv, slices, count, c->size, average_scale(c, op));
    return s;
}

static fsdp_status all_reduce_bf16(fsdp_comm *c, void *buf, size_t count, fsdp_reduce_op op) {
    fsdp_bf16 *all = bf16_scratch(count * (size_t)c->size);  // (size, count) every rank's buffer
    if (!all) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a bf16 all-reduce of %zu values", count);
    fsdp_status s = comm_mpi_allgather(buf, all, count, sizeof(fsdp_bf16), MPI_UINT16_T, c->mpi, c->rank);
    if (s == FSDP_OK) sum_bf16_slices(buf, all, count, c->size, average_scale(c, op));
    return s;
}

static fsdp_status mpi_all_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    (void)ctx;
    return comm_mpi_allgather(send, recv, count, fsdp_dtype_size(dt), comm_mpi_type(dt), c->mpi, c->rank);  // detects in place
}

static fsdp_status mpi_reduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                      fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    if (dt != FSDP_F32) return reduce_scatter_bf16(c, send, recv, count, op);
    fsdp_status s = comm_mpi_reduce_scatter(send, recv, count, sizeof(float), MPI_FLOAT, MPI_SUM, c->mpi, c->size);
    if (op == FSDP_AVG) scale_f32(recv, count, 1.0f / (float)c->size);
    return s;
}

static fsdp_status mpi_all_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    if (dt != FSDP_F32) return all_reduce_bf16(c, buf, count, op);
    fsdp_status s = comm_mpi_allreduce(buf, count, sizeof(float), MPI_FLOAT, MPI_SUM, c->mpi);
    if (op == FSDP_AVG) scale_f32(buf, count, 1.0f / (float)c->size);
    return s;
}

static fsdp_status mpi_broadcast(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, int root) {
    (void)ctx;
    return comm_mpi_bcast(buf, count, fsdp_dtype_size(dt), comm_mpi_type(dt), root, c->mpi);
}

// ---- nonblocking: one MPI call each (comm_path.c sends larger ones and bf16 sums to the blocking forms)

typedef struct mpi_op {
    MPI_Request req;   // MPI_REQUEST_NULL once complete
    float *scale_buf;  // AVG: these (scale_count,) floats are divided by the group size on completion
    size_t scale_count;
    float scale;
} mpi_op;

static mpi_op *new_op(void) {
    mpi_op *m = calloc(1, sizeof *m);
    if (m) m->req = MPI_REQUEST_NULL;
    return m;
}

// AVG: out (count,) floats, MPI's sum, become the mean when m completes
static void average_on_completion(mpi_op *m, const fsdp_comm *c, void *out, size_t count) {
    m->scale_buf = out;
    m->scale_count = count;
    m->scale = 1.0f / (float)c->size;
}

// *op_out = m once MPI took the call, else m is freed
static fsdp_status started(fsdp_status s, mpi_op *m, void **op_out) {
    if (s != FSDP_OK) {
        free(m);
        return s;
    }
    *op_out = m;
    return FSDP_OK;
}

static fsdp_status mpi_iall_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   void **op_out) {
    (void)ctx;
    *op_out = NULL;
    mpi_op *m = new_op();
    if (!m) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    return started(comm_mpi_iallgather(send, recv, count, fsdp_dtype_size(dt), comm_mpi_type(dt), c->mpi, c->rank,
                                       &m->req), m, op_out);
}

static fsdp_status mpi_ireduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, fsdp_reduce_op op, void **op_out) {
    (void)ctx, (void)dt;  // fp32 only
    *op_out = NULL;
    mpi_op *m = new_op();
    if (!m) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (op == FSDP_AVG) average_on_completion(m, c, recv, count);
    return started(comm_mpi_ireduce_scatter(send, recv, count, MPI_FLOAT, MPI_SUM, c->mpi, &m->req), m, op_out);
}

static fsdp_status mpi_iall_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                                   void **op_out) {
    (void)ctx, (void)dt;  // fp32 only
    *op_out = NULL;
    mpi_op *m = new_op();
    if (!m) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (op == FSDP_AVG) average_on_completion(m, c, buf, count);
    return started(comm_mpi_iallreduce(buf, count, MPI_FLOAT, MPI_SUM, c->mpi, &m->req), m, op_out);
}

// AVG: the sum, complete now, becomes the mean (once)
static void completed(mpi_op *m) {
    if (m->scale_buf) scale_f32(m->scale_buf, m->scale_count, m->scale);
    m->scale_buf = NULL;
}

static fsdp_status mpi_test(void *op, int *done) {
    mpi_op *m = op;
    fsdp_status s = comm_mpi_check(MPI_Test(&m->req, done, MPI_STATUS_IGNORE), "MPI_Test");
    if (s == FSDP_OK && *done) completed(m);
    return s;
}

static fsdp_status mpi_wait(void *op) {
    mpi_op *m = op;
    fsdp_status s = comm_mpi_check(MPI_Wait(&m->req, MPI_STATUS_IGNORE), "MPI_Wait");
    completed(m);
    return s;
}

static void mpi_release(void *op) { free(op); }

// Bytes one rank sends: the flat exchanges', except a bf16 all-reduce, which sends its whole buffer to
// every peer (an all-gather, summed here)
static size_t mpi_bytes_sent(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    if (kind == FSDP_COLL_ALL_REDUCE && dt == FSDP_BF16) return count * fsdp_dtype_size(dt) * (size_t)(c->size - 1);
    return fsdp_comm_flat_bytes(c->size, kind, count, dt);
}

const fsdp_comm_transport comm_mpi_transport = {
    .name = "mpi",
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .all_reduce = mpi_all_reduce,
    .broadcast = mpi_broadcast,
    .iall_gather = mpi_iall_gather,
    .ireduce_scatter = mpi_ireduce_scatter,
    .iall_reduce = mpi_iall_reduce,
    .test = mpi_test,
    .wait = mpi_wait,
    .release = mpi_release,
    .bytes_sent = mpi_bytes_sent,
};
