// comm_path.c: the choice of transport (comm_transport.h) for each collective, in one place. A device
// transport installed on the group (fsdp_comm_set_device_transport) takes the buffers it accepts; on
// the host: one node -> shared memory; several hosts laid out host by host with several ranks each ->
// hierarchical reduce-scatters and all-gathers (FSDP_COMM_ALGO auto or hier); otherwise reduce-scatters
// and bf16 all-reduces point to point and the rest through MPI's collectives (auto, as measured across
// hosts: docs/bench.md, "Collectives across hosts"), or as FSDP_COMM_ALGO=p2p/mpi says.
#include "comm/comm_path.h"

#include <pthread.h>
#include <string.h>

#include "comm/comm_hier.h"
#include "comm/comm_mpi.h"
#include "comm/comm_mpi_transport.h"
#include "comm/comm_p2p.h"
#include "comm/comm_shm.h"
#include "core/tunables.h"

// ---- FSDP_COMM_ALGO (read once): auto (default, also for unknown values), mpi, p2p, hier (as auto)

enum { COMM_ALGO_AUTO = 0, COMM_ALGO_MPI = 1, COMM_ALGO_P2P = 2, COMM_ALGO_HIER = 3 };

static int algo_env = COMM_ALGO_AUTO;
static pthread_once_t algo_once = PTHREAD_ONCE_INIT;

static void read_algo(void) {
    const char *v = fsdp_tunable(FSDP_ENV_COMM_ALGO);
    if (!v || !*v || strcmp(v, "auto") == 0) algo_env = COMM_ALGO_AUTO;
    else if (strcmp(v, "mpi") == 0) algo_env = COMM_ALGO_MPI;
    else if (strcmp(v, "p2p") == 0) algo_env = COMM_ALGO_P2P;
    else if (strcmp(v, "hier") == 0) algo_env = COMM_ALGO_HIER;
}

static int comm_algo(void) {
    pthread_once(&algo_once, read_algo);
    return algo_env;
}

const char *fsdp_comm_algo_setting(void) {
    static const char *names[] = {"auto", "mpi", "p2p", "hier"};
    return names[comm_algo()];
}

// ---- the host transports

// 1 when reduce-scatters (and all-gathers that fit) on c run hierarchically
static int use_hier(const fsdp_comm *c) {
    int a = comm_algo();
    return c->backend == COMM_MPI && c->hier && (a == COMM_ALGO_AUTO || a == COMM_ALGO_HIER);
}

// 1 when a reduce-scatter (all_reduce 0) or all-reduce (all_reduce 1) of dt on c (no shared memory)
// runs point to point
static int use_p2p(int all_reduce, fsdp_dtype dt) {
    int a = comm_algo();
    if (a == COMM_ALGO_HIER) return !all_reduce || dt == FSDP_BF16;  // as auto, where no hierarchy applies
    if (a != COMM_ALGO_AUTO) return a == COMM_ALGO_P2P;
    // auto, as measured across hosts (docs/bench.md, "Collectives across hosts"): reduce-scatters point to
    // point at every size (MPI_Reduce_scatter_block ran at 0.1-0.6x of all-gather's bandwidth, these at
    // 0.5-1x); fp32 all-reduces through MPI_Allreduce (as fast or faster than reduce-scatter + all-gather
    // here); bf16 all-reduces point to point (MPI's path sends the whole buffer to every peer)
    return !all_reduce || dt == FSDP_BF16;
}

static const fsdp_comm_transport *host_route(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    if (kind == FSDP_COLL_BROADCAST) return &comm_mpi_transport;
    if (c->shm) return &comm_shm_transport;
    if (kind == FSDP_COLL_ALL_GATHER)
        return use_hier(c) && comm_hier_gather_fits(c, count) ? &comm_hier_transport : &comm_mpi_transport;
    if (kind == FSDP_COLL_REDUCE_SCATTER && use_hier(c)) return &comm_hier_transport;
    return use_p2p(kind == FSDP_COLL_ALL_REDUCE, dt) ? &comm_p2p_transport : &comm_mpi_transport;
}

// 1 when t has a blocking form of kind (it runs that kind)
static int runs_kind(const fsdp_comm_transport *t, fsdp_coll_kind kind) {
    switch (kind) {
    case FSDP_COLL_ALL_GATHER: return t->all_gather != NULL;
    case FSDP_COLL_REDUCE_SCATTER: return t->reduce_scatter != NULL;
    case FSDP_COLL_ALL_REDUCE: return t->all_reduce != NULL;
    case FSDP_COLL_BROADCAST: return t->broadcast != NULL;
    }
    return 0;
}

const fsdp_comm_transport *comm_device_route(const fsdp_comm *c, fsdp_coll_kind kind, const void *buf, void **ctx) {
    const fsdp_comm_transport *d = c->device;
    *ctx = NULL;
    if (!d || !runs_kind(d, kind) || (d->accepts && !d->accepts(c->device_ctx, buf))) return NULL;
    *ctx = c->device_ctx;
    return d;
}

const fsdp_comm_transport *comm_route(const fsdp_comm *c, fsdp_coll_kind kind, const void *buf, size_t count,
                                      fsdp_dtype dt, void **ctx) {
    const fsdp_comm_transport *d = comm_device_route(c, kind, buf, ctx);
    return d ? d : host_route(c, kind, count, dt);
}

int comm_route_in_flight(const fsdp_comm_transport *t, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    int start = kind == FSDP_COLL_ALL_GATHER       ? t->iall_gather != NULL
                : kind == FSDP_COLL_REDUCE_SCATTER ? t->ireduce_scatter != NULL
                : kind == FSDP_COLL_ALL_REDUCE     ? t->iall_reduce != NULL
                                                   : 0;
    if (!start) return 0;
    // MPI: one call per collective, and MPI sums fp32 only (bf16 runs as an exchange summed here)
    if (t == &comm_mpi_transport) return count <= fsdp_comm_max_count() && (kind == FSDP_COLL_ALL_GATHER || dt == FSDP_F32);
    return 1;
}

// ---- the paths comm.h reports

const char *fsdp_comm_path(const fsdp_comm *c, int all_reduce, size_t count, fsdp_dtype dt) {
    if (c->backend != COMM_MPI || c->size == 1) return "local";
    return host_route(c, all_reduce ? FSDP_COLL_ALL_REDUCE : FSDP_COLL_REDUCE_SCATTER, count, dt)->name;
}

const char *fsdp_comm_gather_path(const fsdp_comm *c, size_t count, fsdp_dtype dt) {
    if (c->backend != COMM_MPI || c->size == 1) return "local";
    return host_route(c, FSDP_COLL_ALL_GATHER, count, dt)->name;
}
