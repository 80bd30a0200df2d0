// test_cuda_nccl.c: the cuda device's NCCL transport (device/cuda/cuda_nccl.c) against its staged path,
// on a GPU: every collective of device_comm.h (all-gather in place and out of place, reduce-scatter and
// all-reduce with SUM and AVG, broadcast from the first and the last rank), fp32 and bf16, on every kind
// of group the engine makes (the world; a group of one rank, as HYBRID_SHARD's shard or replica group of
// one; a split group of every rank). Each suite runs on a fresh device under FSDP_DEVICE_COMM=host
// (staged) and =nccl; the results must be the same bits where the arithmetic is the same (gathers and
// broadcasts; every collective of a group of one rank; SUM of two ranks, which commute) and within
// rounding elsewhere, and the staged results must be the known answers. Under mpirun with two ranks on
// one GPU: --comm nccl without NCCL_HOSTID is the one-line "share GPU" error; with a NCCL_HOSTID per rank
// NCCL may run (then it is compared as above) or refuse (the test prints "NCCL REFUSED ..." and runs the
// rest). First, on any machine of an NCCL build (no GPU needed): NCCL is not mapped until asked for, then
// loads with every function the transport calls (a failure fails the test). Exit 77 (skipped) without a
// CUDA build, a GPU or NCCL in the build: never "passed" without one.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "cuda_check.h"
#include "device/device_comm.h"
#include "tensor/tensor.h"
#ifdef FSDP_HAVE_NCCL
#include "device/cuda/cuda_nccl_api.h"
#endif

#define COUNT 65543  // elements per rank: odd, several of NCCL's chunks
#define N_COLL 8     // collectives per (group, dtype)

// The results of one suite, one segment per collective, in the order they ran.
typedef struct {
    unsigned char *bytes;  // (used,)
    size_t used, cap;
    struct {
        char label[96];
        size_t off, bytes;
        int dtype, exact;  // exact: the same bits under both paths
    } seg[64];
    int n_seg;
    size_t comm_calls;  // collectives that went through comm.c (statistics of the groups)
} suite;

static void put(suite *out, const char *label, const void *p, size_t bytes, fsdp_dtype dt, int exact) {
    if (out->used + bytes > out->cap) {
        out->cap = 2 * (out->used + bytes);
        out->bytes = realloc(out->bytes, out->cap);
    }
    memcpy(out->bytes + out->used, p, bytes);
    if (out->n_seg < 64) {
        snprintf(out->seg[out->n_seg].label, sizeof out->seg[0].label, "%s", label);
        out->seg[out->n_seg].off = out->used, out->seg[out->n_seg].bytes = bytes;
        out->seg[out->n_seg].dtype = (int)dt, out->seg[out->n_seg].exact = exact;
        out->n_seg++;
    }
    out->used += bytes;
}

static float value_at(const void *p, size_t i, fsdp_dtype dt) {
    return dt == FSDP_BF16 ? fsdp_bf16_to_f32(((const fsdp_bf16 *)p)[i]) : ((const float *)p)[i];
}

// n values of rank r's input `which` in dt's bytes (malloc'd), from a fixed generator
static void *input(int r, unsigned which, size_t n, fsdp_dtype dt) {
    float *f = cuda_test_rand(n, 7919u * which + (unsigned)r, -1.0f, 1.0f);
    if (dt == FSDP_F32) return f;
    fsdp_bf16 *h = malloc(sizeof *h * n);
    fsdp_f32_to_bf16_array(h, f, n);
    free(f);
    return h;
}

// Known answers of the staged path: got (n,) against want (n,) computed in double over the ranks
static void check_known(const char *what, const void *got, const double *want, size_t n, fsdp_dtype dt) {
    size_t bad = 0, nan = 0;
    double tol = dt == FSDP_BF16 ? 1.6e-2 : 2e-6;
    for (size_t i = 0; i < n; i++) {
        double g = value_at(got, i, dt);
        if (isnan(g)) nan++;
        else if (fabs(g - want[i]) > tol * (1.0 + fabs(want[i]))) bad++;
    }
    if (bad || nan || n == 0) {
        fprintf(stderr, "FAIL %s (staged): %zu of %zu wrong, %zu NaN\n", what, bad, n, nan);
        test_failures++;
    }
}

// Every collective on group c (named `gname`) in dt, on stream s; results appended to out. 0, or the
// status of the first collective that failed (the suite stops there).
static fsdp_status run_group(fsdp_dev *d, fsdp_stream *s, fsdp_comm *c, const char *gname, fsdp_dtype dt, suite *out,
                             int check_answers) {
    const int R = fsdp_comm_rank(c), P = fsdp_comm_size(c);
    const size_t n = COUNT, esz = fsdp_dtype_size(dt), all = (size_t)P * n;
    const char *dn = dt == FSDP_BF16 ? "bf16" : "fp32";
    unsigned char *full = fsdp_dev_alloc(d, all * esz, FSDP_MEM_OTHER), *part = fsdp_dev_alloc(d, n * esz, FSDP_MEM_OTHER);
    unsigned char *host = malloc(all * esz);  // (all,) in dt
    double *want = malloc(sizeof *want * all);  // (all,)
    char label[96];
    fsdp_status st = full && part && host && want ? FSDP_OK : FSDP_ERR_NOMEM;
    for (int k = 0; k < N_COLL && st == FSDP_OK; k++) {
        int avg = k == 3 || k == 5;
        fsdp_reduce_op op = avg ? FSDP_AVG : FSDP_SUM;
        int exact = P == 1 || k <= 1 || k >= 6 || (P == 2 && !avg && dt == FSDP_F32);
        size_t got_n = k <= 1 ? all : n;
        if (fsdp_dev_memset(s, full, 0xff, all * esz) != FSDP_OK || fsdp_dev_memset(s, part, 0xff, n * esz) != FSDP_OK)
            st = FSDP_ERR_INTERNAL;
        void *mine = input(R, (unsigned)k, k == 2 || k == 3 ? all : n, dt);  // this rank's send
        for (size_t i = 0; i < got_n; i++) want[i] = 0.0;
        for (int q = 0; q < P; q++) {  // the answer, from every rank's input
            void *theirs = input(q, (unsigned)k, k == 2 || k == 3 ? all : n, dt);
            for (size_t i = 0; i < got_n; i++) {
                if (k <= 1) want[i] = q == (int)(i / n) ? value_at(theirs, i % n, dt) : want[i];
                else if (k <= 3) want[i] += value_at(theirs, (size_t)R * n + i, dt) / (avg ? P : 1);
                else if (k <= 5) want[i] += value_at(theirs, i, dt) / (avg ? P : 1);
                else if (q == (k == 6 ? 0 : P - 1)) want[i] = value_at(theirs, i, dt);
            }
            free(theirs);
        }
        void *got = k <= 1 ? full : part;
        if (st != FSDP_OK) {
        } else if (k == 0) {  // in place: the shard already at its slice
            snprintf(label, sizeof label, "%s %s all_gather in place", gname, dn);
            st = fsdp_copy_h2d(s, full + (size_t)R * n * esz, mine, n * esz);
            if (st == FSDP_OK) st = fsdp_dev_all_gather(s, c, full + (size_t)R * n * esz, full, n, dt);
        } else if (k == 1) {
            snprintf(label, sizeof label, "%s %s all_gather", gname, dn);
            st = fsdp_copy_h2d(s, part, mine, n * esz);
            if (st == FSDP_OK) st = fsdp_dev_all_gather(s, c, part, full, n, dt);
        } else if (k <= 3) {
            snprintf(label, sizeof label, "%s %s reduce_scatter %s", gname, dn, avg ? "avg" : "sum");
            st = fsdp_copy_h2d(s, full, mine, all * esz);
            if (st == FSDP_OK) st = fsdp_dev_reduce_scatter(s, c, full, part, n, dt, op);
        } else if (k <= 5) {
            snprintf(label, sizeof label, "%s %s all_reduce %s", gname, dn, avg ? "avg" : "sum");
            st = fsdp_copy_h2d(s, part, mine, n * esz);
            if (st == FSDP_OK) st = fsdp_dev_all_reduce(s, c, part, n, dt, op);
        } else {
            int root = k == 6 ? 0 : P - 1;
            snprintf(label, sizeof label, "%s %s broadcast from %d", gname, dn, root);
            st = fsdp_copy_h2d(s, part, mine, n * esz);
            if (st == FSDP_OK) st = fsdp_dev_broadcast(s, c, part, n, dt, root);
        }
        if (st == FSDP_OK) st = fsdp_copy_d2h(s, host, got, got_n * esz);
        if (st == FSDP_OK) st = fsdp_stream_synchronize(s);
        if (st == FSDP_OK) {
            put(out, label, host, got_n * esz, dt, exact);
            if (check_answers) check_known(label, host, want, got_n, dt);
        }
        free(mine);
    }
    fsdp_dev_free(d, full);
    fsdp_dev_free(d, part);
    free(host);
    free(want);
    return st;
}

// One suite on a fresh device under FSDP_DEVICE_COMM=mode: the world, a group of this rank alone and a
// split group of every rank; the groups are freed before the device closes (the transport's detach).
static fsdp_status run_suite(fsdp_comm *world, const char *mode, suite *out, int check_answers) {
    memset(out, 0, sizeof *out);
    setenv("FSDP_DEVICE_COMM", mode, 1);
    fsdp_dev *d = NULL;
    if (fsdp_dev_open("cuda", &d) != FSDP_OK) return FSDP_ERR_INTERNAL;
    fsdp_stream *s = fsdp_dev_stream(d, FSDP_STREAM_COMM);
    int R = fsdp_comm_rank(world);
    fsdp_comm *alone = NULL, *every = NULL;
    fsdp_status st = fsdp_comm_split(world, R, 0, &alone);
    if (st == FSDP_OK) st = fsdp_comm_split(world, 0, R, &every);
    fsdp_comm *groups[3] = {world, alone, every};
    const char *names[3] = {"world", "alone", "split"};
    size_t calls0 = 0;
    for (int g = 0; g < 3 && st == FSDP_OK; g++) calls0 += fsdp_comm_get_stats(groups[g]).calls;
    for (int g = 0; g < 3 && st == FSDP_OK; g++)
        for (int b = 0; b < 2 && st == FSDP_OK; b++)
            st = run_group(d, s, groups[g], names[g], b ? FSDP_BF16 : FSDP_F32, out, check_answers);
    char why[600] = "";
    if (st != FSDP_OK) snprintf(why, sizeof why, "%s", fsdp_last_error());
    for (int g = 0; g < 3; g++) out->comm_calls += groups[g] ? fsdp_comm_get_stats(groups[g]).calls : 0;
    out->comm_calls -= calls0;
    fsdp_comm_free(alone);
    fsdp_comm_free(every);
    fsdp_dev_close(d);
    if (st != FSDP_OK) fsdp_error(st, "%s", why);
    return st;
}

// The NCCL suite against the staged one: segment by segment, bits or rounding
static void compare(const suite *staged, const suite *nccl, const char *what) {
    if (staged->n_seg != nccl->n_seg || staged->used != nccl->used || staged->n_seg == 0) {
        fprintf(stderr, "FAIL %s: %d segments (%zu bytes) staged, %d (%zu) through NCCL\n", what, staged->n_seg,
                staged->used, nccl->n_seg, nccl->used);
        test_failures++;
        return;
    }
    for (int i = 0; i < staged->n_seg; i++) {
        const unsigned char *a = staged->bytes + staged->seg[i].off, *b = nccl->bytes + nccl->seg[i].off;
        fsdp_dtype dt = (fsdp_dtype)staged->seg[i].dtype;
        size_t n = staged->seg[i].bytes / fsdp_dtype_size(dt);
        char label[160];
        snprintf(label, sizeof label, "%s: %s", what, staged->seg[i].label);
        if (staged->seg[i].exact) {
            cuda_test_bytes(label, b, a, staged->seg[i].bytes);
            continue;
        }
        float *fa = malloc(sizeof *fa * n), *fb = malloc(sizeof *fb * n);
        for (size_t k = 0; k < n; k++) fa[k] = value_at(a, k, dt), fb[k] = value_at(b, k, dt);
        // NCCL sums along its ring (bf16 in bf16, AVG as ncclAvg): rounding apart from the staged fp32 sums
        cuda_test_compare(label, fb, fa, n, dt == FSDP_BF16 ? 1e-6 : 1e-7, dt == FSDP_BF16 ? 1.6e-2 : 2e-6);
        free(fa), free(fb);
    }
}

static void free_suite(suite *s) { free(s->bytes), s->bytes = NULL; }

#ifdef FSDP_HAVE_NCCL
// 1 when this process has a file whose name contains `name` mapped
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
    if (f) fclose(f);
    return found;
}
#endif

// The loader (device/cuda/cuda_nccl_api.h), no GPU needed: nothing maps libnccl until the first fsdp_nccl()
// (a build that linked it would), which then binds every function and reads a version with bf16 and AVG.
static void check_loader(void) {
#ifdef FSDP_HAVE_NCCL
    CHECK(!mapped("libnccl"));
    CHECK(fsdp_nccl_version() == 0);
    const fsdp_nccl_api *api = fsdp_nccl();
    if (!api) {
        fprintf(stderr, "FAIL NCCL does not load: %s\n", fsdp_last_error());
        test_failures++;
        return;
    }
    CHECK(mapped("libnccl"));
    int v = fsdp_nccl_version();
    CHECK(v >= 21003);
    CHECK(api->get_error_string(ncclInvalidUsage) != NULL && api->all_gather && api->comm_abort);
    printf("ok NCCL loaded at first use: version %d.%d.%d (built against %d)\n", v / 10000, v / 100 % 100, v % 100,
           NCCL_VERSION_CODE);
#endif
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "no world: %s\n", fsdp_last_error());
        return 1;
    }
    const int R = fsdp_comm_rank(world), P = fsdp_comm_size(world);
    check_loader();
    if (test_failures) return 1;
    fsdp_dev *probe = NULL;
    if (fsdp_dev_open("cuda", &probe) != FSDP_OK) {
        printf("SKIPPED: no CUDA device: %s\n", fsdp_last_error());
        fsdp_comm_free(world);
        return CUDA_TEST_SKIP;
    }
    fsdp_status can = fsdp_dev_comm_check(probe, "nccl");
    fsdp_dev_close(probe);
    if (can != FSDP_OK) {  // no NCCL in the build (or the library does not load): say so, skip
        printf("SKIPPED: --comm nccl: %s\n", fsdp_last_error());
        fsdp_comm_free(world);
        return CUDA_TEST_SKIP;
    }
    suite staged, nccl;
    CHECK(run_suite(world, "host", &staged, 1) == FSDP_OK);
    fsdp_status st = run_suite(world, "nccl", &nccl, 0);
    char why[600];
    snprintf(why, sizeof why, "%s", st == FSDP_OK ? "" : fsdp_last_error());
    int refused = 0;  // NCCL refused two ranks on one GPU even with a NCCL_HOSTID each
    if (st != FSDP_OK && P > 1 && strstr(why, "share GPU")) {
        // ranks on one GPU: --comm nccl is the one-line error; then each rank gets a NCCL_HOSTID of its own
        if (R == 0) printf("ok two ranks on one GPU without a NCCL_HOSTID each: %s\n", why);
        CHECK(strchr(why, '\n') == NULL && strstr(why, "rank ") == why && strstr(why, "NCCL_HOSTID"));
        free_suite(&nccl);
        char id[64];
        snprintf(id, sizeof id, "fsdp-test-rank-%d", R);
        setenv("NCCL_HOSTID", id, 1);
        st = run_suite(world, "nccl", &nccl, 0);
        snprintf(why, sizeof why, "%s", st == FSDP_OK ? "" : fsdp_last_error());
        refused = st != FSDP_OK;
        if (refused && R == 0) printf("NCCL REFUSED two ranks on one GPU with a NCCL_HOSTID each: %s\n", why);
    }
    if (st == FSDP_OK) {
        compare(&staged, &nccl, P == 1 ? "nccl, 1 rank" : "nccl");
        // through NCCL every collective goes through comm.c's call on its group (a group of one rank too),
        // plus, on a group of several ranks, the cards' all-gather and the unique id's broadcast; staged, a
        // group of one rank is the identity on the stream
        size_t per_group = 2 * N_COLL, ones = (size_t)(P == 1 ? 3 : 1), setup = (size_t)(P == 1 ? 0 : 2 * 2);
        CHECK_EQ_INT(nccl.comm_calls, 3 * per_group + setup);
        CHECK_EQ_INT(staged.comm_calls, (3 - ones) * per_group);
        if (R == 0) printf("ok NCCL equals the staged path on %d rank%s\n", P, P == 1 ? "" : "s");
    } else if (!refused) {
        fprintf(stderr, "FAIL the NCCL suite: %s\n", why);
        test_failures++;
    }
    free_suite(&staged);
    free_suite(&nccl);
    fsdp_comm_free(world);
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    else printf("ok test_cuda_nccl (%d rank%s)\n", P, P == 1 ? "" : "s");
    return test_failures ? 1 : 0;
}
