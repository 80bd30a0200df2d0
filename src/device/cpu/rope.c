// rope.c: rotary position embedding in Hugging Face's Llama layout (rotate_half: the first half of each
// head pairs with its second half), in place, and its backward (the rotation by the opposite angle).
// Every value is two rounded products and one rounded sum (ISO C: no contraction into a fused
// multiply-add), so the bits are the same on any thread count and on every backend.
#include <stddef.h>

#include "device/cpu/cpu_kernels.h"

#define ROPE_MIN_PARALLEL 16384  // values per call from which rows go to threads

// Rows (b, t) of x (B*T, heads*D) rotated by the angles of position t: cos, sin (T, D/2); sign -1 rotates
// by the opposite angle (backward). x[i] = x1 c - x2 s', x[i + D/2] = x2 c + x1 s' with s' = sign * s
// (the product by -1 is exact, so backward's bits are forward's with -sin).
static void rope_apply(float *x, const float *cos, const float *sin, int B, int T, int heads, int D, float sign) {
    int half = D / 2;
    size_t rows = (size_t)B * (size_t)T, width = (size_t)heads * (size_t)D;
#pragma omp parallel for schedule(static) if (rows * width >= ROPE_MIN_PARALLEL)
    for (size_t n = 0; n < rows; n++) {
        size_t t = n % (size_t)T;
        const float *c = cos + t * (size_t)half, *s = sin + t * (size_t)half;  // (D/2,) each
        for (int h = 0; h < heads; h++) {
            float *lo = x + n * width + (size_t)h * D, *hi = lo + half;  // (D/2,) each: the head's two halves
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float x1 = lo[i], x2 = hi[i], si = sign * s[i];
                lo[i] = x1 * c[i] - x2 * si;
                hi[i] = x2 * c[i] + x1 * si;
            }
        }
    }
}

void cpu_rope_forward(float *x, const float *cos, const float *sin, int B, int T, int heads, int D) {
    rope_apply(x, cos, sin, B, T, heads, D, 1.0f);
}

void cpu_rope_backward(float *dx, const float *cos, const float *sin, int B, int T, int heads, int D) {
    rope_apply(dx, cos, sin, B, T, heads, D, -1.0f);
}
