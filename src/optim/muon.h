// muon.h: Muon (Keller Jordan's muon.py) on one whole matrix in device memory: the momentum's lerp,
// Nesterov's lerp, the update orthogonalized by quintic Newton-Schulz steps in fp32 through the kernel
// table's gemm, scaled by max(1, out/in)^0.5, and the decoupled weight decay. The caller decides which
// matrices and where they live (fsdp/muon_step.c: one owner rank per matrix under FSDP).
#pragma once
#include <stdint.h>

#include "core/status.h"
#include "device/device.h"
#include "kernels/kernels.h"

typedef struct {
    float lr;            // muon.py's lr
    float momentum;      // beta: m = lerp(m, g, 1 - beta)
    float weight_decay;  // decoupled: p *= 1 - lr * weight_decay
    int nesterov;        // u = lerp(g, m, beta) (else u = m)
    int ns_steps;        // Newton-Schulz steps
} fsdp_muon_config;

fsdp_muon_config fsdp_muon_defaults(void);  // lr 0.02, momentum 0.95, wd 0, nesterov on, 5 steps

// The quintic's coefficients and the norm's epsilon (muon.py's zeropower_via_newtonschulz5)
#define FSDP_MUON_NS_A 3.4445f
#define FSDP_MUON_NS_B (-4.7750f)
#define FSDP_MUON_NS_C 2.0315f
#define FSDP_MUON_NS_EPS 1e-7f

// Device scratch for Newton-Schulz on matrices of at most max_numel elements whose shorter side is at
// most max_side.
typedef struct {
    fsdp_dev *dev;
    int64_t max_numel, max_side;
    float *x_next;    // (max_numel,) the next iterate
    float *gram;      // (max_side, max_side) A = X X^T
    float *poly;      // (max_side, max_side) B = b A + c A A
    double *sum_sq;   // (1,) the Frobenius norm's sum of squares
} fsdp_muon_workspace;

fsdp_status fsdp_muon_workspace_create(fsdp_muon_workspace *ws, fsdp_dev *dev, int64_t max_numel, int64_t max_side);
void fsdp_muon_workspace_free(fsdp_muon_workspace *ws);

// FLOPs of `steps` Newton-Schulz steps on a rows x cols matrix: per step X X^T (2 r r c), A A (2 r^3)
// and B X (2 r r c), r the shorter side and c the longer one (the normalization and the adds not counted).
double fsdp_muon_ns_flops(int64_t rows, int64_t cols, int steps);

// x (rows, cols) device, row-major, overwritten with zeropower_via_newtonschulz5(x, steps) in fp32:
// x / (||x||_F + 1e-7), then X <- a X + (b A + c A A) X with A = X X^T, on the transpose when rows > cols
// (written as X <- a X + X B^T with A = X^T X, so nothing is transposed in memory). Enqueued on st.
fsdp_status fsdp_muon_orthogonalize(const fsdp_kernels *k, fsdp_stream *st, fsdp_muon_workspace *ws, float *x,
                                    int rows, int cols, int steps);

// max(1, out/in)^0.5 of a linear map's [out, in] matrix: the update's scale
float fsdp_muon_shape_scale(int64_t out_features, int64_t in_features);

// muon.py's muon_update for one matrix: momentum (n,) = lerp(momentum, grad, 1 - beta); grad (rows, cols)
// becomes the update: lerp(grad, momentum, beta) (nesterov; else the momentum), orthogonalized, times
// `scale` (fsdp_muon_shape_scale of the matrix's [out, in] view: the NS result of a stored transpose is
// the transpose of the result). Device memory, enqueued on st.
fsdp_status fsdp_muon_update(const fsdp_kernels *k, fsdp_stream *st, fsdp_muon_workspace *ws,
                             const fsdp_muon_config *cfg, float *momentum, float *grad, int rows, int cols,
                             float scale);

// The step on parameters: params (n,) = params * (1 - lr * wd) - lr * update (n,) (device, on st).
void fsdp_muon_apply(const fsdp_kernels *k, fsdp_stream *st, const fsdp_muon_config *cfg, float lr, float *params,
                     const float *update, int64_t n);
