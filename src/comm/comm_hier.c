// comm_hier.c: hierarchical reduce-scatters and all-gathers for MPI groups that span hosts with several
// of their ranks on each (FULL_SHARD over 2 hosts x 4 ranks, say). Flat, every rank sends (size - L)
// blocks over the network (L: the group's ranks per host); here each block crosses the network once per
// host instead of once per rank. A reduce-scatter:
//   1. on each host, through the shared-memory window (comm_shm.c), the L local ranks reduce-scatter
//      each host's segment of the send buffer: local rank l gets this host's partial sum of block h*L + l
//      for every host h: a (H, count) buffer (H: hosts);
//   2. the ranks with the same local index l, one per host, reduce-scatter those partials point to
//      point (comm_p2p.c): rank h*L + l gets the sum over hosts of block h*L + l.
// Bytes over the network per rank: (H - 1) blocks instead of (size - L). Step 1 runs when the collective
// starts (a point every rank of the host reaches in the same order: the window's barriers match);
// step 2 stays in flight like any point-to-point reduction.
// Sums: within a host in local-rank order, then over hosts in host order (fp32; bf16 partials are
// rounded to bf16 once per host, then summed in fp32 and rounded again). Deterministic for a given
// layout, but not the flat rank-order bits (docs/decisions.md).
// An all-gather runs the other way round (across hosts first, then within the host through MPI's own
// intra-node transport: below), so that its second step can start from any progress poll.
// It applies where the group's ranks are laid out host by host: rank = host * L + local index, the
// same L on every host, more than one host and more than one rank per host (comm_hier_setup checks).
// All-reduces stay flat.
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_hier.h"

#include "comm/comm_host.h"
#include "comm/comm_mpi.h"
#include "comm/comm_p2p.h"
#include "comm/comm_shm.h"
#include "core/alloc.h"

struct comm_hier {
    fsdp_comm *c;
    int gather;           // 0: reduce-scatter; 1: all-gather
    unsigned char *part;  // (H, count) elements: RS: this host's partial sums of the blocks of local index l;
    size_t part_bytes;    //   AG: the blocks of local index l of every host. part_bytes: its capacity
    comm_p2p *inter;      // RS step 2, in flight on c->hier->cross
    // all-gathers
    MPI_Request inter_req, intra_req;
    MPI_Datatype spread;  // the intra step's receive type: H blocks of count, L blocks apart
    MPI_Datatype strided; // the step across hosts' receive type: one block, L blocks of extent
    void *recv;           // (size, count) elements
    size_t count;         // elements per rank
    MPI_Datatype type;    // of an element
    int64_t seq;          // this group's all-gathers, in the order they started
    int stage;            // 0 across hosts in flight, 1 across done, 2 within the host in flight, 3 complete
    comm_hier *next;      // the group's all-gathers in flight, oldest first (c->hier->ag_pending)
};

struct comm_hier_group {
    fsdp_comm *intra;       // the group's ranks on this host (shared memory)
    fsdp_comm *cross;       // its ranks of this local index, one per host
    unsigned char *spare;   // (spare_bytes,) the last reduce-scatter's partial sums, kept for the next
    size_t spare_bytes;
    MPI_Comm ag_host;       // intra's ranks again, for the all-gathers' steps within the host only
    int64_t ag_started;     // all-gathers started on this group,
    int64_t ag_issued;      // and those whose step within the host has been issued (in order)
    comm_hier *ag_pending;  // those in flight, oldest first
};

// A sub-group of the hierarchy: m taken into a new group (shared memory where its ranks share a node).
// NULL on failure (m is released then); *s: the error, or FSDP_OK.
static fsdp_comm *subgroup(MPI_Comm m, fsdp_status *s) {
    fsdp_comm *g = calloc(1, sizeof *g);
    if (!g) {
        (void)MPI_Comm_free(&m);
        *s = fsdp_error(FSDP_ERR_NOMEM, "out of memory");
        return NULL;
    }
    g->backend = COMM_MPI;
    *s = comm_group_init(g, m);
    if (*s == FSDP_OK) return g;
    comm_group_release(g);
    free(g);
    return NULL;
}

static void free_subgroup(fsdp_comm *g) {
    if (!g) return;
    comm_group_release(g);
    free(g);
}

fsdp_status comm_hier_setup(fsdp_comm *c) {
    c->hier = NULL;
    if (c->backend != COMM_MPI || c->shm || c->size < 4) return FSDP_OK;
    MPI_Comm host;
    FSDP_CHECK(comm_mpi_check(comm_host_split(c->mpi, c->rank, &host), "MPI_Comm_split_type (hosts)"));
    int L = 0, l = 0, first = c->rank;
    fsdp_status s = comm_mpi_check(MPI_Comm_size(host, &L), "MPI_Comm_size");
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Comm_rank(host, &l), "MPI_Comm_rank");
    if (s == FSDP_OK) s = comm_mpi_allreduce(&first, 1, sizeof first, MPI_INT, MPI_MIN, host);  // the host's lowest rank
    // this rank fits the layout; after the MIN over the group: every rank does, with the same L
    int ok = s == FSDP_OK && L > 1 && L < c->size && c->size % L == 0 && l == c->rank % L && first == c->rank - l;
    int v[3] = {ok, L, -L};
    fsdp_status g = comm_mpi_allreduce(v, 3, sizeof v[0], MPI_INT, MPI_MIN, c->mpi);  // every rank takes part
    if (s == FSDP_OK) s = g;
    if (s != FSDP_OK || !v[0] || v[1] != -v[2]) {
        (void)MPI_Comm_free(&host);
        return s;
    }
    comm_hier_group *hg = calloc(1, sizeof *hg);
    MPI_Comm across = MPI_COMM_NULL;
    int rc = MPI_Comm_split(c->mpi, l, c->rank, &across);  // collective over the group: before any early return
    if (!hg) {
        (void)MPI_Comm_free(&host);
        if (rc == MPI_SUCCESS) (void)MPI_Comm_free(&across);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    hg->ag_host = MPI_COMM_NULL;
    hg->intra = subgroup(host, &s);  // takes host; shared memory (its ranks share a host)
    fsdp_status t = comm_mpi_check(rc, "MPI_Comm_split");
    if (t == FSDP_OK) hg->cross = subgroup(across, &t);
    if (s == FSDP_OK) s = t;
    int usable = s == FSDP_OK && hg->intra->shm;  // no window (FSDP_COMM_NO_SHM): nothing to gain
    fsdp_status u = comm_mpi_allreduce(&usable, 1, sizeof usable, MPI_INT, MPI_MIN, c->mpi);
    if (s == FSDP_OK) s = u;
    // The all-gathers' second steps start from progress polls, at moments that differ between ranks:
    // they get a communicator of their own, where nothing else (the window's collective allocations, say)
    // can come between them
    if (s == FSDP_OK && usable) s = comm_mpi_check(MPI_Comm_dup(hg->intra->mpi, &hg->ag_host), "MPI_Comm_dup");
    if (s != FSDP_OK || !usable) {
        free_subgroup(hg->intra);
        free_subgroup(hg->cross);
        free(hg);
        return s;
    }
    c->hier = hg;
    return FSDP_OK;
}

void comm_hier_free_groups(fsdp_comm *c) {
    comm_hier_group *hg = c->hier;
    if (!hg) return;
    (void)MPI_Comm_free(&hg->ag_host);
    free_subgroup(hg->intra);
    free_subgroup(hg->cross);
    fsdp_free(hg->spare);
    free(hg);
    c->hier = NULL;
}

int comm_hier_ranks_per_host(const fsdp_comm *c) { return c->hier ? c->hier->intra->size : 0; }
int comm_hier_hosts(const fsdp_comm *c) { return c->hier ? c->hier->cross->size : 0; }

// A new request; part: with a (H, count) part buffer (the group's kept one when large enough). NULL when
// out of memory.
static comm_hier *new_hier(fsdp_comm *c, size_t count, fsdp_dtype dt, int part) {
    comm_hier *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->c = c;
    h->inter_req = h->intra_req = MPI_REQUEST_NULL;
    h->spread = h->strided = MPI_DATATYPE_NULL;
    if (!part) return h;
    size_t need = (size_t)c->hier->cross->size * count * fsdp_dtype_size(dt);
    if (c->hier->spare && c->hier->spare_bytes >= need) {  // the last one's buffer is large enough
        h->part = c->hier->spare;
        h->part_bytes = c->hier->spare_bytes;
        c->hier->spare = NULL;
    } else {
        h->part = fsdp_alloc(need ? need : 1, FSDP_MEM_COMM);
        h->part_bytes = need;
    }
    if (!h->part) {
        free(h);
        return NULL;
    }
    return h;
}

fsdp_status comm_hier_start(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale,
                            comm_hier **out_h) {
    *out_h = NULL;
    comm_hier *h = new_hier(c, count, dt, 1);
    if (!h) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a hierarchical reduce-scatter of %zu values", count);
    int L = c->hier->intra->size, H = c->hier->cross->size;
    size_t es = fsdp_dtype_size(dt);
    const unsigned char *in = send;
    fsdp_status s = FSDP_OK;
    for (int host = 0; host < H && s == FSDP_OK; host++)  // step 1: host segment `host` = blocks host*L .. +L
        s = comm_shm_reduce_scatter(c->hier->intra, in + (size_t)host * (size_t)L * count * es,
                                    h->part + (size_t)host * count * es, count, dt, FSDP_SUM);
    if (s == FSDP_OK) s = comm_p2p_start(c->hier->cross, 0, h->part, out, count, dt, scale, &h->inter);  // step 2
    if (s != FSDP_OK) {
        comm_hier_free(h);
        return s;
    }
    *out_h = h;
    return FSDP_OK;
}

// ---- all-gathers: 1. across hosts, the ranks of local index l gather their blocks (MPI_Iallgather on
// hier_cross, each host's block landing at its place in recv: block h*L + l for host h); 2. within the
// host, in place, the ranks gather those (MPI_Iallgather on hier_ag_host, each rank's H blocks L blocks
// apart). No buffer of ours: recv holds everything. Step 2 is
// issued when step 1 is through, which a progress poll may find at any moment; MPI matches a
// communicator's collectives by the order they are issued, so every rank issues the group's step-2s in
// the order the all-gathers started (a later one waits for the earlier ones' issue).

static fsdp_status advance_gather(comm_hier *h) {
    fsdp_comm *c = h->c;
    int flag = 0;
    if (h->stage == 0) {
        FSDP_CHECK(comm_mpi_check(MPI_Test(&h->inter_req, &flag, MPI_STATUS_IGNORE), "MPI_Test"));
        if (flag) h->stage = 1;
    }
    if (h->stage == 1 && c->hier->ag_issued == h->seq) {
        fsdp_comm_mpi_count_call();
        // in place: this rank's H blocks are already at their places in recv
        FSDP_CHECK(comm_mpi_check(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h->recv, 1, h->spread,
                                                 c->hier->ag_host, &h->intra_req), "MPI_Iallgather (within the host)"));
        c->hier->ag_issued++;
        h->stage = 2;
    }
    if (h->stage == 2) {
        FSDP_CHECK(comm_mpi_check(MPI_Test(&h->intra_req, &flag, MPI_STATUS_IGNORE), "MPI_Test"));
        if (flag) h->stage = 3;
    }
    return FSDP_OK;
}

// Advances the group's all-gathers in flight, oldest first, through h
static fsdp_status advance_gathers(comm_hier *h) {
    for (comm_hier *p = h->c->hier->ag_pending; p; p = p->next) {
        FSDP_CHECK(advance_gather(p));
        if (p == h) break;
    }
    return FSDP_OK;
}

int comm_hier_gather_fits(const fsdp_comm *c, size_t count) {
    size_t H = (size_t)c->hier->cross->size, L = (size_t)c->hier->intra->size, lim = fsdp_comm_max_count();
    // one MPI call per step (H blocks of count, L blocks apart, addressed in ints)
    return count >= 1 && count * H <= lim && count * H * L <= (size_t)INT_MAX;
}

fsdp_status comm_hier_gather_start(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   comm_hier **out_h) {
    *out_h = NULL;
    comm_hier *h = new_hier(c, count, dt, 0);
    if (!h) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a hierarchical all-gather of %zu values", count);
    h->gather = 1;
    h->recv = recv;
    int L = c->hier->intra->size, l = c->hier->intra->rank;
    size_t es = fsdp_dtype_size(dt);
    MPI_Datatype t = dt == FSDP_F32 ? MPI_FLOAT : MPI_UINT16_T, blocks = MPI_DATATYPE_NULL;
    h->count = count;
    h->type = t;
    // the receive type of the host's rank l: H blocks of count, L blocks apart (from block l: host h's
    // segment), with an extent of one block, so consecutive ranks' data start one block apart
    fsdp_status s = comm_mpi_check(MPI_Type_create_hvector(c->hier->cross->size, (int)count,
                                                           (MPI_Aint)(count * (size_t)L * fsdp_dtype_size(dt)), t,
                                                           &blocks), "MPI_Type_create_hvector");
    if (s == FSDP_OK)
        s = comm_mpi_check(MPI_Type_create_resized(blocks, 0, (MPI_Aint)(count * fsdp_dtype_size(dt)), &h->spread),
                           "MPI_Type_create_resized");
    if (blocks != MPI_DATATYPE_NULL) MPI_Type_free(&blocks);
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Type_commit(&h->spread), "MPI_Type_commit");
    // the step across hosts receives straight into recv: one block, with an extent of L blocks, so host h's
    // block lands at block h*L + l
    MPI_Datatype one = MPI_DATATYPE_NULL;
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Type_contiguous((int)count, t, &one), "MPI_Type_contiguous");
    if (s == FSDP_OK)
        s = comm_mpi_check(MPI_Type_create_resized(one, 0, (MPI_Aint)(count * (size_t)L * es), &h->strided),
                           "MPI_Type_create_resized");
    if (one != MPI_DATATYPE_NULL) MPI_Type_free(&one);
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Type_commit(&h->strided), "MPI_Type_commit");
    if (s == FSDP_OK) {
        unsigned char *mine = (unsigned char *)recv + (size_t)c->rank * count * es;
        fsdp_comm_mpi_count_call();
        s = comm_mpi_check(MPI_Iallgather(send == mine ? MPI_IN_PLACE : send, (int)count, t,
                                          (unsigned char *)recv + (size_t)l * count * es, 1, h->strided,
                                          c->hier->cross->mpi, &h->inter_req), "MPI_Iallgather (across hosts)");
    }
    if (s != FSDP_OK) {
        comm_hier_free(h);
        return s;
    }
    h->seq = c->hier->ag_started++;
    comm_hier **tail = &c->hier->ag_pending;
    while (*tail) tail = &(*tail)->next;
    *tail = h;
    *out_h = h;
    return FSDP_OK;
}

fsdp_status comm_hier_test(comm_hier *h, int *done) {
    if (!h->gather) return comm_p2p_test(h->inter, done);
    FSDP_CHECK(advance_gathers(h));
    *done = h->stage == 3;
    return FSDP_OK;
}

fsdp_status comm_hier_wait(comm_hier *h) {
    if (!h->gather) return comm_p2p_wait(h->inter);
    for (long spin = 0;; spin++) {  // polls: an earlier all-gather's step 2 may have to be issued first
        FSDP_CHECK(advance_gathers(h));
        if (h->stage == 3) return FSDP_OK;
        if (spin > 64) sched_yield();
    }
}

void comm_hier_free(comm_hier *h) {
    if (!h) return;
    comm_p2p_free(h->inter);
    fsdp_comm *c = h->c;
    if (h->gather) {
        for (comm_hier **p = &c->hier->ag_pending; *p; p = &(*p)->next)
            if (*p == h) {
                *p = h->next;
                break;
            }
        if (h->inter_req != MPI_REQUEST_NULL) (void)MPI_Request_free(&h->inter_req);  // after an error only
        if (h->intra_req != MPI_REQUEST_NULL) (void)MPI_Request_free(&h->intra_req);
        if (h->spread != MPI_DATATYPE_NULL) (void)MPI_Type_free(&h->spread);
        if (h->strided != MPI_DATATYPE_NULL) (void)MPI_Type_free(&h->strided);
    }
    if (!c->hier->spare) {  // kept for the next one on this group
        c->hier->spare = h->part;
        c->hier->spare_bytes = h->part_bytes;
    } else {
        fsdp_free(h->part);
    }
    free(h);
}

fsdp_status comm_hier_gather_run(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    comm_hier *h = NULL;
    FSDP_CHECK(comm_hier_gather_start(c, send, recv, count, dt, &h));
    fsdp_status s = comm_hier_wait(h);
    comm_hier_free(h);
    return s;
}

fsdp_status comm_hier_run(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale) {
    comm_hier *h = NULL;
    FSDP_CHECK(comm_hier_start(c, send, out, count, dt, scale, &h));
    fsdp_status s = comm_hier_wait(h);
    comm_hier_free(h);
    return s;
}

// ---- the transport (comm_transport.h): reduce-scatters and all-gathers, in flight

static fsdp_status hier_all_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    (void)ctx;
    return comm_hier_gather_run(c, send, recv, count, dt);
}

static fsdp_status hier_reduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    return comm_hier_run(c, send, recv, count, dt, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f);
}

static fsdp_status hier_iall_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                    void **op) {
    (void)ctx;
    return comm_hier_gather_start(c, send, recv, count, dt, (comm_hier **)op);
}

static fsdp_status hier_ireduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                        fsdp_dtype dt, fsdp_reduce_op op, void **op_out) {
    (void)ctx;
    return comm_hier_start(c, send, recv, count, dt, op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f,
                           (comm_hier **)op_out);
}

static fsdp_status hier_test(void *op, int *done) { return comm_hier_test(op, done); }
static fsdp_status hier_wait(void *op) { return comm_hier_wait(op); }
static void hier_release(void *op) { comm_hier_free(op); }

// Bytes one rank sends in a reduce-scatter or all-gather of count elements per rank: H blocks to each
// of the L - 1 other ranks on its host and one to each of the H - 1 other hosts.
static size_t hier_bytes_sent(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    (void)kind;
    size_t block = count * fsdp_dtype_size(dt), L = (size_t)c->hier->intra->size, H = (size_t)c->hier->cross->size;
    return block * ((L - 1) * H + H - 1);
}

const fsdp_comm_transport comm_hier_transport = {
    .name = "hier",
    .all_gather = hier_all_gather,
    .reduce_scatter = hier_reduce_scatter,
    .iall_gather = hier_iall_gather,
    .ireduce_scatter = hier_ireduce_scatter,
    .test = hier_test,
    .wait = hier_wait,
    .release = hier_release,
    .bytes_sent = hier_bytes_sent,
};
