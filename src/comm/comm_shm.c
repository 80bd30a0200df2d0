// comm_shm.c: collectives among ranks of one node through an MPI shared-memory window.
// Each rank owns a segment split into two halves; consecutive collectives alternate halves, so one
// barrier per call suffices: a rank can only write a half again after every rank has passed the
// barrier of the following call, i.e. finished reading that half. Sums run in a fixed rank order,
// so every rank computes bit-identical results.
// The barrier is a counter in shared memory: a waiting rank spins briefly, then yields its CPU
// (sched_yield), so ranks that share a core (oversubscribed launches) do not spin against each other.
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_shm.h"

#include "comm/comm_group.h"
#include "comm/comm_host.h"
#include "comm/comm_mpi.h"
#include "comm/comm_sum.h"
#include "core/alloc.h"
#include "core/threads.h"
#include "core/timer.h"
#include "core/tunables.h"

typedef struct shm_barrier shm_barrier;

// A buffer from fsdp_comm_alloc_shared: one MPI shared-memory window, a piece per rank
typedef struct shm_region {
    MPI_Win win;
    size_t bytes;
    unsigned char **peer;  // (size,) each rank's piece; peer[rank] is this rank's
} shm_region;

struct comm_shm {
    MPI_Win win;
    unsigned char **seg;  // (size,) base of each rank's segment in the window
    size_t seg_bytes;     // capacity of one segment; each holds two halves for double buffering
    size_t seg_used;      // bytes of each half in use: touched when reserved, accounted as communication
    int parity;           // which half the next collective uses
    MPI_Win ctl_win;      // the barrier's shared words (rank 0 holds them)
    shm_barrier *ctl;
    int barrier_spins;    // polls before a waiting rank yields its CPU: few when ranks share CPUs
    shm_region *regions;  // (n_regions,) buffers from fsdp_comm_alloc_shared
    int n_regions;
};

static fsdp_status alloc_window(fsdp_comm *c, size_t seg_bytes) {
    MPI_Aint bytes = (MPI_Aint)seg_bytes;
    void *base = NULL;
    if (MPI_Win_allocate_shared(bytes, 64, MPI_INFO_NULL, c->mpi, &base, &c->shm->win) != MPI_SUCCESS)
        return fsdp_error(FSDP_ERR_COMM, "MPI_Win_allocate_shared of %zu bytes failed", seg_bytes);
    c->shm->seg_bytes = seg_bytes;  // release_window frees it from here on
    for (int r = 0; r < c->size; r++) {
        MPI_Aint sz;
        int disp;
        FSDP_CHECK(comm_mpi_check(MPI_Win_shared_query(c->shm->win, r, &sz, &disp, &c->shm->seg[r]), "MPI_Win_shared_query"));
    }
    return comm_mpi_check(MPI_Win_lock_all(MPI_MODE_NOCHECK, c->shm->win), "MPI_Win_lock_all");
}

static void release_window(fsdp_comm *c) {
    if (c->shm->seg_bytes) {
        fsdp_mem_track(FSDP_MEM_COMM, 2 * c->shm->seg_used, -1);
        c->shm->seg_used = 0;
        MPI_Win_unlock_all(c->shm->win);
        MPI_Win_free(&c->shm->win);
        c->shm->seg_bytes = 0;
    }
}

// The shared words of the barrier: `arrived` counts the ranks in the current round; the last to
// arrive resets it and bumps `generation`, which releases the others.
typedef struct shm_barrier {
    atomic_uint arrived;
    atomic_uint generation;
} shm_barrier;

// Polls before yielding: tens of microseconds when every rank has CPUs of its own (a round ends within
// them), a handful when ranks share CPUs (the rank everyone waits for may need this one's CPU).
enum { BARRIER_SPINS = 4096, BARRIER_SPINS_SHARED = 16 };

static void barrier_wait(fsdp_comm *c) {
    shm_barrier *b = c->shm->ctl;
    unsigned gen = atomic_load_explicit(&b->generation, memory_order_acquire);  // before arriving
    if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) == (unsigned)c->size - 1) {
        atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&b->generation, 1, memory_order_release);
        return;
    }
    for (long spin = 0; atomic_load_explicit(&b->generation, memory_order_acquire) == gen; spin++) {
        if (spin < c->shm->barrier_spins) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        sched_yield();
        int flag;  // lets MPI progress this rank's nonblocking collectives on other groups meanwhile
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->mpi, &flag, MPI_STATUS_IGNORE);
    }
}

fsdp_status comm_shm_setup(fsdp_comm *c) {
    c->shm = NULL;
    MPI_Comm node;
    FSDP_CHECK(comm_mpi_check(comm_host_split(c->mpi, 0, &node), "MPI_Comm_split_type"));
    int node_size = 0;
    fsdp_status s = comm_mpi_check(MPI_Comm_size(node, &node_size), "MPI_Comm_size");
    (void)MPI_Comm_free(&node);
    int everyone = node_size == c->size;  // this rank's group lies on its node; after the MIN: every rank's
    if (s == FSDP_OK) s = comm_mpi_allreduce(&everyone, 1, sizeof everyone, MPI_INT, MPI_MIN, c->mpi);
    FSDP_CHECK(s);
    if (!everyone || fsdp_tunable(FSDP_ENV_COMM_NO_SHM)) return FSDP_OK;
    comm_shm *shm = calloc(1, sizeof *shm);
    if (shm) shm->seg = calloc((size_t)c->size, sizeof(unsigned char *));
    if (!shm || !shm->seg) {
        free(shm);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    void *mine = NULL;
    if (MPI_Win_allocate_shared(c->rank == 0 ? (MPI_Aint)sizeof(shm_barrier) : 0, 64, MPI_INFO_NULL, c->mpi, &mine,
                                &shm->ctl_win) != MPI_SUCCESS) {
        free(shm->seg);
        free(shm);
        return fsdp_error(FSDP_ERR_COMM, "MPI_Win_allocate_shared of the barrier's %zu bytes failed", sizeof(shm_barrier));
    }
    MPI_Aint sz;
    int disp;
    MPI_Win_shared_query(shm->ctl_win, 0, &sz, &disp, &shm->ctl);
    if (c->rank == 0) {
        atomic_init(&shm->ctl->arrived, 0);
        atomic_init(&shm->ctl->generation, 0);
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, shm->ctl_win);
    int sharing = comm_sharing_ranks(c->mpi);  // also a barrier: the words are initialised before anyone arrives
    shm->barrier_spins = sharing < 0 || sharing > fsdp_affinity_cores() ? BARRIER_SPINS_SHARED : BARRIER_SPINS;
    c->shm = shm;
    return FSDP_OK;
}

void comm_shm_free(fsdp_comm *c) {
    comm_shm *shm = c->shm;
    if (!shm) return;
    while (shm->n_regions > 0) fsdp_comm_free_shared(c, shm->regions[shm->n_regions - 1].peer[c->rank]);
    free(shm->regions);
    release_window(c);
    MPI_Win_unlock_all(shm->ctl_win);
    MPI_Win_free(&shm->ctl_win);
    free(shm->seg);
    free(shm);
    c->shm = NULL;
}

static unsigned char *half_of(fsdp_comm *c, int rank, int half) {
    return c->shm->seg[rank] + (size_t)half * (c->shm->seg_bytes / 2);
}

// Makes each half of every segment hold at least `bytes`; collective (all ranks ask the same size).
// The bytes in use of both halves of this rank's segment are touched here, once, and accounted as
// communication memory: consecutive collectives alternate halves, so a run's largest message soon
// occupies both, and the memory a run holds then does not depend on which half it landed in first.
static fsdp_status ensure_capacity(fsdp_comm *c, size_t bytes) {
    size_t used = (bytes + 63) / 64 * 64, need = 2 * used;
    if (need > c->shm->seg_bytes) {
        size_t grow = c->shm->seg_bytes * 2 > need ? c->shm->seg_bytes * 2 : need;
        release_window(c);
        FSDP_CHECK(alloc_window(c, grow));
    }
    if (used <= c->shm->seg_used) return FSDP_OK;
    for (int half = 0; half < 2; half++) memset(half_of(c, c->rank, half) + c->shm->seg_used, 0, used - c->shm->seg_used);
    fsdp_mem_track(FSDP_MEM_COMM, 2 * (used - c->shm->seg_used), +1);
    c->shm->seg_used = used;
    return FSDP_OK;
}

static void sync_all(fsdp_comm *c) {
    MPI_Win_sync(c->shm->win);
    barrier_wait(c);
    MPI_Win_sync(c->shm->win);
}

// dst (n,) = sum over ranks r of src_r (n,) in rank order, then * scale; dtype dt for dst and sources
static void sum_segments(fsdp_comm *c, int half, size_t offset_bytes, void *dst, size_t n, fsdp_dtype dt,
                         float scale) {
    if (dt == FSDP_F32) {
        float *out = dst;
#pragma omp parallel for schedule(static) if (n > 32768)
        for (size_t i0 = 0; i0 < n; i0 += 4096) {
            size_t i1 = i0 + 4096 < n ? i0 + 4096 : n;
            const float *s0 = (const float *)(half_of(c, 0, half) + offset_bytes);
            for (size_t i = i0; i < i1; i++) out[i] = s0[i];
            for (int r = 1; r < c->size; r++) {
                const float *s = (const float *)(half_of(c, r, half) + offset_bytes);
#pragma omp simd
                for (size_t i = i0; i < i1; i++) out[i] += s[i];
            }
            if (scale != 1.0f)
                for (size_t i = i0; i < i1; i++) out[i] *= scale;
        }
    } else {  // bf16 payload, fp32 accumulation
        const fsdp_bf16 *src[c->size];
        for (int r = 0; r < c->size; r++) src[r] = (const fsdp_bf16 *)(half_of(c, r, half) + offset_bytes);
        comm_sum_bf16(dst, src, c->size, n, scale);
    }
}

void *fsdp_comm_alloc_shared(fsdp_comm *c, size_t bytes) {
    if (c->backend != COMM_MPI || !c->shm) return NULL;
    shm_region *grown = realloc(c->shm->regions, sizeof(shm_region) * (size_t)(c->shm->n_regions + 1));
    if (!grown) return NULL;
    c->shm->regions = grown;
    shm_region *r = &c->shm->regions[c->shm->n_regions];
    r->bytes = bytes;
    r->peer = calloc((size_t)c->size, sizeof(unsigned char *));
    void *base = NULL;
    if (!r->peer || MPI_Win_allocate_shared((MPI_Aint)(bytes ? bytes : 64), 64, MPI_INFO_NULL, c->mpi, &base,
                                            &r->win) != MPI_SUCCESS) {
        free(r->peer);
        return NULL;
    }
    int ok = 1;
    for (int q = 0; q < c->size; q++) {
        MPI_Aint sz;
        int disp;
        ok &= MPI_Win_shared_query(r->win, q, &sz, &disp, &r->peer[q]) == MPI_SUCCESS;
    }
    if (!ok || MPI_Win_lock_all(MPI_MODE_NOCHECK, r->win) != MPI_SUCCESS) {  // the caller falls back to private memory
        (void)MPI_Win_free(&r->win);
        free(r->peer);
        return NULL;
    }
    memset(r->peer[c->rank], 0, bytes);
    c->shm->n_regions++;
    return r->peer[c->rank];
}

void fsdp_comm_free_shared(fsdp_comm *c, void *ptr) {
    for (int i = 0; ptr && c->shm && i < c->shm->n_regions; i++) {
        shm_region *r = &c->shm->regions[i];
        if (r->peer[c->rank] != ptr) continue;
        MPI_Win_unlock_all(r->win);
        MPI_Win_free(&r->win);
        free(r->peer);
        c->shm->regions[i] = c->shm->regions[--c->shm->n_regions];
        return;
    }
}

// The shared region one of whose ranks' pieces holds [p, p + bytes) (this rank's piece first), with
// p's offset in that piece; NULL when p is ordinary memory.
static const shm_region *find_region(const fsdp_comm *c, const void *p, size_t bytes, size_t *offset) {
    if (!c->shm) return NULL;  // no shared memory: every buffer is ordinary memory
    for (int k = 0; k < c->size; k++) {
        int q = (c->rank + k) % c->size;
        for (int i = 0; i < c->shm->n_regions; i++) {
            const unsigned char *base = c->shm->regions[i].peer[q];
            if ((const unsigned char *)p >= base && (const unsigned char *)p + bytes <= base + c->shm->regions[i].bytes) {
                *offset = (size_t)((const unsigned char *)p - base);
                return &c->shm->regions[i];
            }
        }
    }
    return NULL;
}

static void region_sync(fsdp_comm *c, const shm_region *r) {
    MPI_Win_sync(r->win);
    barrier_wait(c);
    MPI_Win_sync(r->win);
}

// dst (n,) = sum over ranks q of (peer q's region at offset), in rank order, times scale; bf16
// payloads are summed in fp32 and rounded once
static void sum_region(const fsdp_comm *c, const shm_region *r, size_t offset, void *out, size_t n, fsdp_dtype dt,
                       float scale) {
    if (dt == FSDP_BF16) {
        const fsdp_bf16 *src[c->size];
        for (int q = 0; q < c->size; q++) src[q] = (const fsdp_bf16 *)(r->peer[q] + offset);
        comm_sum_bf16(out, src, c->size, n, scale);
        return;
    }
    float *dst = out;
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        size_t i1 = i0 + 4096 < n ? i0 + 4096 : n;
        const float *s0 = (const float *)(r->peer[0] + offset);
        for (size_t i = i0; i < i1; i++) dst[i] = s0[i];
        for (int q = 1; q < c->size; q++) {
            const float *sq = (const float *)(r->peer[q] + offset);
#pragma omp simd
            for (size_t i = i0; i < i1; i++) dst[i] += sq[i];
        }
        if (scale != 1.0f)
            for (size_t i = i0; i < i1; i++) dst[i] *= scale;
    }
}

fsdp_status comm_shm_all_gather(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    size_t bytes = count * fsdp_dtype_size(dt), offset = 0;
    const shm_region *reg = find_region(c, send, bytes, &offset);
    if (reg) {  // zero-copy: every rank's send is readable in place
        region_sync(c, reg);
        for (int r = 0; r < c->size; r++) {
            unsigned char *dst = (unsigned char *)recv + (size_t)r * bytes;
            if (r != c->rank || dst != send) memcpy(dst, reg->peer[r] + offset, bytes);
        }
        return FSDP_OK;
    }
    FSDP_CHECK(ensure_capacity(c, bytes));
    int half = c->shm->parity;
    c->shm->parity ^= 1;
    memcpy(half_of(c, c->rank, half), send, bytes);
    sync_all(c);
    for (int r = 0; r < c->size; r++) {
        unsigned char *dst = (unsigned char *)recv + (size_t)r * bytes;
        if (r == c->rank && dst == send) continue;
        memcpy(dst, half_of(c, r, half), bytes);
    }
    return FSDP_OK;
}

const void *fsdp_comm_shared_at(const fsdp_comm *c, const void *p, int q) {
    size_t offset = 0;
    const shm_region *r = q >= 0 && q < c->size ? find_region(c, p, 1, &offset) : NULL;
    return r ? r->peer[q] + offset : NULL;
}

const void *fsdp_comm_shared_concat(const fsdp_comm *c, const void *p, size_t bytes) {
    size_t offset = 0;
    const shm_region *r = bytes ? find_region(c, p, bytes, &offset) : NULL;
    if (!r) return NULL;
    const unsigned char *first = r->peer[0] + offset;
    for (int q = 1; q < c->size; q++)
        if (r->peer[q] + offset != first + (size_t)q * bytes) return NULL;
    return first;
}

fsdp_status comm_shm_all_gather_shared(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                       const size_t (*copy)[2], size_t n_copy) {
    size_t esize = fsdp_dtype_size(dt), offset = 0;
    const shm_region *reg = find_region(c, send, count * esize, &offset);
    if (!reg) return fsdp_error(FSDP_ERR_INVALID_ARG, "all_gather_shared: the send buffer is not shared memory");
    region_sync(c, reg);
    for (size_t k = 0; k < n_copy; k++) {
        for (size_t i = copy[k][0]; i < copy[k][1];) {  // each piece from the rank that holds it
            size_t q = i / count, end = (q + 1) * count < copy[k][1] ? (q + 1) * count : copy[k][1];
            memcpy((unsigned char *)recv + i * esize, reg->peer[q] + offset + (i - q * count) * esize, (end - i) * esize);
            i = end;
        }
    }
    return FSDP_OK;
}

fsdp_status comm_shm_reduce_scatter(fsdp_comm *c, const void *send, void *recv, size_t count, fsdp_dtype dt,
                                    fsdp_reduce_op op) {
    size_t esize = fsdp_dtype_size(dt), bytes = count * esize * (size_t)c->size, offset = 0;
    float scale = op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f;
    const shm_region *reg = find_region(c, send, bytes, &offset);
    if (reg) {  // zero-copy: sum the peers' slices in place
        region_sync(c, reg);
        sum_region(c, reg, offset + (size_t)c->rank * count * esize, recv, count, dt, scale);
        return FSDP_OK;
    }
    FSDP_CHECK(ensure_capacity(c, bytes));
    int half = c->shm->parity;
    c->shm->parity ^= 1;
    memcpy(half_of(c, c->rank, half), send, bytes);
    sync_all(c);
    sum_segments(c, half, (size_t)c->rank * count * esize, recv, count, dt, scale);
    return FSDP_OK;
}

fsdp_status comm_shm_all_reduce(fsdp_comm *c, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    size_t esize = fsdp_dtype_size(dt), bytes = count * esize;
    FSDP_CHECK(ensure_capacity(c, bytes));
    int half = c->shm->parity;
    c->shm->parity ^= 1;
    memcpy(half_of(c, c->rank, half), buf, bytes);
    sync_all(c);
    float scale = op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f;
    sum_segments(c, half, 0, buf, count, dt, scale);
    return FSDP_OK;
}

// ---- the transport (comm_transport.h): blocking only, the whole group on one node

static fsdp_status shm_all_gather(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count, fsdp_dtype dt) {
    (void)ctx;
    return comm_shm_all_gather(c, send, recv, count, dt);
}

static fsdp_status shm_reduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                      fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    return comm_shm_reduce_scatter(c, send, recv, count, dt, op);
}

static fsdp_status shm_all_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    return comm_shm_all_reduce(c, buf, count, dt, op);
}

static size_t shm_bytes_sent(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    return fsdp_comm_flat_bytes(c->size, kind, count, dt);
}

const fsdp_comm_transport comm_shm_transport = {
    .name = "shm",
    .all_gather = shm_all_gather,
    .reduce_scatter = shm_reduce_scatter,
    .all_reduce = shm_all_reduce,
    .bytes_sent = shm_bytes_sent,
};
