// comm_impl.h: the process-group struct shared by the comm backends (not part of the public API).
#pragma once
#include <mpi.h>
#include <stdint.h>

#include "comm/comm.h"

typedef enum { COMM_LOCAL, COMM_MPI } comm_backend;

struct fsdp_comm {
    comm_backend backend;
    int rank, size;
    int owns_mpi;        // the world that called MPI_Init: finalizes on free
    MPI_Comm mpi;        // COMM_MPI only
    // shared-memory collectives (COMM_MPI with every rank on one node)
    int shm;             // 1 when the window below is usable
    MPI_Win win;
    unsigned char **seg; // (size,) base of each rank's segment in the window
    size_t seg_bytes;    // capacity of one segment; each holds two halves for double buffering
    size_t seg_used;     // bytes of each half in use: touched when reserved, accounted as communication
    int parity;          // which half the next collective uses
    MPI_Win ctl_win;     // the barrier's shared words (rank 0 holds them)
    struct shm_barrier *ctl;
    int barrier_spins;   // polls before a waiting rank yields its CPU: few when ranks share CPUs
    struct shm_region *regions;  // (n_regions,) buffers from fsdp_comm_alloc_shared
    int n_regions;
    int check_sequence;  // FSDP_DEBUG=DETAIL: compare (call, kind, count, elements per MPI call) across ranks first
    int64_t calls_issued;  // collectives issued on this group (the sequence number)
    int64_t p2p_seq;       // point-to-point reductions started on this group (their message tags)
    unsigned char *p2p_spare;  // (p2p_spare_bytes,) the scratch of the last finished point-to-point reduction,
    size_t p2p_spare_bytes;    // kept for the next one (no allocation and first touch per collective)
    struct fsdp_comm *hier_intra;  // the group's ranks on this host (shared memory) when it reduce-scatters
    struct fsdp_comm *hier_cross;  // hierarchically (comm_hier.c): and its ranks of this local index, one per host
    unsigned char *hier_spare;     // (hier_spare_bytes,) the last hierarchical reduce-scatter's partial sums, kept
    size_t hier_spare_bytes;
    MPI_Comm hier_ag_host;         // hier_intra's ranks again, for the all-gathers' steps within the host only
    int64_t hier_ag_started;       // hierarchical all-gathers started on this group,
    int64_t hier_ag_issued;        // and those whose step within the host has been issued (in order)
    struct comm_hier *hier_ag_pending;  // those in flight, oldest first
    fsdp_comm_stats stats;
    char host[MPI_MAX_PROCESSOR_NAME];  // this process's host (MPI_Get_processor_name), cached on first use
};

typedef struct shm_region {
    MPI_Win win;
    size_t bytes;
    unsigned char **peer;  // (size,) each rank's piece; peer[rank] is this rank's
} shm_region;

typedef struct comm_p2p comm_p2p;
typedef struct comm_hier comm_hier;

struct fsdp_comm_request {
    fsdp_comm *comm;
    MPI_Request mpi;     // MPI_REQUEST_NULL when already complete
    comm_p2p *p2p;       // a point-to-point reduction in flight (comm_p2p.c), or NULL
    comm_hier *hier;     // a hierarchical reduce-scatter or all-gather in flight (comm_hier.c), or NULL
    int accounted;       // its bytes and time are in the statistics already
    float *scale_buf;    // AVG: divide these `scale_count` floats by the group size at completion
    size_t scale_count;
    double started;
    size_t bytes;
};

// MPI calls with a count (comm_mpi.c). Counts are size_t; each MPI call carries at most
// fsdp_comm_max_count() elements, so a larger collective runs as pieces, one MPI call each, in the same
// order on every rank; one that fits is a single call with the arguments MPI would get unsplit. esize:
// bytes per element of t. Each returns FSDP_OK or the failing call's error (comm_mpi_check); on an
// error the remaining pieces are not issued.
// buf (count,) = op over ranks of buf, in place
fsdp_status comm_mpi_allreduce(void *buf, size_t count, size_t esize, MPI_Datatype t, MPI_Op op, MPI_Comm m);
// buf (count,) = root's buf. Count 0 still makes one call (MPI checks the arguments).
fsdp_status comm_mpi_bcast(void *buf, size_t count, size_t esize, MPI_Datatype t, int root, MPI_Comm m);
// recv (size, count) = every rank's send (count,), in rank order; in place when send is MPI_IN_PLACE or
// recv + rank * count * esize. Split: piece by piece through a strided derived datatype, no copies.
fsdp_status comm_mpi_allgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                               int rank);
// recv (size, count): block q = rank q's send block `rank`; send (size, count)
fsdp_status comm_mpi_alltoall(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m);
// recv (count,) = op over ranks of their send (size, count) block `rank`. Split: each piece's
// (size, piece) elements are packed into a temporary (at most 256 MiB) and reduced from there.
fsdp_status comm_mpi_reduce_scatter(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t,
                                    MPI_Op op, MPI_Comm m, int size);
// Nonblocking, one MPI call: count must be <= fsdp_comm_max_count() (a larger one goes through the
// blocking forms above). Same shapes as their blocking forms.
fsdp_status comm_mpi_iallgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                                int rank, MPI_Request *req);
fsdp_status comm_mpi_ireduce_scatter(const void *send, void *recv, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m,
                                     MPI_Request *req);
fsdp_status comm_mpi_iallreduce(void *buf, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m, MPI_Request *req);
// MPI calls with a count this process has issued so far, every piece counted (for tests)
size_t fsdp_comm_mpi_calls(void);

// MPI_Comm_split_type(m, MPI_COMM_TYPE_SHARED, key): m's ranks on this host. For tests on one machine,
// FSDP_COMM_RANKS_PER_HOST=k (read once) pretends hosts of k consecutive world ranks. Returns MPI's code.
int comm_host_split(MPI_Comm m, int key, MPI_Comm *out);
// Collective over m: how many of m's ranks (this one included) may run on one of this process's CPUs;
// -1 when the affinity masks cannot be read or exchanged (comm_node.c)
int comm_sharing_ranks(MPI_Comm m);

// shared-memory collectives (comm_shm.c); each returns FSDP_OK or an error with a message
// FSDP_OK for MPI_SUCCESS, else an FSDP_ERR_COMM error "<what> failed: <MPI's message>".
fsdp_status comm_mpi_check(int rc, const char *what);
fsdp_status comm_shm_setup(fsdp_comm *c);
void comm_shm_free(fsdp_comm *c);
fsdp_status comm_shm_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
fsdp_status comm_shm_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                       const size_t (*copy)[2], size_t n_copy);
fsdp_status comm_shm_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                    fsdp_reduce_op op);
fsdp_status comm_shm_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);

// dst (n,) = bf16(scale * sum over r < nsrc of src[r] (n,)), summed in fp32 in the order of src: the one
// reduction of bf16 payloads every path uses, so they all give the same values. src: (nsrc,) pointers.
void comm_sum_bf16(fsdp_bf16 *dst, const fsdp_bf16 *const *src, int nsrc, size_t n, float scale);

// Counts one MPI call with a count (fsdp_comm_mpi_calls): a point-to-point round counts as one.
void fsdp_comm_mpi_count_call(void);

// Point-to-point reductions for MPI groups without shared memory (comm_p2p.c).
// FSDP_COMM_ALGO (read once): auto (default), mpi (MPI's collectives), p2p (comm_p2p.c)
// hier: as auto, and reduce-scatters hierarchically where the group's layout allows (comm_hier.c);
// auto does that too: p2p and mpi keep every reduce-scatter flat.
enum { COMM_ALGO_AUTO = 0, COMM_ALGO_MPI = 1, COMM_ALGO_P2P = 2, COMM_ALGO_HIER = 3 };
int comm_algo(void);
// 1 when a reduce-scatter (all_reduce 0; count per rank) or all-reduce (count: the buffer) of dtype dt on
// c runs point to point: never on shared memory or one rank; FSDP_COMM_ALGO=p2p/mpi decide, auto picks
// the path measured faster. A function of (group, kind, count, dt) only: the same on every rank.
int comm_use_p2p(const fsdp_comm *c, int all_reduce, size_t count, fsdp_dtype dt);
// 1 when a reduce-scatter of count elements per rank of dt on c runs hierarchically (comm_hier.c)
int comm_use_hier(const fsdp_comm *c, size_t count, fsdp_dtype dt);
// Starts: all_reduce 0: out (count,) = scale * sum over ranks in rank order of send (size, count) block
// `rank`; all_reduce 1: out (count,) = scale * the rank-order sum of every rank's send (count,), where
// out == send (in place). bf16 payloads are summed in fp32 and rounded once (comm_sum_bf16).
fsdp_status comm_p2p_start(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                           float scale, comm_p2p **p);
fsdp_status comm_p2p_test(comm_p2p *p, int *done);  // progresses: posts further rounds, sums arrived ones
fsdp_status comm_p2p_wait(comm_p2p *p);             // completes (p stays allocated)
void comm_p2p_free(comm_p2p *p);                // cancels what is still pending (after an error)
void comm_p2p_release_spare(fsdp_comm *c);  // frees the kept scratch (fsdp_comm_free)
// start + wait + free
fsdp_status comm_p2p_run(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                         float scale);

// Hierarchical reduce-scatters (comm_hier.c) for groups laid out host by host with several ranks per host.
// Takes m into c as a process group (shared memory, hierarchy); the caller frees c on failure.
fsdp_status comm_group_adopt(fsdp_comm *c, MPI_Comm m);
// Collective over c (no shared memory of its own): sets c->hier_intra and c->hier_cross where the layout
// allows (rank = host * L + local index, the same L > 1 everywhere, more than one host), else leaves them NULL.
fsdp_status comm_hier_setup(fsdp_comm *c);
void comm_hier_free_groups(fsdp_comm *c);      // fsdp_comm_free
int comm_hier_ranks_per_host(const fsdp_comm *c);  // L where c reduce-scatters hierarchically, else 0
// Starts: out (count,) = scale * sum over ranks of send (size, count) block `rank` (comm_hier.c's order).
// The shared-memory step runs here; the point-to-point one is left in flight.
fsdp_status comm_hier_start(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale,
                            comm_hier **h);
fsdp_status comm_hier_test(comm_hier *h, int *done);
fsdp_status comm_hier_wait(comm_hier *h);
void comm_hier_free(comm_hier *h);
fsdp_status comm_hier_run(fsdp_comm *c, const void *send, void *out, size_t count, fsdp_dtype dt, float scale);
// 1 when an all-gather of count elements per rank of dt on c runs hierarchically (across hosts, then
// within: comm_hier.c)
int comm_use_hier_gather(const fsdp_comm *c, size_t count, fsdp_dtype dt);
// Starts: recv (size, count) = every rank's send (count,) in rank order (send may be recv's block `rank`)
fsdp_status comm_hier_gather_start(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   comm_hier **h);
fsdp_status comm_hier_gather_run(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
