// test_vec_math.c: the vectorised exp against libm's, and the tanh-GELU kernels (computed through
// x * sigmoid(2u)) against the tanh formula evaluated in double. The GELU kernels run through the
// default device's table ($FSDP_DEVICE) on device buffers written and read with copies.
#include <math.h>
#include <stdlib.h>

#include "device/device.h"
#include "device/cpu/vec_math.h"
#include "kernels/kernels.h"
#include "test.h"

int main(void) {
#if FSDP_HAVE_AVX512
    double worst = 0.0;
    for (float x0 = -100.0f; x0 < 88.0f; x0 += 0.37f) {
        float xs[16], ys[16];
        for (int i = 0; i < 16; i++) xs[i] = x0 + 0.0231f * (float)i;
        _mm512_storeu_ps(ys, vexp512(_mm512_loadu_ps(xs)));
        for (int i = 0; i < 16; i++) {
            double ref = exp((double)xs[i]);
            if (ref < 1e-37) continue;  // float denormals: only absolute accuracy matters there
            double rel = fabs(ys[i] - ref) / ref;
            worst = rel > worst ? rel : worst;
        }
    }
    printf("vexp512 worst relative error %.3g\n", worst);
    CHECK(worst < 3e-7);
#endif
    fsdp_dev *dev = fsdp_dev_default();
    fsdp_stream *st = fsdp_dev_stream(dev, FSDP_STREAM_COMPUTE);
    const fsdp_kernels *k = fsdp_dev_kernels(dev, 0);
    enum { N = 4099 };
    const size_t bytes = N * sizeof(float);
    float *x = malloc(bytes), *y = malloc(bytes), *dy = malloc(bytes);
    float *ones = malloc(bytes);
    for (int i = 0; i < N; i++) {
        x[i] = -12.0f + 24.0f * (float)i / N;
        ones[i] = 1.0f;
    }
    float *x_dev = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
    float *y_dev = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
    float *dy_dev = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
    float *ones_dev = fsdp_dev_alloc(dev, bytes, FSDP_MEM_ACTIVATIONS);
    CHECK(x_dev && y_dev && dy_dev && ones_dev);
    CHECK(fsdp_copy_h2d(st, x_dev, x, bytes) == FSDP_OK);
    CHECK(fsdp_copy_h2d(st, ones_dev, ones, bytes) == FSDP_OK);
    k->gelu_forward(st, y_dev, x_dev, N, 1);
    k->gelu_backward(st, dy_dev, ones_dev, x_dev, N, 1);
    CHECK(fsdp_copy_d2h(st, y, y_dev, bytes) == FSDP_OK);
    CHECK(fsdp_copy_d2h(st, dy, dy_dev, bytes) == FSDP_OK);
    CHECK(fsdp_stream_synchronize(st) == FSDP_OK);
    double worst_f = 0.0, worst_b = 0.0;
    for (int i = 0; i < N; i++) {
        double xd = x[i], u = sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd), th = tanh(u);
        double ref = 0.5 * xd * (1.0 + th);
        double dref = 0.5 * (1.0 + th) + 0.5 * xd * (1.0 - th * th) * sqrt(2.0 / M_PI) * (1.0 + 3 * 0.044715 * xd * xd);
        // error relative to the value, with a floor of 1e-3 where the value crosses zero
        double ef = fabs(y[i] - ref) / fmax(fabs(ref), 1e-3), eb = fabs(dy[i] - dref) / fmax(fabs(dref), 1e-3);
        worst_f = ef > worst_f ? ef : worst_f;
        worst_b = eb > worst_b ? eb : worst_b;
    }
    printf("gelu tanh forward worst rel %.3g, backward worst rel %.3g\n", worst_f, worst_b);
    CHECK(worst_f < 2e-6);
    CHECK(worst_b < 1e-4);  // torch 1.13's own float backward is off by up to 1e-3 on this measure
    free(x);
    free(y);
    free(dy);
    free(ones);
    fsdp_dev_free(dev, x_dev);
    fsdp_dev_free(dev, y_dev);
    fsdp_dev_free(dev, dy_dev);
    fsdp_dev_free(dev, ones_dev);
    TEST_MAIN_END();
}
