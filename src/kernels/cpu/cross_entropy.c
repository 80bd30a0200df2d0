// cross_entropy.c: softmax cross-entropy over V classes, mean over N rows (torch.nn.functional.cross_entropy).
// Threads take rows; the rows' losses (double) are then added in row order on one thread, so the mean
// has the serial loop's bits on any thread count.
#include <math.h>
#include <stdlib.h>

#include "core/status.h"
#include "kernels/cpu/cpu_kernels.h"

#define CE_STACK_ROWS 1024  // row losses kept on the stack up to this many rows (more: one malloc)

double cpu_cross_entropy_forward(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V) {
    double stack_rows[CE_STACK_ROWS];  // (N,) row losses when N <= CE_STACK_ROWS
    double *row_loss = N <= CE_STACK_ROWS ? stack_rows : malloc(sizeof(double) * (size_t)N);  // (N,)
    FSDP_ASSERT(row_loss != NULL);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float maxv = z[0];
        for (int v = 1; v < V; v++) maxv = z[v] > maxv ? z[v] : maxv;
        double sum = 0.0;
        for (int v = 0; v < V; v++) {
            p[v] = expf(z[v] - maxv);
            sum += p[v];
        }
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; v++) p[v] *= inv;
        double loss = log(sum) - (double)(z[targets[n]] - maxv);
        losses[n] = (float)loss;
        row_loss[n] = loss;
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    if (row_loss != stack_rows) free(row_loss);
    return total / N;
}

void cpu_cross_entropy_backward(float *dlogits, const float *probs, const int32_t *targets,
                                float dloss, int N, int V) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++) d[v] = p[v] * dloss;
        d[targets[n]] -= dloss;
    }
}
