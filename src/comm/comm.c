// comm.c: process groups (world, split), the local backend and the MPI backend's dispatch between
// shared-memory and MPI collectives, nonblocking requests and statistics.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_impl.h"
#include "core/alloc.h"
#include "core/timer.h"

static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static MPI_Datatype mpi_type(fsdp_dtype dt) { return dt == FSDP_F32 ? MPI_FLOAT : MPI_UINT16_T; }

static fsdp_comm *comm_new(comm_backend b) {
    fsdp_comm *c = calloc(1, sizeof *c);
    if (c) c->backend = b;
    return c;
}

// Takes m into c (the caller frees c on failure: fsdp_comm_free releases m too).
static fsdp_status mpi_group(fsdp_comm *c, MPI_Comm m) {
    c->mpi = m;
    FSDP_CHECK(comm_mpi_check(MPI_Comm_rank(m, &c->rank), "MPI_Comm_rank"));
    FSDP_CHECK(comm_mpi_check(MPI_Comm_size(m, &c->size), "MPI_Comm_size"));
    if (c->size > 1) FSDP_CHECK(comm_shm_setup(c));
    return c->size > 1 ? comm_hier_setup(c) : FSDP_OK;
}

fsdp_status comm_group_adopt(fsdp_comm *c, MPI_Comm m) { return mpi_group(c, m); }

// Hands a new communicator to *out, or frees it and returns the error.
static fsdp_status adopt(fsdp_comm *c, MPI_Comm m, fsdp_comm **out) {
    fsdp_status s = mpi_group(c, m);
    if (s != FSDP_OK) {
        fsdp_comm_free(c);
        return s;
    }
    *out = c;
    return FSDP_OK;
}

fsdp_status fsdp_comm_world(fsdp_comm **world, int *argc, char ***argv) {
    fsdp_mem_init();  // Open MPI's temporary buffers must not go back to the kernel on every call
    *world = NULL;
    if (!launched_by_mpi()) {
        fsdp_comm *c = comm_new(COMM_LOCAL);
        if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
        c->size = 1;
        *world = c;
        return FSDP_OK;
    }
    int initialized = 0, provided = 0;
    FSDP_CHECK(comm_mpi_check(MPI_Initialized(&initialized), "MPI_Initialized"));
    if (!initialized && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return fsdp_error(FSDP_ERR_COMM, "MPI_Init_thread failed");
    fsdp_comm *c = comm_new(COMM_MPI);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    c->owns_mpi = !initialized;
    MPI_Comm dup;
    fsdp_status s = comm_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    // Errors come back as return codes (checked everywhere, turned into fsdp_status) instead of
    // aborting inside MPI; communicators split from this one inherit it.
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (s != FSDP_OK) {
        if (c->owns_mpi) MPI_Finalize();
        free(c);
        return s;
    }
    return adopt(c, dup, world);
}

fsdp_status fsdp_comm_split(fsdp_comm *parent, int color, int key, fsdp_comm **out) {
    *out = NULL;
    fsdp_comm *c = comm_new(parent->backend);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (parent->backend == COMM_LOCAL) {
        c->size = 1;
        *out = c;
        return FSDP_OK;
    }
    MPI_Comm m;
    fsdp_status s = comm_mpi_check(MPI_Comm_split(parent->mpi, color, key, &m), "MPI_Comm_split");
    if (s != FSDP_OK) {
        free(c);
        return s;
    }
    return adopt(c, m, out);
}

fsdp_status fsdp_comm_split_node(fsdp_comm *parent, fsdp_comm **out) {
    *out = NULL;
    fsdp_comm *c = comm_new(parent->backend);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (parent->backend == COMM_LOCAL) {
        c->size = 1;
        *out = c;
        return FSDP_OK;
    }
    MPI_Comm m;
    int rc = comm_host_split(parent->mpi, parent->rank, &m);
    fsdp_status s = comm_mpi_check(rc, "MPI_Comm_split_type");
    if (s != FSDP_OK) {
        free(c);
        return s;
    }
    return adopt(c, m, out);
}

void fsdp_comm_free(fsdp_comm *c) {
    if (!c) return;
    if (c->backend == COMM_MPI) {
        comm_shm_free(c);
        comm_p2p_release_spare(c);
        comm_hier_free_groups(c);
        // teardown: nothing left to report a failure to, and the process is ending or moving on
        (void)MPI_Comm_free(&c->mpi);
        if (c->owns_mpi) (void)MPI_Finalize();
    }
    free(c);
}

int fsdp_comm_rank(const fsdp_comm *c) { return c->rank; }
int fsdp_comm_size(const fsdp_comm *c) { return c->size; }
const char *fsdp_comm_backend(const fsdp_comm *c) {
    return c->backend == COMM_LOCAL ? "local" : c->shm ? "mpi+shm" : "mpi";
}
fsdp_comm_stats fsdp_comm_get_stats(const fsdp_comm *c) { return c->stats; }

static const char *volatile current_name;
static volatile double current_since;

void fsdp_comm_current(const char **name, double *since) {
    *name = current_name;
    *since = current_since;
}

static void enter(const char *name) {
    current_name = name;
    current_since = fsdp_now_sec();
}

static void leave(void) { current_since = 0.0; }

void fsdp_comm_set_sequence_check(fsdp_comm *c, int on) { c->check_sequence = on; }

const char *fsdp_comm_host(fsdp_comm *c) {
    if (!c->host[0]) {
        int len = 0;
        if (c->backend != COMM_MPI || MPI_Get_processor_name(c->host, &len) != MPI_SUCCESS || len <= 0)
            if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "?");
        c->host[sizeof c->host - 1] = 0;
    }
    return c->host;
}

// Compares (call number, kind, count, elements per MPI call) across the group; kind: 1 all-gather,
// 2 reduce-scatter, 3 all-reduce, 4 broadcast. 64-bit throughout: counts above INT_MAX compare exactly.
static fsdp_status check_sequence(fsdp_comm *c, int kind, size_t count) {
    int64_t call = c->calls_issued++;
    if (!c->check_sequence || c->size == 1) return FSDP_OK;
    int64_t n = (int64_t)count, lim = (int64_t)fsdp_comm_max_count();  // a buffer's element count is below 2^63
    int64_t v[8] = {call, -call, kind, -kind, n, -n, lim, -lim};  // max of x and of -x: the group's max and min
    fsdp_status s = comm_mpi_allreduce(v, 8, sizeof v[0], MPI_INT64_T, MPI_MAX, c->mpi);
    if (s != FSDP_OK) {
        char why[512];  // the message lives in the buffer fsdp_error writes: copy it out first
        snprintf(why, sizeof why, "%s", fsdp_last_error());
        return fsdp_error(s, "sequence check: %s", why);
    }
    static const char *kinds[] = {"?", "all_gather", "reduce_scatter", "all_reduce", "broadcast"};
    if (v[0] != -v[1] || v[2] != -v[3] || v[4] != -v[5])
        return fsdp_error(FSDP_ERR_COMM, "collective mismatch: rank %d (host %s)'s call #%" PRId64 " is %s of %zu "
                          "elements, but the group's calls differ (kinds %s..%s, counts %" PRId64 "..%" PRId64 ")",
                          c->rank, fsdp_comm_host(c), call,
                          kinds[kind], count, kinds[-v[3] > 0 && -v[3] < 5 ? -v[3] : 0],
                          kinds[v[2] > 0 && v[2] < 5 ? v[2] : 0], -v[5], v[4]);
    if (v[6] != -v[7])  // the ranks would split collectives into different MPI calls
        return fsdp_error(FSDP_ERR_COMM, "collective mismatch at rank %d (host %s): the group's elements per MPI "
                          "call differ (%" PRId64 "..%" PRId64 "; FSDP_COMM_MAX_COUNT or fsdp_comm_set_max_count)",
                          c->rank, fsdp_comm_host(c), -v[7], v[6]);
    return FSDP_OK;
}

// Marks the start of a blocking collective (for the watchdog) and runs the sequence check.
static fsdp_status begin(fsdp_comm *c, const char *name, int kind, size_t count) {
    enter(name);
    fsdp_status s = check_sequence(c, kind, count);
    if (s != FSDP_OK) leave();
    return s;
}

static void account(fsdp_comm *c, double t0, size_t bytes) {
    leave();
    c->stats.seconds += fsdp_now_sec() - t0;
    c->stats.bytes_sent += bytes;
    c->stats.calls++;
}

// Bytes one rank sends in an all-reduce of count elements: ring-like (2 (size-1)/size of the buffer),
// or all of it to every peer for bf16 over MPI (an all-gather, summed here).
static size_t all_reduce_bytes(const fsdp_comm *c, size_t count, fsdp_dtype dt) {
    size_t esize = fsdp_dtype_size(dt), peers = (size_t)(c->size - 1);
    return !c->shm && dt == FSDP_BF16 && !comm_use_p2p(c, 1, count, dt) ? count * esize * peers : 2 * count * esize * peers / (size_t)c->size;
}

// Bytes one rank sends in a reduce-scatter of count elements per rank: one block to every peer, or
// hierarchically (comm_hier.c) H blocks to each of the L - 1 other ranks on its host and one to each of the
// H - 1 other hosts.
static size_t reduce_scatter_bytes(const fsdp_comm *c, size_t count, fsdp_dtype dt) {
    size_t block = count * fsdp_dtype_size(dt);
    if (!comm_use_hier(c, count, dt)) return block * (size_t)(c->size - 1);
    size_t L = (size_t)c->hier_intra->size, H = (size_t)c->hier_cross->size;
    return block * ((L - 1) * H + H - 1);
}

// Bytes one rank sends in an all-gather of count elements per rank: its block to every peer, or
// hierarchically its block to the H - 1 other hosts and H blocks to the L - 1 others on its host.
static size_t all_gather_bytes(const fsdp_comm *c, size_t count, fsdp_dtype dt) {
    size_t block = count * fsdp_dtype_size(dt);
    if (!comm_use_hier_gather(c, count, dt)) return block * (size_t)(c->size - 1);
    size_t L = (size_t)c->hier_intra->size, H = (size_t)c->hier_cross->size;
    return block * ((L - 1) * H + H - 1);
}

static void scale_f32(void *buf, size_t n, float s) {
    float *x = buf;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

fsdp_status comm_mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return FSDP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return fsdp_error(FSDP_ERR_COMM, "%s failed: %s", what, msg);
}

// bf16 across nodes: MPI has no bf16 sum, so the payloads travel as bf16 (an all-to-all of the slices
// for a reduce-scatter, an all-gather for an all-reduce) and each rank sums them in fp32 in rank
// order, rounding once: the same values as the shared-memory path.
// The scratch grows to the largest payload and is kept (accounted as communication memory).
static fsdp_bf16 *bf16_scratch(size_t count) {
    static fsdp_bf16 *buf;
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

static fsdp_status mpi_reduce_scatter_bf16(fsdp_comm *c, const void *send, void *recv, size_t count,
                                           fsdp_reduce_op op) {
    fsdp_bf16 *slices = bf16_scratch(count * (size_t)c->size);  // (size, count) every rank's slice of mine
    if (!slices) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a bf16 reduce-scatter of %zu values", count);
    fsdp_status s = comm_mpi_alltoall(send, slices, count, sizeof(fsdp_bf16), MPI_UINT16_T, c->mpi);
    if (s == FSDP_OK) sum_bf16_slices(recv, slices, count, c->size, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f);
    return s;
}

static fsdp_status mpi_all_reduce_bf16(fsdp_comm *c, void *buf, size_t count, fsdp_reduce_op op) {
    fsdp_bf16 *all = bf16_scratch(count * (size_t)c->size);  // (size, count) every rank's buffer
    if (!all) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a bf16 all-reduce of %zu values", count);
    fsdp_status s = comm_mpi_allgather(buf, all, count, sizeof(fsdp_bf16), MPI_UINT16_T, c->mpi, c->rank);
    if (s == FSDP_OK) sum_bf16_slices(buf, all, count, c->size, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f);
    return s;
}

fsdp_status fsdp_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt);
    if (c->size == 1) {
        if (recv != send) memmove(recv, send, bytes);
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_gather", 1, count));
    fsdp_status s;
    if (c->shm) {
        s = comm_shm_all_gather(c, send, recv, count, dt);
    } else if (comm_use_hier_gather(c, count, dt)) {
        s = comm_hier_gather_run(c, send, recv, count, dt);
    } else {
        s = comm_mpi_allgather(send, recv, count, fsdp_dtype_size(dt), mpi_type(dt), c->mpi, c->rank);  // detects in place
    }
    account(c, t0, all_gather_bytes(c, count, dt));
    return s;
}

fsdp_status fsdp_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   const size_t (*copy)[2], size_t n_copy) {
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_gather", 1, count));
    fsdp_status s = comm_shm_all_gather_shared(c, send, recv, count, dt, copy, n_copy);
    account(c, t0, all_gather_bytes(c, count, dt));
    return s;
}

fsdp_status fsdp_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                fsdp_reduce_op op) {
    if (c->size == 1) {
        if (recv != send) memmove(recv, send, count * fsdp_dtype_size(dt));
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "reduce_scatter", 2, count));
    fsdp_status s;
    float scale = op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f;
    size_t bytes = reduce_scatter_bytes(c, count, dt);
    if (c->shm) {
        s = comm_shm_reduce_scatter(c, send, recv, count, dt, op);
    } else if (comm_use_hier(c, count, dt)) {
        s = comm_hier_run(c, send, recv, count, dt, scale);
    } else if (comm_use_p2p(c, 0, count, dt)) {
        s = comm_p2p_run(c, 0, send, recv, count, dt, scale);
    } else if (dt == FSDP_F32) {
        s = comm_mpi_reduce_scatter(send, recv, count, sizeof(float), MPI_FLOAT, MPI_SUM, c->mpi, c->size);
        if (op == FSDP_AVG) scale_f32(recv, count, 1.0f / (float)c->size);
    } else {
        s = mpi_reduce_scatter_bf16(c, send, recv, count, op);
    }
    account(c, t0, bytes);
    return s;
}

fsdp_status fsdp_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    if (c->size == 1) return FSDP_OK;
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_reduce", 3, count));
    fsdp_status s;
    if (c->shm) {
        s = comm_shm_all_reduce(c, buf, count, dt, op);
    } else if (comm_use_p2p(c, 1, count, dt)) {
        s = comm_p2p_run(c, 1, buf, buf, count, dt, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f);
    } else if (dt == FSDP_F32) {
        s = comm_mpi_allreduce(buf, count, sizeof(float), MPI_FLOAT, MPI_SUM, c->mpi);
        if (op == FSDP_AVG) scale_f32(buf, count, 1.0f / (float)c->size);
    } else {
        s = mpi_all_reduce_bf16(c, buf, count, op);
    }
    account(c, t0, all_reduce_bytes(c, count, dt));
    return s;
}

fsdp_status fsdp_broadcast(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    if (c->size == 1) return FSDP_OK;
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "broadcast", 4, count));
    fsdp_status s = comm_mpi_bcast(buf, count, fsdp_dtype_size(dt), mpi_type(dt), root, c->mpi);
    account(c, t0, c->rank == root ? count * fsdp_dtype_size(dt) : 0);
    return s;
}

fsdp_status fsdp_barrier(fsdp_comm *c) {
    if (c->size == 1) return FSDP_OK;
    enter("barrier");
    fsdp_status s = comm_mpi_check(MPI_Barrier(c->mpi), "MPI_Barrier");
    leave();
    return s;
}

fsdp_status fsdp_all_reduce_double(fsdp_comm *c, double *value) {
    if (c->size == 1) return FSDP_OK;
    enter("all_reduce(double)");
    fsdp_status s = comm_mpi_allreduce(value, 1, sizeof *value, MPI_DOUBLE, MPI_SUM, c->mpi);
    leave();
    return s;
}

static fsdp_status new_request(fsdp_comm *c, fsdp_comm_request **req) {
    *req = calloc(1, sizeof **req);
    if (!*req) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    (*req)->comm = c;
    (*req)->mpi = MPI_REQUEST_NULL;
    (*req)->started = fsdp_now_sec();
    return FSDP_OK;
}

fsdp_status fsdp_iall_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                             fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    if (c->backend == COMM_MPI && comm_use_hier_gather(c, count, dt)) {  // in flight
        FSDP_CHECK(check_sequence(c, 1, count));
        (*req)->bytes = all_gather_bytes(c, count, dt);
        return comm_hier_gather_start(c, send, recv, count, dt, &(*req)->hier);
    }
    if (c->backend == COMM_LOCAL || c->shm || c->size == 1 || count > fsdp_comm_max_count())
        return fsdp_all_gather(c, send, recv, count, dt);  // runs to completion (split: piece by piece)
    FSDP_CHECK(check_sequence(c, 1, count));  // as the blocking forms do (FSDP_DEBUG=DETAIL): across nodes
    size_t esize = fsdp_dtype_size(dt);
    (*req)->bytes = count * esize * (size_t)(c->size - 1);
    return comm_mpi_iallgather(send, recv, count, esize, mpi_type(dt), c->mpi, c->rank, &(*req)->mpi);
}

fsdp_status fsdp_ireduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                 fsdp_reduce_op op, fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    float scale = op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f;
    if (c->backend == COMM_MPI && comm_use_hier(c, count, dt)) {  // in flight for any count and dtype
        FSDP_CHECK(check_sequence(c, 2, count));
        (*req)->bytes = reduce_scatter_bytes(c, count, dt);
        return comm_hier_start(c, send, recv, count, dt, scale, &(*req)->hier);
    }
    if (c->backend == COMM_MPI && comm_use_p2p(c, 0, count, dt)) {  // in flight for any count and dtype
        FSDP_CHECK(check_sequence(c, 2, count));
        (*req)->bytes = reduce_scatter_bytes(c, count, dt);
        return comm_p2p_start(c, 0, send, recv, count, dt, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f,
                              &(*req)->p2p);
    }
    if (c->backend == COMM_LOCAL || c->shm || c->size == 1 || dt != FSDP_F32 || count > fsdp_comm_max_count())
        return fsdp_reduce_scatter(c, send, recv, count, dt, op);  // runs to completion
    FSDP_CHECK(check_sequence(c, 2, count));
    (*req)->bytes = count * sizeof(float) * (size_t)(c->size - 1);
    if (op == FSDP_AVG) {
        (*req)->scale_buf = recv;
        (*req)->scale_count = count;
    }
    return comm_mpi_ireduce_scatter(send, recv, count, MPI_FLOAT, MPI_SUM, c->mpi, &(*req)->mpi);
}

fsdp_status fsdp_iall_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                             fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    if (c->backend == COMM_MPI && comm_use_p2p(c, 1, count, dt)) {
        FSDP_CHECK(check_sequence(c, 3, count));
        (*req)->bytes = all_reduce_bytes(c, count, dt);
        return comm_p2p_start(c, 1, buf, buf, count, dt, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f,
                              &(*req)->p2p);
    }
    if (c->backend == COMM_LOCAL || c->shm || c->size == 1 || dt != FSDP_F32 || count > fsdp_comm_max_count())
        return fsdp_all_reduce(c, buf, count, dt, op);  // runs to completion
    FSDP_CHECK(check_sequence(c, 3, count));
    (*req)->bytes = all_reduce_bytes(c, count, dt);  // as the blocking form accounts it
    if (op == FSDP_AVG) {
        (*req)->scale_buf = buf;
        (*req)->scale_count = count;
    }
    return comm_mpi_iallreduce(buf, count, MPI_FLOAT, MPI_SUM, c->mpi, &(*req)->mpi);
}

fsdp_status fsdp_comm_test(fsdp_comm_request *req, int *done) {
    if (req->p2p || req->hier) {
        if (req->accounted) {
            *done = 1;
            return FSDP_OK;
        }
        double t0 = fsdp_now_sec();
        fsdp_status s = req->hier ? comm_hier_test(req->hier, done) : comm_p2p_test(req->p2p, done);
        if (s == FSDP_OK && *done) {
            account(req->comm, t0, req->bytes);
            req->accounted = 1;
        }
        return s;
    }
    if (req->mpi == MPI_REQUEST_NULL) {
        *done = 1;
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    fsdp_status s = comm_mpi_check(MPI_Test(&req->mpi, done, MPI_STATUS_IGNORE), "MPI_Test");
    // a completed MPI_Test frees the handle (MPI_REQUEST_NULL), so fsdp_comm_wait will not count it:
    // the bytes and this call's time are accounted here
    if (s == FSDP_OK && *done) account(req->comm, t0, req->bytes);
    return s;
}

fsdp_status fsdp_comm_wait(fsdp_comm_request *req) {
    if (!req) return FSDP_OK;
    fsdp_status s = FSDP_OK;
    if (req->p2p || req->hier) {
        if (!req->accounted) {
            double t0 = fsdp_now_sec();
            s = req->hier ? comm_hier_wait(req->hier) : comm_p2p_wait(req->p2p);
            account(req->comm, t0, req->bytes);
        }
        comm_p2p_free(req->p2p);
        comm_hier_free(req->hier);
    } else if (req->mpi != MPI_REQUEST_NULL) {
        double t0 = fsdp_now_sec();
        s = comm_mpi_check(MPI_Wait(&req->mpi, MPI_STATUS_IGNORE), "MPI_Wait");
        account(req->comm, t0, req->bytes);
    }
    if (req->scale_buf) scale_f32(req->scale_buf, req->scale_count, 1.0f / (float)req->comm->size);
    free(req);
    return s;
}
