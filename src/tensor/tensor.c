// tensor.c: descriptor helpers and fp16/bf16 conversion.
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

size_t fsdp_dtype_size(fsdp_dtype dt) { return dt == FSDP_F32 ? 4 : 2; }
// fp32 / bf16: the tools' flag values (--mixed-precision fp32|bf16)
const char *fsdp_dtype_name(fsdp_dtype dt) { return dt == FSDP_F32 ? "fp32" : "bf16"; }

int64_t fsdp_shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int64_t fsdp_tensor_numel(const fsdp_tensor *t) { return fsdp_shape_numel(t->ndim, t->shape); }
size_t fsdp_tensor_bytes(const fsdp_tensor *t) {
    return (size_t)fsdp_tensor_numel(t) * fsdp_dtype_size(t->dtype);
}

char *fsdp_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

fsdp_tensor fsdp_tensor_make(fsdp_dtype dt, void *data, int ndim, const int64_t *shape) {
    fsdp_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.device = FSDP_DEV_CPU;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    t.data = data;
    return t;
}

float fsdp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) & 1u, exp = (uint32_t)(h >> 10) & 0x1fu, mant = h & 0x3ffu;
    float v;
    if (exp == 0) v = ldexpf((float)mant, -24);
    else if (exp == 31) v = mant ? NAN : INFINITY;
    else v = ldexpf((float)(mant | 0x400u), (int)exp - 25);
    return sign ? -v : v;
}

uint16_t fsdp_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t sign = (v.u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24
        return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
    }
    int e;
    float m = frexpf(a, &e);                               // a = m * 2^e, m in [0.5, 1)
    uint32_t mant = (uint32_t)lrintf(m * 2048.0f);         // 11 bits incl. hidden, round-to-even
    if (mant == 2048) { mant = 1024; e++; }
    uint32_t exp = (uint32_t)(e - 1 + 15);
    return (uint16_t)(sign | (exp << 10) | (mant & 0x3ffu));
}

#ifdef __AVX512F__
// fsdp_f32_to_bf16 on 16 values at once, bit for bit (integer rounding, not VCVTNEPS2BF16, which
// flushes denormals to zero): dst (16,) from src (16,)
static inline void f32_to_bf16_x16(fsdp_bf16 *dst, const float *src) {
    __m512i u = _mm512_loadu_si512(src);
    __m512i high = _mm512_srli_epi32(u, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(high, _mm512_set1_epi32(1)));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, rounding), 16);
    __m512i r = _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));  // NaN stays NaN (quiet)
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtepi32_epi16(r));
}
#endif

void fsdp_f32_to_bf16_array(fsdp_bf16 *dst, const float *src, size_t n) {
    size_t i = 0;
#ifdef __AVX512F__
    for (; i + 16 <= n; i += 16) f32_to_bf16_x16(dst + i, src + i);
#endif
    for (; i < n; i++) dst[i] = fsdp_f32_to_bf16(src[i]);
}

void fsdp_bf16_to_f32_array(float *dst, const fsdp_bf16 *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = fsdp_bf16_to_f32(src[i]);
}

// The in-place conversion goes through a stack chunk, so no store can overtake a load it overlaps
// (and the compiler need not reason about a float* and a uint16_t* aliasing).
#define CONVERT_CHUNK 1024

void fsdp_f32_to_bf16_in_place(void *buf, size_t n) {
    fsdp_bf16 tmp[CONVERT_CHUNK];
    for (size_t i = 0; i < n; i += CONVERT_CHUNK) {
        size_t m = n - i < CONVERT_CHUNK ? n - i : CONVERT_CHUNK;
        const float *src = (const float *)buf + i;  // bytes [4i, 4i + 4m): read before [2i, 2i + 2m) is written
        fsdp_f32_to_bf16_array(tmp, src, m);
        memcpy((fsdp_bf16 *)buf + i, tmp, sizeof(fsdp_bf16) * m);
    }
}
