// muon.c: Muon on one whole matrix (optim/muon.h), as Keller Jordan's muon.py computes it, in fp32
// through the kernel table (gemm for the Newton-Schulz products, axpby for the lerps and the update,
// sum_squares and divide_by_norm for the normalization).
#include "optim/muon.h"

#include <math.h>
#include <string.h>

fsdp_muon_config fsdp_muon_defaults(void) {
    fsdp_muon_config c = {.lr = 0.02f, .momentum = 0.95f, .weight_decay = 0.0f, .nesterov = 1, .ns_steps = 5};
    return c;
}

fsdp_status fsdp_muon_workspace_create(fsdp_muon_workspace *ws, fsdp_dev *dev, int64_t max_numel, int64_t max_side) {
    memset(ws, 0, sizeof *ws);
    ws->dev = dev;
    ws->max_numel = max_numel;
    ws->max_side = max_side;
    size_t gram = sizeof(float) * (size_t)(max_side * max_side);
    ws->x_next = fsdp_dev_alloc(dev, sizeof(float) * (size_t)(max_numel ? max_numel : 1), FSDP_MEM_WORKSPACE);
    ws->gram = fsdp_dev_alloc(dev, gram ? gram : sizeof(float), FSDP_MEM_WORKSPACE);
    ws->poly = fsdp_dev_alloc(dev, gram ? gram : sizeof(float), FSDP_MEM_WORKSPACE);
    ws->sum_sq = fsdp_dev_alloc(dev, sizeof(double), FSDP_MEM_WORKSPACE);
    if (ws->x_next && ws->gram && ws->poly && ws->sum_sq) return FSDP_OK;
    fsdp_muon_workspace_free(ws);
    return fsdp_error(FSDP_ERR_NOMEM, "muon: out of device memory for the Newton-Schulz scratch (%lld floats)",
                      (long long)(max_numel + 2 * max_side * max_side));
}

void fsdp_muon_workspace_free(fsdp_muon_workspace *ws) {
    if (ws->x_next) fsdp_dev_free(ws->dev, ws->x_next);
    if (ws->gram) fsdp_dev_free(ws->dev, ws->gram);
    if (ws->poly) fsdp_dev_free(ws->dev, ws->poly);
    if (ws->sum_sq) fsdp_dev_free(ws->dev, ws->sum_sq);
    memset(ws, 0, sizeof *ws);
}

double fsdp_muon_ns_flops(int64_t rows, int64_t cols, int steps) {
    double r = (double)(rows < cols ? rows : cols), c = (double)(rows < cols ? cols : rows);
    return (double)steps * (4.0 * r * r * c + 2.0 * r * r * r);
}

float fsdp_muon_shape_scale(int64_t out_features, int64_t in_features) {
    double ratio = (double)out_features / (double)in_features;
    return (float)sqrt(ratio > 1.0 ? ratio : 1.0);
}

fsdp_status fsdp_muon_orthogonalize(const fsdp_kernels *k, fsdp_stream *st, fsdp_muon_workspace *ws, float *x,
                                    int rows, int cols, int steps) {
    int tall = rows > cols;
    int r = tall ? cols : rows;  // the Gram matrix's side
    size_t n = (size_t)rows * (size_t)cols;
    if ((int64_t)n > ws->max_numel || r > ws->max_side)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "muon: a %d x %d matrix exceeds the Newton-Schulz scratch (%lld "
                          "elements, side %lld)", rows, cols, (long long)ws->max_numel, (long long)ws->max_side);
    FSDP_CHECK(fsdp_dev_memset(st, ws->sum_sq, 0, sizeof(double)));
    k->sum_squares(st, ws->sum_sq, x, n);
    k->divide_by_norm(st, x, ws->sum_sq, FSDP_MUON_NS_EPS, n);
    float *X = x, *next = ws->x_next;  // X (rows, cols): the iterate; next: where the step writes
    size_t gram_bytes = sizeof(float) * (size_t)r * (size_t)r;
    for (int s = 0; s < steps; s++) {
        if (tall)  // A (cols, cols) = X^T X
            k->gemm(st, 1, 0, r, r, rows, 1.0f, X, cols, X, cols, 0.0f, ws->gram, r);
        else  // A (rows, rows) = X X^T
            k->gemm(st, 0, 1, r, r, cols, 1.0f, X, cols, X, cols, 0.0f, ws->gram, r);
        // B = b A + c A A
        FSDP_CHECK(fsdp_copy_d2d(st, ws->poly, ws->gram, gram_bytes));
        k->gemm(st, 0, 0, r, r, r, FSDP_MUON_NS_C, ws->gram, r, ws->gram, r, FSDP_MUON_NS_B, ws->poly, r);
        // next = a X + B X (wide), a X + X B^T (tall: the transpose of the wide step on X^T)
        FSDP_CHECK(fsdp_copy_d2d(st, next, X, sizeof(float) * n));
        if (tall)
            k->gemm(st, 0, 1, rows, cols, cols, 1.0f, X, cols, ws->poly, r, FSDP_MUON_NS_A, next, cols);
        else
            k->gemm(st, 0, 0, rows, cols, rows, 1.0f, ws->poly, r, X, cols, FSDP_MUON_NS_A, next, cols);
        float *t = X;
        X = next;
        next = t;
    }
    if (X != x) FSDP_CHECK(fsdp_copy_d2d(st, x, X, sizeof(float) * n));
    return FSDP_OK;
}

fsdp_status fsdp_muon_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_muon_workspace *ws,
                             const fsdp_muon_config *cfg, float *momentum, float *grad, int rows, int cols,
                             float scale) {
    size_t n = (size_t)rows * (size_t)cols;
    float beta = cfg->momentum;
    k->axpby(st, momentum, grad, beta, 1.0f - beta, n);  // m = lerp(m, g, 1 - beta)
    if (cfg->nesterov)
        k->axpby(st, grad, momentum, 1.0f - beta, beta, n);  // u = lerp(g, m, beta), in the gradient's place
    else
        FSDP_CHECK(fsdp_copy_d2d(st, grad, momentum, sizeof(float) * n));
    FSDP_CHECK(fsdp_muon_orthogonalize(k, st, ws, grad, rows, cols, cfg->ns_steps));
    if (scale != 1.0f) k->scale(st, grad, scale, n);
    return FSDP_OK;
}

void fsdp_muon_apply(const fsdp_kernels *k, fsdp_stream *st, const fsdp_muon_config *cfg, float lr, float *params,
                     const float *update, int64_t n) {
    if (n > 0) k->axpby(st, params, update, 1.0f - lr * cfg->weight_decay, -lr, (size_t)n);
}
