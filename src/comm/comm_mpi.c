// comm_mpi.c: the MPI calls that take a count, with 64-bit (size_t) counts. MPI's counts are int, so a
// collective of more elements than one call may carry (fsdp_comm_max_count: INT_MAX by default) is split
// into pieces of at most that many elements, one MPI call each, issued in the same order on every
// rank. A collective that fits is one call with exactly the arguments an unsplit call would have, so
// results at the default limit are the same as MPI's own (the summation order does not change).
// Every rank of a group must use the same limit (the same FSDP_COMM_MAX_COUNT, the same
// fsdp_comm_set_max_count calls): ranks splitting differently would issue different calls.
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_mpi.h"
#include "core/alloc.h"
#include "core/tunables.h"

// A reduce-scatter piece is packed into a temporary of (size, piece) elements: at most these bytes, so
// the temporary stays small next to the payload (a piece of 256 MiB is still one large transfer).
enum { PACK_BYTES = 256 << 20 };

static size_t limit_env = (size_t)INT_MAX;  // FSDP_COMM_MAX_COUNT, or INT_MAX; read once
static atomic_size_t limit_set;             // fsdp_comm_set_max_count's value; 0: limit_env
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_size_t mpi_calls;             // MPI calls with a count issued by this process

static size_t clamp_limit(unsigned long long n) { return n > (unsigned long long)INT_MAX ? (size_t)INT_MAX : (size_t)n; }

static void read_env(void) {
    const char *v = fsdp_tunable(FSDP_ENV_COMM_MAX_COUNT);
    if (!v || !*v) return;
    if (strspn(v, "0123456789") != strlen(v)) return;  // not a plain decimal count: ignored
    unsigned long long n = strtoull(v, NULL, 10);        // saturates at ULLONG_MAX, then clamped
    if (n > 0) limit_env = clamp_limit(n);
}

size_t fsdp_comm_max_count(void) {
    pthread_once(&env_once, read_env);
    size_t set = atomic_load_explicit(&limit_set, memory_order_relaxed);
    return set ? set : limit_env;
}

void fsdp_comm_set_max_count(size_t n) {
    pthread_once(&env_once, read_env);
    atomic_store_explicit(&limit_set, n ? clamp_limit(n) : 0, memory_order_relaxed);
}

size_t fsdp_comm_mpi_calls(void) { return atomic_load_explicit(&mpi_calls, memory_order_relaxed); }

static void counted(void) { atomic_fetch_add_explicit(&mpi_calls, 1, memory_order_relaxed); }

void fsdp_comm_mpi_count_call(void) { counted(); }

fsdp_status comm_mpi_check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return FSDP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return fsdp_error(FSDP_ERR_COMM, "%s failed: %s", what, msg);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// Elements per piece where one piece is a single derived-datatype element of n * esize bytes: MPI
// reports type sizes as int, so such a piece also stays below INT_MAX bytes.
static size_t piece_elements(size_t esize) {
    size_t by_bytes = (size_t)INT_MAX / esize;
    return min_size(fsdp_comm_max_count(), by_bytes > 0 ? by_bytes : 1);
}

// *out = n consecutive elements of t, with an extent of `stride` bytes: in an
// all-gather or all-to-all of one such element per rank, rank r's n elements sit r * stride bytes on.
static fsdp_status strided_type(size_t n, MPI_Datatype t, size_t stride, MPI_Datatype *out) {
    MPI_Datatype run;
    FSDP_CHECK(comm_mpi_check(MPI_Type_contiguous((int)n, t, &run), "MPI_Type_contiguous"));
    fsdp_status s = comm_mpi_check(MPI_Type_create_resized(run, 0, (MPI_Aint)stride, out), "MPI_Type_create_resized");
    (void)MPI_Type_free(&run);  // *out keeps what it needs
    if (s == FSDP_OK) {
        s = comm_mpi_check(MPI_Type_commit(out), "MPI_Type_commit");
        if (s != FSDP_OK) (void)MPI_Type_free(out);
    }
    return s;
}

// Keeps *pt the strided type of n elements of t (stride bytes apart per rank), rebuilding it when n
// changes: a split call needs at most two (full pieces and the last one). *have: the n *pt holds, 0: none.
static fsdp_status piece_type(size_t n, MPI_Datatype t, size_t stride, MPI_Datatype *pt, size_t *have) {
    if (*have == n) return FSDP_OK;
    if (*have) (void)MPI_Type_free(pt);
    *have = 0;
    FSDP_CHECK(strided_type(n, t, stride, pt));
    *have = n;
    return FSDP_OK;
}

fsdp_status comm_mpi_allreduce(void *buf, size_t count, size_t esize, MPI_Datatype t, MPI_Op op, MPI_Comm m) {
    unsigned char *b = buf;  // (count * esize) bytes, reduced in place
    size_t lim = fsdp_comm_max_count();
    for (size_t off = 0; off == 0 || off < count; off += lim) {  // count 0: one call, as unsplit
        size_t n = min_size(lim, count - off);
        counted();
        FSDP_CHECK(comm_mpi_check(MPI_Allreduce(MPI_IN_PLACE, b + off * esize, (int)n, t, op, m), "MPI_Allreduce"));
    }
    return FSDP_OK;
}

fsdp_status comm_mpi_bcast(void *buf, size_t count, size_t esize, MPI_Datatype t, int root, MPI_Comm m) {
    unsigned char *b = buf;  // (count * esize) bytes: root's are copied to every rank
    size_t lim = fsdp_comm_max_count();
    // count 0 still makes one call: MPI checks the arguments (an invalid root fails on every rank)
    for (size_t off = 0; off == 0 || off < count; off += lim) {
        size_t n = min_size(lim, count - off);
        counted();
        FSDP_CHECK(comm_mpi_check(MPI_Bcast(b + off * esize, (int)n, t, root, m), "MPI_Bcast"));
    }
    return FSDP_OK;
}

fsdp_status comm_mpi_allgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                               int rank) {
    // send: (count * esize) bytes, or MPI_IN_PLACE, or recv + rank * count * esize (in place);
    // recv: (size, count) elements, rank r's block at r * count * esize bytes
    unsigned char *r = recv;
    const unsigned char *s = send;
    size_t block = count * esize;
    int in_place = send == MPI_IN_PLACE || s == r + (size_t)rank * block;
    if (count <= fsdp_comm_max_count()) {
        counted();
        return comm_mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, (int)count, t, recv, (int)count, t, m),
                              "MPI_Allgather");
    }
    // Piece j: every rank sends elements [off, off + n) of its block; they land at `off` in each rank's
    // block of recv through one strided element per rank. In place, MPI reads this rank's piece where its
    // own contribution lands (recv + off*esize + rank * block): the same bytes as send + off*esize.
    size_t lim = piece_elements(esize), have = 0;
    MPI_Datatype pt = MPI_DATATYPE_NULL;
    fsdp_status st = FSDP_OK;
    for (size_t off = 0; off < count && st == FSDP_OK; off += lim) {
        size_t n = min_size(lim, count - off);
        st = piece_type(n, t, block, &pt, &have);
        if (st != FSDP_OK) break;
        counted();
        st = comm_mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : s + off * esize, (int)n, t, r + off * esize, 1, pt, m),
                            "MPI_Allgather");
    }
    if (have) (void)MPI_Type_free(&pt);
    return st;
}

fsdp_status comm_mpi_alltoall(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m) {
    // send, recv: (size, count) elements; block r of send goes to rank r, block r of recv comes from it
    const unsigned char *s = send;
    unsigned char *r = recv;
    if (count <= fsdp_comm_max_count()) {
        counted();
        return comm_mpi_check(MPI_Alltoall(send, (int)count, t, recv, (int)count, t, m), "MPI_Alltoall");
    }
    size_t lim = piece_elements(esize), have = 0, block = count * esize;
    MPI_Datatype pt = MPI_DATATYPE_NULL;
    fsdp_status st = FSDP_OK;
    for (size_t off = 0; off < count && st == FSDP_OK; off += lim) {  // elements [off, off + n) of every block
        size_t n = min_size(lim, count - off);
        st = piece_type(n, t, block, &pt, &have);
        if (st != FSDP_OK) break;
        counted();
        st = comm_mpi_check(MPI_Alltoall(s + off * esize, 1, pt, r + off * esize, 1, pt, m), "MPI_Alltoall");
    }
    if (have) (void)MPI_Type_free(&pt);
    return st;
}

fsdp_status comm_mpi_reduce_scatter(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t,
                                    MPI_Op op, MPI_Comm m, int size) {
    // send: (size, count) elements, block r reduced into rank r's recv; recv: (count) elements
    if (count <= fsdp_comm_max_count()) {
        counted();
        return comm_mpi_check(MPI_Reduce_scatter_block(send, recv, (int)count, t, op, m), "MPI_Reduce_scatter_block");
    }
    // Piece j: elements [off, off + n) of every block, packed contiguously (a predefined reduction needs
    // a predefined datatype), reduced into recv + off. Packing first also makes recv aliasing this
    // rank's block of send harmless.
    size_t by_pack = (size_t)PACK_BYTES / (esize * (size_t)size);
    size_t lim = min_size(fsdp_comm_max_count(), by_pack > 0 ? by_pack : 1);
    unsigned char *pack = fsdp_alloc((size_t)size * lim * esize, FSDP_MEM_COMM);  // (size, lim) elements
    if (!pack) return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a reduce-scatter piece of %zu elements", lim);
    const unsigned char *s = send;
    unsigned char *r = recv;
    fsdp_status st = FSDP_OK;
    for (size_t off = 0; off < count && st == FSDP_OK; off += lim) {
        size_t n = min_size(lim, count - off);
        for (int q = 0; q < size; q++)  // pack: (size, n), block q = send[q * count + off .. + n)
            memcpy(pack + (size_t)q * n * esize, s + ((size_t)q * count + off) * esize, n * esize);
        counted();
        st = comm_mpi_check(MPI_Reduce_scatter_block(pack, r + off * esize, (int)n, t, op, m), "MPI_Reduce_scatter_block");
    }
    fsdp_free(pack);
    return st;
}

fsdp_status comm_mpi_iallgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                                int rank, MPI_Request *req) {
    FSDP_ASSERT(count <= fsdp_comm_max_count());  // callers run a larger one through comm_mpi_allgather
    const unsigned char *s = send;
    int in_place = send == MPI_IN_PLACE || s == (const unsigned char *)recv + (size_t)rank * count * esize;
    counted();
    return comm_mpi_check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, (int)count, t, recv, (int)count, t, m, req),
                          "MPI_Iallgather");
}

fsdp_status comm_mpi_ireduce_scatter(const void *send, void *recv, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m,
                                     MPI_Request *req) {
    FSDP_ASSERT(count <= fsdp_comm_max_count());
    counted();
    return comm_mpi_check(MPI_Ireduce_scatter_block(send, recv, (int)count, t, op, m, req), "MPI_Ireduce_scatter_block");
}

fsdp_status comm_mpi_iallreduce(void *buf, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m, MPI_Request *req) {
    FSDP_ASSERT(count <= fsdp_comm_max_count());
    counted();
    return comm_mpi_check(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, t, op, m, req), "MPI_Iallreduce");
}
