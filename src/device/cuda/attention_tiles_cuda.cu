// attention_tiles_cuda.cu: the fp32 table's attention for head dims 64 and 128 in 64 x 64 tiles
// (FlashAttention-2's schedule on CUDA cores): what attention_cuda.cu's row kernels compute, with each K
// and V row read once per 64 query rows instead of once per query row. (The bf16 table's runs on tensor
// cores: attention_mma_cuda.cu.)
//
// A block of 256 threads (16 x 16) holds one tile of 64 query rows (forward, dq) of one (batch, head)
// pair, or 64 key rows (dk, dv) of one (batch, key/value head) pair, in shared memory and sweeps the
// other side's rows 64 at a time (for dk and dv, those of every query head of the group, in order). Products run
// from shared memory: thread (ty, tx) owns rows 4 ty .. 4 ty + 3 and columns 4 tx .. 4 tx + 3 of a 64 x 64
// score tile (and columns 64 g + 4 tx .. + 3, g < hd / 64, of a 64 x hd output tile), reading float4s of
// operands stored k-major (a row of the product's inner dimension holds 64 rows' values). A row's
// maximum and sum go over its 16 threads by shuffles (a half warp). Every output element is written
// once by one thread; nothing is atomic: deterministic. fp32 throughout (no TF32).
//
// Forward: the online softmax per key tile (running maximum m, sum l of the undropped P, output rescaled
// by exp(m_old - m_new) when m moves); out = o / l, stats = m + log(l). Backward: dq with one block per
// query tile (S and dP recomputed per key tile, dq += scale dS K), dk and dv with one block per key tile
// (dk += scale dS^T Q, dv += dropout(P)^T dO over the query tiles that see it). The scores' q is scale q
// (the scale joined to q first, as the CPU's GEMM applies alpha). Causal blocks skip the tiles above the
// diagonal; the heaviest tiles are launched first.
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>

#include "attention_cuda.cuh"

namespace {

using namespace cuattn;

constexpr int kTT = 256;      // threads per block: 16 x 16
constexpr int kBR = 64;       // rows per tile (query tiles and key tiles alike)
constexpr int kLd = kBR + 4;  // row length of a k-major tile: 64 values, float4-aligned, banks spread

// the shared tiles' row length for natural (row-major, hd columns) tiles
template <int HD>
__host__ __device__ constexpr int ld_nat() {
    return HD + 4;
}

// Tile rows r0 .. r0 + n of a head part into dst k-major: dst[c * kLd + r] = opnd(mul * src[(r0 + r) *
// step + c]), rows n .. 63 zero. src: (rows, HD) with row stride step (floats); dst: (HD, kLd) shared.
template <int HD>
__device__ __forceinline__ void load_kmajor(float *dst, const float *src, int64_t step, int r0, int n, float mul) {
    for (int idx = (int)threadIdx.x; idx < kBR * HD; idx += kTT) {
        const int r = idx / HD, c = idx % HD;
        dst[c * kLd + r] = r < n ? (mul * src[(int64_t)(r0 + r) * step + c]) : 0.0f;
    }
}

// Tile rows r0 .. r0 + n into dst row-major: dst[r * ld_nat + c] = opnd(src[(r0 + r) * step + c]), rows
// n .. 63 zero. src: (rows, HD) with row stride step; dst: (kBR, ld_nat<HD>) shared.
template <int HD>
__device__ __forceinline__ void load_natural(float *dst, const float *src, int64_t step, int r0, int n) {
    for (int idx = (int)threadIdx.x; idx < kBR * HD; idx += kTT) {
        const int r = idx / HD, c = idx % HD;
        dst[r * ld_nat<HD>() + c] = r < n ? (src[(int64_t)(r0 + r) * step + c]) : 0.0f;
    }
}

// acc[a][b] += sum_{k < K} At[k * lda + ra + a] * Bt[k * ldb + cb + b]: a 4 x 4 block of a product whose
// operands are stored k-major in shared memory (At: (K, lda), Bt: (K, ldb); ra, cb multiples of 4).
template <int K>
__device__ __forceinline__ void outer4(float (&acc)[4][4], const float *At, int lda, int ra, const float *Bt, int ldb,
                                       int cb) {
#pragma unroll 8
    for (int k = 0; k < K; k++) {
        const float4 x = *reinterpret_cast<const float4 *>(At + k * lda + ra);
        const float4 y = *reinterpret_cast<const float4 *>(Bt + k * ldb + cb);
        const float xa[4] = {x.x, x.y, x.z, x.w}, yb[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) acc[a][b] = fmaf(xa[a], yb[b], acc[a][b]);
    }
}

// acc[a][4 g + b] += sum_{k < n} At[k * kLd + ra + a] * Bn[k * ld_nat + 64 g + cb + b] for g < HD / 64:
// a 4 x (HD / 16) block of (64 x n) (n x HD). At: (n, kLd) shared k-major; Bn: (n, ld_nat<HD>) natural.
template <int HD>
__device__ __forceinline__ void outer4_wide(float (&acc)[4][HD / 16], const float *At, int ra, const float *Bn, int cb,
                                            int n) {
    for (int k = 0; k < n; k++) {
        const float4 x = *reinterpret_cast<const float4 *>(At + k * kLd + ra);
        const float xa[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
        for (int g = 0; g < HD / 64; g++) {
            const float4 y = *reinterpret_cast<const float4 *>(Bn + k * ld_nat<HD>() + 64 * g + cb);
            const float yb[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) acc[a][4 * g + b] = fmaf(xa[a], yb[b], acc[a][4 * g + b]);
        }
    }
}

// maximum / sum over the 16 threads of a half warp that share a row (lanes differing in bits 0..3)
__device__ __forceinline__ float row_max16(float v) {
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float row_sum16(float v) {
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// tiles of 64 rows covering T
__host__ __device__ __forceinline__ int n_tiles(int T) { return (T + kBR - 1) / kBR; }

// pointer to column 0 of token 0 of batch b of query head h (part 0; token t at + t * q_step) or of
// key / value head h (parts 1, 2; token t at + t * kv_step), in qkv's layout (Args)
__device__ __forceinline__ const float *qkv_head(const float *qkv, const Args &a, int b, int h, int part) {
    return qkv + (part == 0 ? q_at(a, b, 0, h) : part == 1 ? k_at(a, b, 0, h) : v_at(a, b, 0, h));
}

// Forward: one block per (bh, query tile); blockIdx.x = (ntiles - 1 - tile) * B*H + bh (heaviest first).
// out: rows of C; stats: (B, H, T); qkv: Args' layout.
template <int HD>
__global__ void __launch_bounds__(kTT) k_tiles_forward(float *out, float *stats, const float *qkv, Args a, int BH) {
    extern __shared__ float4 smem4[];
    float *Qt = reinterpret_cast<float *>(smem4);  // (HD, kLd) round(scale q) of the tile's rows, k-major
    float *Kt = Qt + HD * kLd;                     // (HD, kLd) the key tile, k-major
    float *Vn = Kt + HD * kLd;                     // (kBR, ld_nat) the value tile
    float *Pt = Vn + kBR * ld_nat<HD>();           // (kBR keys, kLd) dropout(P), key-major
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int T = a.T, C = a.C;
    const int bh = (int)(blockIdx.x % (unsigned)BH), q0 = (n_tiles(T) - 1 - (int)(blockIdx.x / (unsigned)BH)) * kBR;
    const int b = bh / a.H, h = bh % a.H, kvh = h / a.group, nq = min(kBR, T - q0);
    const int64_t step = q_step(a), kstep = kv_step(a);  // floats from one token's q (k, v) row to the next's
    load_kmajor<HD>(Qt, qkv_head(qkv, a, b, h, 0), step, q0, nq, a.scale);

    float m[4], l[4], o[4][HD / 16];
    for (int r = 0; r < 4; r++) {
        m[r] = -INFINITY, l[r] = 0.0f;
        for (int c = 0; c < HD / 16; c++) o[r][c] = 0.0f;
    }
    const int kv_end = a.causal ? q0 + nq : T;  // keys some row of the tile sees
    for (int j0 = 0; j0 < kv_end; j0 += kBR) {
        const int nk = min(kBR, kv_end - j0);
        __syncthreads();  // the previous tile's reads of Kt, Vn, Pt are done
        load_kmajor<HD>(Kt, qkv_head(qkv, a, b, kvh, 1), kstep, j0, nk, 1.0f);
        load_natural<HD>(Vn, qkv_head(qkv, a, b, kvh, 2), kstep, j0, nk);
        __syncthreads();
        float s[4][4] = {};
        outer4<HD>(s, Qt, kLd, 4 * ty, Kt, kLd, 4 * tx);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + 4 * ty + r;
            bool valid[4];
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + 4 * tx + c;
                valid[c] = j < kv_end && (!a.causal || j <= i);
                if (valid[c]) mx = fmaxf(mx, s[r][c]);
            }
            const float m_new = fmaxf(m[r], row_max16(mx));
            float e[4], sum = 0.0f;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                e[c] = valid[c] ? expf(s[r][c] - m_new) : 0.0f;
                sum += e[c];
            }
            sum = row_sum16(sum);
            if (m[r] != -INFINITY && m_new != m[r]) {  // rescale what earlier tiles summed
                const float corr = expf(m[r] - m_new);
                l[r] *= corr;
                for (int c = 0; c < HD / 16; c++) o[r][c] *= corr;
            }
            l[r] += sum;
            m[r] = m_new;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                float pd = e[c];
                if (a.dropout && valid[c]) pd = kept(a, bh, i, j0 + 4 * tx + c) ? pd * a.keep : 0.0f;
                Pt[(4 * tx + c) * kLd + 4 * ty + r] = (pd);
            }
        }
        __syncthreads();
        outer4_wide<HD>(o, Pt, 4 * ty, Vn, 4 * tx, nk);
    }
    for (int r = 0; r < 4; r++) {
        const int i = q0 + 4 * ty + r;
        if (i >= T) continue;
        const float inv = 1.0f / l[r];
        float *row = out + (int64_t)token_row(a, b, i) * C + (int64_t)h * HD;  // (HD,)
        for (int g = 0; g < HD / 64; g++)
            for (int c = 0; c < 4; c++) row[64 * g + 4 * tx + c] = o[r][4 * g + c] * inv;
        if (tx == 0) stats[(int64_t)bh * T + i] = m[r] + logf(l[r]);
    }
}

// dq: one block per (bh, query tile), heaviest first as the forward. dqkv: qkv's layout (query head h of
// the tile's rows written); dout: rows of C; qkv: Args' layout; stats, dd: (B, H, T).
template <int HD>
__global__ void __launch_bounds__(kTT) k_tiles_dq(float *dqkv, const float *dout, const float *qkv,
                                                  const float *stats, const float *dd, Args a, int BH) {
    extern __shared__ float4 smem4[];
    float *Qt = reinterpret_cast<float *>(smem4);  // (HD, kLd) round(scale q), k-major
    float *dOt = Qt + HD * kLd;                    // (HD, kLd) round(dO), k-major
    float *Kt = dOt + HD * kLd;                    // (HD, kLd) the key tile, k-major (scores)
    float *Vt = Kt + HD * kLd;                     // (HD, kLd) the value tile, k-major (dP)
    float *Kn = Vt + HD * kLd;                     // (kBR, ld_nat) the key tile (dq += dS K)
    float *Wt = Kn + kBR * ld_nat<HD>();           // (kBR keys, kLd) round(scale dS), key-major
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int T = a.T, C = a.C;
    const int bh = (int)(blockIdx.x % (unsigned)BH), q0 = (n_tiles(T) - 1 - (int)(blockIdx.x / (unsigned)BH)) * kBR;
    const int b = bh / a.H, h = bh % a.H, kvh = h / a.group, nq = min(kBR, T - q0);
    const int64_t step = q_step(a), kstep = kv_step(a), ostep = a.stride_t * (int64_t)C;
    const float *dhead = dout + (int64_t)token_row(a, b, 0) * C + (int64_t)h * HD;  // (T, HD) dO, rows ostep apart
    load_kmajor<HD>(Qt, qkv_head(qkv, a, b, h, 0), step, q0, nq, a.scale);
    load_kmajor<HD>(dOt, dhead, ostep, q0, nq, 1.0f);
    float lse[4], di[4], dq[4][HD / 16];
    for (int r = 0; r < 4; r++) {
        const int i = q0 + 4 * ty + r;
        lse[r] = i < T ? stats[(int64_t)bh * T + i] : 0.0f;
        di[r] = i < T ? dd[(int64_t)bh * T + i] : 0.0f;
        for (int c = 0; c < HD / 16; c++) dq[r][c] = 0.0f;
    }
    const int kv_end = a.causal ? q0 + nq : T;
    for (int j0 = 0; j0 < kv_end; j0 += kBR) {
        const int nk = min(kBR, kv_end - j0);
        __syncthreads();
        load_kmajor<HD>(Kt, qkv_head(qkv, a, b, kvh, 1), kstep, j0, nk, 1.0f);
        load_kmajor<HD>(Vt, qkv_head(qkv, a, b, kvh, 2), kstep, j0, nk, 1.0f);
        load_natural<HD>(Kn, qkv_head(qkv, a, b, kvh, 1), kstep, j0, nk);
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        outer4<HD>(s, Qt, kLd, 4 * ty, Kt, kLd, 4 * tx);
        outer4<HD>(dp, dOt, kLd, 4 * ty, Vt, kLd, 4 * tx);
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int i = q0 + 4 * ty + r;
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int j = j0 + 4 * tx + c;
                const bool valid = i < T && j < kv_end && (!a.causal || j <= i);
                float w = 0.0f;
                if (valid) {
                    const float pr = expf(s[r][c] - lse[r]);
                    float d = dp[r][c];
                    if (a.dropout) d = kept(a, bh, i, j) ? d * a.keep : 0.0f;
                    w = (a.scale * (pr * (d - di[r])));
                }
                Wt[(4 * tx + c) * kLd + 4 * ty + r] = w;
            }
        }
        __syncthreads();
        outer4_wide<HD>(dq, Wt, 4 * ty, Kn, 4 * tx, nk);
    }
    for (int r = 0; r < 4; r++) {
        const int i = q0 + 4 * ty + r;
        if (i >= T) continue;
        float *row = dqkv + q_at(a, b, i, h);  // (HD,) query head h of row i
        for (int g = 0; g < HD / 64; g++)
            for (int c = 0; c < 4; c++) row[64 * g + 4 * tx + c] = dq[r][4 * g + c];
    }
}

// dk, dv: one block per (b, key/value head, key tile); blockIdx.x = tile * B*KV + b * KV + kvh (key tile 0
// sees the most queries). dqkv: qkv's layout (key and value head kvh of the tile's rows written: the sums
// over the group's query heads, in head order); the rest as k_tiles_dq.
template <int HD>
__global__ void __launch_bounds__(kTT) k_tiles_dkdv(float *dqkv, const float *dout, const float *qkv,
                                                    const float *stats, const float *dd, Args a, int BKV) {
    extern __shared__ float4 smem4[];
    float *Kt = reinterpret_cast<float *>(smem4);  // (HD, kLd) the key tile, k-major (scores)
    float *Vt = Kt + HD * kLd;                     // (HD, kLd) the value tile, k-major (dP)
    float *Qt = Vt + HD * kLd;                     // (HD, kLd) round(scale q) of a query tile, k-major
    float *dOt = Qt + HD * kLd;                    // (HD, kLd) round(dO) of it, k-major
    float *Qn = dOt + HD * kLd;                    // (kBR, ld_nat) round(q) (dk += dS^T Q)
    float *dOn = Qn + kBR * ld_nat<HD>();          // (kBR, ld_nat) round(dO) (dv += P^T dO)
    float *Ws = Qt;                                // (kBR queries, kLd) round(scale dS), over Qt once read
    float *Ps = dOt;                               // (kBR queries, kLd) round(dropout(P)), over dOt once read
    const int tid = (int)threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int T = a.T, C = a.C;
    const int bkv = (int)(blockIdx.x % (unsigned)BKV), k0 = (int)(blockIdx.x / (unsigned)BKV) * kBR;
    const int b = bkv / a.KV, kvh = bkv % a.KV, nk = min(kBR, T - k0);
    const int64_t step = q_step(a), kstep = kv_step(a), ostep = a.stride_t * (int64_t)C;
    load_kmajor<HD>(Kt, qkv_head(qkv, a, b, kvh, 1), kstep, k0, nk, 1.0f);
    load_kmajor<HD>(Vt, qkv_head(qkv, a, b, kvh, 2), kstep, k0, nk, 1.0f);
    float dk[4][HD / 16], dv[4][HD / 16];
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < HD / 16; c++) dk[r][c] = 0.0f, dv[r][c] = 0.0f;
    for (int qh = 0; qh < a.group; qh++) {  // the query heads that read this key/value head, in order
        const int h = kvh * a.group + qh, bh = b * a.H + h;
        const float *dhead = dout + (int64_t)token_row(a, b, 0) * C + (int64_t)h * HD;  // (T, HD) dO, rows ostep apart
        for (int i0 = a.causal ? k0 : 0; i0 < T; i0 += kBR) {
            const int ni = min(kBR, T - i0);
            __syncthreads();  // the previous tile's reads of Ws, Ps, Qn, dOn are done
            load_kmajor<HD>(Qt, qkv_head(qkv, a, b, h, 0), step, i0, ni, a.scale);
            load_kmajor<HD>(dOt, dhead, ostep, i0, ni, 1.0f);
            load_natural<HD>(Qn, qkv_head(qkv, a, b, h, 0), step, i0, ni);
            load_natural<HD>(dOn, dhead, ostep, i0, ni);
            float lse[4], di[4];
            for (int r = 0; r < 4; r++) {
                const int i = i0 + 4 * ty + r;
                lse[r] = i < T ? stats[(int64_t)bh * T + i] : 0.0f;
                di[r] = i < T ? dd[(int64_t)bh * T + i] : 0.0f;
            }
            __syncthreads();
            float s[4][4] = {}, dp[4][4] = {};  // rows: queries 4 ty + r; columns: keys 4 tx + c
            outer4<HD>(s, Qt, kLd, 4 * ty, Kt, kLd, 4 * tx);
            outer4<HD>(dp, dOt, kLd, 4 * ty, Vt, kLd, 4 * tx);
            __syncthreads();  // Qt and dOt are read: Ws and Ps may overwrite them
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int i = i0 + 4 * ty + r;
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int j = k0 + 4 * tx + c;
                    const bool valid = i < T && j < T && (!a.causal || j <= i);
                    float w = 0.0f, pd = 0.0f;
                    if (valid) {
                        const float pr = expf(s[r][c] - lse[r]);
                        float d = dp[r][c];
                        pd = pr;
                        if (a.dropout) {
                            const bool keep = kept(a, bh, i, j);
                            pd = keep ? pr * a.keep : 0.0f;
                            d = keep ? d * a.keep : 0.0f;
                        }
                        w = (a.scale * (pr * (d - di[r])));
                        pd = (pd);
                    }
                    Ws[(4 * ty + r) * kLd + 4 * tx + c] = w;
                    Ps[(4 * ty + r) * kLd + 4 * tx + c] = pd;
                }
            }
            __syncthreads();
            outer4_wide<HD>(dk, Ws, 4 * ty, Qn, 4 * tx, ni);  // rows: keys 4 ty + r
            outer4_wide<HD>(dv, Ps, 4 * ty, dOn, 4 * tx, ni);
        }
    }
    for (int r = 0; r < 4; r++) {
        const int j = k0 + 4 * ty + r;
        if (j >= T) continue;
        float *krow = dqkv + k_at(a, b, j, kvh), *vrow = dqkv + v_at(a, b, j, kvh);  // (HD,) each
        for (int g = 0; g < HD / 64; g++)
            for (int c = 0; c < 4; c++) {
                krow[64 * g + 4 * tx + c] = dk[r][4 * g + c];
                vrow[64 * g + 4 * tx + c] = dv[r][4 * g + c];
            }
    }
}

// shared bytes of each kernel
template <int HD>
constexpr size_t fwd_bytes() {
    return sizeof(float) * (size_t)(2 * HD * kLd + kBR * ld_nat<HD>() + kBR * kLd);
}
template <int HD>
constexpr size_t dq_bytes() {
    return sizeof(float) * (size_t)(4 * HD * kLd + kBR * ld_nat<HD>() + kBR * kLd);
}
template <int HD>
constexpr size_t dkdv_bytes() {
    return sizeof(float) * (size_t)(4 * HD * kLd + 2 * kBR * ld_nat<HD>());
}

template <int HD>
void forward_hd(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a, int BH) {
    if (!allow_shared(st, k_tiles_forward<HD>, fwd_bytes<HD>())) return;
    const unsigned blocks = (unsigned)n_tiles(a.T) * (unsigned)BH;
    k_tiles_forward<HD><<<blocks, kTT, fwd_bytes<HD>(), cu_stream(st)>>>(out, stats, qkv, a, BH);
    CU_LAUNCHED(st, "attention_forward (tiles)");
}

template <int HD>
void backward_hd(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                 const float *dd, const Args &a, int BH) {
    if (!allow_shared(st, k_tiles_dq<HD>, dq_bytes<HD>())) return;
    if (!allow_shared(st, k_tiles_dkdv<HD>, dkdv_bytes<HD>())) return;
    const unsigned blocks = (unsigned)n_tiles(a.T) * (unsigned)BH, BKV = (unsigned)(BH / a.group);
    k_tiles_dq<HD><<<blocks, kTT, dq_bytes<HD>(), cu_stream(st)>>>(dqkv, dout, qkv, stats, dd, a, BH);
    CU_LAUNCHED(st, "attention_backward (dq tiles)");
    k_tiles_dkdv<HD><<<(unsigned)n_tiles(a.T) * BKV, kTT, dkdv_bytes<HD>(), cu_stream(st)>>>(dqkv, dout, qkv, stats,
                                                                                           dd, a, (int)BKV);
    CU_LAUNCHED(st, "attention_backward (dk, dv tiles)");
}

}  // namespace

namespace cuattn {

void tiles_forward(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a) {
    if (a.hd == 64) forward_hd<64>(st, out, stats, qkv, a, a.B * a.H);
    else forward_hd<128>(st, out, stats, qkv, a, a.B * a.H);
}

void tiles_backward(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                    const float *dd, const Args &a) {
    if (a.hd == 64) backward_hd<64>(st, dqkv, dout, qkv, stats, dd, a, a.B * a.H);
    else backward_hd<128>(st, dqkv, dout, qkv, stats, dd, a, a.B * a.H);
}

}  // namespace cuattn
