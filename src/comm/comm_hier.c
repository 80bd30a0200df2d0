// comm_hier.c: the hierarchical reduce-scatter for MPI groups that span hosts with several of their ranks
// on each (FULL_SHARD over 2 hosts x 4 ranks, say). Flat, every rank sends (size - L) blocks over the
// network (L: the group's ranks per host); here each byte of a gradient crosses the network once per
// host instead of once per rank:
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
// It applies where the group's ranks are laid out host by host: rank = host * L + local index, the
// same L on every host, more than one host and more than one rank per host (comm_hier_setup checks).
// All-gathers and all-reduces stay flat: their last step is a shared-memory copy after the network
// exchange, which a rank could only run at a point its host's other ranks reach in the same order,
// and fsdp_comm_test (called from progress polls at any time) is not such a point.
#include <stdlib.h>
#include <string.h>

#include "comm/comm_impl.h"
#include "core/alloc.h"

struct comm_hier {
    fsdp_comm *c;
    unsigned char *part;  // (H, count) elements: this host's partial sums of the blocks of local index l
    size_t part_bytes;    // its capacity (a kept buffer may be larger)
    comm_p2p *inter;      // step 2, in flight on c->hier_cross
};

fsdp_status comm_hier_setup(fsdp_comm *c) {
    c->hier_intra = c->hier_cross = NULL;
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
    fsdp_comm *intra = calloc(1, sizeof *intra), *cross = calloc(1, sizeof *cross);
    MPI_Comm across = MPI_COMM_NULL;
    int rc = MPI_Comm_split(c->mpi, l, c->rank, &across);  // collective over the group: before any early return
    if (!intra || !cross) {
        free(intra);
        free(cross);
        (void)MPI_Comm_free(&host);
        if (rc == MPI_SUCCESS) (void)MPI_Comm_free(&across);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    intra->backend = cross->backend = COMM_MPI;
    s = comm_group_adopt(intra, host);  // takes host; shared memory (its ranks share a host)
    fsdp_status t = comm_mpi_check(rc, "MPI_Comm_split");
    if (t == FSDP_OK) {
        t = comm_group_adopt(cross, across);
    } else {
        free(cross);
        cross = NULL;
    }
    if (s == FSDP_OK) s = t;
    int usable = s == FSDP_OK && intra->shm;  // no window (FSDP_COMM_NO_SHM): nothing to gain
    fsdp_status u = comm_mpi_allreduce(&usable, 1, sizeof usable, MPI_INT, MPI_MIN, c->mpi);
    if (s == FSDP_OK) s = u;
    if (s != FSDP_OK || !usable) {
        fsdp_comm_free(intra);
        fsdp_comm_free(cross);
        return s;
    }
    c->hier_intra = intra;
    c->hier_cross = cross;
    return FSDP_OK;
}

void comm_hier_free_groups(fsdp_comm *c) {
    fsdp_comm_free(c->hier_intra);
    fsdp_comm_free(c->hier_cross);
    c->hier_intra = c->hier_cross = NULL;
    fsdp_free(c->hier_spare);
    c->hier_spare = NULL;
    c->hier_spare_bytes = 0;
}

int comm_hier_ranks_per_host(const fsdp_comm *c) { return c->hier_intra ? c->hier_intra->size : 0; }

fsdp_status comm_hier_start(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale,
                            comm_hier **out_h) {
    *out_h = NULL;
    comm_hier *h = calloc(1, sizeof *h);
    if (!h) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    h->c = c;
    int L = c->hier_intra->size, H = c->hier_cross->size;
    size_t es = fsdp_dtype_size(dt), need = (size_t)H * count * es;
    if (c->hier_spare && c->hier_spare_bytes >= need) {  // the last one's buffer is large enough
        h->part = c->hier_spare;
        h->part_bytes = c->hier_spare_bytes;
        c->hier_spare = NULL;
    } else {
        h->part = fsdp_alloc(need ? need : 1, FSDP_MEM_COMM);
        h->part_bytes = need;
    }
    if (!h->part) {
        free(h);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a hierarchical reduce-scatter of %zu values", count);
    }
    const unsigned char *in = send;
    fsdp_status s = FSDP_OK;
    for (int host = 0; host < H && s == FSDP_OK; host++)  // step 1: host segment `host` = blocks host*L .. +L
        s = comm_shm_reduce_scatter(c->hier_intra, in + (size_t)host * (size_t)L * count * es,
                                    h->part + (size_t)host * count * es, count, dt, FSDP_SUM);
    if (s == FSDP_OK) s = comm_p2p_start(c->hier_cross, 0, h->part, out, count, dt, scale, &h->inter);  // step 2
    if (s != FSDP_OK) {
        comm_hier_free(h);
        return s;
    }
    *out_h = h;
    return FSDP_OK;
}

fsdp_status comm_hier_test(comm_hier *h, int *done) { return comm_p2p_test(h->inter, done); }
fsdp_status comm_hier_wait(comm_hier *h) { return comm_p2p_wait(h->inter); }

void comm_hier_free(comm_hier *h) {
    if (!h) return;
    comm_p2p_free(h->inter);
    fsdp_comm *c = h->c;
    if (!c->hier_spare) {  // kept for the next one on this group
        c->hier_spare = h->part;
        c->hier_spare_bytes = h->part_bytes;
    } else {
        fsdp_free(h->part);
    }
    free(h);
}

fsdp_status comm_hier_run(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale) {
    comm_hier *h = NULL;
    FSDP_CHECK(comm_hier_start(c, send, out, count, dt, scale, &h));
    fsdp_status s = comm_hier_wait(h);
    comm_hier_free(h);
    return s;
}
