// test_llama_kernels.c: the kernels the Llama family adds (kernels/kernel_list.h): residual_rmsnorm_forward,
// rope_forward / rope_backward and swiglu_forward / swiglu_backward, on the CPU table:
//  - against plain references in double at odd sizes (rows, channels, positions and head sizes that are
//    not multiples of 16, vector lanes and scalar tails, several chunks of work);
//  - the backwards against central finite differences of a loss in double;
//  - residual_rmsnorm_forward: res the float sum a + b, out and rstd the bits of rmsnorm_forward on it,
//    res over a and over b; rope: the bits of the contract's formula in float (two rounded products and
//    a rounded sum), backward the inverse rotation; swiglu: dgate over gate and dup over up;
//  - bf16 outputs (the fp32 output rounded to nearest even, out untouched);
//  - the same bits on 1 and 3 threads, and through the cpu and guard devices' tables (the guard's in its
//    arena, copied in and out through the device layer).
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/cpu/cpu_kernels.h"
#include "device/device.h"
#include "kernels/kernels.h"
#include "test.h"

static float *floats(size_t n, uint64_t stream, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    fsdp_rng_uniform_range((fsdp_rng){46, stream}, 0, x, n, lo, hi);
    return x;
}

static float *dup_floats(const float *x, size_t n) {
    float *y = malloc(sizeof(float) * (n ? n : 1));
    memcpy(y, x, sizeof(float) * n);
    return y;
}

// max |got - want| / max |want| (NaN, or no values at all: infinite)
static double rel_err(const float *got, const double *want, size_t n) {
    double worst = n ? 0 : INFINITY, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]);
        worst = fmax(worst, e);
        scale = fmax(scale, fabs(want[i]));
    }
    return worst / scale;
}

// 1 when every bf16 value is the fp32 value rounded to nearest even
static int is_rounded(const fsdp_bf16 *b16, const float *f32, size_t n) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= b16[i] == fsdp_f32_to_bf16(f32[i]);
    return ok;
}

// ---- residual_rmsnorm_forward ----

// out (N, C) of RMSNorm of x in double; rstd (N,)
static void rmsnorm_reference(double *out, double *rstd, const float *x, const float *w, int N, int C, double eps) {
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[(size_t)n * C + c] * x[(size_t)n * C + c];
        double r = 1.0 / sqrt(ss / C + eps);
        rstd[n] = r;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[(size_t)n * C + c] * r * w[c];
    }
}

static void check_residual_rmsnorm(int N, int C) {
    const float eps = 1e-5f;
    size_t n = (size_t)N * C;
    float *a = floats(n, 1, -2.0f, 2.0f), *b = floats(n, 2, -1.5f, 1.5f), *w = floats((size_t)C, 3, 0.5f, 1.5f);
    float *res = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n), *rstd = malloc(sizeof(float) * N);
    cpu_residual_rmsnorm_forward(res, out, NULL, rstd, a, b, w, N, C, eps);
    int sum_ok = 1;
    for (size_t i = 0; i < n; i++) sum_ok &= res[i] == a[i] + b[i];
    CHECK(sum_ok);
    double *want = malloc(sizeof(double) * n), *want_rstd = malloc(sizeof(double) * N);
    rmsnorm_reference(want, want_rstd, res, w, N, C, eps);
    double e_out = rel_err(out, want, n), e_rstd = rel_err(rstd, want_rstd, (size_t)N);
    printf("residual_rmsnorm N%d C%d: rel err out %.2e rstd %.2e (double reference)\n", N, C, e_out, e_rstd);
    CHECK(e_out < 1e-6);
    CHECK(e_rstd < 1e-6);

    // the bits of add followed by rmsnorm_forward
    float *out2 = malloc(sizeof(float) * n), *rstd2 = malloc(sizeof(float) * N);
    cpu_rmsnorm_forward(out2, NULL, rstd2, res, w, N, C, eps);
    CHECK(memcmp(out2, out, sizeof(float) * n) == 0);
    CHECK(memcmp(rstd2, rstd, sizeof(float) * N) == 0);

    // res over a, then over b: the same res, out and rstd
    for (int over = 0; over < 2; over++) {
        float *buf = dup_floats(over ? b : a, n), *o = malloc(sizeof(float) * n), *r = malloc(sizeof(float) * N);
        cpu_residual_rmsnorm_forward(buf, o, NULL, r, over ? a : buf, over ? buf : b, w, N, C, eps);
        printf("residual_rmsnorm N%d C%d: res over %s: %s\n", N, C, over ? "b" : "a",
               memcmp(buf, res, sizeof(float) * n) == 0 ? "same bits" : "DIFFERENT");
        CHECK(memcmp(buf, res, sizeof(float) * n) == 0);
        CHECK(memcmp(o, out, sizeof(float) * n) == 0);
        CHECK(memcmp(r, rstd, sizeof(float) * N) == 0);
        free(buf), free(o), free(r);
    }

    // bf16 output: the fp32 output rounded; out not written
    fsdp_bf16 *o16 = malloc(sizeof(fsdp_bf16) * n);
    float *sent = floats(n, 4, 7.0f, 8.0f), *out3 = dup_floats(sent, n), *res3 = malloc(sizeof(float) * n);
    cpu_residual_rmsnorm_forward(res3, out3, o16, rstd2, a, b, w, N, C, eps);
    CHECK(is_rounded(o16, out, n));
    CHECK(memcmp(out3, sent, sizeof(float) * n) == 0);
    CHECK(memcmp(res3, res, sizeof(float) * n) == 0);
    free(a), free(b), free(w), free(res), free(out), free(rstd), free(want), free(want_rstd), free(out2), free(rstd2);
    free(o16), free(sent), free(out3), free(res3);
}

// ---- rope_forward / rope_backward ----

// cos, sin (T, D/2) of Llama's angles t * theta^(-2i/D), computed in double and rounded
static void rope_angles(float *cos_t, float *sin_t, int T, int D, double theta) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < D / 2; i++) {
            double angle = t * pow(theta, -2.0 * i / D);
            cos_t[(size_t)t * (D / 2) + i] = (float)cos(angle), sin_t[(size_t)t * (D / 2) + i] = (float)sin(angle);
        }
}

// y (B*T, heads*D) = x rotated (HF's rotate_half layout), in double; sign -1: the inverse rotation
static void rope_reference(double *y, const float *x, const float *cos_t, const float *sin_t, int B, int T,
                           int heads, int D, double sign) {
    int half = D / 2;
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                size_t at = ((size_t)n * heads + h) * D + i, ang = (size_t)(n % T) * half + i;
                double x1 = x[at], x2 = x[at + half], c = cos_t[ang], s = sign * sin_t[ang];
                y[at] = x1 * c - x2 * s;
                y[at + half] = x2 * c + x1 * s;
            }
}

// the contract's formula in float, operation by operation (ISO C: no fused multiply-add)
static void rope_float(float *x, const float *cos_t, const float *sin_t, int B, int T, int heads, int D) {
    int half = D / 2;
    for (int n = 0; n < B * T; n++)
        for (int h = 0; h < heads; h++)
            for (int i = 0; i < half; i++) {
                size_t at = ((size_t)n * heads + h) * D + i, ang = (size_t)(n % T) * half + i;
                float x1 = x[at], x2 = x[at + half];
                x[at] = x1 * cos_t[ang] - x2 * sin_t[ang];
                x[at + half] = x2 * cos_t[ang] + x1 * sin_t[ang];
            }
}

// L = sum(rope(x) * g) in double
static double rope_loss(const float *x, const float *g, const float *cos_t, const float *sin_t, int B, int T, int heads,
                        int D) {
    size_t n = (size_t)B * T * heads * D;
    double *y = malloc(sizeof(double) * n), L = 0;
    rope_reference(y, x, cos_t, sin_t, B, T, heads, D, 1.0);
    for (size_t i = 0; i < n; i++) L += y[i] * g[i];
    free(y);
    return L;
}

static void check_rope(int B, int T, int heads, int D) {
    size_t n = (size_t)B * T * heads * D, na = (size_t)T * (D / 2);
    float *cos_t = malloc(sizeof(float) * na), *sin_t = malloc(sizeof(float) * na);
    rope_angles(cos_t, sin_t, T, D, 10000.0);
    float *x0 = floats(n, 10, -2.0f, 2.0f), *x = dup_floats(x0, n), *g = floats(n, 11, -1.0f, 1.0f);
    double *want = malloc(sizeof(double) * n);
    cpu_rope_forward(x, cos_t, sin_t, B, T, heads, D);
    rope_reference(want, x0, cos_t, sin_t, B, T, heads, D, 1.0);
    double e_fwd = rel_err(x, want, n);
    CHECK(e_fwd < 1e-6);
    float *xf = dup_floats(x0, n);
    rope_float(xf, cos_t, sin_t, B, T, heads, D);
    CHECK(memcmp(xf, x, sizeof(float) * n) == 0);  // the contract's bits

    // backward: R^T g against the reference's inverse rotation and central differences of L
    float *dx = dup_floats(g, n);
    cpu_rope_backward(dx, cos_t, sin_t, B, T, heads, D);
    rope_reference(want, g, cos_t, sin_t, B, T, heads, D, -1.0);
    double e_bwd = rel_err(dx, want, n);
    CHECK(e_bwd < 1e-6);
    const double h = 1e-2;  // L is linear in x: the difference is exact up to rounding
    double *fd = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        float keep = x0[i];
        x0[i] = (float)(keep + h);
        double up = rope_loss(x0, g, cos_t, sin_t, B, T, heads, D);
        x0[i] = (float)(keep - h);
        double down = rope_loss(x0, g, cos_t, sin_t, B, T, heads, D);
        fd[i] = (up - down) / ((double)(float)(keep + h) - (double)(float)(keep - h));
        x0[i] = keep;
    }
    double e_fd = rel_err(dx, fd, n);
    CHECK(e_fd < 1e-5);
    // backward of forward: x again (a rotation), within rounding
    cpu_rope_backward(x, cos_t, sin_t, B, T, heads, D);
    for (size_t i = 0; i < n; i++) want[i] = x0[i];
    double e_round = rel_err(x, want, n);
    CHECK(e_round < 1e-6);
    printf("rope B%d T%d heads%d D%d: rel err forward %.2e backward %.2e, vs finite differences %.2e, "
           "round trip %.2e\n", B, T, heads, D, e_fwd, e_bwd, e_fd, e_round);
    free(cos_t), free(sin_t), free(x0), free(x), free(g), free(want), free(xf), free(dx), free(fd);
}

// ---- swiglu_forward / swiglu_backward ----

static double silu_d(double g) { return g / (1.0 + exp(-g)); }

// L = sum(silu(gate) * up * dout) in double
static double swiglu_loss(const float *gate, const float *up, const float *dout, size_t n) {
    double L = 0;
    for (size_t i = 0; i < n; i++) L += silu_d(gate[i]) * up[i] * dout[i];
    return L;
}

// dL/dv[i] by a central difference (v is gate or up; L is a sum over elements, so only element i moves)
static double swiglu_difference(float *v, size_t i, const float *gate, const float *up, const float *dout) {
    const double h = 1e-3;
    float keep = v[i];
    v[i] = (float)(keep + h);
    double upL = swiglu_loss(gate + i, up + i, dout + i, 1);
    v[i] = (float)(keep - h);
    double downL = swiglu_loss(gate + i, up + i, dout + i, 1);
    double step = (double)(float)(keep + h) - (double)(float)(keep - h);
    v[i] = keep;
    return (upL - downL) / step;
}

static void check_swiglu(size_t n) {
    float *gate = floats(n, 20, -12.0f, 12.0f), *up = floats(n, 21, -2.0f, 2.0f), *dout = floats(n, 22, -1.0f, 1.0f);
    float *out = malloc(sizeof(float) * n);
    double *want = malloc(sizeof(double) * n), *want2 = malloc(sizeof(double) * n);
    cpu_swiglu_forward(out, NULL, gate, up, n);
    for (size_t i = 0; i < n; i++) want[i] = silu_d(gate[i]) * up[i];
    double e_out = rel_err(out, want, n);
    CHECK(e_out < 1e-6);

    // bf16 output: the fp32 output rounded; out not written
    fsdp_bf16 *o16 = malloc(sizeof(fsdp_bf16) * n);
    float *sent = floats(n, 23, 7.0f, 8.0f), *out2 = dup_floats(sent, n);
    cpu_swiglu_forward(out2, o16, gate, up, n);
    CHECK(is_rounded(o16, out, n));
    CHECK(memcmp(out2, sent, sizeof(float) * n) == 0);

    // backward: against the derivative in double and central differences
    float *dgate = malloc(sizeof(float) * n), *dup = malloc(sizeof(float) * n);
    cpu_swiglu_backward(dgate, dup, dout, gate, up, n);
    for (size_t i = 0; i < n; i++) {
        double g = gate[i], sig = 1.0 / (1.0 + exp(-g));
        want[i] = dout[i] * up[i] * sig * (1.0 + g * (1.0 - sig));
        want2[i] = dout[i] * silu_d(g);
    }
    double e_dg = rel_err(dgate, want, n), e_du = rel_err(dup, want2, n);
    CHECK(e_dg < 1e-6);
    CHECK(e_du < 1e-6);
    for (size_t i = 0; i < n; i++) {
        want[i] = swiglu_difference(gate, i, gate, up, dout);
        want2[i] = swiglu_difference(up, i, gate, up, dout);
    }
    double e_fg = rel_err(dgate, want, n), e_fu = rel_err(dup, want2, n);
    CHECK(e_fg < 2e-5);
    CHECK(e_fu < 2e-5);
    printf("swiglu n%zu: rel err out %.2e dgate %.2e dup %.2e (double); vs finite differences dgate %.2e dup %.2e\n", n,
           e_out, e_dg, e_du, e_fg, e_fu);

    // dgate over gate and dup over up: the same bits
    float *g2 = dup_floats(gate, n), *u2 = dup_floats(up, n);
    cpu_swiglu_backward(g2, u2, dout, g2, u2, n);
    CHECK(memcmp(g2, dgate, sizeof(float) * n) == 0);
    CHECK(memcmp(u2, dup, sizeof(float) * n) == 0);
    free(gate), free(up), free(dout), free(out), free(want), free(want2), free(o16), free(sent), free(out2);
    free(dgate), free(dup), free(g2), free(u2);
}

// gates far out on both sides (exp(-g) overflows below about -88.7), on the vector path (the first 16)
// and the scalar one: finite values within 1e-6 of the double ones, relative to each row's scale
static void check_swiglu_extremes(void) {
    const float g0[] = {-200.0f, -100.0f, -89.0f, -88.0f, -30.0f, -1e-30f, 0.0f,
                        1e-30f,  30.0f,   88.0f,  89.0f,  100.0f, 200.0f};
    enum { K = sizeof g0 / sizeof g0[0], N = 16 + K };
    float gate[N], up[N], dout[N], out[N], dgate[N], dup[N];
    for (int i = 0; i < N; i++) gate[i] = g0[i % K], up[i] = 1.5f, dout[i] = -0.75f;
    cpu_swiglu_forward(out, NULL, gate, up, N);
    cpu_swiglu_backward(dgate, dup, dout, gate, up, N);
    int ok = 1;
    for (int i = 0; i < N; i++) {
        double g = gate[i], sig = 1.0 / (1.0 + exp(-g)), silu = g * sig;
        double want_dg = -0.75 * 1.5 * sig * (1.0 + g * (1.0 - sig));
        ok &= fabs(out[i] - silu * 1.5) <= 1e-6 * fmax(1.0, fabs(silu * 1.5));
        ok &= fabs(dup[i] - (-0.75 * silu)) <= 1e-6 * fmax(1.0, fabs(silu));
        ok &= fabs(dgate[i] - want_dg) <= 1e-6;
    }
    printf("swiglu at gates out to +-200: %s\n", ok ? "finite, within 1e-6" : "WRONG");
    CHECK(ok);
}

// ---- the same bits on any thread count and through the devices' tables ----

// sizes of one run of every kernel
typedef struct {
    int N, C;               // residual_rmsnorm rows and channels
    int B, T, heads, D;     // rope
    size_t n;               // swiglu values
} sizes;

// the outputs of one run (host memory)
typedef struct {
    float *res, *out, *rstd;  // residual_rmsnorm (N, C), (N, C), (N,)
    fsdp_bf16 *out16;         // its bf16 output (N, C)
    float *rope, *drope;      // rope_forward of x, rope_backward of g: (B*T, heads*D) each
    float *sw, *dgate, *dup;  // swiglu forward and backward: (n,) each
    fsdp_bf16 *sw16;          // swiglu's bf16 output (n,)
} outputs;

// a device buffer (dev NULL: host memory) holding bytes of host src (NULL: zeros)
static void *dev_in(fsdp_dev *dev, fsdp_stream *s, const void *src, size_t bytes) {
    void *p = dev ? fsdp_dev_alloc(dev, bytes ? bytes : 4, FSDP_MEM_OTHER) : calloc(1, bytes ? bytes : 4);
    CHECK(p != NULL);
    if (p && src) {
        if (dev) CHECK(fsdp_copy_h2d(s, p, src, bytes) == FSDP_OK);
        else memcpy(p, src, bytes);
    }
    return p;
}

// host dst (bytes) = device buffer p, which is then freed
static void dev_out(fsdp_dev *dev, fsdp_stream *s, void *dst, void *p, size_t bytes) {
    if (dev) {
        CHECK(fsdp_dev_read(s, dst, p, bytes) == FSDP_OK);
        fsdp_dev_free(dev, p);
    } else {
        memcpy(dst, p, bytes);
        free(p);
    }
}

// every kernel once through table k on stream s, with `threads` OpenMP threads, buffers on dev (NULL: host)
static void run_all(const fsdp_kernels *k, fsdp_dev *dev, fsdp_stream *s, int threads, const sizes *z, outputs *o) {
    omp_set_num_threads(threads);
    size_t nr = (size_t)z->N * z->C, nx = (size_t)z->B * z->T * z->heads * z->D, na = (size_t)z->T * (z->D / 2);
    float *ha = floats(nr, 30, -2.0f, 2.0f), *hb = floats(nr, 31, -2.0f, 2.0f);
    float *hw = floats((size_t)z->C, 32, 0.5f, 1.5f);
    float *hx = floats(nx, 33, -2.0f, 2.0f), *hg = floats(nx, 34, -1.0f, 1.0f);
    float *hc = malloc(sizeof(float) * na), *hs = malloc(sizeof(float) * na);
    rope_angles(hc, hs, z->T, z->D, 500000.0);
    float *hgate = floats(z->n, 35, -10.0f, 10.0f), *hup = floats(z->n, 36, -2.0f, 2.0f);
    float *hdy = floats(z->n, 37, -1.0f, 1.0f);
    size_t fr = sizeof(float) * nr, fx = sizeof(float) * nx, fa = sizeof(float) * na, fn = sizeof(float) * z->n;
    float *a = dev_in(dev, s, ha, fr), *b = dev_in(dev, s, hb, fr), *w = dev_in(dev, s, hw, sizeof(float) * z->C);
    float *res = dev_in(dev, s, NULL, fr), *out = dev_in(dev, s, NULL, fr), *rstd = dev_in(dev, s, NULL, 4 * z->N);
    fsdp_bf16 *out16 = dev_in(dev, s, NULL, 2 * nr);
    float *x = dev_in(dev, s, hx, fx), *g = dev_in(dev, s, hg, fx), *c = dev_in(dev, s, hc, fa);
    float *sn = dev_in(dev, s, hs, fa);
    float *gate = dev_in(dev, s, hgate, fn), *up = dev_in(dev, s, hup, fn), *dy = dev_in(dev, s, hdy, fn);
    float *sw = dev_in(dev, s, NULL, fn);
    fsdp_bf16 *sw16 = dev_in(dev, s, NULL, 2 * z->n);
    k->residual_rmsnorm_forward(s, res, out, NULL, rstd, a, b, w, z->N, z->C, 1e-5f);
    k->residual_rmsnorm_forward(s, b, a, out16, rstd, a, b, w, z->N, z->C, 1e-5f);  // res over b; a not written
    k->rope_forward(s, x, c, sn, z->B, z->T, z->heads, z->D);
    k->rope_backward(s, g, c, sn, z->B, z->T, z->heads, z->D);
    k->swiglu_forward(s, sw, NULL, gate, up, z->n);
    k->swiglu_forward(s, sw, sw16, gate, up, z->n);
    k->swiglu_backward(s, gate, up, dy, gate, up, z->n);  // in place
    dev_out(dev, s, o->res, res, fr), dev_out(dev, s, o->out, out, fr), dev_out(dev, s, o->rstd, rstd, 4 * z->N);
    dev_out(dev, s, o->out16, out16, 2 * nr), dev_out(dev, s, o->rope, x, fx), dev_out(dev, s, o->drope, g, fx);
    dev_out(dev, s, o->sw, sw, fn), dev_out(dev, s, o->sw16, sw16, 2 * z->n), dev_out(dev, s, o->dgate, gate, fn);
    dev_out(dev, s, o->dup, up, fn);
    float *rest[] = {a, b, w, c, sn, dy};
    for (size_t i = 0; i < sizeof rest / sizeof rest[0]; i++) {
        if (dev) fsdp_dev_free(dev, rest[i]);
        else free(rest[i]);
    }
    free(ha), free(hb), free(hw), free(hx), free(hg), free(hc), free(hs), free(hgate), free(hup), free(hdy);
}

static outputs outputs_new(const sizes *z) {
    size_t nr = (size_t)z->N * z->C, nx = (size_t)z->B * z->T * z->heads * z->D;
    outputs o = {malloc(4 * nr), malloc(4 * nr), malloc(4 * (size_t)z->N), malloc(2 * nr), malloc(4 * nx),
                 malloc(4 * nx), malloc(4 * z->n), malloc(4 * z->n), malloc(4 * z->n), malloc(2 * z->n)};
    return o;
}

static void outputs_free(outputs *o) {
    free(o->res), free(o->out), free(o->rstd), free(o->out16), free(o->rope), free(o->drope), free(o->sw);
    free(o->dgate), free(o->dup), free(o->sw16);
}

// 1 when every output of x and y has the same bytes
static int outputs_same(const outputs *x, const outputs *y, const sizes *z) {
    size_t nr = (size_t)z->N * z->C, nx = (size_t)z->B * z->T * z->heads * z->D;
    return !memcmp(x->res, y->res, 4 * nr) && !memcmp(x->out, y->out, 4 * nr) &&
           !memcmp(x->rstd, y->rstd, 4 * (size_t)z->N) && !memcmp(x->out16, y->out16, 2 * nr) &&
           !memcmp(x->rope, y->rope, 4 * nx) && !memcmp(x->drope, y->drope, 4 * nx) &&
           !memcmp(x->sw, y->sw, 4 * z->n) && !memcmp(x->sw16, y->sw16, 2 * z->n) &&
           !memcmp(x->dgate, y->dgate, 4 * z->n) && !memcmp(x->dup, y->dup, 4 * z->n);
}

static void check_bits(sizes z) {
    outputs o[4] = {outputs_new(&z), outputs_new(&z), outputs_new(&z), outputs_new(&z)};
    run_all(fsdp_kernels_cpu(), NULL, NULL, 1, &z, &o[0]);
    run_all(fsdp_kernels_cpu(), NULL, NULL, 3, &z, &o[1]);
    fsdp_dev *cpu = NULL, *guard = NULL;
    CHECK(fsdp_dev_open("cpu", &cpu) == FSDP_OK);
    if (cpu) run_all(fsdp_dev_kernels(cpu, 1), cpu, fsdp_dev_stream(cpu, FSDP_STREAM_COMPUTE), 2, &z, &o[2]);
    CHECK(fsdp_dev_open("guard", &guard) == FSDP_OK);
    if (guard) {
        CHECK(strcmp(fsdp_dev_kernels(guard, 0)->name, "guard") == 0);
        run_all(fsdp_dev_kernels(guard, 0), guard, fsdp_dev_stream(guard, FSDP_STREAM_COMPUTE), 2, &z, &o[3]);
    }
    // the run's own values are right: the second residual_rmsnorm's bf16 output is the first's rounded,
    // and swiglu's bf16 output its fp32 one rounded (so a table that writes nothing cannot pass)
    CHECK(is_rounded(o[0].out16, o[0].out, (size_t)z.N * z.C));
    CHECK(is_rounded(o[0].sw16, o[0].sw, z.n));
    for (int i = 1; i < 4; i++) {
        if ((i == 2 && !cpu) || (i == 3 && !guard)) continue;
        int same = outputs_same(&o[i], &o[0], &z);
        printf("llama kernels N%d C%d, B%d T%d heads%d D%d, n%zu: %s: %s\n", z.N, z.C, z.B, z.T, z.heads, z.D, z.n,
               i == 1 ? "3 threads" : i == 2 ? "cpu device (bf16 table)" : "guard device",
               same ? "same bits" : "DIFFERENT");
        CHECK(same);
    }
    fsdp_dev_close(cpu);
    fsdp_dev_close(guard);
    for (int i = 0; i < 4; i++) outputs_free(&o[i]);
}

int main(void) {
    check_residual_rmsnorm(1, 8);
    check_residual_rmsnorm(3, 7);     // under the lanes
    check_residual_rmsnorm(37, 129);  // lanes and a tail
    check_rope(1, 1, 1, 2);
    check_rope(2, 13, 3, 18);         // D/2 = 9: no full vector; rows of batch 1 take positions again
    check_rope(3, 7, 2, 66);          // D/2 = 33: vectors and a tail
    check_swiglu(1);
    check_swiglu(37);                 // two vectors and a tail
    check_swiglu(3001);               // three chunks, the last one short
    check_swiglu_extremes();
    check_bits((sizes){1, 5, 1, 3, 1, 4, 7});
    check_bits((sizes){131, 129, 2, 67, 5, 26, 5003});  // enough values for threads in every kernel
    TEST_MAIN_END();
}
