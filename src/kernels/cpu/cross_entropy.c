// cross_entropy.c: softmax cross-entropy over V classes, mean over N rows (torch.nn.functional.cross_entropy).
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

double cpu_cross_entropy_forward(float *losses, float *probs, const float *logits,
                                 const int32_t *targets, int N, int V) {
    double total = 0.0;
#pragma omp parallel for reduction(+ : total) schedule(static)
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
        total += loss;
    }
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
