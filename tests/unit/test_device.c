// test_device.c: the device layer on the cpu and guard devices: memory (zero-filled, aligned,
// accounted by the requested bytes), copies (h2d, d2d, d2h, memset, 2-D, fsdp_dev_read), events and
// streams, kernels through the bound tables (bit-identical to the CPU tables on both devices), the guard
// device's fault report (in forked children: a host access dies of SIGSEGV and names the allocation, a
// copy through the layer does not), registered memory, device names, and collectives on streams.
// As a plain process (local backend) it runs everything; under `mpirun -np 2` with FSDP_COMM_NO_SHM=1
// (tests/CMakeLists.txt: test_device_np2) the collectives are MPI requests really in flight, and the
// test checks that events, stream waits and later work on the stream complete them.
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/alloc.h"
#include "device/device.h"
#include "device/device_comm.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

static const char *const device_names[] = {"cpu", "guard"};

static fsdp_dev *open_dev(const char *name) {
    fsdp_dev *d = NULL;
    if (fsdp_dev_open(name, &d) != FSDP_OK) {
        fprintf(stderr, "fsdp_dev_open(%s): %s\n", name, fsdp_last_error());
        exit(1);
    }
    return d;
}

static float input(int rank, size_t i) { return (float)((rank + 1) * 0.5 + (double)(i % 1000) * 0.001); }

// ---------------------------------------------------------------------------------------------
// Names, memory, copies, events

static void test_open(void) {
    fsdp_dev *d = NULL;
    CHECK(fsdp_dev_open("xyz", &d) == FSDP_ERR_INVALID_ARG);
    CHECK(d == NULL);
    CHECK(strstr(fsdp_last_error(), "xyz") != NULL);
    CHECK(strstr(fsdp_last_error(), "cpu, guard, cuda or cuda:N") != NULL);
    CHECK(fsdp_dev_open("GUARD", &d) == FSDP_OK);  // case-insensitive
    CHECK(d && fsdp_dev_kind(d) == FSDP_DEVICE_GUARD && strcmp(fsdp_dev_name(d), "guard") == 0);
    CHECK(d && !fsdp_dev_host_addressable(d));
    fsdp_dev_close(d);
    const char *saved = getenv("FSDP_DEVICE");
    setenv("FSDP_DEVICE", "guard", 1);  // NULL or "": $FSDP_DEVICE
    CHECK(fsdp_dev_open("", &d) == FSDP_OK);
    CHECK(d && fsdp_dev_kind(d) == FSDP_DEVICE_GUARD);
    fsdp_dev_close(d);
    unsetenv("FSDP_DEVICE");
    CHECK(fsdp_dev_open(NULL, &d) == FSDP_OK);  // else cpu
    CHECK(d && fsdp_dev_kind(d) == FSDP_DEVICE_CPU && strcmp(fsdp_dev_name(d), "cpu") == 0);
    CHECK(d && fsdp_dev_host_addressable(d));
    fsdp_dev_close(d);
    if (saved) setenv("FSDP_DEVICE", saved, 1);
    fsdp_dev_close(NULL);
    // --comm: auto and host on every device; nccl (a transport the host devices lack) a one-line error
    // naming the device; without a GPU here the cuda device does not open (test_cuda_nccl asks it)
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "guard" : "cpu";
        CHECK(fsdp_dev_open(name, &d) == FSDP_OK);
        CHECK(d && fsdp_dev_comm_check(d, "auto") == FSDP_OK && fsdp_dev_comm_check(d, "host") == FSDP_OK);
        CHECK(d && fsdp_dev_comm_check(d, NULL) == FSDP_OK);
        CHECK(d && fsdp_dev_comm_check(d, "nccl") == FSDP_ERR_INVALID_ARG);
        char want[64];
        snprintf(want, sizeof want, "the %s device has no nccl transport", name);
        CHECK(strstr(fsdp_last_error(), want) != NULL && strchr(fsdp_last_error(), '\n') == NULL);
        fsdp_dev_close(d);
    }
}

static int all_bytes(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

static void test_memory(fsdp_dev *d) {
    fsdp_stream *s = fsdp_dev_stream(d, FSDP_STREAM_COMPUTE);
    static const size_t sizes[] = {0, 1, 100, 4096, 12345, 1 << 20};
    unsigned char *host = malloc(1 << 20);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        size_t before = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
        unsigned char *p = fsdp_dev_alloc(d, n, FSDP_MEM_ACTIVATIONS);  // (n,)
        CHECK(p != NULL);
        if (!p) continue;
        CHECK((uintptr_t)p % FSDP_ALIGNMENT == 0);
        CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_ACTIVATIONS), before + n);
        memset(host, 0x77, n);
        CHECK(fsdp_copy_d2h(s, host, p, n) == FSDP_OK);
        CHECK(all_bytes(host, n, 0));
        CHECK(fsdp_dev_memset(s, p, 0xab, n) == FSDP_OK);
        fsdp_dev_free(d, p);
        CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_ACTIVATIONS), before);
        // the same size again (the guard device reuses the block): zeros again
        p = fsdp_dev_alloc(d, n, FSDP_MEM_ACTIVATIONS);
        CHECK(p != NULL);
        if (!p) continue;
        memset(host, 0x77, n);
        CHECK(fsdp_copy_d2h(s, host, p, n) == FSDP_OK);
        CHECK(all_bytes(host, n, 0));
        fsdp_dev_free(d, p);
    }
    // interleaved frees leave holes that later allocations fill; every byte accounted as requested
    size_t before = fsdp_mem_current(FSDP_MEM_PARAMS);
    void *blocks[16];
    for (int i = 0; i < 16; i++) blocks[i] = fsdp_dev_alloc(d, 1000 * (size_t)(i + 1), FSDP_MEM_PARAMS);
    for (int i = 0; i < 16; i += 2) fsdp_dev_free(d, blocks[i]);
    for (int i = 0; i < 16; i += 2) blocks[i] = fsdp_dev_alloc(d, 999 * (size_t)(i + 1), FSDP_MEM_PARAMS);
    size_t want = 0;
    for (int i = 0; i < 16; i++) want += (i % 2 ? 1000 : 999) * (size_t)(i + 1);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_PARAMS), before + want);
    int zero = 1;
    for (int i = 0; i < 16; i++) {
        CHECK(fsdp_dev_read(s, host, blocks[i], 999) == FSDP_OK);
        zero &= all_bytes(host, 999, 0);
        CHECK(fsdp_dev_memset(s, blocks[i], i + 1, 999) == FSDP_OK);
    }
    CHECK(zero);
    int kept = 1;
    for (int i = 0; i < 16; i++) {
        CHECK(fsdp_dev_read(s, host, blocks[i], 999) == FSDP_OK);
        kept &= all_bytes(host, 999, (unsigned char)(i + 1));
    }
    CHECK(kept);
    for (int i = 0; i < 16; i++) fsdp_dev_free(d, blocks[i]);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_PARAMS), before);
    // pinned host memory: host-accessible, zero-filled, accounted
    before = fsdp_mem_current(FSDP_MEM_COMM);
    unsigned char *h = fsdp_dev_host_alloc(d, 5000, FSDP_MEM_COMM);  // (5000,)
    CHECK(h && all_bytes(h, 5000, 0) && (uintptr_t)h % FSDP_ALIGNMENT == 0);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_COMM), before + 5000);
    fsdp_dev_host_free(d, h);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_COMM), before);
    free(host);
}

static void test_copies(fsdp_dev *d) {
    fsdp_stream *s = fsdp_dev_stream(d, FSDP_STREAM_COMPUTE), *c = fsdp_dev_stream(d, FSDP_STREAM_COMM);
    CHECK(fsdp_stream_device(s) == d && s != c);
    enum { ROWS = 8, COLS = 16, N = ROWS * COLS };
    float h[N], out[N];
    for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f - 3.0f;
    float *a = fsdp_dev_alloc(d, sizeof h, FSDP_MEM_OTHER), *b = fsdp_dev_alloc(d, sizeof h, FSDP_MEM_OTHER);  // (N,)
    CHECK(fsdp_copy_h2d(s, a, h, sizeof h) == FSDP_OK);
    CHECK(fsdp_copy_d2d(c, b, a, sizeof h) == FSDP_OK);
    CHECK(fsdp_copy_d2h(s, out, b, sizeof out) == FSDP_OK);
    CHECK(memcmp(out, h, sizeof h) == 0);
    CHECK(fsdp_dev_memset(s, b + 10, 0, 20 * sizeof(float)) == FSDP_OK);
    CHECK(fsdp_copy_d2h(s, out, b, sizeof out) == FSDP_OK);
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= out[i] == (i >= 10 && i < 30 ? 0.0f : h[i]);
    CHECK(ok);
    // 2-D: columns 3..8 of every row of a (ROWS, COLS) into a (ROWS, 7) host matrix
    float sub[ROWS * 7];
    memset(sub, 0, sizeof sub);
    CHECK(fsdp_copy_d2h_2d(s, sub, 7 * sizeof(float), a + 3, COLS * sizeof(float), 6 * sizeof(float), ROWS) == FSDP_OK);
    ok = 1;
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < 7; j++) ok &= sub[r * 7 + j] == (j < 6 ? h[r * COLS + 3 + j] : 0.0f);
    CHECK(ok);
    CHECK(fsdp_copy_d2h_2d(s, sub, 4, a, COLS * sizeof(float), 8, 2) == FSDP_ERR_INVALID_ARG);  // pitch < row
    float one = 0.0f;
    CHECK(fsdp_dev_read(s, &one, a + 37, sizeof one) == FSDP_OK);
    CHECK(one == h[37]);
    fsdp_dev_free(d, a);
    fsdp_dev_free(d, b);
}

static void test_events(fsdp_dev *d, fsdp_dev *other) {
    fsdp_stream *s = fsdp_dev_stream(d, FSDP_STREAM_COMPUTE), *c = fsdp_dev_stream(d, FSDP_STREAM_COMM);
    fsdp_event *e = NULL;
    CHECK(fsdp_event_create(d, &e) == FSDP_OK);
    CHECK(fsdp_event_query(e) == 1);  // never recorded: complete
    CHECK(fsdp_event_synchronize(e) == FSDP_OK);
    CHECK(fsdp_event_record(e, s) == FSDP_OK);
    CHECK(fsdp_event_query(e) == 1);  // nothing in flight
    CHECK(fsdp_stream_wait_event(c, e) == FSDP_OK);
    CHECK(fsdp_event_synchronize(e) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(s) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(c) == FSDP_OK);
    CHECK_EQ_INT(fsdp_stream_in_flight(s), 0);
    CHECK(fsdp_event_record(e, fsdp_dev_stream(other, FSDP_STREAM_COMPUTE)) == FSDP_ERR_INVALID_ARG);
    CHECK(fsdp_stream_wait_event(fsdp_dev_stream(other, FSDP_STREAM_COMM), e) == FSDP_ERR_INVALID_ARG);
    fsdp_event_destroy(e);
}

// ---------------------------------------------------------------------------------------------
// Kernels

static void test_tables(void) {
    fsdp_dev *cpu = open_dev("cpu"), *guard = open_dev("guard");
    const char *names[4] = {"cpu", "cpu-bf16", "guard", "guard-bf16"};
    const fsdp_kernels *t[4] = {fsdp_dev_kernels(cpu, 0), fsdp_dev_kernels(cpu, 1), fsdp_dev_kernels(guard, 0),
                                fsdp_dev_kernels(guard, 1)};
    for (int i = 0; i < 4; i++) {
        CHECK(strcmp(t[i]->name, names[i]) == 0);
        // every entry (the function pointers from gemm to the end of the struct) is set
        int unset = 0;
        for (size_t off = offsetof(fsdp_kernels, gemm); off < sizeof(fsdp_kernels); off += sizeof(void (*)(void))) {
            void (*fn)(void) = NULL;
            memcpy(&fn, (const char *)t[i] + off, sizeof fn);
            unset += fn == NULL;
        }
        CHECK_EQ_INT(unset, 0);
        CHECK(t[i] != fsdp_kernels_cpu() && t[i] != fsdp_kernels_cpu_bf16());
    }
    fsdp_dev_close(cpu);
    fsdp_dev_close(guard);
}

enum { KM = 5, KN = 7, KK = 9, LDA = KK + 3, LDB = KN + 1, LDC = KN + 2, KV = 1001 };

typedef struct {
    float c[KM * LDC], c16[KM * LDC];  // gemm through the fp32 and the bf16 table
    float acc[KV];                     // add_inplace
    double ss;                         // sum_squares of acc into 0.25
    float param[KV], m[KV], v[KV];     // adamw_update
} kernel_out;

static void kernel_inputs(float *A, float *B, float *C, float *x, float *y) {
    for (int i = 0; i < KM * LDA; i++) A[i] = (float)((i * 37) % 23) / 7.0f - 1.0f;  // not bf16 values
    for (int i = 0; i < KK * LDB; i++) B[i] = (float)((i * 11) % 19) / 13.0f - 0.5f;
    for (int i = 0; i < KM * LDC; i++) C[i] = (float)(i % 5) * 0.3f;
    for (int i = 0; i < KV; i++) x[i] = (float)((i * 7) % 101) * 0.01f - 0.4f, y[i] = 1.0f / (float)(i + 3);
}

// Runs the kernels on host memory through the CPU tables (d == NULL) or on d's memory through its tables.
static void run_kernels(fsdp_dev *d, fsdp_stream *host_stream, kernel_out *o) {
    static float A[KM * LDA], B[KK * LDB], C[KM * LDC], x[KV], y[KV];
    kernel_inputs(A, B, C, x, y);
    const fsdp_kernels *k32 = d ? fsdp_dev_kernels(d, 0) : fsdp_kernels_cpu();
    const fsdp_kernels *k16 = d ? fsdp_dev_kernels(d, 1) : fsdp_kernels_cpu_bf16();
    fsdp_stream *s = d ? fsdp_dev_stream(d, FSDP_STREAM_COMPUTE) : host_stream;
    float *dA = A, *dB = B, *dC = o->c, *dC16 = o->c16, *dx = o->acc, *dy = y, *dp = o->param, *dm = o->m, *dv = o->v;
    double *dss = &o->ss;
    memcpy(o->c, C, sizeof C);
    memcpy(o->c16, C, sizeof C);
    memcpy(o->acc, x, sizeof x);
    memcpy(o->param, x, sizeof x);
    memset(o->m, 0, sizeof o->m);
    memset(o->v, 0, sizeof o->v);
    o->ss = 0.25;
    if (d) {  // the same values in device memory
        float **bufs[] = {&dA, &dB, &dC, &dC16, &dx, &dy, &dp, &dm, &dv};
        const float *src[] = {A, B, o->c, o->c16, o->acc, y, o->param, o->m, o->v};
        size_t n[] = {KM * LDA, KK * LDB, KM * LDC, KM * LDC, KV, KV, KV, KV, KV};
        for (int i = 0; i < 9; i++) {
            *bufs[i] = fsdp_dev_alloc(d, n[i] * sizeof(float), FSDP_MEM_ACTIVATIONS);
            CHECK(fsdp_copy_h2d(s, *bufs[i], src[i], n[i] * sizeof(float)) == FSDP_OK);
        }
        dss = fsdp_dev_alloc(d, sizeof(double), FSDP_MEM_ACTIVATIONS);
        CHECK(fsdp_copy_h2d(s, dss, &o->ss, sizeof(double)) == FSDP_OK);
    }
    k32->gemm(s, 0, 0, KM, KN, KK, 0.5f, dA, LDA, dB, LDB, 0.25f, dC, LDC);
    k16->gemm(s, 0, 0, KM, KN, KK, 0.5f, dA, LDA, dB, LDB, 0.25f, dC16, LDC);
    k32->add_inplace(s, dx, dy, KV);
    k32->sum_squares(s, dss, dx, KV);
    for (int step = 1; step <= 2; step++)
        k32->adamw_update(s, dp, dy, dm, dv, KV, 1e-2f, 0.9f, 0.99f, 1e-6f, 0.1f, 1e-2f / (1.0f - 0.9f),
                          0.1f * (float)step);
    if (d) {
        float *dst[] = {o->c, o->c16, o->acc, o->param, o->m, o->v};
        float *from[] = {dC, dC16, dx, dp, dm, dv};
        size_t n[] = {KM * LDC, KM * LDC, KV, KV, KV, KV};
        for (int i = 0; i < 6; i++) CHECK(fsdp_copy_d2h(s, dst[i], from[i], n[i] * sizeof(float)) == FSDP_OK);
        CHECK(fsdp_dev_read(s, &o->ss, dss, sizeof(double)) == FSDP_OK);
        float *all[] = {dA, dB, dC, dC16, dx, dy, dp, dm, dv};
        for (int i = 0; i < 9; i++) fsdp_dev_free(d, all[i]);
        fsdp_dev_free(d, dss);
    }
}

static void test_kernels(void) {
    fsdp_dev *cpu = open_dev("cpu"), *guard = open_dev("guard");
    static kernel_out direct, on_cpu, on_guard;
    run_kernels(NULL, fsdp_dev_stream(cpu, FSDP_STREAM_COMPUTE), &direct);
    size_t before = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    run_kernels(cpu, NULL, &on_cpu);
    run_kernels(guard, NULL, &on_guard);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_ACTIVATIONS), before);
    CHECK(memcmp(&direct, &on_cpu, sizeof direct) == 0);
    CHECK(memcmp(&direct, &on_guard, sizeof direct) == 0);
    CHECK(memcmp(direct.c, direct.c16, sizeof direct.c) != 0);  // the bf16 table's gemm rounds its operands
    CHECK(direct.ss > 0.25);
    fsdp_dev_close(cpu);
    fsdp_dev_close(guard);
}

// ---------------------------------------------------------------------------------------------
// The guard device's faults, in forked children

typedef struct {
    fsdp_dev *d;
    unsigned char *p;  // device (or registered) memory to touch
    int how;           // CHILD_*
} child_job;

// (no kernels in a child: libgomp's thread pool does not survive fork; test_kernels runs them on guard
// memory in the parent, where a wrapper that left the memory closed would crash the test)
enum { CHILD_WRITE, CHILD_READ, CHILD_COPY, CHILD_DEFAULT_DEVICE };

static void child_main(const child_job *j) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    fsdp_stream *s = j->d ? fsdp_dev_stream(j->d, FSDP_STREAM_COMPUTE) : NULL;
    unsigned char host[64] = {1};
    volatile unsigned char *direct = j->p;
    switch (j->how) {
    case CHILD_WRITE: direct[100] = 1; break;
    case CHILD_READ: host[0] = direct[5000]; break;
    case CHILD_COPY:
        if (fsdp_copy_h2d(s, j->p, host, sizeof host) != FSDP_OK || fsdp_copy_d2h(s, host, j->p + 64, 8) != FSDP_OK)
            _exit(3);
        break;
    case CHILD_DEFAULT_DEVICE:
        setenv("FSDP_DEVICE", "xyz", 1);
        (void)fsdp_dev_default();
        break;
    }
    _exit(0);
}

// Runs the job in a child; returns its wait status and its stderr in err (cap bytes, NUL-terminated).
static int run_child(const child_job *j, char *err, size_t cap) {
    int fds[2];
    err[0] = 0;
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        child_main(j);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    char sink[4096];
    while ((r = read(fds[0], n + 1 < cap ? err + n : sink, n + 1 < cap ? cap - 1 - n : sizeof sink)) > 0)
        if (n + 1 < cap) n += (size_t)r;
    err[n] = 0;
    close(fds[0]);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

static int died_of(int status, int sig) { return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == sig; }
static int exited_ok(int status) { return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

static void test_guard_faults(void) {
    fsdp_dev *g = open_dev("guard"), *cpu = open_dev("cpu");
    static char err[16384];
    unsigned char *p = fsdp_dev_alloc(g, 12345, FSDP_MEM_ACTIVATIONS);  // (12345,)
    unsigned char *q = fsdp_dev_alloc(g, 777, FSDP_MEM_OPTIM);           // (777,)
    fsdp_stream *s = fsdp_dev_stream(g, FSDP_STREAM_COMPUTE);
    CHECK(fsdp_dev_memset(s, p, 0x11, 12345) == FSDP_OK);  // the layer opened and closed the memory
    CHECK(fsdp_copy_d2d(s, q, p, 777) == FSDP_OK);
    int st = run_child(&(child_job){g, p, CHILD_WRITE}, err, sizeof err);
    CHECK(died_of(st, SIGSEGV));
    CHECK(strstr(err, "host access to device memory") != NULL);
    CHECK(strstr(err, "allocation of 12345 bytes (category activations) at offset 100") != NULL);
    if (!died_of(st, SIGSEGV) || !strstr(err, "allocation of 12345")) fprintf(stderr, "child's stderr:\n%s\n", err);
    st = run_child(&(child_job){g, p, CHILD_READ}, err, sizeof err);
    CHECK(died_of(st, SIGSEGV));
    CHECK(strstr(err, "allocation of 12345 bytes (category activations) at offset 5000") != NULL);
    st = run_child(&(child_job){g, q, CHILD_WRITE}, err, sizeof err);
    CHECK(died_of(st, SIGSEGV));
    CHECK(strstr(err, "allocation of 777 bytes (category optimizer)") != NULL);
    // through the layer the same memory is fine
    st = run_child(&(child_job){g, p, CHILD_COPY}, err, sizeof err);
    CHECK(exited_ok(st));
    // the same accesses on the cpu device are allowed
    unsigned char *c = fsdp_dev_alloc(cpu, 12345, FSDP_MEM_ACTIVATIONS);
    st = run_child(&(child_job){cpu, c, CHILD_WRITE}, err, sizeof err);
    CHECK(exited_ok(st));
    fsdp_dev_free(cpu, c);
    // freed memory faults too
    fsdp_dev_free(g, p);
    st = run_child(&(child_job){g, p, CHILD_WRITE}, err, sizeof err);
    CHECK(died_of(st, SIGSEGV));
    CHECK(strstr(err, "no live allocation") != NULL);
    fsdp_dev_free(g, q);
    // an invalid $FSDP_DEVICE aborts the default device's first use with a message naming it
    st = run_child(&(child_job){NULL, NULL, CHILD_DEFAULT_DEVICE}, err, sizeof err);
    CHECK(died_of(st, SIGABRT));
    CHECK(strstr(err, "fsdp: FSDP_DEVICE=xyz: unknown device (expected cpu, guard, cuda or cuda:N)") != NULL);
    fsdp_dev_close(g);
    fsdp_dev_close(cpu);
}

static void test_registered(void) {
    fsdp_dev *g = open_dev("guard"), *cpu = open_dev("cpu");
    static char err[16384];
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);  // (2 pages,)
    CHECK(m != MAP_FAILED);
    if (m == MAP_FAILED) return;
    m[10] = 42;
    CHECK(fsdp_dev_register(g, m + 1, page, "unaligned") == FSDP_ERR_INVALID_ARG);
    CHECK(fsdp_dev_register(g, m, page + 100, "offload shard test.bin") == FSDP_OK);
    CHECK(fsdp_dev_register(g, m + page, 10, "overlapping") == FSDP_ERR_INVALID_ARG);  // rounded up: both pages
    fsdp_stream *s = fsdp_dev_stream(g, FSDP_STREAM_COMPUTE);
    unsigned char v = 0;
    CHECK(fsdp_copy_d2h(s, &v, m + 10, 1) == FSDP_OK);  // the layer reads it in place
    CHECK_EQ_INT(v, 42);
    int st = run_child(&(child_job){g, m, CHILD_WRITE}, err, sizeof err);
    CHECK(died_of(st, SIGSEGV));
    char want[128];
    snprintf(want, sizeof want, "registered memory 'offload shard test.bin' of %zu bytes at offset 100", page + 100);
    CHECK(strstr(err, want) != NULL);
    st = run_child(&(child_job){g, m, CHILD_COPY}, err, sizeof err);  // through the layer: fine
    CHECK(exited_ok(st));
    fsdp_dev_unregister(g, m);
    CHECK_EQ_INT(m[10], 42);  // host access is back
    m[11] = 7;
    CHECK(fsdp_dev_register(cpu, m, page, "cpu") == FSDP_OK);  // the cpu device leaves it accessible
    CHECK_EQ_INT(m[11], 7);
    fsdp_dev_unregister(cpu, m);
    munmap(m, 2 * page);
    fsdp_dev_close(g);
    fsdp_dev_close(cpu);
}

// ---------------------------------------------------------------------------------------------
// Collectives on streams

// On rank 0 of several (cpu device), collectives started right after this stay in flight: the other
// ranks start theirs 0.2 s later.
static int hold_back_peers(fsdp_comm *w, int on) {
    CHECK(fsdp_barrier(w) == FSDP_OK);
    if (on && fsdp_comm_rank(w) != 0) usleep(200000);
    return on && fsdp_comm_rank(w) == 0;
}

static void test_collectives(fsdp_comm *w, const char *name) {
    fsdp_dev *d = open_dev(name);
    int R = fsdp_comm_rank(w), N = fsdp_comm_size(w);
    // collectives stay in flight: the cpu device over plain MPI (FSDP_COMM_NO_SHM=1)
    int async = fsdp_dev_kind(d) == FSDP_DEVICE_CPU && N > 1 && strcmp(fsdp_comm_backend(w), "mpi") == 0;
    fsdp_stream *cs = fsdp_dev_stream(d, FSDP_STREAM_COMPUTE), *ms = fsdp_dev_stream(d, FSDP_STREAM_COMM);
    size_t n = 100003, nn = n * (size_t)N;
    float *h = malloc(sizeof(float) * nn), *h2 = malloc(sizeof(float) * nn);  // (N*n,) host
    float *send = fsdp_dev_alloc(d, sizeof(float) * n, FSDP_MEM_COMM);         // (n,)
    float *recv = fsdp_dev_alloc(d, sizeof(float) * nn, FSDP_MEM_COMM);        // (N*n,)
    float *rs_send = fsdp_dev_alloc(d, sizeof(float) * nn, FSDP_MEM_COMM);     // (N*n,)
    float *rs_recv = fsdp_dev_alloc(d, sizeof(float) * n, FSDP_MEM_COMM);      // (n,)
    float *out = fsdp_dev_alloc(d, sizeof(float) * nn, FSDP_MEM_COMM);         // (N*n,)
    fsdp_event *ready = NULL, *gathered = NULL;
    CHECK(fsdp_event_create(d, &ready) == FSDP_OK);
    CHECK(fsdp_event_create(d, &gathered) == FSDP_OK);
    int bad = 0;

    // inputs written on compute; the comm stream waits for them; an all-gather and a reduce-scatter on
    // the comm stream (independent buffers: both in flight at once); compute waits for an event after them
    for (size_t i = 0; i < nn; i++) h[i] = input(R, i);
    CHECK(fsdp_copy_h2d(cs, send, h, sizeof(float) * n) == FSDP_OK);
    CHECK(fsdp_copy_h2d(cs, rs_send, h, sizeof(float) * nn) == FSDP_OK);
    CHECK(fsdp_event_record(ready, cs) == FSDP_OK);
    CHECK(fsdp_stream_wait_event(ms, ready) == FSDP_OK);
    int first = hold_back_peers(w, async);
    CHECK(fsdp_dev_all_gather(ms, w, send, recv, n, FSDP_F32) == FSDP_OK);
    if (first) CHECK_EQ_INT(fsdp_stream_in_flight(ms), 1);
    CHECK(fsdp_dev_reduce_scatter(ms, w, rs_send, rs_recv, n, FSDP_F32, FSDP_AVG) == FSDP_OK);
    if (first) CHECK_EQ_INT(fsdp_stream_in_flight(ms), 2);
    CHECK(fsdp_event_record(gathered, ms) == FSDP_OK);
    if (first) CHECK(fsdp_event_query(gathered) == 0);  // the peers have not started theirs
    CHECK(fsdp_stream_wait_event(cs, gathered) == FSDP_OK);
    CHECK_EQ_INT(fsdp_stream_in_flight(ms), 0);
    CHECK(fsdp_event_query(gathered) == 1);
    CHECK(fsdp_copy_d2h(cs, h2, recv, sizeof(float) * nn) == FSDP_OK);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += h2[(size_t)r * n + i] != input(r, i);
    CHECK(fsdp_dev_read(cs, h2, rs_recv, sizeof(float) * n) == FSDP_OK);
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < N; r++) want += input(r, (size_t)R * n + i);
        bad += fabs(h2[i] - want / N) > 1e-5 * fabs(want / N);
    }

    // a copy enqueued on the comm stream right after an in-flight all-gather sees its result
    for (size_t i = 0; i < n; i++) h[i] = input(R, i) + 1.0f;
    CHECK(fsdp_copy_h2d(ms, send, h, sizeof(float) * n) == FSDP_OK);
    first = hold_back_peers(w, async);
    CHECK(fsdp_dev_all_gather(ms, w, send, recv, n, FSDP_F32) == FSDP_OK);
    if (first) CHECK_EQ_INT(fsdp_stream_in_flight(ms), 1);
    CHECK(fsdp_copy_d2d(ms, out, recv, sizeof(float) * nn) == FSDP_OK);
    CHECK_EQ_INT(fsdp_stream_in_flight(ms), 0);
    CHECK(fsdp_copy_d2h(ms, h2, out, sizeof(float) * nn) == FSDP_OK);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += h2[(size_t)r * n + i] != input(r, i) + 1.0f;

    // in place; then a kernel on the stream after an all-reduce sees the sum; a copy of other buffers
    // does not wait for it (it is still in flight after the copy)
    CHECK(fsdp_dev_memset(ms, recv, 0, sizeof(float) * nn) == FSDP_OK);
    for (size_t i = 0; i < n; i++) h[i] = input(R, i);
    CHECK(fsdp_copy_h2d(ms, recv + (size_t)R * n, h, sizeof(float) * n) == FSDP_OK);
    CHECK(fsdp_dev_all_gather(ms, w, recv + (size_t)R * n, recv, n, FSDP_F32) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(ms) == FSDP_OK);
    CHECK(fsdp_copy_d2h(cs, h2, recv, sizeof(float) * nn) == FSDP_OK);
    for (int r = 0; r < N; r++)
        for (size_t i = 0; i < n; i++) bad += h2[(size_t)r * n + i] != input(r, i);
    CHECK(fsdp_copy_h2d(ms, rs_recv, h, sizeof(float) * n) == FSDP_OK);
    first = hold_back_peers(w, async);
    CHECK(fsdp_dev_all_reduce(ms, w, rs_recv, n, FSDP_F32, FSDP_SUM) == FSDP_OK);
    CHECK(fsdp_copy_d2d(ms, out, send, sizeof(float) * n) == FSDP_OK);  // independent of the all-reduce
    if (first) CHECK_EQ_INT(fsdp_stream_in_flight(ms), 1);
    fsdp_dev_kernels(d, 0)->scale(ms, rs_recv, 2.0f, n);
    CHECK_EQ_INT(fsdp_stream_in_flight(ms), 0);
    CHECK(fsdp_copy_d2h(ms, h2, rs_recv, sizeof(float) * n) == FSDP_OK);
    for (size_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < N; r++) want += input(r, i);
        bad += fabs(h2[i] - 2 * want) > 1e-5 * fabs(2 * want);
    }

    // more independent collectives than a stream holds in flight: the oldest is completed first
    for (int k = 0; k < 9; k++) CHECK(fsdp_copy_h2d(ms, out + (size_t)k * 1000, h + k, sizeof(float) * 1000) == FSDP_OK);
    first = hold_back_peers(w, async);
    for (int k = 0; k < 9; k++) CHECK(fsdp_dev_all_reduce(ms, w, out + (size_t)k * 1000, 1000, FSDP_F32, FSDP_SUM) == FSDP_OK);
    if (first) CHECK_EQ_INT(fsdp_stream_in_flight(ms), 8);
    CHECK(fsdp_stream_synchronize(ms) == FSDP_OK);
    CHECK(fsdp_copy_d2h(cs, h2, out, sizeof(float) * 9000) == FSDP_OK);
    for (int k = 0; k < 9; k++)
        for (size_t i = 0; i < 1000; i++) {
            double want = 0;
            for (int r = 0; r < N; r++) want += input(r, (size_t)k + i);
            bad += fabs(h2[(size_t)k * 1000 + i] - want) > 1e-5 * fabs(want);
        }

    // a buffer freed while a collective may still use it is released once the collective is complete
    size_t before = fsdp_mem_current(FSDP_MEM_GRADS);
    float *g = fsdp_dev_alloc(d, sizeof(float) * n, FSDP_MEM_GRADS);  // (n,)
    CHECK(fsdp_copy_h2d(ms, g, h, sizeof(float) * n) == FSDP_OK);
    first = hold_back_peers(w, async);
    CHECK(fsdp_dev_all_reduce(ms, w, g, n, FSDP_F32, FSDP_AVG) == FSDP_OK);
    fsdp_dev_free(d, g);
    if (first) CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_GRADS), before + sizeof(float) * n);
    CHECK(fsdp_stream_synchronize(ms) == FSDP_OK);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_GRADS), before);

    // broadcast from the last rank; a host double summed over the ranks
    CHECK(fsdp_copy_h2d(cs, send, h, sizeof(float) * n) == FSDP_OK);
    CHECK(fsdp_dev_broadcast(cs, w, send, n, FSDP_F32, N - 1) == FSDP_OK);
    CHECK(fsdp_copy_d2h(cs, h2, send, sizeof(float) * n) == FSDP_OK);
    for (size_t i = 0; i < n; i++) bad += h2[i] != input(N - 1, i);
    double v = R + 1.0;
    CHECK(fsdp_dev_all_reduce_double(cs, w, &v) == FSDP_OK);
    CHECK_NEAR(v, N * (N + 1) / 2.0, 1e-9);

    if (bad) fprintf(stderr, "collectives on %s, rank %d/%d: %d wrong values\n", name, R, N, bad);
    CHECK(bad == 0);
    CHECK(fsdp_barrier(w) == FSDP_OK);
    fsdp_event_destroy(ready);
    fsdp_event_destroy(gathered);
    float *bufs[] = {send, recv, rs_send, rs_recv, out};
    for (int i = 0; i < 5; i++) fsdp_dev_free(d, bufs[i]);
    free(h);
    free(h2);
    fsdp_dev_close(d);
}

// Progress between kernels (cpu device over plain MPI): an all-reduce in flight on the comm stream
// completes while the compute stream runs kernels, with no wait and no event query, when
// FSDP_COMM_PROGRESS is poll (the default); with none it is still unfinished after as many kernels.
// Completion shows in the group's statistics (a collective is counted when it is found complete).
static void test_progress(fsdp_comm *w, const char *progress) {
    if (fsdp_comm_size(w) < 2 || strcmp(fsdp_comm_backend(w), "mpi") != 0) return;
    setenv("FSDP_COMM_PROGRESS", progress, 1);
    fsdp_dev *d = open_dev("cpu");
    unsetenv("FSDP_COMM_PROGRESS");
    int poll = strcmp(progress, "poll") == 0;
    fsdp_stream *cs = fsdp_dev_stream(d, FSDP_STREAM_COMPUTE), *ms = fsdp_dev_stream(d, FSDP_STREAM_COMM);
    size_t n = 1 << 20;
    float *buf = fsdp_dev_alloc(d, sizeof(float) * n, FSDP_MEM_COMM);  // (n,) all-reduced on the comm stream
    float *x = fsdp_dev_alloc(d, sizeof(float) * 64, FSDP_MEM_ACTIVATIONS);  // (64,) the kernels' operand
    CHECK(fsdp_dev_memset(ms, buf, 0, sizeof(float) * n) == FSDP_OK);
    CHECK(fsdp_dev_memset(cs, x, 0, sizeof(float) * 64) == FSDP_OK);
    CHECK(fsdp_barrier(w) == FSDP_OK);
    size_t calls = fsdp_comm_get_stats(w).calls;
    CHECK(fsdp_dev_all_reduce(ms, w, buf, n, FSDP_F32, FSDP_SUM) == FSDP_OK);
    const fsdp_kernels *k = fsdp_dev_kernels(d, 0);
    int kernels = 0;
    for (; kernels < 4000 && fsdp_comm_get_stats(w).calls == calls; kernels++) {
        k->scale(cs, x, 1.0f, 64);  // compute-stream work: the polls run before each kernel
        usleep(250);                // the peer gets a CPU to progress its side
    }
    if (poll && fsdp_comm_get_stats(w).calls == calls)
        fprintf(stderr, "progress: the all-reduce did not complete during %d kernels with polls on\n", kernels);
    CHECK(fsdp_comm_get_stats(w).calls != calls || !poll);
    if (!poll) CHECK(fsdp_comm_get_stats(w).calls == calls);  // nothing tested it: still counted as running
    CHECK(fsdp_stream_synchronize(ms) == FSDP_OK);
    CHECK(fsdp_comm_get_stats(w).calls == calls + 1);
    CHECK(fsdp_barrier(w) == FSDP_OK);
    fsdp_dev_free(d, buf);
    fsdp_dev_free(d, x);
    fsdp_dev_close(d);
}

int main(int argc, char **argv) {
    fsdp_comm *world = NULL;
    if (fsdp_comm_world(&world, &argc, &argv) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 1;
    }
    int R = fsdp_comm_rank(world), N = fsdp_comm_size(world);
    if (N == 1) {  // forks only without MPI
        test_open();
        for (int i = 0; i < 2; i++) {
            fsdp_dev *d = open_dev(device_names[i]), *other = open_dev(device_names[1 - i]);
            test_memory(d);
            test_copies(d);
            test_events(d, other);
            fsdp_dev_close(d);
            fsdp_dev_close(other);
        }
        test_tables();
        test_kernels();
        test_guard_faults();
        test_registered();
    }
    for (int i = 0; i < 2; i++) test_collectives(world, device_names[i]);
    test_progress(world, "poll");
    test_progress(world, "none");
    int failures = test_failures;
    fsdp_comm_free(world);
    if (failures) {
        fprintf(stderr, "rank %d: %d check(s) failed\n", R, failures);
        return 1;
    }
    if (R == 0) printf("all checks passed\n");
    return 0;
}
