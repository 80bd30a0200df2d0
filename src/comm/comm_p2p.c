// comm_p2p.c: reduce-scatter and all-reduce over point-to-point messages for MPI groups without shared
// memory (ranks on different hosts). Open MPI 4.1's MPI_Reduce_scatter_block runs far below the link
// (docs/bench.md, "Collectives across hosts"); here every rank sends block q of its buffer straight to
// rank q (pairwise: at step d to rank+d, receiving from rank-d) and sums its own block and the blocks it
// received in rank order, as the shared-memory path does: the bits are the same on every path that sums
// here, and deterministic. Bytes sent per rank: (size-1) * block, the optimum. An all-reduce is this
// reduce-scatter over `size` near-equal blocks of the buffer (the first count % size one element longer)
// followed by the same exchange of the reduced blocks (an all-gather).
// Messages are chunks of at most P2P_CHUNK_BYTES and fsdp_comm_max_count() elements (MPI counts are int);
// P2P_DEPTH rounds of chunks are in flight at once, so a round is summed while the next one travels.
// A round = one chunk of every block = one counted "MPI call" (fsdp_comm_mpi_calls).
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_p2p.h"

#include "comm/comm_mpi.h"
#include "comm/comm_sum.h"
#include "core/alloc.h"
#include "core/tunables.h"

// 1 MiB messages: across the bed's hosts 2 MiB and larger ran a 256 MiB reduce-scatter at 0.2-0.4 GB/s against
// 1.6-1.9 GB/s with 1 MiB or smaller (and 1.8-2.1 at 64 MiB either way: docs/bench.md, "Collectives across hosts")
enum { P2P_CHUNK_BYTES = 1 << 20, P2P_DEPTH = 2 };

struct comm_p2p {
    fsdp_comm *c;
    fsdp_dtype dt;
    size_t esize;
    int all_reduce;
    const unsigned char *send;  // RS: (size, count) elements; AR: the buffer
    unsigned char *out;         // RS: (count,) elements; AR: the buffer (in place)
    size_t count;               // RS: per rank; AR: the whole buffer
    float scale;
    size_t chunk;               // elements per message
    size_t rounds;              // rounds per phase
    int phase;                  // 0: reduce-scatter exchange, 1: all-gather exchange (AR), 2: complete
    size_t posted, finished;    // rounds of this phase posted, completed
    int tag;
    unsigned char *scratch;     // (P2P_DEPTH, size-1, chunk) elements received for this rank's block
    size_t scratch_bytes;       // its capacity (a kept scratch may be larger than this one needs)
    MPI_Request *reqs;          // (P2P_DEPTH, 2*(size-1))
    int nreq[P2P_DEPTH];
};

struct comm_p2p_group {
    int64_t seq;             // point-to-point reductions started on this group (their message tags)
    unsigned char *spare;    // (spare_bytes,) the scratch of the last finished reduction, kept for the
    size_t spare_bytes;      // next one (no allocation and first touch per collective)
};

// Bytes per message: P2P_CHUNK_BYTES, or FSDP_COMM_P2P_CHUNK_BYTES (read once, 4 KiB..1 GiB; for tuning:
// every rank must use the same)
static size_t chunk_env = P2P_CHUNK_BYTES;
static pthread_once_t chunk_once = PTHREAD_ONCE_INIT;

static void read_chunk(void) {
    const char *v = fsdp_tunable(FSDP_ENV_COMM_P2P_CHUNK_BYTES);
    long long n = v ? atoll(v) : 0;
    if (n >= 4096 && n <= (1LL << 30)) chunk_env = (size_t)n;
}

static size_t p2p_chunk_bytes(void) {
    pthread_once(&chunk_once, read_chunk);
    return chunk_env;
}

// ---- sums in rank order

// dst (n,) = (src[0] + src[1] + ... + src[nsrc-1]) * scale (scale 1: no multiply), fp32, added in the
// order of src: the same operations, in the same order, as the shared-memory path's sum. Accumulates in
// a local block first, so dst may alias any source.
static void sum_f32(float *dst, const float *const *src, int nsrc, size_t n, float scale) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (size_t i0 = 0; i0 < n; i0 += 2048) {
        size_t m = n - i0 < 2048 ? n - i0 : 2048;
        float acc[2048];
        for (size_t i = 0; i < m; i++) acc[i] = src[0][i0 + i];
        for (int r = 1; r < nsrc; r++) {
            const float *s = src[r] + i0;
#pragma omp simd
            for (size_t i = 0; i < m; i++) acc[i] += s[i];
        }
        if (scale != 1.0f)
            for (size_t i = 0; i < m; i++) acc[i] *= scale;
        memcpy(dst + i0, acc, m * sizeof(float));
    }
}

// ---- block geometry

static size_t block_len(const comm_p2p *p, int q) {
    if (!p->all_reduce) return p->count;
    size_t n = (size_t)p->c->size, base = p->count / n, rem = p->count % n;
    return base + ((size_t)q < rem);
}

static size_t block_off(const comm_p2p *p, int q) {  // elements from the start of send (and, for AR, out)
    if (!p->all_reduce) return (size_t)q * p->count;
    size_t n = (size_t)p->c->size, base = p->count / n, rem = p->count % n;
    return (size_t)q * base + ((size_t)q < rem ? (size_t)q : rem);
}

// elements of round j's chunk of a block of len elements
static size_t piece(const comm_p2p *p, size_t len, size_t j) {
    size_t at = j * p->chunk;
    if (at >= len) return 0;
    return len - at < p->chunk ? len - at : p->chunk;
}

static int peer_index(int q, int rank) { return q < rank ? q : q - 1; }

static unsigned char *slot_scratch(const comm_p2p *p, int slot, int k) {
    return p->scratch + ((size_t)slot * (size_t)(p->c->size - 1) + (size_t)k) * p->chunk * p->esize;
}

static fsdp_status post_round(comm_p2p *p, size_t j) {
    fsdp_comm *c = p->c;
    int slot = (int)(j % P2P_DEPTH), me = c->rank, n = c->size, tag = p->tag + p->phase;
    MPI_Request *rq = p->reqs + (size_t)slot * 2 * (size_t)(n - 1);
    MPI_Datatype t = p->dt == FSDP_F32 ? MPI_FLOAT : MPI_UINT16_T;
    int k = 0;
    size_t es = p->esize, my_len = block_len(p, me), my_off = block_off(p, me);
    fsdp_comm_mpi_count_call();
    for (int d = 1; d < n; d++) {  // receive first: from rank-d
        int q = (me - d + n) % n;
        if (p->phase == 0) {
            size_t m = piece(p, my_len, j);
            if (!m) continue;
            FSDP_CHECK(comm_mpi_check(MPI_Irecv(slot_scratch(p, slot, peer_index(q, me)), (int)m, t, q, tag,
                                                c->mpi, &rq[k++]), "MPI_Irecv"));
        } else {
            size_t m = piece(p, block_len(p, q), j);
            if (!m) continue;
            unsigned char *dst = p->out + (block_off(p, q) + j * p->chunk) * es;
            FSDP_CHECK(comm_mpi_check(MPI_Irecv(dst, (int)m, t, q, tag, c->mpi, &rq[k++]), "MPI_Irecv"));
        }
    }
    for (int d = 1; d < n; d++) {  // then send: to rank+d
        int q = (me + d) % n;
        const unsigned char *src;
        size_t m;
        if (p->phase == 0) {
            m = piece(p, block_len(p, q), j);
            src = p->send + (block_off(p, q) + j * p->chunk) * es;
        } else {
            m = piece(p, my_len, j);
            src = p->out + (my_off + j * p->chunk) * es;
        }
        if (!m) continue;
        FSDP_CHECK(comm_mpi_check(MPI_Isend(src, (int)m, t, q, tag, c->mpi, &rq[k++]), "MPI_Isend"));
    }
    p->nreq[slot] = k;
    return FSDP_OK;
}

// round j of this phase has arrived: sum it (reduce-scatter exchange); the all-gather lands in place
static void finish_round(comm_p2p *p, size_t j) {
    if (p->phase != 0) return;
    fsdp_comm *c = p->c;
    int me = c->rank, slot = (int)(j % P2P_DEPTH);
    size_t m = piece(p, block_len(p, me), j);
    if (!m) return;
    size_t es = p->esize, at = j * p->chunk;
    const void *src[c->size];
    for (int q = 0; q < c->size; q++)
        src[q] = q == me ? (const void *)(p->send + (block_off(p, me) + at) * es)
                         : (const void *)slot_scratch(p, slot, peer_index(q, me));
    unsigned char *dst = p->out + ((p->all_reduce ? block_off(p, me) : 0) + at) * es;
    if (p->dt == FSDP_F32) sum_f32((float *)dst, (const float *const *)src, c->size, m, p->scale);
    else comm_sum_bf16((fsdp_bf16 *)dst, (const fsdp_bf16 *const *)src, c->size, m, p->scale);
}

static fsdp_status start_phase(comm_p2p *p) {
    p->posted = p->finished = 0;
    while (p->posted < p->rounds && p->posted < P2P_DEPTH) FSDP_CHECK(post_round(p, p->posted++));
    return FSDP_OK;
}

// Advances as far as it can; blocking: until complete. *done = 1 when complete.
static fsdp_status progress(comm_p2p *p, int blocking, int *done) {
    while (p->phase < 2) {
        if (p->finished == p->rounds) {  // this phase is through
            p->phase = p->all_reduce && p->phase == 0 ? 1 : 2;
            if (p->phase == 1) FSDP_CHECK(start_phase(p));
            continue;
        }
        int slot = (int)(p->finished % P2P_DEPTH), flag = 1;
        MPI_Request *rq = p->reqs + (size_t)slot * 2 * (size_t)(p->c->size - 1);
        // blocking: polls, yielding the CPU after a few (MPI_Waitall spins inside MPI, which starves the
        // peer this rank waits for when ranks share cores)
        for (long spin = 0;; spin++) {
            FSDP_CHECK(comm_mpi_check(MPI_Testall(p->nreq[slot], rq, &flag, MPI_STATUSES_IGNORE), "MPI_Testall"));
            if (flag || !blocking) break;
            if (spin >= 64) sched_yield();
        }
        if (!flag) break;
        finish_round(p, p->finished++);
        if (p->posted < p->rounds) FSDP_CHECK(post_round(p, p->posted++));
    }
    *done = p->phase == 2;
    return FSDP_OK;
}

static void release_spare(comm_p2p_group *g) {
    fsdp_free(g->spare);
    g->spare = NULL;
    g->spare_bytes = 0;
}

fsdp_status comm_p2p_start(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                           float scale, comm_p2p **out_p) {
    *out_p = NULL;
    if (!c->p2p) c->p2p = calloc(1, sizeof *c->p2p);
    comm_p2p *p = c->p2p ? calloc(1, sizeof *p) : NULL;
    if (!p) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    p->c = c;
    p->dt = dt;
    p->esize = fsdp_dtype_size(dt);
    p->all_reduce = all_reduce;
    p->send = send;
    p->out = out;
    p->count = count;
    p->scale = scale;
    size_t lim = fsdp_comm_max_count(), by_bytes = p2p_chunk_bytes() / p->esize;
    size_t by_int = (size_t)INT_MAX;  // messages count elements (MPI_FLOAT, MPI_UINT16_T)
    p->chunk = lim < by_bytes ? lim : by_bytes;
    if (p->chunk > by_int) p->chunk = by_int;
    if (p->chunk < 1) p->chunk = 1;
    size_t longest = block_len(p, 0);  // block 0 is never shorter than the others
    p->rounds = (longest + p->chunk - 1) / p->chunk;
    p->tag = (int)((c->p2p->seq++ & 0x3fff) * 2);  // per collective: several may be in flight on one group
    size_t peers = (size_t)(c->size - 1), per_slot = longest < p->chunk ? longest : p->chunk;
    p->chunk = p->rounds > 1 ? p->chunk : (per_slot ? per_slot : 1);  // one round: scratch of just the block
    size_t need = P2P_DEPTH * peers * p->chunk * p->esize;
    p->scratch_bytes = need;
    comm_p2p_group *g = c->p2p;
    if (g->spare && g->spare_bytes >= need) {  // the last reduction's scratch is large enough
        p->scratch = g->spare;
        p->scratch_bytes = g->spare_bytes;
        g->spare = NULL;
    } else {
        release_spare(g);
        p->scratch = fsdp_alloc(need, FSDP_MEM_COMM);
    }
    p->reqs = malloc(sizeof(MPI_Request) * P2P_DEPTH * 2 * peers);
    if (!p->scratch || !p->reqs) {
        comm_p2p_free(p);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory for a point-to-point reduction of %zu values", count);
    }
    for (size_t i = 0; i < P2P_DEPTH * 2 * peers; i++) p->reqs[i] = MPI_REQUEST_NULL;
    fsdp_status s = start_phase(p);
    if (s != FSDP_OK) {
        comm_p2p_free(p);
        return s;
    }
    *out_p = p;
    return FSDP_OK;
}

fsdp_status comm_p2p_test(comm_p2p *p, int *done) { return progress(p, 0, done); }

fsdp_status comm_p2p_wait(comm_p2p *p) {
    int done = 0;
    return progress(p, 1, &done);
}

void comm_p2p_free(comm_p2p *p) {
    if (!p) return;
    if (p->reqs) {  // after an error: requests still pending are cancelled and released
        size_t n = P2P_DEPTH * 2 * (size_t)(p->c->size - 1);
        for (size_t i = 0; i < n; i++)
            if (p->reqs[i] != MPI_REQUEST_NULL) {
                (void)MPI_Cancel(&p->reqs[i]);
                (void)MPI_Request_free(&p->reqs[i]);
            }
    }
    comm_p2p_group *g = p->c->p2p;
    if (!g->spare && p->scratch) {  // kept for the next reduction on this group
        g->spare = p->scratch;
        g->spare_bytes = p->scratch_bytes;
    } else {
        fsdp_free(p->scratch);
    }
    free(p->reqs);
    free(p);
}

void comm_p2p_release_group(fsdp_comm *c) {
    if (!c->p2p) return;
    release_spare(c->p2p);
    free(c->p2p);
    c->p2p = NULL;
}

fsdp_status comm_p2p_run(fsdp_comm *c, int all_reduce, const void *send, void *out, size_t count, fsdp_dtype dt,
                         float scale) {
    comm_p2p *p = NULL;
    FSDP_CHECK(comm_p2p_start(c, all_reduce, send, out, count, dt, scale, &p));
    fsdp_status s = comm_p2p_wait(p);
    comm_p2p_free(p);
    return s;
}

// ---- the transport (comm_transport.h): reduce-scatters and all-reduces, in flight for any count and dtype

static float average_scale(const fsdp_comm *c, fsdp_reduce_op op) { return op == FSDP_AVG ? 1.0f / (float)c->size : 1.0f; }

static fsdp_status p2p_reduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                      fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    return comm_p2p_run(c, 0, send, recv, count, dt, average_scale(c, op));
}

static fsdp_status p2p_all_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    (void)ctx;
    return comm_p2p_run(c, 1, buf, buf, count, dt, average_scale(c, op));
}

static fsdp_status p2p_ireduce_scatter(fsdp_comm *c, void *ctx, const void *send, void *recv, size_t count,
                                       fsdp_dtype dt, fsdp_reduce_op op, void **op_out) {
    (void)ctx;
    return comm_p2p_start(c, 0, send, recv, count, dt, average_scale(c, op), (comm_p2p **)op_out);
}

static fsdp_status p2p_iall_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                                   void **op_out) {
    (void)ctx;
    return comm_p2p_start(c, 1, buf, buf, count, dt, average_scale(c, op), (comm_p2p **)op_out);
}

static fsdp_status p2p_test(void *op, int *done) { return comm_p2p_test(op, done); }
static fsdp_status p2p_wait(void *op) { return comm_p2p_wait(op); }
static void p2p_release(void *op) { comm_p2p_free(op); }

static size_t p2p_bytes_sent(const fsdp_comm *c, fsdp_coll_kind kind, size_t count, fsdp_dtype dt) {
    return fsdp_comm_flat_bytes(c->size, kind, count, dt);
}

const fsdp_comm_transport comm_p2p_transport = {
    .name = "p2p",
    .reduce_scatter = p2p_reduce_scatter,
    .all_reduce = p2p_all_reduce,
    .ireduce_scatter = p2p_ireduce_scatter,
    .iall_reduce = p2p_iall_reduce,
    .test = p2p_test,
    .wait = p2p_wait,
    .release = p2p_release,
    .bytes_sent = p2p_bytes_sent,
};
