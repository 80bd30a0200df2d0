// test_fused_kernels.c: the fused non-GEMM kernels against the unfused computation.
//  - cross-entropy fused with the softmax (no probabilities stored; backward recomputes them from two
//    floats per row and writes dlogits over the logits): loss, row losses, row statistics and dlogits
//    against double, in place and not, rows far from zero, V off the vector width;
//  - LayerNorm fused with the residual add before it (and the dropout on the branch), and its backward
//    fused with the residual gradient's add: bit-identical to the unfused kernels (dropout, add,
//    LayerNorm; LayerNorm backward, add), and against double;
//  - a linear layer's bias, activation (ReLU, GELU, tanh GELU) and dropout in one pass, and the backward
//    of dropout and activation in one pass: against double, the dropout mask exactly (kernels.h:
//    element i of the call over N*F values is kept iff uniform(rng, i) >= p).
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "device/cpu/cpu_kernels.h"
#include "kernels/kernels.h"
#include "test.h"

// max |got - want| over n values, relative to max |want|; NaN counts as a failure
static double rel_err(const float *got, const double *want, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double e = isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]);
        worst = fmax(worst, e);
        scale = fmax(scale, fabs(want[i]));
    }
    return worst / scale;
}

static float *floats(size_t n, uint64_t stream, float lo, float hi) {
    float *x = malloc(sizeof(float) * n);
    fsdp_rng_uniform_range((fsdp_rng){77, stream}, 0, x, n, lo, hi);
    return x;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, sizeof(float) * n) == 0; }

// ---- cross-entropy ----

static void check_cross_entropy(int N, int V, float offset) {
    float *logits = floats((size_t)N * V, 1, -6.0f, 6.0f);  // (N, V)
    for (int n = 0; n < N; n += 2)
        for (int v = 0; v < V; v++) logits[(size_t)n * V + v] += offset;  // rows far from zero
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)N);  // (N,)
    for (int n = 0; n < N; n++) tgt[n] = n == 0 ? 0 : n == 1 ? V - 1 : (int32_t)((n * 7919) % V);
    float *losses = malloc(sizeof(float) * (size_t)N), *stats = malloc(sizeof(float) * 2 * (size_t)N);
    float *dlogits = malloc(sizeof(float) * (size_t)N * V), *inplace = malloc(sizeof(float) * (size_t)N * V);
    double *want_losses = calloc((size_t)N, sizeof(double)), *want_d = calloc((size_t)N * V, sizeof(double));
    float dloss = 0.75f / (float)N;
    double want = 0;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++) sum += exp((double)z[v] - mx);
        want_losses[n] = mx + log(sum) - z[tgt[n]];
        want += want_losses[n] / N;
        for (int v = 0; v < V; v++)
            want_d[(size_t)n * V + v] = (exp((double)z[v] - mx) / sum - (v == tgt[n])) * (double)dloss;
    }
    double got = 0.0;
    cpu_cross_entropy_forward(&got, losses, stats, logits, tgt, N, V);
    cpu_cross_entropy_backward(dlogits, logits, stats, tgt, dloss, N, V);
    memcpy(inplace, logits, sizeof(float) * (size_t)N * V);
    cpu_cross_entropy_backward(inplace, inplace, stats, tgt, dloss, N, V);
    double e_loss = fabs(got - want) / fabs(want), e_rows = rel_err(losses, want_losses, (size_t)N);
    double e_d = rel_err(dlogits, want_d, (size_t)N * V);
    int stats_ok = 1;
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float mx = z[0];
        for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        stats_ok &= stats[2 * n] == mx && stats[2 * n + 1] > 0 && stats[2 * n + 1] <= 1;
    }
    printf("cross_entropy N%d V%d offset %g: rel err loss %.2e rows %.2e dlogits %.2e\n", N, V, offset, e_loss,
           e_rows, e_d);
    CHECK(isfinite(got) && e_loss <= 1e-6);
    CHECK(e_rows <= 1e-6);
    CHECK(e_d <= 2e-6);
    CHECK(stats_ok);
    CHECK(same_bits(inplace, dlogits, (size_t)N * V));  // in place: the same values
    free(logits), free(tgt), free(losses), free(stats), free(dlogits), free(inplace), free(want_losses), free(want_d);
}

// ---- LayerNorm with the residual add ----

static void ln_double(double *y, double *xhat, const float *x, const float *w, const float *b, int C, double eps) {
    double m = 0, var = 0;
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    for (int c = 0; c < C; c++) var += (x[c] - m) * (x[c] - m);
    double s = 1.0 / sqrt(var / C + eps);
    for (int c = 0; c < C; c++) xhat[c] = (x[c] - m) * s, y[c] = xhat[c] * w[c] + b[c];
}

static void check_residual_layernorm(int N, int C, float p) {
    size_t n = (size_t)N * C;
    fsdp_rng rng = {31, 4};
    float *a = floats(n, 2, -2.0f, 2.0f), *b = floats(n, 3, -1.0f, 3.0f), *w = floats((size_t)C, 4, 0.5f, 1.5f);
    float *bias = floats((size_t)C, 5, -0.5f, 0.5f), *dout = floats(n, 6, -1.0f, 1.0f), *dres = floats(n, 7, -1.0f, 1.0f);
    float *res = malloc(sizeof(float) * n), *out = malloc(sizeof(float) * n), *mean = malloc(sizeof(float) * N);
    float *rstd = malloc(sizeof(float) * N), *dinp = malloc(sizeof(float) * n);
    float *dw = malloc(sizeof(float) * C), *db = malloc(sizeof(float) * C);
    // the unfused kernels
    float *u_b = malloc(sizeof(float) * n), *u_res = malloc(sizeof(float) * n), *u_out = malloc(sizeof(float) * n);
    float *u_mean = malloc(sizeof(float) * N), *u_rstd = malloc(sizeof(float) * N), *u_dinp = malloc(sizeof(float) * n);
    float *u_dw = malloc(sizeof(float) * C), *u_db = malloc(sizeof(float) * C);
    for (int c = 0; c < C; c++) dw[c] = u_dw[c] = 0.25f, db[c] = u_db[c] = -0.5f;  // accumulated into
    cpu_residual_layernorm_forward(res, out, NULL, mean, rstd, a, b, p, rng, w, bias, N, C, 1e-5f);
    cpu_layernorm_backward(dinp, dw, db, dout, dres, res, w, mean, rstd, N, C);
    cpu_dropout_forward(u_b, b, n, p, rng);
    cpu_add(u_res, a, u_b, n);
    cpu_layernorm_forward(u_out, NULL, u_mean, u_rstd, u_res, w, bias, N, C, 1e-5f);
    cpu_layernorm_backward(u_dinp, u_dw, u_db, dout, NULL, u_res, w, u_mean, u_rstd, N, C);
    cpu_add_inplace(u_dinp, dres, n);
    CHECK(same_bits(res, u_res, n) && same_bits(out, u_out, n));
    CHECK(same_bits(mean, u_mean, (size_t)N) && same_bits(rstd, u_rstd, (size_t)N));
    CHECK(same_bits(dinp, u_dinp, n) && same_bits(dw, u_dw, (size_t)C) && same_bits(db, u_db, (size_t)C));
    // against double: the residual (with the mask of kernels.h) exactly, the norm and its gradients
    double *y = calloc(n, sizeof(double)), *xhat = calloc(n, sizeof(double)), *dx = calloc(n, sizeof(double));
    double *wdw = calloc((size_t)C, sizeof(double)), *wdb = calloc((size_t)C, sizeof(double));
    float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    int res_ok = 1;
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = p <= 0.0f || fsdp_rng_uniform_at(rng, i) >= p;
        dropped += !keep;
        res_ok &= res[i] == a[i] + (keep ? b[i] * scale : 0.0f);
    }
    for (int r = 0; r < N; r++) {
        size_t at = (size_t)r * C;
        ln_double(y + at, xhat + at, res + at, w, bias, C, 1e-5);
        double s = 0, m1 = 0, m2 = 0, var = 0, mu = 0;
        for (int c = 0; c < C; c++) mu += res[at + c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (res[at + c] - mu) * (res[at + c] - mu);
        s = 1.0 / sqrt(var / C + 1e-5);
        for (int c = 0; c < C; c++) {
            double g = (double)w[c] * dout[at + c];
            m1 += g / C, m2 += g * xhat[at + c] / C;
            wdw[c] += xhat[at + c] * dout[at + c], wdb[c] += dout[at + c];
        }
        for (int c = 0; c < C; c++)
            dx[at + c] = s * ((double)w[c] * dout[at + c] - m1 - xhat[at + c] * m2) + dres[at + c];
    }
    for (int c = 0; c < C; c++) wdw[c] += 0.25, wdb[c] += -0.5;
    double e_out = rel_err(out, y, n), e_dx = rel_err(dinp, dx, n);
    double e_dw = rel_err(dw, wdw, (size_t)C), e_db = rel_err(db, wdb, (size_t)C);
    printf("residual_layernorm N%d C%d p=%.1f (%zu dropped): rel err out %.2e dinp %.2e dweight %.2e dbias %.2e\n",
           N, C, p, dropped, e_out, e_dx, e_dw, e_db);
    CHECK(res_ok);
    CHECK(p <= 0.0f || dropped > 0);
    CHECK(e_out <= 1e-5 && e_dx <= 1e-5 && e_dw <= 1e-5 && e_db <= 1e-5);
    free(a), free(b), free(w), free(bias), free(dout), free(dres), free(res), free(out), free(mean), free(rstd);
    free(dinp), free(dw), free(db), free(u_b), free(u_res), free(u_out), free(u_mean), free(u_rstd), free(u_dinp);
    free(u_dw), free(u_db), free(y), free(xhat), free(dx), free(wdw), free(wdb);
}

// ---- bias + activation + dropout ----

#define SQRT_2_OVER_PI_D 0.79788456080286535588
#define GELU_TANH_COEF_D 0.044715

static double act_double(double x, fsdp_activation a) {
    if (a == FSDP_ACT_RELU) return x > 0 ? x : 0;
    if (a == FSDP_ACT_GELU) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    return 0.5 * x * (1 + tanh(SQRT_2_OVER_PI_D * (x + GELU_TANH_COEF_D * x * x * x)));
}

static double act_grad_double(double x, fsdp_activation a) {
    if (a == FSDP_ACT_RELU) return x > 0 ? 1 : 0;
    if (a == FSDP_ACT_GELU) return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    double t = tanh(SQRT_2_OVER_PI_D * (x + GELU_TANH_COEF_D * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI_D * (1 + 3 * GELU_TANH_COEF_D * x * x);
}

static void check_bias_act_dropout(int N, int F, fsdp_activation a, float p) {
    static const char *names[] = {"relu", "gelu", "gelu_tanh"};
    size_t n = (size_t)N * F;
    fsdp_rng rng = {12, 3};
    float *product = floats(n, 8, -3.0f, 3.0f), *bias = floats((size_t)F, 9, -1.0f, 1.0f);
    float *dact = floats(n, 10, -1.0f, 1.0f);
    float *pre = malloc(sizeof(float) * n), *act = malloc(sizeof(float) * n), *dpre = malloc(sizeof(float) * n);
    float *inplace = malloc(sizeof(float) * n);
    memcpy(pre, product, sizeof(float) * n);
    cpu_bias_act_dropout_forward(pre, act, NULL, bias, N, F, a, p, rng);
    cpu_act_dropout_backward(dpre, dact, pre, n, a, p, rng);
    memcpy(inplace, dact, sizeof(float) * n);
    cpu_act_dropout_backward(inplace, inplace, pre, n, a, p, rng);
    double *want = calloc(n, sizeof(double)), *want_d = calloc(n, sizeof(double));  // (n,) each
    double scale = p < 1.0f ? 1.0 / (1.0 - p) : 0.0;
    int pre_ok = 1, mask_ok = 1;
    size_t dropped = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = p <= 0.0f || fsdp_rng_uniform_at(rng, i) >= p;
        dropped += !keep;
        float x = product[i] + bias[i % F];
        pre_ok &= pre[i] == x;
        want[i] = keep ? act_double(x, a) * scale : 0.0;
        want_d[i] = keep ? dact[i] * scale * act_grad_double(x, a) : 0.0;
        mask_ok &= keep || (act[i] == 0.0f && dpre[i] == 0.0f);
    }
    double e_act = rel_err(act, want, n), e_d = rel_err(dpre, want_d, n);
    printf("bias_act_dropout N%d F%d %s p=%.1f (%zu dropped): rel err act %.2e dpre %.2e\n", N, F, names[a], p,
           dropped, e_act, e_d);
    CHECK(pre_ok);
    CHECK(mask_ok && (p <= 0.0f || dropped > 0));
    CHECK(e_act <= 2e-6 && e_d <= 2e-6);
    CHECK(same_bits(inplace, dpre, n));
    // bias NULL (the product added it): pre is only read, act the same bits
    float *pre2 = malloc(sizeof(float) * n), *act2 = malloc(sizeof(float) * n);
    memcpy(pre2, pre, sizeof(float) * n);
    cpu_bias_act_dropout_forward(pre2, act2, NULL, NULL, N, F, a, p, rng);
    CHECK(same_bits(pre2, pre, n) && same_bits(act2, act, n));
    free(pre2), free(act2);
    if (a == FSDP_ACT_RELU) {  // from the forward's output instead of its input: the same bits
        memcpy(inplace, dact, sizeof(float) * n);
        cpu_relu_dropout_backward(inplace, inplace, act, n, p);
        CHECK(same_bits(inplace, dpre, n));
    }
    free(product), free(bias), free(dact), free(pre), free(act), free(dpre), free(inplace), free(want), free(want_d);
}

int main(void) {
    check_cross_entropy(5, 7, 0.0f);       // under one vector
    check_cross_entropy(9, 16, 50.0f);     // one vector, rows far from zero
    check_cross_entropy(64, 515, -80.0f);  // vectors and a tail; enough rows for threads
    check_cross_entropy(3, 50257, 10.0f);  // GPT-2's vocabulary
    for (int pi = 0; pi < 2; pi++) {
        float p = pi ? 0.2f : 0.0f;
        check_residual_layernorm(5, 7, p);
        check_residual_layernorm(33, 512, p);
        check_residual_layernorm(64, 130, p);  // enough values for threads; lanes and a tail
    }
    for (int a = FSDP_ACT_RELU; a <= FSDP_ACT_GELU_TANH; a++)
        for (int pi = 0; pi < 2; pi++) {
            float p = pi ? 0.1f : 0.0f;
            check_bias_act_dropout(3, 5, (fsdp_activation)a, p);
            check_bias_act_dropout(8, 100, (fsdp_activation)a, p);
            check_bias_act_dropout(17, 2048, (fsdp_activation)a, p);  // threads
        }
    TEST_MAIN_END();
}
