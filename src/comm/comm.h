// comm.h: process groups and collectives. Backends: `local` (one process, no MPI) and `mpi`
// (Open MPI or MPICH; ranks on one node reduce-scatter and all-gather through an MPI shared-memory
// window, others use MPI's collectives). Underneath, each collective runs through one transport
// (comm_transport.h: shared memory, point to point, hierarchical, MPI), chosen in comm_path.c; a device
// backend plugs its own in (NCCL on CUDA buffers: fsdp_comm_set_device_transport below).
//
// Semantics follow NCCL's (counts are per rank):
//   all_gather(send, recv, count):      recv (size*count) = concat of every rank's send (count);
//                                       in place when send == recv + rank*count
//   reduce_scatter(send, recv, count):  recv (count) = op over ranks of send[rank*count .. +count]
//   all_reduce(buf, count):             buf (count) = op over ranks, in place
//   broadcast(buf, count, root):        buf (count) = root's buf
// Every rank of the group must make the same calls in the same order with the same counts.
// Counts are size_t end to end: a collective larger than one MPI call may carry (MPI's counts are int;
// see fsdp_comm_set_max_count) runs as several MPI calls on pieces of the buffers.
#pragma once
#include <stddef.h>

#include "core/status.h"
#include "tensor/tensor.h"

typedef struct fsdp_comm fsdp_comm;  // opaque process group

typedef enum { FSDP_SUM = 0, FSDP_AVG = 1 } fsdp_reduce_op;

// The world: MPI when the process was started by an MPI launcher (mpirun/mpiexec, srun), the local
// backend otherwise (a plain process is a world of one). argc/argv may be NULL.
fsdp_status fsdp_comm_world(fsdp_comm **world, int *argc, char ***argv);
// Splits `parent` into groups of ranks with equal `color`, ordered by `key` (MPI_Comm_split).
fsdp_status fsdp_comm_split(fsdp_comm *parent, int color, int key, fsdp_comm **out);
// Ranks of `parent` that share a node (MPI_COMM_TYPE_SHARED).
fsdp_status fsdp_comm_split_node(fsdp_comm *parent, fsdp_comm **out);
void fsdp_comm_free(fsdp_comm *comm);  // for the world: also MPI_Finalize
int fsdp_comm_rank(const fsdp_comm *comm);
int fsdp_comm_size(const fsdp_comm *comm);
const char *fsdp_comm_backend(const fsdp_comm *comm);  // "local", "mpi", "mpi+shm"

fsdp_status fsdp_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt);
fsdp_status fsdp_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                fsdp_reduce_op op);
fsdp_status fsdp_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op);
fsdp_status fsdp_broadcast(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, int root);
fsdp_status fsdp_barrier(fsdp_comm *c);
// all_reduce of one double (sum): global loss and norms
fsdp_status fsdp_all_reduce_double(fsdp_comm *c, double *value);

// Elements per MPI call (of the call's MPI datatype; bytes where MPI counts bytes): a collective of more
// elements per rank is split into pieces of at most this many, one MPI call each, in the same order
// on every rank. Default INT_MAX (MPI's largest count: collectives that fit run as one call, exactly as
// unsplit); the environment variable FSDP_COMM_MAX_COUNT (a positive integer, read once) lowers the
// default, and fsdp_comm_set_max_count(n) overrides it for this process (n = 0 restores the default;
// n is clamped to 1..INT_MAX). Every rank of a group must run with the same limit. For tests: small
// limits exercise the splitting on small buffers.
void fsdp_comm_set_max_count(size_t n);
size_t fsdp_comm_max_count(void);  // the limit now in force

// Nonblocking forms: start now, complete with fsdp_comm_wait/test. Buffers must stay untouched until
// completion. Where the backend cannot run a collective in the background (local, shared memory) the
// start runs it to completion and the request is already done; so does a collective that must be split
// (more elements than fsdp_comm_max_count per MPI call: the pieces run one after another), and bf16
// reduce-scatters and all-reduces through MPI's collectives (summed here, after an exchange). Those that
// run point to point (FSDP_COMM_ALGO below) stay in flight for any count and dtype.
typedef struct fsdp_comm_request fsdp_comm_request;
fsdp_status fsdp_iall_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                             fsdp_comm_request **req);
fsdp_status fsdp_ireduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                 fsdp_reduce_op op, fsdp_comm_request **req);
fsdp_status fsdp_iall_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                             fsdp_comm_request **req);
fsdp_status fsdp_comm_wait(fsdp_comm_request *req);            // completes and frees the request
fsdp_status fsdp_comm_test(fsdp_comm_request *req, int *done);  // *done = 1 when complete (then call wait)

// Shared buffers (zero-copy collectives). On a group whose ranks share a node, a buffer from
// fsdp_comm_alloc_shared lives in memory every rank can read: a reduce-scatter whose `send`, or an
// all-gather whose `send`, lies in such a buffer reads the peers' data in place instead of copying it
// in first. Contract: after such a collective returns, do not write its `send` buffer again until one
// more collective (or fsdp_barrier) on the same group has completed. Collective call; returns NULL
// (no error) when the group has no shared memory: the caller then uses ordinary memory.
void *fsdp_comm_alloc_shared(fsdp_comm *c, size_t bytes);
void fsdp_comm_free_shared(fsdp_comm *c, void *ptr);  // collective
// Where rank q holds what p addresses in a shared buffer (in this rank's piece of it or a peer's: the
// same offset in q's piece of the same fsdp_comm_alloc_shared call); NULL when p lies in no such buffer
// or q is not a rank of c.
const void *fsdp_comm_shared_at(const fsdp_comm *c, const void *p, int q);
// Where the ranks' pieces [p, p + bytes) of a shared buffer lie one after another in memory (rank q's
// at the returned address + q * bytes), the address of rank 0's piece: the pieces' concatenation (the
// gathered array of an all-gather whose send is p) can then be read in place there. MPI windows are
// contiguous across ranks unless told otherwise, so this holds for a whole buffer from
// fsdp_comm_alloc_shared; NULL when it does not hold (or p is not shared memory).
const void *fsdp_comm_shared_concat(const fsdp_comm *c, const void *p, size_t bytes);
// An all-gather read in place. send (count,) lies in a shared buffer; once this returns, every rank's
// send is read through fsdp_comm_shared_at, and only the element ranges of the gathered array
// (size*count,) listed in copy (n_copy pairs [begin, end)) are written to recv; the rest of recv is left
// as it was. The contract above, for readers that read after the call: each rank finishes its reads
// before it enters its next collective on c, and a rank writes its send again only after that
// collective has completed. FSDP_ERR_INVALID_ARG when send is not in a shared buffer.
fsdp_status fsdp_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                   const size_t (*copy)[2], size_t n_copy);

// Debug support (FSDP_DEBUG=DETAIL): before every collective on a group with checking on, the ranks
// compare (call number, kind, element count) with one small all-reduce; a mismatch (ranks running
// different collective sequences) fails that collective on every rank with a message naming the call.
void fsdp_comm_set_sequence_check(fsdp_comm *c, int on);
// This process's host name (MPI_Get_processor_name; gethostname for the local backend), cached in c.
const char *fsdp_comm_host(fsdp_comm *c);
// The collective this process is blocked in: its name and when it started (0 when none). For a
// watchdog thread; reads are racy by design but never crash.
void fsdp_comm_current(const char **name, double *since);
// For device transports whose collectives run after their call returns (NCCL enqueues on a stream): the
// host's wait for them is marked as the collective `name` in progress from now (fsdp_comm_current sees
// it, so the watchdog reports a wait that never ends), until fsdp_comm_mark_done. name: a static string.
void fsdp_comm_mark_wait(const char *name);
void fsdp_comm_mark_done(void);

// Reduce-scatters and all-reduces on MPI groups without shared memory (ranks on different hosts) run
// either as MPI's collectives or point to point (every rank sends block q to rank q and sums what it
// receives in rank order: the same bits as the shared-memory path, and the bytes of a ring). The
// environment variable FSDP_COMM_ALGO (read once; every rank must use the same) picks: `mpi`, `p2p`, or
// `auto` (default, also for unknown values: the path measured faster, docs/decisions.md), or `hier`
// (as auto). auto and hier reduce-scatter and all-gather hierarchically on a group laid out host by host
// with several ranks per host (comm_hier.c); p2p and mpi keep them flat. The
// point-to-point forms are nonblocking for any count and dtype. fp32 sums over MPI's own collectives are
// in MPI's order.
const char *fsdp_comm_algo_setting(void);  // "auto", "mpi", "p2p" or "hier"
// The path a reduce-scatter (all_reduce 0, count per rank) or an all-reduce (all_reduce 1) of count
// elements of dt takes on c: "local", "shm", "mpi", "p2p" or "hier" (reduce-scatters only)
const char *fsdp_comm_path(const fsdp_comm *c, int all_reduce, size_t count, fsdp_dtype dt);

// The path an all-gather of count elements per rank of dt takes on c: "local", "shm", "mpi" or "hier"
// (a group laid out host by host with several ranks per host, FSDP_COMM_ALGO auto or hier: across hosts
// first, then within each host)
const char *fsdp_comm_gather_path(const fsdp_comm *c, size_t count, fsdp_dtype dt);

// The slot for a device backend's transport (NCCL on CUDA buffers, say): installs t (an interface of
// comm_transport.h, with its context ctx) on c, called from above (the device layer) after c is made and
// before its collectives on device buffers; t = NULL removes it. From then on a collective on c whose
// send buffer t accepts (t->accepts, or every buffer where it is NULL), of a kind t implements, runs
// through t; everything else keeps the host transports. Every rank of c must install the same.
// t and ctx must outlive c's use of them (c does not free them). FSDP_ERR_INVALID_ARG when t has no name,
// a nonblocking form without its blocking one, or a nonblocking form without test, wait and release.
// A group of one rank: collectives its device transport accepts run through it too (NCCL with one rank),
// the rest are the identity on the host as before. fsdp_comm_free(c) calls t->detach first, when set.
struct fsdp_comm_transport;
fsdp_status fsdp_comm_set_device_transport(fsdp_comm *c, const struct fsdp_comm_transport *t, void *ctx);
// For the watchdog, before it ends the process: every group of this process with a device transport
// installed has that transport's abort called (NCCL: ncclCommAbort, so no GPU stays blocked in a
// collective whose peers are gone). Safe to call from any thread; nothing when no transport is installed.
void fsdp_comm_abort_device(void);
// What the group is, for messages naming it: "world (N ranks)" for the world, else "group of K ranks
// (world ranks a,b,...)" (the first few), "local (1 rank)" without MPI. Writes at most cap bytes.
void fsdp_comm_describe(const fsdp_comm *c, char *buf, size_t cap);

// Communication statistics of this process: bytes moved and seconds spent inside collectives.
typedef struct {
    double seconds;
    size_t bytes_sent;
    size_t calls;
} fsdp_comm_stats;
fsdp_comm_stats fsdp_comm_get_stats(const fsdp_comm *c);
