// test_comm.c: every collective against values each rank computes locally (nccl-tests' way: rank r's
// input element i is a function of (r, i), so the expected output needs no communication).
// Runs as a plain process (local backend) and under `mpirun -np N` (see tests/CMakeLists.txt).
// check_pieces: collectives split into pieces by a small limit on elements per MPI call give the same
// bits as unsplit ones, and really issue more MPI calls.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/comm_mpi.h"        // fsdp_comm_mpi_calls
#include "comm/comm_transport.h"  // fsdp_comm_transport: a stand-in device transport
#include "test.h"

static float input(int rank, size_t i) { return (float)((rank + 1) * 0.5 + (double)(i % 1000) * 0.001); }

static void check_group(fsdp_comm *c, const char *label) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t counts[] = {1, 7, 1000, 300001};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        size_t n = counts[ci];
        // under a small limit on elements per MPI call (the small-limit ctest run) 300001 elements would
        // be ~43k MPI calls per collective: a smaller large count keeps the (sanitized) run short
        if (n > 10007 && fsdp_comm_max_count() < 4096) n = 10007;
        float *send = malloc(sizeof(float) * n * (size_t)N), *recv = malloc(sizeof(float) * n * (size_t)N);
        int bad = 0;
        // all-gather, out of place and in place
        for (size_t i = 0; i < n; i++) send[i] = input(R, i);
        CHECK(fsdp_all_gather(c, send, recv, n, FSDP_F32) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        memset(recv, 0, sizeof(float) * n * (size_t)N);
        for (size_t i = 0; i < n; i++) recv[(size_t)R * n + i] = input(R, i);
        CHECK(fsdp_all_gather(c, recv + (size_t)R * n, recv, n, FSDP_F32) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        // reduce-scatter sum and avg: element i of block b on rank r is input(r, b*n + i)
        for (size_t i = 0; i < n * (size_t)N; i++) send[i] = input(R, i);
        for (int op = 0; op < 2; op++) {
            CHECK(fsdp_reduce_scatter(c, send, recv, n, FSDP_F32, (fsdp_reduce_op)op) == FSDP_OK);
            for (size_t i = 0; i < n; i++) {
                double want = 0;
                for (int r = 0; r < N; r++) want += input(r, (size_t)R * n + i);
                if (op == FSDP_AVG) want /= N;
                bad += fabs(recv[i] - want) > 1e-5 * fabs(want);
            }
        }
        // all-reduce avg, nonblocking
        for (size_t i = 0; i < n; i++) recv[i] = input(R, i);
        fsdp_comm_request *req = NULL;
        CHECK(fsdp_iall_reduce(c, recv, n, FSDP_F32, FSDP_AVG, &req) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += input(r, i);
            bad += fabs(recv[i] - want / N) > 1e-5 * fabs(want / N);
        }
        // nonblocking all-gather and reduce-scatter
        for (size_t i = 0; i < n; i++) send[i] = input(R, i);
        CHECK(fsdp_iall_gather(c, send, recv, n, FSDP_F32, &req) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < n; i++) bad += recv[(size_t)r * n + i] != input(r, i);
        for (size_t i = 0; i < n * (size_t)N; i++) send[i] = input(R, i);
        CHECK(fsdp_ireduce_scatter(c, send, recv, n, FSDP_F32, FSDP_SUM, &req) == FSDP_OK);
        int done = 0;
        while (!done) CHECK(fsdp_comm_test(req, &done) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += input(r, (size_t)R * n + i);
            bad += fabs(recv[i] - want) > 1e-5 * fabs(want);
        }
        // broadcast from the last rank
        for (size_t i = 0; i < n; i++) recv[i] = input(R, i);
        CHECK(fsdp_broadcast(c, recv, n, FSDP_F32, N - 1) == FSDP_OK);
        for (size_t i = 0; i < n; i++) bad += recv[i] != input(N - 1, i);
        if (bad) fprintf(stderr, "%s rank %d/%d count %zu: %d wrong values\n", label, R, N, n, bad);
        CHECK(bad == 0);
        free(send);
        free(recv);
    }
    // bf16 reduce-scatter and all-reduce: bf16 payloads summed in fp32 in rank order, rounded once,
    // identically over shared memory (plain and zero-copy from a shared buffer) and plain MPI
    for (int shared = 0; shared < 2; shared++) {
        size_t n = 513;
        fsdp_bf16 *s = shared ? fsdp_comm_alloc_shared(c, 2 * n * (size_t)N) : NULL;
        int from_shared = s != NULL;
        if (!s) s = malloc(2 * n * (size_t)N);
        fsdp_bf16 *r = malloc(2 * n * (size_t)N), *a = malloc(2 * n);
        for (size_t i = 0; i < n * (size_t)N; i++) s[i] = fsdp_f32_to_bf16(input(R, i));
        for (size_t i = 0; i < n; i++) a[i] = fsdp_f32_to_bf16(input(R, i));
        CHECK(fsdp_reduce_scatter(c, s, r, n, FSDP_BF16, FSDP_SUM) == FSDP_OK);
        CHECK(fsdp_all_reduce(c, a, n, FSDP_BF16, FSDP_AVG) == FSDP_OK);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = 0.0f, want_avg = 0.0f;
            // hierarchically (FSDP_COMM_RANKS_PER_HOST=L): each host's partial rounded to bf16 first
            const char *hv = getenv("FSDP_COMM_RANKS_PER_HOST");
            int L = strcmp(fsdp_comm_path(c, 0, n, FSDP_BF16), "hier") == 0 && hv ? atoi(hv) : N;
            for (int h = 0; h < N / L; h++) {
                float part = 0.0f;
                for (int q = h * L; q < h * L + L; q++) part += fsdp_bf16_to_f32(fsdp_f32_to_bf16(input(q, (size_t)R * n + i)));
                want += L < N ? fsdp_bf16_to_f32(fsdp_f32_to_bf16(part)) : part;
            }
            for (int q = 0; q < N; q++) want_avg += fsdp_bf16_to_f32(fsdp_f32_to_bf16(input(q, i)));
            bad += fsdp_bf16_to_f32(r[i]) != fsdp_bf16_to_f32(fsdp_f32_to_bf16(want));
            bad += fsdp_bf16_to_f32(a[i]) != fsdp_bf16_to_f32(fsdp_f32_to_bf16(want_avg * (1.0f / (float)N)));
        }
        if (bad) fprintf(stderr, "bf16 reductions (%s, send in %s memory): %d wrong\n", fsdp_comm_backend(c),
                         from_shared ? "shared" : "private", bad);
        CHECK(bad == 0);
        CHECK(fsdp_barrier(c) == FSDP_OK);  // peers may still read a shared send buffer until here
        if (from_shared) fsdp_comm_free_shared(c, s);
        else free(s);
        free(r);
        free(a);
    }
    double v = R + 1.0;
    CHECK(fsdp_all_reduce_double(c, &v) == FSDP_OK);
    CHECK_NEAR(v, N * (N + 1) / 2.0, 1e-9);
    CHECK(fsdp_barrier(c) == FSDP_OK);
}

// fp32 inputs whose sums are exact in any order (multiples of 2^-10 below 2: sums over a few ranks need
// 14 bits), so MPI may pick a different reduction algorithm for a piece than for the whole buffer and
// the bits still agree; (i * 37) % 1021 does not repeat within 1021 elements, so a piece read from or
// written to the wrong offset shows. bf16 payloads are summed here in rank order (any inputs).
static float exact_input(int rank, size_t i) {
    return (float)((rank + 1) * 0.25 + (double)((i * 37) % 1021) / 1024.0);
}

// element i of buf (dtype dt) = rank r's input i
static void put_input(void *buf, fsdp_dtype dt, size_t i, int r) {
    if (dt == FSDP_F32) ((float *)buf)[i] = exact_input(r, i);
    else ((fsdp_bf16 *)buf)[i] = fsdp_f32_to_bf16(input(r, i));
}

enum {
    OP_AG, OP_AG_IN_PLACE, OP_RS_SUM, OP_RS_AVG, OP_AR_SUM, OP_AR_AVG, OP_BCAST,
    OP_IAG, OP_IAG_IN_PLACE, OP_IRS_SUM, OP_IRS_AVG, OP_IAR_SUM, OP_IAR_AVG, N_OPS
};
static const char *op_names[N_OPS] = {"all_gather", "all_gather(in place)", "reduce_scatter(sum)",
                                      "reduce_scatter(avg)", "all_reduce(sum)", "all_reduce(avg)", "broadcast",
                                      "iall_gather", "iall_gather(in place)", "ireduce_scatter(sum)",
                                      "ireduce_scatter(avg)", "iall_reduce(sum)", "iall_reduce(avg)"};

// Runs collective `op` on n elements per rank of dtype dt from fresh inputs. send: scratch of (N, n)
// elements; out: (N, n) elements, first filled with a sentinel, then the result (all-gather: all of it;
// the others: its first n). Returns the MPI calls it issued.
static size_t run_op(fsdp_comm *c, int op, fsdp_dtype dt, size_t n, unsigned char *send, unsigned char *out) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t es = fsdp_dtype_size(dt), total = n * (size_t)N;
    memset(out, 0xA5, total * es);
    fsdp_reduce_op rop = op == OP_RS_AVG || op == OP_AR_AVG || op == OP_IRS_AVG || op == OP_IAR_AVG ? FSDP_AVG : FSDP_SUM;
    size_t before = fsdp_comm_mpi_calls();
    fsdp_comm_request *req = NULL;
    switch (op) {
    case OP_AG:
    case OP_IAG:
        for (size_t i = 0; i < n; i++) put_input(send, dt, i, R);
        if (op == OP_AG) CHECK(fsdp_all_gather(c, send, out, n, dt) == FSDP_OK);
        else CHECK(fsdp_iall_gather(c, send, out, n, dt, &req) == FSDP_OK);
        break;
    case OP_AG_IN_PLACE:
    case OP_IAG_IN_PLACE: {
        unsigned char *mine = out + (size_t)R * n * es;  // (n,) this rank's block of out
        for (size_t i = 0; i < n; i++) put_input(mine, dt, i, R);
        if (op == OP_AG_IN_PLACE) CHECK(fsdp_all_gather(c, mine, out, n, dt) == FSDP_OK);
        else CHECK(fsdp_iall_gather(c, mine, out, n, dt, &req) == FSDP_OK);
        break;
    }
    case OP_RS_SUM:
    case OP_RS_AVG:
    case OP_IRS_SUM:
    case OP_IRS_AVG:
        for (size_t i = 0; i < total; i++) put_input(send, dt, i, R);
        if (op == OP_RS_SUM || op == OP_RS_AVG) CHECK(fsdp_reduce_scatter(c, send, out, n, dt, rop) == FSDP_OK);
        else CHECK(fsdp_ireduce_scatter(c, send, out, n, dt, rop, &req) == FSDP_OK);
        break;
    case OP_AR_SUM:
    case OP_AR_AVG:
    case OP_IAR_SUM:
    case OP_IAR_AVG:
        for (size_t i = 0; i < n; i++) put_input(out, dt, i, R);
        if (op == OP_AR_SUM || op == OP_AR_AVG) CHECK(fsdp_all_reduce(c, out, n, dt, rop) == FSDP_OK);
        else CHECK(fsdp_iall_reduce(c, out, n, dt, rop, &req) == FSDP_OK);
        break;
    default:  // OP_BCAST: every rank starts from its own values
        for (size_t i = 0; i < n; i++) put_input(out, dt, i, R);
        CHECK(fsdp_broadcast(c, out, n, dt, N - 1) == FSDP_OK);
        break;
    }
    if (req) {
        int done = 0;
        while (!done) CHECK(fsdp_comm_test(req, &done) == FSDP_OK);
        CHECK(fsdp_comm_wait(req) == FSDP_OK);
    }
    return fsdp_comm_mpi_calls() - before;
}

// Every collective, split by limits of 1, 7 and 64 elements per MPI call, against the same collective
// with the limit off: the same bits, and (where the call goes to MPI) at least ceil(n / limit) MPI calls
// where unsplit there is exactly one (plus, with `seq` on, the blocking forms' sequence check).
static void check_pieces(fsdp_comm *c, const char *label, int seq) {
    int N = fsdp_comm_size(c);
    const char *backend = fsdp_comm_backend(c);
    size_t counts[] = {1, 7, 8, 50, 1000}, limits[] = {1, 7, 64};
    size_t max_n = 1000, saved = fsdp_comm_max_count();
    unsigned char *send = malloc(sizeof(float) * max_n * (size_t)N);  // (N, n) elements of either dtype
    unsigned char *ref = malloc(sizeof(float) * max_n * (size_t)N);   // (N, n) the unsplit result
    unsigned char *out = malloc(sizeof(float) * max_n * (size_t)N);   // (N, n) the split result
    fsdp_comm_set_sequence_check(c, seq);
    for (int d = 0; d < 2; d++) {
        fsdp_dtype dt = d == 0 ? FSDP_F32 : FSDP_BF16;
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t n = counts[ci], bytes = n * (size_t)N * fsdp_dtype_size(dt);
            for (int op = 0; op < N_OPS; op++) {
                // plain MPI runs every collective through MPI; shared memory only the broadcast
                int via_mpi = N > 1 && (strcmp(backend, "mpi") == 0 || op == OP_BCAST);
                int is_ar = op == OP_AR_SUM || op == OP_AR_AVG || op == OP_IAR_SUM || op == OP_IAR_AVG;
                // point to point, an all-reduce is a reduce-scatter round and an all-gather round over blocks
                // of ceil(n / N) elements at most: each round one counted call per piece
                int p2p_ar = via_mpi && is_ar && strcmp(fsdp_comm_path(c, 1, n, dt), "p2p") == 0;
                int is_ag = op == OP_AG || op == OP_AG_IN_PLACE || op == OP_IAG || op == OP_IAG_IN_PLACE;
                // hierarchically, an all-gather is two calls: across hosts, then within the host
                fsdp_comm_set_max_count(SIZE_MAX);  // off: INT_MAX
                int hier_ag = via_mpi && is_ag && strcmp(fsdp_comm_gather_path(c, n, dt), "hier") == 0;
                size_t calls_ref = run_op(c, op, dt, n, send, ref);
                if (via_mpi && (calls_ref < 1 || calls_ref > 1 + (size_t)(seq != 0) + (size_t)p2p_ar + (size_t)hier_ag)) {
                    fprintf(stderr, "%s: unsplit %s of %zu: %zu MPI calls\n", label, op_names[op], n, calls_ref);
                    CHECK(0);
                }
                for (size_t li = 0; li < sizeof limits / sizeof limits[0]; li++) {
                    size_t lim = limits[li];
                    fsdp_comm_set_max_count(lim);
                    CHECK(fsdp_comm_max_count() == lim);
                    size_t calls = run_op(c, op, dt, n, send, out);
                    if (memcmp(out, ref, bytes) != 0) {
                        fprintf(stderr, "%s (%s): %s %s of %zu, limit %zu: differs from unsplit\n", label, backend,
                                dt == FSDP_F32 ? "fp32" : "bf16", op_names[op], n, lim);
                        CHECK(0);
                    }
                    size_t per = p2p_ar ? (n + (size_t)N - 1) / (size_t)N : n;
                    size_t want = p2p_ar ? 2 * ((per + lim - 1) / lim) : (n + lim - 1) / lim;
                    if (via_mpi && calls < want) {
                        fprintf(stderr, "%s (%s): %s of %zu, limit %zu: %zu MPI calls, want >= %zu\n", label, backend,
                                op_names[op], n, lim, calls, want);
                        CHECK(0);
                    }
                }
            }
        }
    }
    fsdp_comm_set_max_count(0);  // the default again (FSDP_COMM_MAX_COUNT, or INT_MAX)
    CHECK(fsdp_comm_max_count() == saved);
    fsdp_comm_set_sequence_check(c, 0);
    CHECK(fsdp_barrier(c) == FSDP_OK);
    free(send);
    free(ref);
    free(out);
}

// Values whose fp32 sum depends on the order of addition (mixed signs and exponents 2^-12..2^11), and on
// (rank, i): a sum in another order, or a block read from or written to the wrong offset, shows.
static float order_input(int rank, size_t i) {
    int e = (int)((i * 7 + (size_t)rank * 13) % 24) - 12;
    float m = 1.0f + (float)((i * 37 + (size_t)rank * 101) % 1021) / 1021.0f;
    return ldexpf((i + (size_t)rank) % 3 == 0 ? -m : m, e);
}

// element i of the expected result: the inputs of ranks 0, 1, ..., N-1 (at element `at` of theirs) added in
// that order in fp32, then times scale (scale 1: no multiply); bf16: bf16 inputs, rounded once at the end.
// The shared-memory path's sum, so every path that sums here must give these bits.
static float rank_order_sum(int N, size_t at, fsdp_dtype dt, float scale, int reverse) {
    float acc = 0.0f;
    for (int k = 0; k < N; k++) {
        int q = reverse ? N - 1 - k : k;
        float x = order_input(q, at);
        if (dt == FSDP_BF16) x = fsdp_bf16_to_f32(fsdp_f32_to_bf16(x));
        acc = k == 0 ? x : acc + x;
    }
    if (scale != 1.0f) acc *= scale;
    return dt == FSDP_BF16 ? fsdp_bf16_to_f32(fsdp_f32_to_bf16(acc)) : acc;
}

// The hierarchical reduce-scatter's sum (comm_hier.c) over N ranks in hosts of L consecutive ranks: each
// host's inputs added in rank order (bf16: rounded to bf16), then the hosts' partials in host order,
// times scale, rounded once more for bf16.
static float host_order_sum(int N, int L, size_t at, fsdp_dtype dt, float scale) {
    float acc = 0.0f;
    for (int h = 0; h < N / L; h++) {
        float part = 0.0f;
        for (int k = 0; k < L; k++) {
            float x = order_input(h * L + k, at);
            if (dt == FSDP_BF16) x = fsdp_bf16_to_f32(fsdp_f32_to_bf16(x));
            part = k == 0 ? x : part + x;
        }
        if (dt == FSDP_BF16) part = fsdp_bf16_to_f32(fsdp_f32_to_bf16(part));
        acc = h == 0 ? part : acc + part;
    }
    if (scale != 1.0f) acc *= scale;
    return dt == FSDP_BF16 ? fsdp_bf16_to_f32(fsdp_f32_to_bf16(acc)) : acc;
}

// FSDP_COMM_RANKS_PER_HOST: the pretended hosts' size (0: real hosts)
static int pretend_ranks_per_host(void) {
    const char *v = getenv("FSDP_COMM_RANKS_PER_HOST");
    return v ? atoi(v) : 0;
}

static void put_order(void *buf, fsdp_dtype dt, size_t i, size_t at, int r) {
    if (dt == FSDP_F32) ((float *)buf)[i] = order_input(r, at);
    else ((fsdp_bf16 *)buf)[i] = fsdp_f32_to_bf16(order_input(r, at));
}

static float get_val(const void *buf, fsdp_dtype dt, size_t i) {
    return dt == FSDP_F32 ? ((const float *)buf)[i] : fsdp_bf16_to_f32(((const fsdp_bf16 *)buf)[i]);
}

static void poll(fsdp_comm_request *req) {
    int done = 0;
    while (!done) CHECK(fsdp_comm_test(req, &done) == FSDP_OK);
    CHECK(fsdp_comm_wait(req) == FSDP_OK);
}

// Reduce-scatters and all-reduces (sum, avg; blocking, nonblocking polled with fsdp_comm_test, two in flight
// at once) against the rank-order sum, bit for bit, on every path that sums in rank order: shared memory,
// point to point, bf16 over MPI (fp32 over MPI's own collectives sums in MPI's order: skipped). Counts 0,
// 1, not divisible by the group, large; the default limit on elements per MPI call and 7.
static void check_rank_order(fsdp_comm *c, const char *label) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t counts[] = {0, 1, 7, (size_t)N * 5 + 1, 1001, 30011}, saved = fsdp_comm_max_count();
    size_t limits[] = {0, 7};
    int sensitive = 0;  // fp32 elements whose sum in reverse rank order differs: the inputs can tell
    size_t checked_f32 = 0;  // fp32 reduce-scatter elements checked (none where fp32 goes through MPI's sum)
    for (int d = 0; d < 2; d++) {
        fsdp_dtype dt = d == 0 ? FSDP_F32 : FSDP_BF16;
        size_t es = fsdp_dtype_size(dt);
        for (size_t li = 0; li < 2; li++) {
            fsdp_comm_set_max_count(limits[li]);
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                size_t n = counts[ci];
                if (limits[li] && n > 1001) continue;  // ~14k pieces per collective: long under sanitizers
                const char *rs_path = fsdp_comm_path(c, 0, n, dt), *ar_path = fsdp_comm_path(c, 1, n, dt);
                int rs_on = dt == FSDP_BF16 || strcmp(rs_path, "mpi") != 0;
                int ar_on = dt == FSDP_BF16 || strcmp(ar_path, "mpi") != 0;
                size_t total = n * (size_t)N;
                unsigned char *send = malloc(es * total + 1), *out = malloc(es * total + 1);
                unsigned char *send2 = malloc(es * total + 1), *out2 = malloc(es * total + 1);
                int bad = 0;
                for (int op = 0; op < 2; op++) {
                    float scale = op == FSDP_AVG ? 1.0f / (float)N : 1.0f;
                    for (int mode = 0; mode < 3; mode++) {  // blocking, nonblocking, two in flight
                        if (!rs_on && !ar_on) break;
                        for (size_t i = 0; i < total; i++) put_order(send, dt, i, i, R);
                        for (size_t i = 0; i < n; i++) put_order(out2, dt, i, i, R);
                        memset(out, 0xA5, es * n);
                        fsdp_comm_request *a = NULL, *b = NULL;
                        if (mode == 0) {
                            if (rs_on) CHECK(fsdp_reduce_scatter(c, send, out, n, dt, (fsdp_reduce_op)op) == FSDP_OK);
                            if (ar_on) CHECK(fsdp_all_reduce(c, out2, n, dt, (fsdp_reduce_op)op) == FSDP_OK);
                        } else if (mode == 1) {
                            if (rs_on) {
                                CHECK(fsdp_ireduce_scatter(c, send, out, n, dt, (fsdp_reduce_op)op, &a) == FSDP_OK);
                                poll(a);
                            }
                            if (ar_on) {
                                CHECK(fsdp_iall_reduce(c, out2, n, dt, (fsdp_reduce_op)op, &b) == FSDP_OK);
                                poll(b);
                            }
                        } else {  // both in flight, completed in the other order
                            if (rs_on) CHECK(fsdp_ireduce_scatter(c, send, out, n, dt, (fsdp_reduce_op)op, &a) == FSDP_OK);
                            if (ar_on) CHECK(fsdp_iall_reduce(c, out2, n, dt, (fsdp_reduce_op)op, &b) == FSDP_OK);
                            if (b) poll(b);
                            if (a) poll(a);
                        }
                        for (size_t i = 0; rs_on && i < n; i++) {
                            int L = strcmp(rs_path, "hier") == 0 ? pretend_ranks_per_host() : 0;
                            float want = L ? host_order_sum(N, L, (size_t)R * n + i, dt, scale)
                                           : rank_order_sum(N, (size_t)R * n + i, dt, scale, 0);
                            float got = get_val(out, dt, i);
                            bad += memcmp(&got, &want, sizeof got) != 0;
                            if (dt == FSDP_F32) sensitive += want != rank_order_sum(N, (size_t)R * n + i, dt, scale, 1);
                            checked_f32 += dt == FSDP_F32;
                        }
                        for (size_t i = 0; ar_on && i < n; i++) {
                            float want = rank_order_sum(N, i, dt, scale, 0), got = get_val(out2, dt, i);
                            bad += memcmp(&got, &want, sizeof got) != 0;
                        }
                        if (bad) {
                            fprintf(stderr, "%s rank %d/%d (%s/%s): %s %s of %zu, %s, limit %zu: %d values off the "
                                    "rank-order sum\n", label, R, N, rs_path, ar_path, dt == FSDP_F32 ? "fp32" : "bf16",
                                    op ? "avg" : "sum", n, mode == 0 ? "blocking" : mode == 1 ? "polled" : "two in flight",
                                    fsdp_comm_max_count(), bad);
                            CHECK(0);
                            bad = 0;
                        }
                    }
                }
                free(send);
                free(out);
                free(send2);
                free(out2);
            }
        }
    }
    fsdp_comm_set_max_count(0);
    CHECK(fsdp_comm_max_count() == saved);
    if (N >= 3 && checked_f32 > 0) CHECK(sensitive > 0);  // two addends commute exactly; three or more must be order-sensitive
    CHECK(fsdp_barrier(c) == FSDP_OK);
}

// Three nonblocking all-gathers in flight at once (counts 3, 1000, 5), one polled, completed in reverse
// order, then a blocking one: every result exact. On a hierarchical group this holds the order in which
// their second steps are issued to the order they started, whatever order they are completed in.
static void check_gathers_in_flight(fsdp_comm *c, const char *label) {
    int R = fsdp_comm_rank(c), N = fsdp_comm_size(c);
    size_t counts[3] = {3, 1000, 5};
    float *recv[3], *send[3];
    fsdp_comm_request *req[3];
    for (int k = 0; k < 3; k++) {
        send[k] = malloc(sizeof(float) * counts[k]);
        recv[k] = malloc(sizeof(float) * counts[k] * (size_t)N);
        for (size_t i = 0; i < counts[k]; i++) send[k][i] = input(R, i + (size_t)k * 7);
        CHECK(fsdp_iall_gather(c, send[k], recv[k], counts[k], FSDP_F32, &req[k]) == FSDP_OK);
    }
    int done = 0;
    for (int spin = 0; spin < 100 && !done; spin++) CHECK(fsdp_comm_test(req[1], &done) == FSDP_OK);
    for (int k = 2; k >= 0; k--) CHECK(fsdp_comm_wait(req[k]) == FSDP_OK);
    float *blocking = malloc(sizeof(float) * 4 * (size_t)N), mine[4] = {1, 2, 3, (float)R};
    CHECK(fsdp_all_gather(c, mine, blocking, 4, FSDP_F32) == FSDP_OK);
    int bad = 0;
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < N; r++)
            for (size_t i = 0; i < counts[k]; i++) bad += recv[k][(size_t)r * counts[k] + i] != input(r, i + (size_t)k * 7);
    for (int r = 0; r < N; r++) bad += blocking[4 * r + 3] != (float)r || blocking[4 * r] != 1.0f;
    if (bad) fprintf(stderr, "%s (%s): all-gathers in flight together: %d wrong values\n", label,
                     fsdp_comm_gather_path(c, 3, FSDP_F32), bad);
    CHECK(bad == 0);
    for (int k = 0; k < 3; k++) free(send[k]), free(recv[k]);
    free(blocking);
}

// A stand-in for a device backend's transport (fsdp_comm_set_device_transport): claims the buffers in
// [lo, hi) and "all-reduces" them by writing a marker no host transport computes, counting its calls.
typedef struct {
    const float *lo, *hi;  // the claimed range
    int calls;
    int detached, aborted;  // its detach and abort calls
} fake_device;

static int fake_accepts(void *ctx, const void *buf) {
    fake_device *d = ctx;
    return (const float *)buf >= d->lo && (const float *)buf < d->hi;
}

static fsdp_status fake_all_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op) {
    fake_device *d = ctx;
    d->calls++;
    for (size_t i = 0; i < count; i++) ((float *)buf)[i] = -1.0f;
    return FSDP_OK;
}

static void fake_detach(fsdp_comm *c, void *ctx) { ((fake_device *)ctx)->detached++; }
static void fake_abort(fsdp_comm *c, void *ctx) { ((fake_device *)ctx)->aborted++; }

static fsdp_status fake_iall_reduce(fsdp_comm *c, void *ctx, void *buf, size_t count, fsdp_dtype dt, fsdp_reduce_op op,
                                    void **op_out) {
    return fsdp_error(FSDP_ERR_INTERNAL, "never started");
}

// The device-transport slot: collectives on the buffers an installed transport accepts run through it
// (a nonblocking one without a start: its blocking form; in a group of one rank too, as NCCL with one
// rank), the others and the kinds it lacks on the host transports; removing it restores the host paths;
// an incomplete interface is refused.
static void check_device_transport(fsdp_comm *c) {
    int N = fsdp_comm_size(c);
    float dev[4] = {1, 1, 1, 1}, host[4] = {1, 1, 1, 1}, gathered[4 * 64];
    fake_device d = {dev, dev + 4, 0, 0, 0};
    static const fsdp_comm_transport fake = {.name = "fake", .accepts = fake_accepts, .all_reduce = fake_all_reduce};
    static const fsdp_comm_transport no_wait = {.name = "no_wait", .all_reduce = fake_all_reduce,
                                                .iall_reduce = fake_iall_reduce};
    CHECK(fsdp_comm_set_device_transport(c, &no_wait, &d) == FSDP_ERR_INVALID_ARG);
    CHECK(fsdp_comm_set_device_transport(c, &fake, &d) == FSDP_OK);
    CHECK(fsdp_all_reduce(c, dev, 4, FSDP_F32, FSDP_SUM) == FSDP_OK);
    CHECK(fsdp_all_reduce(c, host, 4, FSDP_F32, FSDP_SUM) == FSDP_OK);
    fsdp_comm_request *req = NULL;
    CHECK(fsdp_iall_reduce(c, dev + 1, 3, FSDP_F32, FSDP_SUM, &req) == FSDP_OK);
    CHECK(fsdp_comm_wait(req) == FSDP_OK);
    if (N <= 64) {
        CHECK_EQ_INT(d.calls, 2);
        CHECK(dev[0] == -1.0f && dev[1] == -1.0f && host[0] == (float)N);
        CHECK(fsdp_all_gather(c, dev, gathered, 4, FSDP_F32) == FSDP_OK);  // no all-gather: the host's
        CHECK(gathered[0] == -1.0f && gathered[4 * (N - 1)] == -1.0f && d.calls == 2);
    }
    CHECK(fsdp_comm_set_device_transport(c, NULL, NULL) == FSDP_OK);
    dev[0] = 1.0f;
    CHECK(fsdp_all_reduce(c, dev, 1, FSDP_F32, FSDP_SUM) == FSDP_OK);
    CHECK(dev[0] == (float)N);
}

// A device transport's lifetime: the watchdog's fsdp_comm_abort_device reaches every group that has one
// installed (and no other), fsdp_comm_free tells it (detach) before the group goes; and the words that
// name a group in messages.
static void check_device_transport_lifetime(fsdp_comm *world) {
    static const fsdp_comm_transport fake = {.name = "fake", .accepts = fake_accepts, .all_reduce = fake_all_reduce,
                                             .detach = fake_detach, .abort = fake_abort};
    float dev[1] = {1};
    fake_device dw = {dev, dev + 1, 0, 0, 0}, dg = dw;
    fsdp_comm *group = NULL;
    CHECK(fsdp_comm_split(world, 0, fsdp_comm_rank(world), &group) == FSDP_OK);  // the world's ranks again
    CHECK(fsdp_comm_set_device_transport(world, &fake, &dw) == FSDP_OK);
    CHECK(fsdp_comm_set_device_transport(group, &fake, &dg) == FSDP_OK);
    fsdp_comm_abort_device();
    CHECK(dw.aborted == 1 && dg.aborted == 1);
    fsdp_comm_free(group);
    CHECK(dg.detached == 1 && dw.detached == 0);
    fsdp_comm_abort_device();  // the freed group is no longer reached
    CHECK(dw.aborted == 2 && dg.aborted == 1);
    CHECK(fsdp_comm_set_device_transport(world, NULL, NULL) == FSDP_OK);
    fsdp_comm_abort_device();
    CHECK(dw.aborted == 2 && dw.detached == 0);

    char words[160] = "";
    fsdp_comm_describe(world, words, sizeof words);
    int N = fsdp_comm_size(world);
    CHECK(strcmp(fsdp_comm_backend(world), "local") == 0 ? strcmp(words, "local (1 rank)") == 0
                                                         : strncmp(words, "world (", 7) == 0);
    if (N > 1) {  // a real split: "group of K ranks (world ranks ...)", this rank among them
        fsdp_comm *half = NULL;
        int R = fsdp_comm_rank(world);
        CHECK(fsdp_comm_split(world, R % 2, R, &half) == FSDP_OK);
        fsdp_comm_describe(half, words, sizeof words);
        char mine[32];
        snprintf(mine, sizeof mine, "%d", R);
        CHECK(strncmp(words, "group of ", 9) == 0 && strstr(words, "(world ranks ") && strstr(words, mine));
        if (R == 0) printf("a split group is described as: %s\n", words);
        fsdp_comm_free(half);
    }
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 1;
    }
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    const char *env_limit = getenv("FSDP_COMM_MAX_COUNT");  // the small-limit ctest run: in force from the start
    if (env_limit) CHECK(fsdp_comm_max_count() == (size_t)strtoull(env_limit, NULL, 10));
    check_group(world, "world");
    if (N > 1) {  // an MPI error comes back as a status naming the call (no abort inside MPI): root N is invalid
        float x = 0.0f;
        CHECK(fsdp_broadcast(world, &x, 1, FSDP_F32, N) == FSDP_ERR_COMM);
        CHECK(strstr(fsdp_last_error(), "MPI_Bcast failed") != NULL);
    }
    fsdp_comm *half = NULL, *node = NULL;
    CHECK(fsdp_comm_split(world, R % 2, R, &half) == FSDP_OK);
    CHECK_EQ_INT(fsdp_comm_size(half), (N + 1 - R % 2) / 2);
    check_group(half, "split");
    int per_host = pretend_ranks_per_host();
    const char *algo = fsdp_comm_algo_setting();
    if (per_host > 1 && N > per_host && N % per_host == 0) {  // pretended hosts: the world reduce-scatters
        int flat = strcmp(algo, "p2p") == 0 || strcmp(algo, "mpi") == 0;  // hierarchically unless told not to
        const char *path = fsdp_comm_path(world, 0, 10, FSDP_F32), *gpath = fsdp_comm_gather_path(world, 1, FSDP_F32);
        if (strcmp(path, flat ? algo : "hier") != 0 || strcmp(gpath, flat ? "mpi" : "hier") != 0) {
            fprintf(stderr, "world of %d in hosts of %d, FSDP_COMM_ALGO=%s: reduce-scatter path %s, all-gather path %s\n",
                    N, per_host, algo, path, gpath);
            CHECK(0);
        }
    }
    check_gathers_in_flight(world, "world");
    check_rank_order(world, "world");
    check_rank_order(half, "split");
    check_pieces(world, "world", 0);
    check_pieces(half, "split (sequence check on)", 1);
    if (N > 1) {  // ranks splitting collectives differently: the sequence check names it on every rank
        float x = 1.0f;
        fsdp_comm_set_max_count(R == 0 ? 100 : 200);
        fsdp_comm_set_sequence_check(world, 1);
        CHECK(fsdp_all_reduce(world, &x, 1, FSDP_F32, FSDP_SUM) == FSDP_ERR_COMM);
        CHECK(strstr(fsdp_last_error(), "elements per MPI call differ") != NULL);
        fsdp_comm_set_sequence_check(world, 0);
        fsdp_comm_set_max_count(0);
    }
    check_device_transport(world);
    check_device_transport(half);
    check_device_transport_lifetime(world);
    CHECK(fsdp_comm_split_node(world, &node) == FSDP_OK);
    CHECK_EQ_INT(fsdp_comm_size(node), per_host > 0 && per_host < N ? (R / per_host < N / per_host ? per_host : N % per_host) : N);
    fsdp_comm_stats st = fsdp_comm_get_stats(world);
    if (N > 1) CHECK(st.calls > 0 && st.bytes_sent > 0);
    if (R == 0) printf("backend %s, %d ranks\n", fsdp_comm_backend(world), N);
    fsdp_comm_free(node);
    fsdp_comm_free(half);
    int failures = test_failures;
    fsdp_comm_free(world);
    if (failures) return 1;
    if (R == 0) printf("all checks passed\n");
    return 0;
}
