// tensor.h: a tensor descriptor (dtype, device, shape, data pointer) and bf16 conversions.
// The descriptor never owns memory: parameters are views into flat buffers, activations into
// module buffers.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define FSDP_MAX_DIMS 4

typedef enum { FSDP_F32 = 0, FSDP_BF16 = 1 } fsdp_dtype;
typedef enum { FSDP_DEV_CPU = 0, FSDP_DEV_CUDA = 1 } fsdp_device;

typedef struct {
    fsdp_dtype dtype;
    fsdp_device device;
    int ndim;
    int64_t shape[FSDP_MAX_DIMS];  // row-major, shape[ndim-1] is contiguous
    void *data;                    // numel elements of dtype, not owned
} fsdp_tensor;

size_t fsdp_dtype_size(fsdp_dtype dt);
const char *fsdp_dtype_name(fsdp_dtype dt);
int64_t fsdp_shape_numel(int ndim, const int64_t *shape);
int64_t fsdp_tensor_numel(const fsdp_tensor *t);
size_t fsdp_tensor_bytes(const fsdp_tensor *t);
// "[3, 4]" into buf; returns buf
char *fsdp_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);
fsdp_tensor fsdp_tensor_make(fsdp_dtype dt, void *data, int ndim, const int64_t *shape);

typedef uint16_t fsdp_bf16;

static inline fsdp_bf16 fsdp_f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (fsdp_bf16)((v.u >> 16) | 0x40);
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (fsdp_bf16)((v.u + rounding) >> 16);
}

static inline float fsdp_bf16_to_f32(fsdp_bf16 h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

float fsdp_f16_to_f32(uint16_t h);
uint16_t fsdp_f32_to_f16(float f);
void fsdp_f32_to_bf16_array(fsdp_bf16 *dst, const float *src, size_t n);
void fsdp_bf16_to_f32_array(float *dst, const fsdp_bf16 *src, size_t n);
// In place, in a buffer of 4n bytes: n fp32 values become n bf16 values in its first 2n bytes.
void fsdp_f32_to_bf16_in_place(void *buf, size_t n);
