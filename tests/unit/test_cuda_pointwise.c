// test_cuda_pointwise.c: the CUDA table's pointwise kernels (device/cuda/pointwise_cuda.cu) against the
// CPU table's, on the same inputs, in both tables (fp32 and bf16 mixed precision):
//  - conversions fp32 <-> bf16 (special values: NaN, Inf, -0, subnormals, ties) and the in-place one:
//    the bits exactly (the whole 4n-byte buffer of the in-place one);
//  - add, add_inplace, add_inplace_b16, scale, bias_add, fill_rows: to 1 ulp; bias_backward (+=, from
//    nonzero values): as a reduction;
//  - ReLU, exact GELU, tanh GELU forward and backward; dropout forward and backward (p 0 and 0.25,
//    out-of-place and in place): the masks exactly (which elements are zero);
//  - the fused bias + activation + dropout forward (fp32 and bf16 outputs: the fp32 output untouched
//    when the bf16 one is given), the fused activation + dropout backward and ReLU's from the output
//    (also against each other on the GPU: the same bits);
//  - LayerNorm forward (fp32 and bf16 outputs), fused with the residual add and its dropout (res apart,
//    res = b, res = a), and backward with and without dres, with dweight / dbias each NULL or not
//    (accumulated from nonzero values), dinp = dout, and N large enough for the CPU's larger row blocks;
//  - RMSNorm forward (fp32 and bf16 outputs) and backward (dres or not, dweight or NULL, dinp = dout);
//    fused with the residual add (res apart, res = a, res = b; fp32 and bf16 outputs);
//  - rotary embedding forward and backward: the bits exactly (the contract: no fused multiply-add);
//  - SwiGLU forward (fp32 and bf16 outputs) and backward (apart, and dgate = gate with dup = up), gates
//    out to +-20 (exp's tails) and a few exact zeros;
//  - every entry with size 0 (nothing written), sizes 1 and odd ones (37 x 129) and 513 x 768.
// Tolerances: 1 ulp (atol 0, rtol 2e-7) where the arithmetic is the same fp32 operations; erf / exp / tanh
// forms rtol 2e-6 with a small atol (act_atol, grad_atol: the libraries' erff and expf differ by an ulp or
// two, and some forms amplify that); reductions atol 1e-5, rtol 1e-5; bf16 outputs of transcendental forms
// one bf16 ulp (values an fp32 ulp apart can round to neighbouring bf16 values). The CUDA kernels repeat the
// CPU's operations in the CPU's order, so all but the transcendental forms are expected to match bit for bit.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "cuda_check.h"
#include "tensor/tensor.h"

static cuda_test T;
static int B;  // the table pair under test: 0 fp32, 1 bf16

#define EXACT_RTOL 2e-7
#define RED_TOL 1e-5
#define BF16_RTOL 8e-3  // one bf16 ulp (2^-7), and some

static const fsdp_rng RNG = {1234, 77};

// ---- helpers ----

#define label(...) cuda_test_label(B, __VA_ARGS__)  // "[fp32] ..." or "[bf16] ..." for the table under test
#define host_rand cuda_test_rand
#define host_dup cuda_test_dup

// device copy (n,) of host floats h (n,)
static float *dev_floats(const float *h, size_t n) { return cuda_test_upload(&T, h, sizeof(float) * n); }
// host copy (n,) of device floats d (n,)
static float *get_floats(const float *d, size_t n) { return cuda_test_download(&T, d, sizeof(float) * n); }
// host copy (n,) of device bf16 d (n,)
static fsdp_bf16 *get_b16(const fsdp_bf16 *d, size_t n) { return cuda_test_download(&T, d, sizeof(fsdp_bf16) * n); }
static void dev_free(void *p) { fsdp_dev_free(T.gpu, p); }

// device bf16 (n,) holding 0xa5a5 everywhere (no kernel writes that value here): an output buffer
static fsdp_bf16 *dev_b16_garbage(size_t n) {
    fsdp_bf16 *h = malloc(sizeof(fsdp_bf16) * (n ? n : 1));
    memset(h, 0xa5, sizeof(fsdp_bf16) * n);
    fsdp_bf16 *d = cuda_test_upload(&T, h, sizeof(fsdp_bf16) * n);
    free(h);
    return d;
}

// widened copy (n,) of bf16 h (n,), malloc'd
static float *widen(const fsdp_bf16 *h, size_t n) {
    float *w = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) w[i] = fsdp_bf16_to_f32(h[i]);
    return w;
}

// cuda_test_compare, except that n == 0 has nothing to compare (cuda_test_compare counts it a failure)
static void check_close(const char *what, const float *got, const float *want, size_t n, double atol, double rtol) {
    if (n) cuda_test_compare(what, got, want, n, atol, rtol);
}

// the same elements are zero in got (n,) and want (n,): the dropout masks
static void check_mask(const char *what, const float *got, const float *want, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if ((got[i] == 0.0f) != (want[i] == 0.0f)) {
            if (!bad) first = i;
            bad++;
        }
    if (bad) {
        fprintf(stderr, "FAIL %s mask: %zu of %zu differ in being zero; first [%zu] %.9g vs %.9g\n", what, bad, n,
                first,
                got[first], want[first]);
        test_failures++;
    } else if (n) {
        printf("ok %s mask (%zu values)\n", what, n);
    }
}

#define check_bytes cuda_test_bytes

// the device floats d (n,) still hold the host values h (n,) (an output that must not be written)
static void check_untouched(const char *what, const float *d, const float *h, size_t n) {
    float *g = get_floats(d, n);
    check_bytes(what, g, h, sizeof(float) * n);
    free(g);
}

// the device bf16 output g16 (n,) against the CPU's c16 (n,) to a bf16 ulp (row sums: RED_TOL), and the
// device fp32 output gout (n,) still holding the sentinel sent (n,): a kernel given out_b16 writes only it
static void check_b16_output(const char *what, const fsdp_bf16 *g16, const fsdp_bf16 *c16, size_t n, const float *gout,
                             const float *sent) {
    fsdp_bf16 *h16 = get_b16(g16, n);
    float *wg = widen(h16, n), *wc = widen(c16, n);
    check_close(what, wg, wc, n, RED_TOL, BF16_RTOL);
    char untouched[320];
    snprintf(untouched, sizeof untouched, "%.280s: out not written", what);
    check_untouched(untouched, gout, sent, n);
    free(h16), free(wg), free(wc);
}

static const char *act_name(fsdp_activation a) {
    return a == FSDP_ACT_RELU ? "relu" : a == FSDP_ACT_GELU ? "gelu" : "gelu_tanh";
}
// Activation outputs: ReLU is exact; the GELU forms go through erff / expf, which differ between glibc,
// the CPU's AVX-512 exp and CUDA by an ulp or two. Exact GELU: 0.5 x (1 + erf(x / sqrt 2)) cancels in the
// negative tail, where an ulp of erf (6e-8) times 0.5 |x| (up to 2.5 here, times the dropout's 1/(1-p))
// is up to ~6e-7 absolute.
static double act_atol(fsdp_activation a) { return a == FSDP_ACT_RELU ? 0.0 : a == FSDP_ACT_GELU ? 1e-6 : 2e-7; }
static double act_rtol(fsdp_activation a) { return a == FSDP_ACT_RELU ? EXACT_RTOL : 2e-6; }
// Activation gradients (times dout in [-1, 1], and 1/(1-p)): tanh GELU's s + 2 x s (1 - s) u' takes 1 - s
// of s = sigmoid(2u) near 1, so an ulp of s (from exp) is worth 2 |x| u' (up to ~35) ulps of the result:
// the CPU's own AVX-512 and scalar paths differ by up to 2e-6 there.
static double grad_atol(fsdp_activation a) { return a == FSDP_ACT_GELU_TANH ? 6e-6 : act_atol(a); }

static const size_t SIZES[] = {1, 37 * 129, 513 * 768};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
static const int ROWS[][2] = {{1, 1}, {37, 129}, {513, 768}};  // (N, C)
#define NROWS (sizeof ROWS / sizeof ROWS[0])

// ---- size 0: every entry writes nothing ----

static void test_zero_sizes(void) {
    const fsdp_kernels *k = T.kg[B];
    float sent[16];  // a sentinel for every pointer
    cuda_test_fill(sent, 16, 99, 1.0f, 2.0f);
    float *d = dev_floats(sent, 16);  // (16,)
    fsdp_bf16 *h = (fsdp_bf16 *)d;    // (32,) bf16 view of the same bytes
    k->layernorm_forward(T.gs, d, NULL, d, d, d, d, d, 0, 5, 1e-5f);
    k->layernorm_forward(T.gs, d, h, d, d, d, d, d, 0, 5, 1e-5f);
    k->residual_layernorm_forward(T.gs, d, d, NULL, d, d, d, d, 0.25f, RNG, d, d, 0, 5, 1e-5f);
    k->layernorm_backward(T.gs, d, d, d, d, d, d, d, d, d, 0, 5);
    k->layernorm_backward(T.gs, d, d, d, d, d, d, d, d, d, 5, 0);
    k->rmsnorm_forward(T.gs, d, NULL, d, d, d, 0, 5, 1e-6f);
    k->rmsnorm_backward(T.gs, d, d, d, d, d, d, d, 0, 5);
    k->rmsnorm_backward(T.gs, d, d, d, d, d, d, d, 5, 0);
    k->residual_rmsnorm_forward(T.gs, d, d, NULL, d, d, d, d, 0, 5, 1e-6f);
    k->residual_rmsnorm_forward(T.gs, d, d, h, d, d, d, d, 0, 5, 1e-6f);
    k->rope_forward(T.gs, d, d, d, 0, 3, 2, 4);
    k->rope_forward(T.gs, d, d, d, 2, 0, 2, 4);
    k->rope_backward(T.gs, d, d, d, 2, 3, 0, 4);
    k->rope_backward(T.gs, d, d, d, 2, 3, 2, 0);
    k->swiglu_forward(T.gs, d, NULL, d, d, 0);
    k->swiglu_forward(T.gs, d, h, d, d, 0);
    k->swiglu_backward(T.gs, d, d, d, d, d, 0);
    k->relu_forward(T.gs, d, d, 0);
    k->relu_backward(T.gs, d, d, d, 0);
    for (int ta = 0; ta < 2; ta++) {
        k->gelu_forward(T.gs, d, d, 0, ta);
        k->gelu_backward(T.gs, d, d, d, 0, ta);
    }
    for (int p = 0; p < 2; p++) {
        float pp = p ? 0.25f : 0.0f;
        k->dropout_forward(T.gs, d, d + 8, 0, pp, RNG);
        k->dropout_backward(T.gs, d, d + 8, 0, pp, RNG);
        for (int a = 0; a < 3; a++) {
            k->bias_act_dropout_forward(T.gs, d, d, NULL, d, 0, 5, (fsdp_activation)a, pp, RNG);
            k->bias_act_dropout_forward(T.gs, d, d, h, d, 3, 0, (fsdp_activation)a, pp, RNG);
            k->act_dropout_backward(T.gs, d, d, d, 0, (fsdp_activation)a, pp, RNG);
        }
        k->relu_dropout_backward(T.gs, d, d, d, 0, pp);
    }
    k->add(T.gs, d, d, d, 0);
    k->add_inplace(T.gs, d, d, 0);
    k->add_inplace_b16(T.gs, d, h, 0);
    k->scale(T.gs, d, 3.0f, 0);
    k->bias_add(T.gs, d, d, 0, 5);
    k->bias_add(T.gs, d, d, 5, 0);
    k->fill_rows(T.gs, d, d + 8, 0, 5);
    k->fill_rows(T.gs, d, d + 8, 5, 0);
    k->bias_backward(T.gs, d, d, 5, 0);
    k->f32_to_bf16(T.gs, h, d, 0);
    k->bf16_to_f32(T.gs, d, h, 0);
    k->f32_to_bf16_in_place(T.gs, d, 0);
    check_untouched(label("size 0: nothing written"), d, sent, 16);
    dev_free(d);

    // bias_backward over N = 0 rows adds zero sums: dbias unchanged, as on the CPU
    float db[5], want[5];
    cuda_test_fill(db, 5, 98, -1.0f, 1.0f);
    memcpy(want, db, sizeof db);
    float *ddb = dev_floats(db, 5), *dummy = dev_floats(db, 5);
    T.kc[B]->bias_backward(T.cs, want, db, 0, 5);
    T.kg[B]->bias_backward(T.gs, ddb, dummy, 0, 5);
    float *got = get_floats(ddb, 5);
    check_close(label("bias_backward N=0"), got, want, 5, 0.0, 0.0);
    free(got);
    dev_free(ddb), dev_free(dummy);
}

// ---- conversions ----

static void test_conversions(void) {
    static const uint32_t special[] = {
        0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fbfffffu, 0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u,
        0x00000001u, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f817fffu,
        0x00008000u, 0x00018000u, 0x7f7f8000u, 0x3f800000u};
    const size_t nspecial = sizeof special / sizeof special[0];
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s] + (s ? nspecial : 0);
        float *x = host_rand(n, 1 + (unsigned)s, -3.0f, 3.0f);  // (n,)
        if (n >= nspecial) memcpy(x, special, sizeof special);
        for (size_t i = nspecial; i < n; i += 7) x[i] *= 1e-30f;  // some tiny values
        for (size_t i = nspecial + 3; i < n; i += 11) x[i] *= 1e30f;  // some huge ones

        // f32_to_bf16
        fsdp_bf16 *want = malloc(sizeof(fsdp_bf16) * n);  // (n,)
        T.kc[B]->f32_to_bf16(T.cs, want, x, n);
        float *dx = dev_floats(x, n);
        fsdp_bf16 *dh = dev_b16_garbage(n);  // (n,)
        T.kg[B]->f32_to_bf16(T.gs, dh, dx, n);
        fsdp_bf16 *got = get_b16(dh, n);
        check_bytes(label("f32_to_bf16 n=%zu", n), got, want, sizeof(fsdp_bf16) * n);

        // bf16_to_f32 of arbitrary bit patterns (NaNs included)
        fsdp_bf16 *bits = malloc(sizeof(fsdp_bf16) * n);  // (n,)
        unsigned long long st = 12345 + s;
        for (size_t i = 0; i < n; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            bits[i] = (fsdp_bf16)(st >> 48);
        }
        float *wantf = malloc(sizeof(float) * n);  // (n,)
        T.kc[B]->bf16_to_f32(T.cs, wantf, bits, n);
        fsdp_bf16 *dbits = cuda_test_upload(&T, bits, sizeof(fsdp_bf16) * n);
        float *df = dev_floats(x, n);  // overwritten
        T.kg[B]->bf16_to_f32(T.gs, df, dbits, n);
        float *gotf = get_floats(df, n);
        check_bytes(label("bf16_to_f32 n=%zu", n), gotf, wantf, sizeof(float) * n);

        // in place: the whole buffer of 4n bytes (its second half keeps the fp32 bytes)
        float *buf = host_dup(x, n);  // (n,) fp32, then n bf16 in its first 2n bytes
        T.kc[B]->f32_to_bf16_in_place(T.cs, buf, n);
        float *dbuf = dev_floats(x, n);
        T.kg[B]->f32_to_bf16_in_place(T.gs, dbuf, n);
        float *gotb = get_floats(dbuf, n);
        check_bytes(label("f32_to_bf16_in_place n=%zu", n), gotb, buf, sizeof(float) * n);

        free(x), free(want), free(got), free(bits), free(wantf), free(gotf), free(buf), free(gotb);
        dev_free(dx), dev_free(dh), dev_free(dbits), dev_free(df), dev_free(dbuf);
    }
}

// ---- adds, scale, bias broadcast and gradient, row fill ----

static void test_elementwise(void) {
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s] + (s == 1 ? 4000 : 0);
        float *a = host_rand(n, 10, -2.0f, 2.0f), *b = host_rand(n, 11, -2.0f, 2.0f);  // (n,) each
        float *da = dev_floats(a, n), *db = dev_floats(b, n), *dout = dev_floats(a, n);

        float *want = host_dup(a, n), *got;  // (n,)
        T.kc[B]->add(T.cs, want, a, b, n);
        T.kg[B]->add(T.gs, dout, da, db, n);
        got = get_floats(dout, n);
        check_close(label("add n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        memcpy(want, a, sizeof(float) * n);
        T.kc[B]->add_inplace(T.cs, want, b, n);
        T.kg[B]->add_inplace(T.gs, da, db, n);
        got = get_floats(da, n);
        check_close(label("add_inplace n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        fsdp_bf16 *bh = malloc(sizeof(fsdp_bf16) * n);  // (n,)
        for (size_t i = 0; i < n; i++) bh[i] = fsdp_f32_to_bf16(b[i]);
        fsdp_bf16 *dbh = cuda_test_upload(&T, bh, sizeof(fsdp_bf16) * n);
        float *dacc = dev_floats(a, n);
        memcpy(want, a, sizeof(float) * n);
        T.kc[B]->add_inplace_b16(T.cs, want, bh, n);
        T.kg[B]->add_inplace_b16(T.gs, dacc, dbh, n);
        got = get_floats(dacc, n);
        check_close(label("add_inplace_b16 n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        memcpy(want, a, sizeof(float) * n);
        T.kc[B]->scale(T.cs, want, 0.37f, n);
        dev_free(dacc);
        dacc = dev_floats(a, n);
        T.kg[B]->scale(T.gs, dacc, 0.37f, n);
        got = get_floats(dacc, n);
        check_close(label("scale n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        free(a), free(b), free(want), free(bh);
        dev_free(da), dev_free(db), dev_free(dout), dev_free(dbh), dev_free(dacc);
    }

    const int rows[][2] = {{1, 1}, {37, 129}, {513, 768}, {2000, 3}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r][0], C = rows[r][1];
        size_t n = (size_t)N * C;
        float *x = host_rand(n, 20, -2.0f, 2.0f), *bias = host_rand((size_t)C, 21, -1.0f, 1.0f);
        float *dx = dev_floats(x, n), *dbias = dev_floats(bias, (size_t)C);

        float *want = host_dup(x, n), *got;  // (n,)
        T.kc[B]->bias_add(T.cs, want, bias, N, C);
        T.kg[B]->bias_add(T.gs, dx, dbias, N, C);
        got = get_floats(dx, n);
        check_close(label("bias_add N=%d C=%d", N, C), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        T.kc[B]->fill_rows(T.cs, want, bias, N, C);
        T.kg[B]->fill_rows(T.gs, dx, dbias, N, C);
        got = get_floats(dx, n);
        check_bytes(label("fill_rows N=%d C=%d", N, C), got, want, sizeof(float) * n);
        free(got);

        // dbias += column sums, from nonzero values
        float *acc = host_rand((size_t)C, 22, -1.0f, 1.0f), *dacc = dev_floats(acc, (size_t)C);
        float *ddout = dev_floats(x, n);
        T.kc[B]->bias_backward(T.cs, acc, x, N, C);
        T.kg[B]->bias_backward(T.gs, dacc, ddout, N, C);
        got = get_floats(dacc, (size_t)C);
        check_close(label("bias_backward N=%d C=%d", N, C), got, acc, (size_t)C, RED_TOL, RED_TOL);
        free(got);

        free(x), free(bias), free(want), free(acc);
        dev_free(dx), dev_free(dbias), dev_free(dacc), dev_free(ddout);
    }
}

// ---- activations and dropout ----

static void test_activations(void) {
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s];
        float *x = host_rand(n, 30, -5.0f, 5.0f), *dy = host_rand(n, 31, -1.0f, 1.0f);  // (n,) each
        if (n > 4) x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-30f, x[3] = -1e-30f;
        float *dx = dev_floats(x, n), *ddy = dev_floats(dy, n), *dout = dev_floats(dy, n);
        float *want = host_dup(x, n), *got;  // (n,)

        T.kc[B]->relu_forward(T.cs, want, x, n);
        T.kg[B]->relu_forward(T.gs, dout, dx, n);
        got = get_floats(dout, n);
        check_close(label("relu_forward n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        // backward reads the forward's output
        float *fwd = host_dup(want, n), *dfwd = dev_floats(fwd, n);
        T.kc[B]->relu_backward(T.cs, want, dy, fwd, n);
        T.kg[B]->relu_backward(T.gs, dout, ddy, dfwd, n);
        got = get_floats(dout, n);
        check_close(label("relu_backward n=%zu", n), got, want, n, 0.0, EXACT_RTOL);
        free(got);

        for (int ta = 0; ta < 2; ta++) {
            fsdp_activation a = ta ? FSDP_ACT_GELU_TANH : FSDP_ACT_GELU;
            T.kc[B]->gelu_forward(T.cs, want, x, n, ta);
            T.kg[B]->gelu_forward(T.gs, dout, dx, n, ta);
            got = get_floats(dout, n);
            check_close(label("gelu_forward tanh=%d n=%zu", ta, n), got, want, n, act_atol(a), act_rtol(a));
            free(got);

            T.kc[B]->gelu_backward(T.cs, want, dy, x, n, ta);
            T.kg[B]->gelu_backward(T.gs, dout, ddy, dx, n, ta);
            got = get_floats(dout, n);
            check_close(label("gelu_backward tanh=%d n=%zu", ta, n), got, want, n, grad_atol(a), act_rtol(a));
            free(got);
        }

        // the activation in place (out = inp)
        float *in = host_dup(x, n), *din = dev_floats(x, n);
        T.kc[B]->gelu_forward(T.cs, in, in, n, 1);
        T.kg[B]->gelu_forward(T.gs, din, din, n, 1);
        got = get_floats(din, n);
        check_close(label("gelu_forward in place n=%zu", n), got, in, n, act_atol(FSDP_ACT_GELU_TANH),
                    act_rtol(FSDP_ACT_GELU_TANH));
        free(got);

        free(x), free(dy), free(want), free(fwd), free(in);
        dev_free(dx), dev_free(ddy), dev_free(dout), dev_free(dfwd), dev_free(din);
    }
}

static void test_dropout(void) {
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s] + (s ? 3 : 0);
        float *x = host_rand(n, 40, 0.5f, 2.0f);  // (n,) nonzero: a zero output is a dropped element
        float *sent = host_rand(n, 41, 7.0f, 8.0f);  // (n,) what an output holds before the call
        for (size_t i = 0; i < n; i += 2) x[i] = -x[i];
        for (int pi = 0; pi < 2; pi++) {
            float p = pi ? 0.25f : 0.0f;
            for (int bwd = 0; bwd < 2; bwd++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    float *want = host_dup(inplace ? x : sent, n), *dx = dev_floats(x, n);
                    float *dout = inplace ? dx : dev_floats(sent, n);
                    float *src = inplace ? want : x;  // (n,)
                    if (bwd) T.kc[B]->dropout_backward(T.cs, want, src, n, p, RNG);
                    else T.kc[B]->dropout_forward(T.cs, want, src, n, p, RNG);
                    if (bwd) T.kg[B]->dropout_backward(T.gs, dout, dx, n, p, RNG);
                    else T.kg[B]->dropout_forward(T.gs, dout, dx, n, p, RNG);
                    float *got = get_floats(dout, n);
                    const char *what = label("dropout_%s p=%g n=%zu%s", bwd ? "backward" : "forward", (double)p, n,
                                             inplace ? " in place" : "");
                    char name[256];
                    snprintf(name, sizeof name, "%s", what);
                    check_close(name, got, want, n, 0.0, EXACT_RTOL);
                    check_mask(name, got, want, n);
                    if (p == 0.0f) check_bytes(name, got, x, sizeof(float) * n);  // p = 0: the input as is
                    free(got), free(want);
                    dev_free(dx);
                    if (!inplace) dev_free(dout);
                }
            }
        }
        free(x), free(sent);
    }
}

// The GPU's bf16 activation output d_act16 (n,) against the CPU's want16 (n,): ReLU bit for bit, GELU
// within the bf16 tolerance, the same dropout mask
static void check_act16(const char *name, fsdp_activation a, const fsdp_bf16 *d_act16, const fsdp_bf16 *want16,
                        size_t n) {
    fsdp_bf16 *got16 = get_b16(d_act16, n);
    float *want = widen(want16, n), *got = widen(got16, n);
    if (a == FSDP_ACT_RELU) check_bytes(name, got16, want16, sizeof(fsdp_bf16) * n);
    else check_close(name, got, want, n, act_atol(a), BF16_RTOL);
    check_mask(name, got, want, n);
    free(got16), free(want), free(got);
}

// bias + activation + dropout forward, and the backwards from it
static void test_fused_activation(void) {
    for (size_t r = 0; r < NROWS; r++) {
        int N = ROWS[r][0], F = ROWS[r][1];
        size_t n = (size_t)N * F;
        float *pre0 = host_rand(n, 50, -4.0f, 4.0f), *bias = host_rand((size_t)F, 51, -1.0f, 1.0f);
        float *dact = host_rand(n, 52, -1.0f, 1.0f), *sent = host_rand(n, 53, 7.0f, 8.0f);  // (n,) sentinel
        float *dbias = dev_floats(bias, (size_t)F);
        for (int ai = 0; ai < 3; ai++) {
            fsdp_activation a = (fsdp_activation)ai;
            for (int pi = 0; pi < 2; pi++) {
                float p = pi ? 0.25f : 0.0f;
                char name[256];
                // fp32 output
                float *pre = host_dup(pre0, n), *act = host_dup(sent, n);  // (n,) each
                T.kc[B]->bias_act_dropout_forward(T.cs, pre, act, NULL, bias, N, F, a, p, RNG);
                float *dpre = dev_floats(pre0, n), *dactv = dev_floats(sent, n);
                T.kg[B]->bias_act_dropout_forward(T.gs, dpre, dactv, NULL, dbias, N, F, a, p, RNG);
                float *gpre = get_floats(dpre, n), *gact = get_floats(dactv, n);
                snprintf(name, sizeof name, "%s",
                         label("bias_act_dropout_forward %s p=%g N=%d F=%d", act_name(a), (double)p, N, F));
                check_close(name, gpre, pre, n, 0.0, EXACT_RTOL);
                check_close(name, gact, act, n, act_atol(a), act_rtol(a));
                check_mask(name, gact, act, n);

                // bf16 output: the fp32 one untouched
                float *pre2 = host_dup(pre0, n);
                fsdp_bf16 *act16 = malloc(sizeof(fsdp_bf16) * n);  // (n,)
                float *act_unused = host_dup(sent, n);
                T.kc[B]->bias_act_dropout_forward(T.cs, pre2, act_unused, act16, bias, N, F, a, p, RNG);
                float *dpre2 = dev_floats(pre0, n), *dact2 = dev_floats(sent, n);
                fsdp_bf16 *dact16 = dev_b16_garbage(n);
                T.kg[B]->bias_act_dropout_forward(T.gs, dpre2, dact2, dact16, dbias, N, F, a, p, RNG);
                float *gpre2 = get_floats(dpre2, n);
                snprintf(name, sizeof name, "%s",
                         label("bias_act_dropout_forward bf16 %s p=%g N=%d F=%d", act_name(a), (double)p, N, F));
                check_close(name, gpre2, pre2, n, 0.0, EXACT_RTOL);
                check_act16(name, a, dact16, act16, n);
                check_untouched(label("bias_act_dropout_forward bf16: fp32 act not written"), dact2, sent, n);

                // bias NULL (a product added it): the biased pre is only read, bf16 act as above
                float *dpre3 = dev_floats(pre2, n);
                fsdp_bf16 *dact16n = dev_b16_garbage(n);
                T.kg[B]->bias_act_dropout_forward(T.gs, dpre3, NULL, dact16n, NULL, N, F, a, p, RNG);
                snprintf(name, sizeof name, "%s",
                         label("bias_act_dropout_forward bias NULL %s p=%g N=%d F=%d", act_name(a), (double)p, N, F));
                check_untouched(name, dpre3, pre2, n);
                check_act16(name, a, dact16n, act16, n);
                dev_free(dpre3), dev_free(dact16n);

                // act_dropout_backward at the biased pre (out of place, and dpre = dact)
                for (int inplace = 0; inplace < 2; inplace++) {
                    float *want = host_dup(inplace ? dact : sent, n);
                    T.kc[B]->act_dropout_backward(T.cs, want, inplace ? want : dact, pre, n, a, p, RNG);
                    float *dd = dev_floats(dact, n), *dout = inplace ? dd : dev_floats(sent, n);
                    float *dprev = dev_floats(pre, n);
                    T.kg[B]->act_dropout_backward(T.gs, dout, dd, dprev, n, a, p, RNG);
                    float *got = get_floats(dout, n);
                    snprintf(name, sizeof name, "%s",
                             label("act_dropout_backward %s p=%g n=%zu%s", act_name(a), (double)p, n,
                                   inplace ? " in place" : ""));
                    check_close(name, got, want, n, grad_atol(a), act_rtol(a));
                    if (a == FSDP_ACT_RELU) check_mask(name, got, want, n);
                    free(want), free(got);
                    dev_free(dd), dev_free(dprev);
                    if (!inplace) dev_free(dout);
                }

                // ReLU's backward from the forward's fp32 output (the CPU's act, uploaded), and the same bits
                // as act_dropout_backward with ReLU on the GPU
                if (a == FSDP_ACT_RELU) {
                    for (int inplace = 0; inplace < 2; inplace++) {
                        float *want = host_dup(inplace ? dact : sent, n);
                        T.kc[B]->relu_dropout_backward(T.cs, want, inplace ? want : dact, act, n, p);
                        float *dd = dev_floats(dact, n), *dout = inplace ? dd : dev_floats(sent, n);
                        float *dactf = dev_floats(act, n), *dprev = dev_floats(pre, n), *dref = dev_floats(sent, n);
                        float *ddact = dev_floats(dact, n);
                        T.kg[B]->act_dropout_backward(T.gs, dref, ddact, dprev, n, a, p, RNG);
                        T.kg[B]->relu_dropout_backward(T.gs, dout, dd, dactf, n, p);
                        float *got = get_floats(dout, n), *ref = get_floats(dref, n);
                        snprintf(name, sizeof name, "%s",
                                 label("relu_dropout_backward p=%g n=%zu%s", (double)p, n, inplace ? " in place" : ""));
                        check_close(name, got, want, n, 0.0, EXACT_RTOL);
                        check_mask(name, got, want, n);
                        check_bytes(label("relu_dropout_backward = act_dropout_backward(relu) on the GPU"), got, ref,
                                    sizeof(float) * n);
                        free(want), free(got), free(ref);
                        dev_free(dd), dev_free(dactf), dev_free(dprev), dev_free(dref), dev_free(ddact);
                        if (!inplace) dev_free(dout);
                    }
                }

                free(pre), free(act), free(gpre), free(gact), free(pre2), free(act16), free(act_unused), free(gpre2);
                dev_free(dpre), dev_free(dactv), dev_free(dpre2), dev_free(dact2), dev_free(dact16);
            }
        }
        free(pre0), free(bias), free(dact), free(sent);
        dev_free(dbias);
    }
}

// ---- LayerNorm ----

static void test_layernorm_forward(void) {
    const int rows[][2] = {{1, 1}, {4, 16}, {37, 129}, {513, 768}};
    const float eps = 1e-5f;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r][0], C = rows[r][1];
        size_t n = (size_t)N * C;
        float *x = host_rand(n, 60, 1.0f, 5.0f), *w = host_rand((size_t)C, 61, 0.5f, 1.5f);  // rows off zero
        float *b = host_rand((size_t)C, 62, -0.5f, 0.5f), *sent = host_rand(n, 63, 7.0f, 8.0f);
        float *dx = dev_floats(x, n), *dw = dev_floats(w, (size_t)C), *db = dev_floats(b, (size_t)C);
        float *out = host_dup(sent, n), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
        T.kc[B]->layernorm_forward(T.cs, out, NULL, mean, rstd, x, w, b, N, C, eps);
        float *dout = dev_floats(sent, n), *dmean = dev_floats(sent, (size_t)N), *drstd = dev_floats(sent, (size_t)N);
        T.kg[B]->layernorm_forward(T.gs, dout, NULL, dmean, drstd, dx, dw, db, N, C, eps);
        float *gout = get_floats(dout, n), *gmean = get_floats(dmean, (size_t)N), *grstd = get_floats(drstd, (size_t)N);
        char name[256];
        snprintf(name, sizeof name, "%s", label("layernorm_forward N=%d C=%d", N, C));
        check_close(name, gout, out, n, RED_TOL, RED_TOL);
        check_close(label("layernorm_forward mean N=%d C=%d", N, C), gmean, mean, (size_t)N, RED_TOL, RED_TOL);
        check_close(label("layernorm_forward rstd N=%d C=%d", N, C), grstd, rstd, (size_t)N, RED_TOL, RED_TOL);

        // bf16 output, out not written
        fsdp_bf16 *o16 = malloc(sizeof(fsdp_bf16) * n);  // (n,)
        T.kc[B]->layernorm_forward(T.cs, NULL, o16, mean, rstd, x, w, b, N, C, eps);
        float *dout2 = dev_floats(sent, n);
        fsdp_bf16 *do16 = dev_b16_garbage(n);
        T.kg[B]->layernorm_forward(T.gs, dout2, do16, dmean, drstd, dx, dw, db, N, C, eps);
        fsdp_bf16 *g16 = get_b16(do16, n);
        float *wg = widen(g16, n), *ww = widen(o16, n);
        check_close(label("layernorm_forward bf16 N=%d C=%d", N, C), wg, ww, n, RED_TOL, BF16_RTOL);
        check_untouched(label("layernorm_forward bf16: out not written"), dout2, sent, n);

        free(x), free(w), free(b), free(sent), free(out), free(mean), free(rstd), free(gout), free(gmean), free(grstd);
        free(o16), free(g16), free(wg), free(ww);
        dev_free(dx), dev_free(dw), dev_free(db), dev_free(dout), dev_free(dmean), dev_free(drstd), dev_free(dout2);
        dev_free(do16);
    }
}

// alias: 0 res apart, 1 res = b, 2 res = a (p = 0 only: the CPU writes the dropped b over res before it
// reads a, so res = a with p > 0 is not the documented a + dropout(b) there; no caller does that)
static void residual_case(int N, int C, float p, int alias, int b16) {
    const float eps = 1e-5f;
    size_t n = (size_t)N * C;
    float *a = host_rand(n, 70, -1.0f, 1.0f), *bb = host_rand(n, 71, 0.5f, 2.0f);  // bb nonzero
    for (size_t i = 0; i < n; i += 3) bb[i] = -bb[i];
    float *w = host_rand((size_t)C, 72, 0.5f, 1.5f), *bias = host_rand((size_t)C, 73, -0.5f, 0.5f);
    float *sent = host_rand(n, 74, 7.0f, 8.0f);
    // CPU
    float *ca = host_dup(a, n), *cb = host_dup(bb, n), *cres = alias == 1 ? cb : alias == 2 ? ca : host_dup(sent, n);
    float *cout = host_dup(sent, n), *cmean = malloc(sizeof(float) * N), *crstd = malloc(sizeof(float) * N);
    fsdp_bf16 *c16 = b16 ? malloc(sizeof(fsdp_bf16) * n) : NULL;  // (n,)
    T.kc[B]->residual_layernorm_forward(T.cs, cres, b16 ? NULL : cout, c16, cmean, crstd, ca, cb, p, RNG, w, bias, N,
                                        C, eps);
    // GPU
    float *ga = dev_floats(a, n), *gb = dev_floats(bb, n);
    float *gres = alias == 1 ? gb : alias == 2 ? ga : dev_floats(sent, n);
    float *gout = dev_floats(sent, n), *gmean = dev_floats(sent, (size_t)N), *grstd = dev_floats(sent, (size_t)N);
    float *gw = dev_floats(w, (size_t)C), *gbias = dev_floats(bias, (size_t)C);
    fsdp_bf16 *g16 = b16 ? dev_b16_garbage(n) : NULL;
    T.kg[B]->residual_layernorm_forward(T.gs, gres, gout, g16, gmean, grstd, ga, gb, p, RNG, gw, gbias, N, C, eps);
    char name[256];
    snprintf(name, sizeof name, "%s", label("residual_layernorm_forward p=%g N=%d C=%d res=%s%s", (double)p, N, C,
                                            alias == 1 ? "b" : alias == 2 ? "a" : "apart", b16 ? " bf16" : ""));
    float *hres = get_floats(gres, n), *hmean = get_floats(gmean, (size_t)N), *hrstd = get_floats(grstd, (size_t)N);
    check_close(name, hres, cres, n, 0.0, EXACT_RTOL);
    // the mask: res - a is zero exactly where b was dropped (b is nonzero)
    float *dg = malloc(sizeof(float) * n), *dc = malloc(sizeof(float) * n);  // (n,) each
    for (size_t i = 0; i < n; i++) dg[i] = hres[i] - a[i], dc[i] = cres[i] - a[i];
    check_mask(name, dg, dc, n);
    check_close(name, hmean, cmean, (size_t)N, RED_TOL, RED_TOL);
    check_close(name, hrstd, crstd, (size_t)N, RED_TOL, RED_TOL);
    if (b16) {
        check_b16_output(name, g16, c16, n, gout, sent);
    } else {
        float *hout = get_floats(gout, n);
        check_close(name, hout, cout, n, RED_TOL, RED_TOL);
        free(hout);
    }
    free(hres), free(hmean), free(hrstd), free(dg), free(dc);
    if (alias == 0) free(cres), dev_free(gres);
    free(a), free(bb), free(w), free(bias), free(sent), free(ca), free(cb), free(cout), free(cmean), free(crstd);
    free(c16);
    dev_free(ga), dev_free(gb), dev_free(gout), dev_free(gmean), dev_free(grstd), dev_free(gw), dev_free(gbias);
    if (g16) dev_free(g16);
}

static void test_residual_layernorm(void) {
    const int rows[][2] = {{1, 1}, {37, 129}, {513, 768}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r][0], C = rows[r][1];
        for (int pi = 0; pi < 2; pi++)
            for (int b16 = 0; b16 < 2; b16++) residual_case(N, C, pi ? 0.25f : 0.0f, 0, b16);
        residual_case(N, C, 0.25f, 1, 0);
        residual_case(N, C, 0.0f, 1, 0);
        residual_case(N, C, 0.0f, 2, 0);
    }
}

static void backward_case(int N, int C, int use_dres, int use_dw, int use_db, int inplace) {
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 80, -1.0f, 3.0f), *w = host_rand((size_t)C, 81, 0.5f, 1.5f);
    float *bias = host_rand((size_t)C, 82, -0.5f, 0.5f), *dy = host_rand(n, 83, -1.0f, 1.0f);
    float *dres = host_rand(n, 84, -1.0f, 1.0f), *dw0 = host_rand((size_t)C, 85, -1.0f, 1.0f);
    float *db0 = host_rand((size_t)C, 86, -1.0f, 1.0f), *sent = host_rand(n, 87, 7.0f, 8.0f);
    float *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N), *rstd = malloc(sizeof(float) * N);
    T.kc[B]->layernorm_forward(T.cs, out, NULL, mean, rstd, x, w, bias, N, C, 1e-5f);  // the same saved stats both
    // CPU
    float *cdy = host_dup(dy, n), *cdinp = inplace ? cdy : host_dup(sent, n);
    float *cdw = host_dup(dw0, (size_t)C), *cdb = host_dup(db0, (size_t)C);
    T.kc[B]->layernorm_backward(T.cs, cdinp, use_dw ? cdw : NULL, use_db ? cdb : NULL, cdy, use_dres ? dres : NULL, x,
                                w, mean, rstd, N, C);
    // GPU
    float *gx = dev_floats(x, n), *gw = dev_floats(w, (size_t)C), *gdy = dev_floats(dy, n);
    float *gdres = dev_floats(dres, n), *gmean = dev_floats(mean, (size_t)N), *grstd = dev_floats(rstd, (size_t)N);
    float *gdinp = inplace ? gdy : dev_floats(sent, n);
    float *gdw = dev_floats(dw0, (size_t)C), *gdb = dev_floats(db0, (size_t)C);
    T.kg[B]->layernorm_backward(T.gs, gdinp, use_dw ? gdw : NULL, use_db ? gdb : NULL, gdy, use_dres ? gdres : NULL,
                                gx, gw, gmean, grstd, N, C);
    char name[256];
    snprintf(name, sizeof name, "%s", label("layernorm_backward N=%d C=%d dres=%d dweight=%d dbias=%d%s", N, C,
                                            use_dres, use_dw, use_db, inplace ? " dinp=dout" : ""));
    float *hdinp = get_floats(gdinp, n), *hdw = get_floats(gdw, (size_t)C), *hdb = get_floats(gdb, (size_t)C);
    check_close(name, hdinp, cdinp, n, RED_TOL, RED_TOL);
    check_close(name, hdw, cdw, (size_t)C, RED_TOL, RED_TOL);  // unchanged from dw0 when NULL was passed
    check_close(name, hdb, cdb, (size_t)C, RED_TOL, RED_TOL);
    if (!use_dw) check_bytes(label("layernorm_backward: dweight NULL"), hdw, dw0, sizeof(float) * C);
    if (!use_db) check_bytes(label("layernorm_backward: dbias NULL"), hdb, db0, sizeof(float) * C);
    free(x), free(w), free(bias), free(dy), free(dres), free(dw0), free(db0), free(sent), free(out), free(mean);
    free(rstd), free(cdy), free(cdw), free(cdb), free(hdinp), free(hdw), free(hdb);
    if (!inplace) free(cdinp), dev_free(gdinp);
    dev_free(gx), dev_free(gw), dev_free(gdy), dev_free(gdres), dev_free(gmean), dev_free(grstd), dev_free(gdw);
    dev_free(gdb);
}

static void test_layernorm_backward(void) {
    const int rows[][2] = {{1, 1}, {37, 129}, {513, 768}, {9000, 3}};  // 9000 rows: the CPU's blocks of 36
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r][0], C = rows[r][1];
        backward_case(N, C, 0, 1, 1, 0);
        backward_case(N, C, 1, 1, 1, 0);
        backward_case(N, C, 1, 0, 0, 0);
        backward_case(N, C, 0, 1, 0, 0);
        backward_case(N, C, 0, 0, 1, 0);
        backward_case(N, C, 1, 1, 1, 1);
    }
}

// ---- RMSNorm ----

// forward (fp32 and bf16 output) and backward (dres or not, dweight or NULL, dinp over dout) against the
// CPU table: the same order of operations (rmsnorm.c), so RED_TOL (double row sums: equal in practice)
static void rmsnorm_case(int N, int C, int use_dres, int use_dw, int inplace) {
    const float eps = 1e-6f;
    size_t n = (size_t)N * C;
    float *x = host_rand(n, 80, -2.0f, 2.0f), *w = host_rand((size_t)C, 81, 0.5f, 1.5f);
    float *dy = host_rand(n, 82, -1.0f, 1.0f), *dres = host_rand(n, 83, -1.0f, 1.0f);
    float *dw0 = host_rand((size_t)C, 84, -0.1f, 0.1f), *sent = host_rand(n, 85, 7.0f, 8.0f);
    float *out = host_dup(sent, n), *rstd = malloc(sizeof(float) * N);
    float *gx = dev_floats(x, n), *gw = dev_floats(w, (size_t)C), *gout = dev_floats(sent, n);
    float *grstd = dev_floats(sent, (size_t)N);
    T.kc[B]->rmsnorm_forward(T.cs, out, NULL, rstd, x, w, N, C, eps);
    T.kg[B]->rmsnorm_forward(T.gs, gout, NULL, grstd, gx, gw, N, C, eps);
    float *hout = get_floats(gout, n), *hrstd = get_floats(grstd, (size_t)N);
    check_close(label("rmsnorm_forward N=%d C=%d", N, C), hout, out, n, RED_TOL, RED_TOL);
    check_close(label("rmsnorm_forward rstd N=%d C=%d", N, C), hrstd, rstd, (size_t)N, RED_TOL, RED_TOL);
    fsdp_bf16 *o16 = malloc(sizeof(fsdp_bf16) * (n ? n : 1)), *go16 = dev_b16_garbage(n);
    float *gout2 = dev_floats(sent, n);
    T.kc[B]->rmsnorm_forward(T.cs, NULL, o16, rstd, x, w, N, C, eps);
    T.kg[B]->rmsnorm_forward(T.gs, gout2, go16, grstd, gx, gw, N, C, eps);
    fsdp_bf16 *h16 = get_b16(go16, n);
    float *wg = widen(h16, n), *ww = widen(o16, n);
    check_close(label("rmsnorm_forward bf16 N=%d C=%d", N, C), wg, ww, n, RED_TOL, BF16_RTOL);
    check_untouched(label("rmsnorm_forward bf16: out not written"), gout2, sent, n);

    float *cdinp = inplace ? host_dup(dy, n) : malloc(sizeof(float) * n), *cdy = host_dup(dy, n);
    float *cdw = host_dup(dw0, (size_t)C);
    T.kc[B]->rmsnorm_backward(T.cs, cdinp, use_dw ? cdw : NULL, inplace ? cdinp : cdy, use_dres ? dres : NULL, x, w,
                              rstd, N, C);
    float *gdy = dev_floats(dy, n), *gdres = dev_floats(dres, n), *gdw = dev_floats(dw0, (size_t)C);
    float *gdinp = inplace ? gdy : dev_floats(sent, n);
    T.kg[B]->rmsnorm_backward(T.gs, gdinp, use_dw ? gdw : NULL, gdy, use_dres ? gdres : NULL, gx, gw, grstd, N, C);
    float *hdinp = get_floats(gdinp, n), *hdw = get_floats(gdw, (size_t)C);
    const char *name = label("rmsnorm_backward N=%d C=%d dres %d dweight %d in place %d", N, C, use_dres, use_dw,
                             inplace);
    check_close(name, hdinp, cdinp, n, RED_TOL, RED_TOL);
    check_close(name, hdw, cdw, (size_t)C, RED_TOL, RED_TOL);
    if (!use_dw) check_bytes(label("rmsnorm_backward: dweight NULL"), hdw, dw0, sizeof(float) * C);
    free(x), free(w), free(dy), free(dres), free(dw0), free(sent), free(out), free(rstd), free(hout), free(hrstd);
    free(o16), free(h16), free(wg), free(ww), free(cdinp), free(cdy), free(cdw), free(hdinp), free(hdw);
    if (!inplace) dev_free(gdinp);
    dev_free(gx), dev_free(gw), dev_free(gout), dev_free(grstd), dev_free(go16), dev_free(gout2), dev_free(gdy);
    dev_free(gdres), dev_free(gdw);
}

static void test_rmsnorm(void) {
    const int rows[][2] = {{1, 1}, {37, 129}, {513, 768}, {9000, 3}};  // 9000 rows: several blocks of rows
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int N = rows[r][0], C = rows[r][1];
        rmsnorm_case(N, C, 0, 1, 0);
        rmsnorm_case(N, C, 1, 1, 0);
        rmsnorm_case(N, C, 1, 0, 0);
        rmsnorm_case(N, C, 0, 1, 1);
    }
}

// residual_rmsnorm_forward (alias 0: res apart, 1: res = a, 2: res = b; fp32 or bf16 output) against the
// CPU table: rmsnorm_forward's order after an exact add, so RED_TOL (equal in practice); res to the bit
static void residual_rmsnorm_case(int N, int C, int alias, int b16) {
    const float eps = 1e-5f;
    size_t n = (size_t)N * C;
    float *a = host_rand(n, 90, -2.0f, 2.0f), *bb = host_rand(n, 91, -1.0f, 1.0f);
    float *w = host_rand((size_t)C, 92, 0.5f, 1.5f), *sent = host_rand(n, 93, 7.0f, 8.0f);
    float *ca = host_dup(a, n), *cb = host_dup(bb, n), *cout = host_dup(sent, n), *crstd = malloc(sizeof(float) * N);
    float *cres = alias == 1 ? ca : alias == 2 ? cb : malloc(sizeof(float) * n);
    fsdp_bf16 *c16 = b16 ? malloc(sizeof(fsdp_bf16) * n) : NULL;
    T.kc[B]->residual_rmsnorm_forward(T.cs, cres, cout, c16, crstd, ca, cb, w, N, C, eps);
    float *ga = dev_floats(a, n), *gb = dev_floats(bb, n), *gw = dev_floats(w, (size_t)C), *gout = dev_floats(sent, n);
    float *grstd = dev_floats(sent, (size_t)N), *gres = alias == 1 ? ga : alias == 2 ? gb : dev_floats(sent, n);
    fsdp_bf16 *g16 = b16 ? dev_b16_garbage(n) : NULL;
    T.kg[B]->residual_rmsnorm_forward(T.gs, gres, gout, g16, grstd, ga, gb, gw, N, C, eps);
    char what[256];  // label's buffer is reused by the checks' own labels
    snprintf(what, sizeof what, "%s", label("residual_rmsnorm_forward N=%d C=%d res %s%s", N, C,
                                            alias == 1 ? "= a" : alias == 2 ? "= b" : "apart", b16 ? " bf16" : ""));
    float *hres = get_floats(gres, n), *hrstd = get_floats(grstd, (size_t)N);
    check_bytes(what, hres, cres, sizeof(float) * n);
    check_close(what, hrstd, crstd, (size_t)N, RED_TOL, RED_TOL);
    if (b16) {
        check_b16_output(what, g16, c16, n, gout, sent);
        free(c16), dev_free(g16);
    } else {
        float *hout = get_floats(gout, n);
        check_close(what, hout, cout, n, RED_TOL, RED_TOL);
        free(hout);
    }
    free(hres), free(hrstd), free(a), free(bb), free(w), free(sent), free(ca), free(cb), free(cout), free(crstd);
    if (alias == 0) free(cres), dev_free(gres);
    dev_free(ga), dev_free(gb), dev_free(gw), dev_free(gout), dev_free(grstd);
}

static void test_residual_rmsnorm(void) {
    const int rows[][2] = {{1, 1}, {37, 129}, {513, 768}};
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int alias = 0; alias < 3; alias++)
            for (int b16 = 0; b16 < 2; b16++) residual_rmsnorm_case(rows[r][0], rows[r][1], alias, b16);
}

// rope_forward and rope_backward in place against the CPU table's: the bits exactly
static void test_rope(void) {
    const int shapes[][4] = {{1, 1, 1, 2}, {2, 13, 3, 18}, {3, 67, 5, 26}, {2, 256, 12, 64}};  // B, T, heads, D
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int Bn = shapes[k][0], Tn = shapes[k][1], heads = shapes[k][2], D = shapes[k][3];
        size_t n = (size_t)Bn * Tn * heads * D, na = (size_t)Tn * (D / 2);
        float *x = host_rand(n, 100, -2.0f, 2.0f), *c = host_rand(na, 101, -1.0f, 1.0f);
        float *sn = host_rand(na, 102, -1.0f, 1.0f);
        float *gx = dev_floats(x, n), *gc = dev_floats(c, na), *gs = dev_floats(sn, na);
        for (int back = 0; back < 2; back++) {
            if (back) T.kc[B]->rope_backward(T.cs, x, c, sn, Bn, Tn, heads, D);
            else T.kc[B]->rope_forward(T.cs, x, c, sn, Bn, Tn, heads, D);
            if (back) T.kg[B]->rope_backward(T.gs, gx, gc, gs, Bn, Tn, heads, D);
            else T.kg[B]->rope_forward(T.gs, gx, gc, gs, Bn, Tn, heads, D);
            float *got = get_floats(gx, n);
            check_bytes(label("rope_%s B=%d T=%d heads=%d D=%d", back ? "backward" : "forward", Bn, Tn, heads, D), got,
                        x, sizeof(float) * n);
            free(got);
        }
        free(x), free(c), free(sn);
        dev_free(gx), dev_free(gc), dev_free(gs);
    }
}

// swiglu_forward (fp32 and bf16 outputs) and swiglu_backward (apart, and in place) against the CPU
// table's: expf differs by an ulp or two (tolerances as the activations')
static void test_swiglu(void) {
    for (size_t s = 0; s < NSIZES; s++) {
        size_t n = SIZES[s];
        float *g = host_rand(n, 110, -20.0f, 20.0f), *u = host_rand(n, 111, -2.0f, 2.0f);
        float *dy = host_rand(n, 112, -1.0f, 1.0f), *sent = host_rand(n, 113, 7.0f, 8.0f);
        if (n > 4) g[0] = 0.0f, g[1] = -0.0f, g[2] = 1e-30f, g[3] = -1e-30f;
        float *gg = dev_floats(g, n), *gu = dev_floats(u, n), *gdy = dev_floats(dy, n), *gout = dev_floats(sent, n);
        float *want = malloc(sizeof(float) * n), *got;
        T.kc[B]->swiglu_forward(T.cs, want, NULL, g, u, n);
        T.kg[B]->swiglu_forward(T.gs, gout, NULL, gg, gu, n);
        got = get_floats(gout, n);
        check_close(label("swiglu_forward n=%zu", n), got, want, n, 2e-7, 2e-6);
        free(got);
        fsdp_bf16 *c16 = malloc(sizeof(fsdp_bf16) * n), *g16 = dev_b16_garbage(n);
        float *gout2 = dev_floats(sent, n);
        T.kc[B]->swiglu_forward(T.cs, NULL, c16, g, u, n);
        T.kg[B]->swiglu_forward(T.gs, gout2, g16, gg, gu, n);
        fsdp_bf16 *h16 = get_b16(g16, n);
        float *wg = widen(h16, n), *ww = widen(c16, n);
        check_close(label("swiglu_forward bf16 n=%zu", n), wg, ww, n, 2e-7, BF16_RTOL);
        check_untouched(label("swiglu_forward bf16: out not written"), gout2, sent, n);

        float *cdg = malloc(sizeof(float) * n), *cdu = malloc(sizeof(float) * n);
        T.kc[B]->swiglu_backward(T.cs, cdg, cdu, dy, g, u, n);
        float *gdg = dev_floats(sent, n), *gdu = dev_floats(sent, n);
        T.kg[B]->swiglu_backward(T.gs, gdg, gdu, gdy, gg, gu, n);
        float *hdg = get_floats(gdg, n), *hdu = get_floats(gdu, n);
        check_close(label("swiglu_backward dgate n=%zu", n), hdg, cdg, n, 1e-6, 2e-6);
        check_close(label("swiglu_backward dup n=%zu", n), hdu, cdu, n, 2e-7, 2e-6);
        T.kg[B]->swiglu_backward(T.gs, gg, gu, gdy, gg, gu, n);  // in place: the same bits as apart
        float *ig = get_floats(gg, n), *iu = get_floats(gu, n);
        check_bytes(label("swiglu_backward dgate = gate n=%zu", n), ig, hdg, sizeof(float) * n);
        check_bytes(label("swiglu_backward dup = up n=%zu", n), iu, hdu, sizeof(float) * n);
        free(g), free(u), free(dy), free(sent), free(want), free(c16), free(h16), free(wg), free(ww), free(cdg);
        free(cdu), free(hdg), free(hdu), free(ig), free(iu);
        dev_free(gg), dev_free(gu), dev_free(gdy), dev_free(gout), dev_free(g16), dev_free(gout2), dev_free(gdg);
        dev_free(gdu);
    }
}

int main(void) {
    cuda_test_open(&T);
    for (B = 0; B < 2; B++) {
        printf("== %s against %s\n", T.kg[B]->name, T.kc[B]->name);
        test_zero_sizes();
        test_conversions();
        test_elementwise();
        test_activations();
        test_dropout();
        test_fused_activation();
        test_layernorm_forward();
        test_residual_layernorm();
        test_layernorm_backward();
        test_rmsnorm();
        test_residual_rmsnorm();
        test_rope();
        test_swiglu();
    }
    cuda_test_close(&T);
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures);
    else printf("all checks passed\n");
    return test_failures ? 1 : 0;
}
