// dnnl_bench.c: our bf16 GEMM against oneDNN's matmul (Debian's libdnnl-dev) on the GPT benchmark
// model's shapes, in the same run. oneDNN runs twice: fp32 inputs with fpmath_mode bf16 (implicit
// down-conversion: our GEMM's contract, conversion included) and inputs already in bf16 (conversion
// excluded: oneDNN's best case). Built only where CMake finds oneDNN (bench/README.md).
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"

#define CHECK_DNNL(x)                                                         \
    do {                                                                      \
        dnnl_status_t st_ = (x);                                              \
        if (st_ != dnnl_success) {                                            \
            fprintf(stderr, "dnnl-bench: %s failed (status %d)\n", #x, st_);  \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

typedef struct {
    int ta, tb, M, N, K;
    const char *what;
} shape;

static double best_of(void (*run)(void *), void *ctx, int reps) {
    double best = 1e9;
    run(ctx);  // warm-up (first-touch, primitive caches)
    for (int r = 0; r < 3; r++) {
        double t0 = fsdp_now_sec();
        for (int i = 0; i < reps; i++) run(ctx);
        double dt = (fsdp_now_sec() - t0) / reps;
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    dnnl_primitive_t prim;
    dnnl_stream_t stream;
    dnnl_exec_arg_t args[3];
} dnnl_run;

static void run_dnnl(void *p) {
    dnnl_run *r = p;
    CHECK_DNNL(dnnl_primitive_execute(r->prim, r->stream, 3, r->args));
    CHECK_DNNL(dnnl_stream_wait(r->stream));
}

typedef struct {
    const shape *s;
    const float *A, *B;
    float *C;
} ours_run;

static void run_ours(void *p) {
    ours_run *r = p;
    const shape *s = r->s;
    cpu_gemm_bf16(s->ta, s->tb, s->M, s->N, s->K, 1.0f, r->A, s->ta ? s->M : s->K, r->B, s->tb ? s->K : s->N, 0.0f,
                  r->C, s->N);
}

// oneDNN matmul C = op(A) op(B) with inputs of type dt (A, B given in that type), fpmath bf16 for f32
static double time_dnnl(dnnl_engine_t eng, dnnl_stream_t stream, const shape *s, dnnl_data_type_t dt, void *A,
                        void *B, float *C, int reps, char *impl, size_t impl_cap) {
    dnnl_dims_t a_dims = {s->M, s->K}, b_dims = {s->K, s->N}, c_dims = {s->M, s->N};
    dnnl_dims_t a_strides = {s->ta ? 1 : s->K, s->ta ? s->M : 1}, b_strides = {s->tb ? 1 : s->N, s->tb ? s->K : 1};
    dnnl_dims_t c_strides = {s->N, 1};
    dnnl_memory_desc_t a_md, b_md, c_md;
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dt, a_strides));
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dt, b_strides));
    CHECK_DNNL(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides));
    dnnl_matmul_desc_t desc;
    CHECK_DNNL(dnnl_matmul_desc_init(&desc, &a_md, &b_md, NULL, &c_md));
    dnnl_primitive_attr_t attr;
    CHECK_DNNL(dnnl_primitive_attr_create(&attr));
    if (dt == dnnl_f32) CHECK_DNNL(dnnl_primitive_attr_set_fpmath_mode(attr, dnnl_fpmath_mode_bf16));
    dnnl_primitive_desc_t pd;
    CHECK_DNNL(dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL));
    const char *name = NULL;
    CHECK_DNNL(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name));
    snprintf(impl, impl_cap, "%s", name ? name : "?");
    dnnl_run r;
    CHECK_DNNL(dnnl_primitive_create(&r.prim, pd));
    dnnl_memory_t a_mem, b_mem, c_mem;
    CHECK_DNNL(dnnl_memory_create(&a_mem, &a_md, eng, A));
    CHECK_DNNL(dnnl_memory_create(&b_mem, &b_md, eng, B));
    CHECK_DNNL(dnnl_memory_create(&c_mem, &c_md, eng, C));
    r.stream = stream;
    r.args[0] = (dnnl_exec_arg_t){DNNL_ARG_SRC, a_mem};
    r.args[1] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, b_mem};
    r.args[2] = (dnnl_exec_arg_t){DNNL_ARG_DST, c_mem};
    double t = best_of(run_dnnl, &r, reps);
    dnnl_memory_destroy(a_mem);
    dnnl_memory_destroy(b_mem);
    dnnl_memory_destroy(c_mem);
    dnnl_primitive_destroy(r.prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    return t;
}

int main(void) {
    shape shapes[] = {
        {0, 0, 2048, 1536, 512, "qkv fwd (x @ W)"},
        {0, 1, 2048, 2048, 512, "fc fwd (x @ W^T)"},
        {0, 1, 2048, 512, 2048, "proj bwd dX"},
        {1, 0, 512, 2048, 2048, "weight grad (X^T dY)"},
        {0, 1, 256, 256, 64, "attention QK^T"},
    };
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    CHECK_DNNL(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CHECK_DNNL(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d against ours (bf16 GEMM path %s), GFLOP/s, best of 3\n", v->major, v->minor, v->patch,
           cpu_gemm_bf16_name());
    printf("%-22s %16s %5s %5s %9s %12s %12s %8s  %s\n", "shape", "", "", "", "ours", "dnnl f32->bf16", "dnnl bf16 in",
           "ours/dnnl", "oneDNN implementation");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        size_t an = (size_t)s->M * s->K, bn = (size_t)s->K * s->N, cn = (size_t)s->M * s->N;
        float *A = malloc(sizeof(float) * an), *B = malloc(sizeof(float) * bn), *C = malloc(sizeof(float) * cn);
        uint16_t *A16 = malloc(2 * an), *B16 = malloc(2 * bn);
        for (size_t j = 0; j < an; j++) A[j] = (float)(j % 13) * 0.01f - 0.06f;
        for (size_t j = 0; j < bn; j++) B[j] = (float)(j % 7) * 0.01f - 0.03f;
        fsdp_f32_to_bf16_array(A16, A, an);
        fsdp_f32_to_bf16_array(B16, B, bn);
        double flops = 2.0 * s->M * s->N * (double)s->K;
        int reps = flops > 1e8 ? 10 : 200;
        ours_run o = {s, A, B, C};
        double t_ours = best_of(run_ours, &o, reps);
        char impl[128], impl16[128];
        double t_f32 = time_dnnl(eng, stream, s, dnnl_f32, A, B, C, reps, impl, sizeof impl);
        double t_b16 = time_dnnl(eng, stream, s, dnnl_bf16, A16, B16, C, reps, impl16, sizeof impl16);
        double best_dnnl = t_f32 < t_b16 ? t_f32 : t_b16;
        printf("%-22s M %4d N %4d K %4d %9.1f %12.1f %12.1f %8.2fx  %s / %s\n", s->what, s->M, s->N, s->K,
               flops / t_ours / 1e9, flops / t_f32 / 1e9, flops / t_b16 / 1e9, best_dnnl / t_ours, impl, impl16);
        free(A);
        free(B);
        free(C);
        free(A16);
        free(B16);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
