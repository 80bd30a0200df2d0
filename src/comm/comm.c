// comm.c: the collectives of comm.h, run through the transport comm_path.c picks (comm_transport.h):
// the sequence check (FSDP_DEBUG=DETAIL), the watchdog's record of the collective in progress, the
// statistics, and the nonblocking requests.
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_group.h"
#include "comm/comm_mpi.h"
#include "comm/comm_path.h"
#include "comm/comm_shm.h"
#include "core/timer.h"

struct fsdp_comm_request {
    fsdp_comm *comm;
    const fsdp_comm_transport *transport;  // the transport running op
    void *op;            // its collective in flight, or NULL: complete already (run blocking)
    int accounted;       // its bytes and time are in the statistics already
    double started;
    size_t bytes;
};

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

void fsdp_comm_mark_wait(const char *name) { enter(name); }
void fsdp_comm_mark_done(void) { leave(); }

void fsdp_comm_set_sequence_check(fsdp_comm *c, int on) { c->check_sequence = on; }

// Compares (call number, kind, count, elements per MPI call) across the group. 64-bit throughout:
// counts above INT_MAX compare exactly.
static fsdp_status check_sequence(fsdp_comm *c, fsdp_coll_kind kind, size_t count) {
    int64_t call = c->calls_issued++;
    if (!c->check_sequence || c->size == 1) return FSDP_OK;
    int64_t n = (int64_t)count, lim = (int64_t)fsdp_comm_max_count();  // a buffer's element count is below 2^63
    int64_t v[8] = {call, -call, kind, -(int64_t)kind, n, -n, lim, -lim};  // max of x and of -x: the group's max and min
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
static fsdp_status begin(fsdp_comm *c, const char *name, fsdp_coll_kind kind, size_t count) {
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

// What t sends in this collective (the flat exchanges' bytes where it does not say)
static size_t bytes_sent(const fsdp_comm *c, const fsdp_comm_transport *t, fsdp_coll_kind kind, size_t count,
                         fsdp_dtype dt) {
    return t->bytes_sent ? t->bytes_sent(c, kind, count, dt) : fsdp_comm_flat_bytes(c->size, kind, count, dt);
}

fsdp_status fsdp_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt);
    void *ctx;
    if (c->size == 1 && !comm_device_route(c, FSDP_COLL_ALL_GATHER, send, &ctx)) {
        if (recv != send) memmove(recv, send, bytes);
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_gather", FSDP_COLL_ALL_GATHER, count));
    const fsdp_comm_transport *t = comm_route(c, FSDP_COLL_ALL_GATHER, send, count, dt, &ctx);
    fsdp_status s = t->all_gather(c, ctx, send, recv, count, dt);
    account(c, t0, bytes_sent(c, t, FSDP_COLL_ALL_GATHER, count, dt));
    return s;
}

fsdp_status fsdp_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   const size_t (*copy)[2], size_t n_copy) {
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_gather", FSDP_COLL_ALL_GATHER, count));
    fsdp_status s = comm_shm_all_gather_shared(c, send, recv, count, dt, copy, n_copy);
    account(c, t0, bytes_sent(c, &comm_shm_transport, FSDP_COLL_ALL_GATHER, count, dt));
    return s;
}

fsdp_status fsdp_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                fsdp_reduce_op op) {
    void *ctx;
    if (c->size == 1 && !comm_device_route(c, FSDP_COLL_REDUCE_SCATTER, send, &ctx)) {
        if (recv != send) memmove(recv, send, count * fsdp_dtype_size(dt));
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "reduce_scatter", FSDP_COLL_REDUCE_SCATTER, count));
    const fsdp_comm_transport *t = comm_route(c, FSDP_COLL_REDUCE_SCATTER, send, count, dt, &ctx);
    size_t bytes = bytes_sent(c, t, FSDP_COLL_REDUCE_SCATTER, count, dt);
    fsdp_status s = t->reduce_scatter(c, ctx, send, recv, count, dt, op);
    account(c, t0, bytes);
    return s;
}

fsdp_status fsdp_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    void *ctx;
    if (c->size == 1 && !comm_device_route(c, FSDP_COLL_ALL_REDUCE, buf, &ctx)) return FSDP_OK;
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "all_reduce", FSDP_COLL_ALL_REDUCE, count));
    const fsdp_comm_transport *t = comm_route(c, FSDP_COLL_ALL_REDUCE, buf, count, dt, &ctx);
    fsdp_status s = t->all_reduce(c, ctx, buf, count, dt, op);
    account(c, t0, bytes_sent(c, t, FSDP_COLL_ALL_REDUCE, count, dt));
    return s;
}

fsdp_status fsdp_broadcast(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root) {
    void *ctx;
    if (c->size == 1 && !comm_device_route(c, FSDP_COLL_BROADCAST, buf, &ctx)) return FSDP_OK;
    double t0 = fsdp_now_sec();
    FSDP_CHECK(begin(c, "broadcast", FSDP_COLL_BROADCAST, count));
    const fsdp_comm_transport *t = comm_route(c, FSDP_COLL_BROADCAST, buf, count, dt, &ctx);
    fsdp_status s = t->broadcast(c, ctx, buf, count, dt, root);
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
    (*req)->started = fsdp_now_sec();
    return FSDP_OK;
}

// The transport that runs this collective in flight, with its context and the request's bytes; NULL:
// it runs blocking (one rank, or no nonblocking form for it on its transport)
static const fsdp_comm_transport *in_flight_route(fsdp_comm *c, fsdp_coll_kind kind, const void *buf, size_t count,
                                                  fsdp_dtype dt, void **ctx, fsdp_comm_request *req) {
    if (c->size == 1) return NULL;
    const fsdp_comm_transport *t = comm_route(c, kind, buf, count, dt, ctx);
    if (!comm_route_in_flight(t, kind, count, dt)) return NULL;
    req->transport = t;
    return t;
}

fsdp_status fsdp_iall_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                             fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    void *ctx;
    const fsdp_comm_transport *t = in_flight_route(c, FSDP_COLL_ALL_GATHER, send, count, dt, &ctx, *req);
    if (!t) return fsdp_all_gather(c, send, recv, count, dt);  // runs to completion (split: piece by piece)
    FSDP_CHECK(check_sequence(c, FSDP_COLL_ALL_GATHER, count));  // as the blocking forms do (FSDP_DEBUG=DETAIL)
    (*req)->bytes = bytes_sent(c, t, FSDP_COLL_ALL_GATHER, count, dt);
    return t->iall_gather(c, ctx, send, recv, count, dt, &(*req)->op);
}

fsdp_status fsdp_ireduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                 fsdp_reduce_op op, fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    void *ctx;
    const fsdp_comm_transport *t = in_flight_route(c, FSDP_COLL_REDUCE_SCATTER, send, count, dt, &ctx, *req);
    if (!t) return fsdp_reduce_scatter(c, send, recv, count, dt, op);  // runs to completion
    FSDP_CHECK(check_sequence(c, FSDP_COLL_REDUCE_SCATTER, count));
    (*req)->bytes = bytes_sent(c, t, FSDP_COLL_REDUCE_SCATTER, count, dt);
    return t->ireduce_scatter(c, ctx, send, recv, count, dt, op, &(*req)->op);
}

fsdp_status fsdp_iall_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                             fsdp_comm_request **req) {
    FSDP_CHECK(new_request(c, req));
    void *ctx;
    const fsdp_comm_transport *t = in_flight_route(c, FSDP_COLL_ALL_REDUCE, buf, count, dt, &ctx, *req);
    if (!t) return fsdp_all_reduce(c, buf, count, dt, op);  // runs to completion
    FSDP_CHECK(check_sequence(c, FSDP_COLL_ALL_REDUCE, count));
    (*req)->bytes = bytes_sent(c, t, FSDP_COLL_ALL_REDUCE, count, dt);  // as the blocking form accounts it
    return t->iall_reduce(c, ctx, buf, count, dt, op, &(*req)->op);
}

fsdp_status fsdp_comm_test(fsdp_comm_request *req, int *done) {
    if (!req->op || req->accounted) {
        *done = 1;
        return FSDP_OK;
    }
    double t0 = fsdp_now_sec();
    fsdp_status s = req->transport->test(req->op, done);
    if (s == FSDP_OK && *done) {  // its bytes and this call's time are accounted here: wait will not
        account(req->comm, t0, req->bytes);
        req->accounted = 1;
    }
    return s;
}

fsdp_status fsdp_comm_wait(fsdp_comm_request *req) {
    if (!req) return FSDP_OK;
    fsdp_status s = FSDP_OK;
    if (req->op) {
        if (!req->accounted) {
            double t0 = fsdp_now_sec();
            s = req->transport->wait(req->op);
            account(req->comm, t0, req->bytes);
        }
        req->transport->release(req->op);
    }
    free(req);
    return s;
}
