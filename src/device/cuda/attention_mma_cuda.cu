// attention_mma_cuda.cu: the bf16 table's attention for head dims 64 and 128 on tensor cores (WMMA,
// bf16 x bf16 -> fp32, m16n16k16): attention_tiles_cuda.cu's schedule with its products moved from CUDA
// cores to tensor cores. The bf16 table's products already take bf16 operands with fp32 accumulation
// (the CPU's rounding points, attention_cuda.cu), which is what a tensor core computes; only the order
// of the fp32 sums differs.
//
// A block of 4 warps holds a tile of 64 query rows (forward, dq) of one (batch, head) pair, or 64 key rows
// (dk, dv) of one (batch, key/value head) pair; warp w owns rows 16 w .. 16 w + 15 and sweeps the other
// side 64 rows at a time (for dk and dv, those of every query head of the group, in order). Products
// whose accumulators need no per-row rescaling stay in fragments across tiles (dq, dk, dv); the
// forward's output is rescaled as the running maximum moves, so each tile's P V lands in shared memory
// and every lane adds it into its row's registers. Softmax, D and dS are fp32 on CUDA cores: lane l of a
// warp takes row l / 2 and half l % 2 of the warp's 16 x 64 score tile (row maximum and sum over the lane
// pair by one shuffle). Every output element is written once; nothing is atomic: deterministic. The
// operands (q scaled and not, k, v, dO) are rounded to bf16 once per call into per-head copies in the
// stream's scratch (k_mma_prepare), from which the blocks fill their tiles 16 bytes at a time.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>
#include <stdint.h>

#include "attention_cuda.cuh"

namespace {

using namespace cuattn;
using namespace nvcuda;

constexpr int kWarps = 4;             // warps per block
constexpr int kThreads = 32 * kWarps;  // threads per block
constexpr int kRows = 16 * kWarps;     // rows per tile, both sides
constexpr int kLdS = kRows + 4;        // row length of a warp's fp32 score tile (16 x 64)
constexpr int kLdP = kRows + 8;        // row length of a warp's bf16 probability tile (16 x 64)

using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // B^T stored row-major
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// the row length of a bf16 tile of HD columns (16-byte padding: spreads banks, keeps WMMA's alignment)
template <int HD>
__host__ __device__ constexpr int ld_h() {
    return HD + 8;
}

// x rounded to bf16 (nearest even: cu_f32_to_bf16's bits)
__device__ __forceinline__ bf16 to_bf16(float x) { return __ushort_as_bfloat16(cu_f32_to_bf16(x)); }

// The operands in bf16, rounded once per call instead of once per tile: (B*H, T, HD) arrays of the query
// heads, head bh's token t at (bh * T + t) * HD, and (B*KV, T, HD) arrays of the key/value heads, head
// b * KV + kvh's token t at ((b * KV + kvh) * T + t) * HD. q_s = round(scale q) (the scores' A), q_n =
// round(q) (dk's), k, v, dO rounded. Forward: q_s, k, v; backward: all five (dout NULL in forward: q_n
// and dO skipped).
struct Operands {
    bf16 *q_s, *q_n, *k, *v, *dout;  // (B*H, T, HD): q_s, q_n, dout (NULL when not needed); (B*KV, T, HD): k, v
};

// One thread per 4 consecutive columns of one token of one query head: the rounded copies of Operands
// (the keys and values by the threads of each group's first query head). qkv: Args' layout; dout: rows
// of C, or NULL.
template <int HD>
__global__ void k_mma_prepare(Operands o, const float *qkv, const float *dout, Args a) {
    const size_t quads = (size_t)a.B * a.H * a.T * (HD / 4);
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < quads;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(idx % (HD / 4)) * 4;
        const size_t bt = idx / (HD / 4);  // bh * T + t
        const int t = (int)(bt % (size_t)a.T), bh = (int)(bt / (size_t)a.T), b = bh / a.H, h = bh % a.H;
        const float *q = qkv + q_at(a, b, t, h) + c;  // (4,)
        const size_t at = bt * HD + (size_t)c;
        for (int e = 0; e < 4; e++) o.q_s[at + e] = to_bf16(a.scale * q[e]);
        if (h % a.group == 0) {
            const int kvh = h / a.group;
            const float *k = qkv + k_at(a, b, t, kvh) + c, *v = qkv + v_at(a, b, t, kvh) + c;  // (4,) each
            const size_t kv = (((size_t)b * a.KV + kvh) * a.T + t) * HD + (size_t)c;
            for (int e = 0; e < 4; e++) {
                o.k[kv + e] = to_bf16(k[e]);
                o.v[kv + e] = to_bf16(v[e]);
            }
        }
        if (dout) {
            const float *d = dout + (int64_t)token_row(a, b, t) * a.C + (int64_t)h * HD + c;  // (4,)
            for (int e = 0; e < 4; e++) {
                o.q_n[at + e] = to_bf16(q[e]);
                o.dout[at + e] = to_bf16(d[e]);
            }
        }
    }
}

// Tile rows r0 .. r0 + n of a rounded operand into dst (kRows, ld_h<HD>) shared, rows n .. kRows - 1 zero;
// 16 bytes (8 values) a copy. src: (T, HD) bf16, one head's rows.
template <int HD>
__device__ __forceinline__ void copy_tile(bf16 *dst, const bf16 *src, int r0, int n) {
    constexpr int kVec = HD / 8;  // 16-byte pieces per row
    for (int idx = (int)threadIdx.x; idx < kRows * kVec; idx += kThreads) {
        const int r = idx / kVec, v = idx % kVec;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < n) val = *reinterpret_cast<const uint4 *>(src + (size_t)(r0 + r) * HD + 8 * v);
        *reinterpret_cast<uint4 *>(dst + r * ld_h<HD>() + 8 * v) = val;
    }
}

// S (16 x 64, fp32, row length kLdS) = A (16 x HD rows of a, row length lda) B^T, B's 64 rows of HD
// stored row-major at b (row length ldb): one warp.
template <int HD>
__device__ __forceinline__ void warp_abt(float *S, const bf16 *a, int lda, const bf16 *b, int ldb) {
#pragma unroll
    for (int f = 0; f < kRows / 16; f++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int k = 0; k < HD / 16; k++) {
            FragA fa;
            FragBt fb;
            wmma::load_matrix_sync(fa, a + 16 * k, lda);
            wmma::load_matrix_sync(fb, b + 16 * f * ldb + 16 * k, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(S + 16 * f, acc, kLdS, wmma::mem_row_major);
    }
}

// acc[g] (16 x 16 blocks g of a 16 x HD product) += P (16 x 64 bf16, row length kLdP) B (64 x HD bf16
// rows of b, row length ldb): one warp.
template <int HD>
__device__ __forceinline__ void warp_pb(FragC (&acc)[HD / 16], const bf16 *P, const bf16 *b, int ldb) {
#pragma unroll
    for (int k = 0; k < kRows / 16; k++) {
        FragA fa;
        wmma::load_matrix_sync(fa, P + 16 * k, kLdP);
#pragma unroll
        for (int g = 0; g < HD / 16; g++) {
            FragB fb;
            wmma::load_matrix_sync(fb, b + 16 * k * ldb + 16 * g, ldb);
            wmma::mma_sync(acc[g], fa, fb, acc[g]);
        }
    }
}

__host__ __device__ __forceinline__ int n_tiles(int T) { return (T + kRows - 1) / kRows; }

// byte offsets of a kernel's shared arrays, each 128-byte aligned
__host__ __device__ constexpr size_t al(size_t bytes) { return (bytes + 127) & ~(size_t)127; }
template <int HD>
__host__ __device__ constexpr size_t tile_bytes() {
    return al(sizeof(bf16) * kRows * ld_h<HD>());
}
constexpr size_t kScoreBytes = al(sizeof(float) * kWarps * 16 * kLdS);  // each warp's 16 x 64 fp32 tile
constexpr size_t kProbBytes = al(sizeof(bf16) * kWarps * 16 * kLdP);    // each warp's 16 x 64 bf16 tile
template <int HD>
__host__ __device__ constexpr size_t out_bytes() {
    return al(sizeof(float) * kWarps * 16 * (HD + 4));
}
template <int HD>
constexpr size_t fwd_bytes() {
    return 3 * tile_bytes<HD>() + kScoreBytes + kProbBytes + out_bytes<HD>();
}
template <int HD>
constexpr size_t dq_bytes() {
    return 4 * tile_bytes<HD>() + 2 * kScoreBytes + kProbBytes;
}
template <int HD>
constexpr size_t dkdv_bytes() {
    return 5 * tile_bytes<HD>() + 2 * kScoreBytes + 2 * kProbBytes + al(2 * sizeof(float) * kRows);
}

// A warp's 16 x HD result (fragments acc) to rows r0 .. r0 + 15 (those under T) of dst: row of token
// (b, r) at dst + token_row(b, r) * row_len (dst: the head's first column in its part of dqkv; row_len:
// the part's floats per row, Args' row_q or row_kv), through stage (16, kLdS) shared, 16 columns at a time.
template <int HD>
__device__ __forceinline__ void store_rows(float *dst, int64_t row_len, FragC (&acc)[HD / 16], float *stage,
                                           const Args &a, int b, int r0) {
    const int lane = (int)threadIdx.x & 31;
#pragma unroll
    for (int g = 0; g < HD / 16; g++) {
        wmma::store_matrix_sync(stage, acc[g], kLdS, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
            const int r = e >> 4, c = e & 15;
            if (r0 + r < a.T) dst[(int64_t)token_row(a, b, r0 + r) * row_len + 16 * g + c] = stage[r * kLdS + c];
        }
        __syncwarp();
    }
}

// Forward: one block per (bh, query tile), heaviest first: blockIdx.x = (ntiles - 1 - tile) * B*H + bh.
// out: rows of C; stats: (B, H, T); ops: prepare's.
template <int HD>
__global__ void __launch_bounds__(kThreads) k_mma_forward(float *out, float *stats, Operands ops, Args a, int BH) {
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);                                 // (64, ld_h) round(scale q)
    bf16 *Ks = reinterpret_cast<bf16 *>(smem + tile_bytes<HD>());              // (64, ld_h) round(k)
    bf16 *Vs = reinterpret_cast<bf16 *>(smem + 2 * tile_bytes<HD>());          // (64, ld_h) round(v)
    float *Sf = reinterpret_cast<float *>(smem + 3 * tile_bytes<HD>());        // (4, 16, kLdS) scores
    bf16 *Ps = reinterpret_cast<bf16 *>(smem + 3 * tile_bytes<HD>() + kScoreBytes);  // (4, 16, kLdP) dropout(P)
    float *Of = reinterpret_cast<float *>(smem + 3 * tile_bytes<HD>() + kScoreBytes + kProbBytes);  // (4, 16, HD + 4)
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int T = a.T, C = a.C;
    const int bh = (int)(blockIdx.x % (unsigned)BH), q0 = (n_tiles(T) - 1 - (int)(blockIdx.x / (unsigned)BH)) * kRows;
    const int b = bh / a.H, h = bh % a.H, nq = min(kRows, T - q0);
    const size_t head = (size_t)bh * T * HD;  // this head's rows in the rounded operands
    const size_t kv_head = ((size_t)b * a.KV + h / a.group) * T * HD;  // its key/value head's
    copy_tile<HD>(Qs, ops.q_s + head, q0, nq);
    float *S = Sf + warp * 16 * kLdS;                // (16, kLdS) this warp's scores
    bf16 *P = Ps + warp * 16 * kLdP;                 // (16, kLdP) this warp's probabilities
    float *O = Of + warp * 16 * (HD + 4);            // (16, HD + 4) this warp's P V of a tile
    const int i = q0 + 16 * warp + rr;               // this lane's query row
    float o[HD / 2];                                 // this lane's half of the output row
    #pragma unroll
    for (int c = 0; c < HD / 2; c++) o[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kv_end = a.causal ? q0 + nq : T;
    for (int j0 = 0; j0 < kv_end; j0 += kRows) {
        const int nk = min(kRows, kv_end - j0);
        __syncthreads();  // the previous tile's reads of Ks, Vs are done
        copy_tile<HD>(Ks, ops.k + kv_head, j0, nk);
        copy_tile<HD>(Vs, ops.v + kv_head, j0, nk);
        __syncthreads();
        warp_abt<HD>(S, Qs + 16 * warp * ld_h<HD>(), ld_h<HD>(), Ks, ld_h<HD>());
        __syncwarp();
        const float *s = S + rr * kLdS + 32 * half;  // (32,) this lane's scores
        float mx = -INFINITY;
        for (int t = 0; t < 32; t++) {
            const int j = j0 + 32 * half + t;
            if (j < kv_end && (!a.causal || j <= i)) mx = fmaxf(mx, s[t]);
        }
        const float m_new = fmaxf(m, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        float sum = 0.0f;
        bf16 *p = P + rr * kLdP + 32 * half;  // (32,)
        for (int t = 0; t < 32; t++) {
            const int j = j0 + 32 * half + t;
            const bool valid = j < kv_end && (!a.causal || j <= i);
            const float e = valid ? expf(s[t] - m_new) : 0.0f;
            sum += e;
            float pd = e;
            if (a.dropout && valid) pd = kept(a, bh, i, j) ? pd * a.keep : 0.0f;
            p[t] = to_bf16(pd);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        if (m != -INFINITY && m_new != m) {  // rescale what earlier tiles summed
            const float corr = expf(m - m_new);
            l *= corr;
            #pragma unroll
            for (int c = 0; c < HD / 2; c++) o[c] *= corr;
        }
        l += sum;
        m = m_new;
        __syncwarp();
        FragC acc[HD / 16];
#pragma unroll
        for (int g = 0; g < HD / 16; g++) wmma::fill_fragment(acc[g], 0.0f);
        warp_pb<HD>(acc, P, Vs, ld_h<HD>());
#pragma unroll
        for (int g = 0; g < HD / 16; g++) wmma::store_matrix_sync(O + 16 * g, acc[g], HD + 4, wmma::mem_row_major);
        __syncwarp();
        const float *ot = O + rr * (HD + 4) + half * (HD / 2);  // (HD / 2,)
        #pragma unroll
        for (int c = 0; c < HD / 2; c++) o[c] += ot[c];
        __syncwarp();  // O is read before the next tile's stores
    }
    if (i < T) {
        const float inv = 1.0f / l;
        float *row = out + (int64_t)token_row(a, b, i) * C + (int64_t)h * HD + half * (HD / 2);  // (HD / 2,)
        #pragma unroll
        for (int c = 0; c < HD / 2; c++) row[c] = o[c] * inv;
        if (half == 0) stats[(int64_t)bh * T + i] = m + logf(l);
    }
}

// dq: one block per (bh, query tile), heaviest first. dqkv: Args' layout (query head h of the tile's
// rows); ops: prepare's; stats, dd: (B, H, T).
template <int HD>
__global__ void __launch_bounds__(kThreads) k_mma_dq(float *dqkv, Operands ops, const float *stats, const float *dd,
                                                     Args a, int BH) {
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem);                             // (64, ld_h) round(scale q)
    bf16 *dOs = reinterpret_cast<bf16 *>(smem + tile_bytes<HD>());         // (64, ld_h) round(dO)
    bf16 *Ks = reinterpret_cast<bf16 *>(smem + 2 * tile_bytes<HD>());      // (64, ld_h) round(k)
    bf16 *Vs = reinterpret_cast<bf16 *>(smem + 3 * tile_bytes<HD>());      // (64, ld_h) round(v)
    float *Sf = reinterpret_cast<float *>(smem + 4 * tile_bytes<HD>());    // (4, 16, kLdS) scores
    float *Df = reinterpret_cast<float *>(smem + 4 * tile_bytes<HD>() + kScoreBytes);  // (4, 16, kLdS) dO . v
    bf16 *Ws = reinterpret_cast<bf16 *>(smem + 4 * tile_bytes<HD>() + 2 * kScoreBytes);  // (4, 16, kLdP) round(scale dS)
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int T = a.T;
    const int bh = (int)(blockIdx.x % (unsigned)BH), q0 = (n_tiles(T) - 1 - (int)(blockIdx.x / (unsigned)BH)) * kRows;
    const int b = bh / a.H, h = bh % a.H, nq = min(kRows, T - q0);
    const size_t head = (size_t)bh * T * HD;  // this head's rows in the rounded operands
    const size_t kv_head = ((size_t)b * a.KV + h / a.group) * T * HD;  // its key/value head's
    copy_tile<HD>(Qs, ops.q_s + head, q0, nq);
    copy_tile<HD>(dOs, ops.dout + head, q0, nq);
    float *S = Sf + warp * 16 * kLdS, *D = Df + warp * 16 * kLdS;  // (16, kLdS) each: this warp's tiles
    bf16 *W = Ws + warp * 16 * kLdP;                               // (16, kLdP)
    const int i = q0 + 16 * warp + rr;
    const float lse = i < T ? stats[(int64_t)bh * T + i] : 0.0f, di = i < T ? dd[(int64_t)bh * T + i] : 0.0f;
    FragC acc[HD / 16];  // dq of the warp's 16 rows
#pragma unroll
    for (int g = 0; g < HD / 16; g++) wmma::fill_fragment(acc[g], 0.0f);
    const int kv_end = a.causal ? q0 + nq : T;
    for (int j0 = 0; j0 < kv_end; j0 += kRows) {
        const int nk = min(kRows, kv_end - j0);
        __syncthreads();
        copy_tile<HD>(Ks, ops.k + kv_head, j0, nk);
        copy_tile<HD>(Vs, ops.v + kv_head, j0, nk);
        __syncthreads();
        warp_abt<HD>(S, Qs + 16 * warp * ld_h<HD>(), ld_h<HD>(), Ks, ld_h<HD>());
        warp_abt<HD>(D, dOs + 16 * warp * ld_h<HD>(), ld_h<HD>(), Vs, ld_h<HD>());
        __syncwarp();
        const float *s = S + rr * kLdS + 32 * half, *dp = D + rr * kLdS + 32 * half;  // (32,) each
        bf16 *w = W + rr * kLdP + 32 * half;                                         // (32,)
        for (int t = 0; t < 32; t++) {
            const int j = j0 + 32 * half + t;
            float v = 0.0f;
            if (i < T && j < kv_end && (!a.causal || j <= i)) {
                const float pr = expf(s[t] - lse);
                float d = dp[t];
                if (a.dropout) d = kept(a, bh, i, j) ? d * a.keep : 0.0f;
                v = a.scale * (pr * (d - di));
            }
            w[t] = to_bf16(v);
        }
        __syncwarp();
        warp_pb<HD>(acc, W, Ks, ld_h<HD>());
        __syncwarp();
    }
    // the warp's dq rows through its score tile (free now) into query head h of dqkv
    store_rows<HD>(dqkv + (int64_t)h * HD, a.row_q, acc, Sf + warp * 16 * kLdS, a, b, q0 + 16 * warp);
}

// dk, dv: one block per (b, key/value head, key tile); blockIdx.x = tile * B*KV + b * KV + kvh (key tile 0
// sees the most queries). dqkv: Args' layout (key and value head kvh of the tile's rows: the sums over the
// group's query heads, in head order); the rest as k_mma_dq.
template <int HD>
__global__ void __launch_bounds__(kThreads) k_mma_dkdv(float *dqkv, Operands ops, const float *stats, const float *dd,
                                                       Args a, int BKV) {
    extern __shared__ __align__(128) unsigned char smem[];
    const size_t tb = tile_bytes<HD>();
    bf16 *Ks = reinterpret_cast<bf16 *>(smem);            // (64, ld_h) round(k) of the key tile
    bf16 *Vs = reinterpret_cast<bf16 *>(smem + tb);       // (64, ld_h) round(v)
    bf16 *Qs = reinterpret_cast<bf16 *>(smem + 2 * tb);   // (64, ld_h) round(scale q) of a query tile
    bf16 *Qn = reinterpret_cast<bf16 *>(smem + 3 * tb);   // (64, ld_h) round(q)
    bf16 *dOs = reinterpret_cast<bf16 *>(smem + 4 * tb);  // (64, ld_h) round(dO)
    float *Sf = reinterpret_cast<float *>(smem + 5 * tb);                // (4, 16, kLdS) scores, keys x queries
    float *Df = reinterpret_cast<float *>(smem + 5 * tb + kScoreBytes);  // (4, 16, kLdS) v . dO
    bf16 *Ws = reinterpret_cast<bf16 *>(smem + 5 * tb + 2 * kScoreBytes);               // (4, 16, kLdP) round(scale dS)^T
    bf16 *Ps = reinterpret_cast<bf16 *>(smem + 5 * tb + 2 * kScoreBytes + kProbBytes);  // (4, 16, kLdP) round(P)^T
    float *lse_s = reinterpret_cast<float *>(smem + 5 * tb + 2 * kScoreBytes + 2 * kProbBytes);  // (64,) the tile's lse
    float *di_s = lse_s + kRows;                                                                  // (64,) its D
    const int warp = (int)threadIdx.x >> 5, lane = (int)threadIdx.x & 31, rr = lane >> 1, half = lane & 1;
    const int T = a.T;
    const int bkv = (int)(blockIdx.x % (unsigned)BKV), k0 = (int)(blockIdx.x / (unsigned)BKV) * kRows;
    const int b = bkv / a.KV, kvh = bkv % a.KV, nk = min(kRows, T - k0);
    const size_t kv_head = (size_t)bkv * T * HD;  // this key/value head's rows in the rounded operands
    copy_tile<HD>(Ks, ops.k + kv_head, k0, nk);
    copy_tile<HD>(Vs, ops.v + kv_head, k0, nk);
    float *S = Sf + warp * 16 * kLdS, *D = Df + warp * 16 * kLdS;  // (16, kLdS) each
    bf16 *W = Ws + warp * 16 * kLdP, *P = Ps + warp * 16 * kLdP;   // (16, kLdP) each
    const int j = k0 + 16 * warp + rr;                             // this lane's key row
    FragC dk[HD / 16], dv[HD / 16];
#pragma unroll
    for (int g = 0; g < HD / 16; g++) wmma::fill_fragment(dk[g], 0.0f), wmma::fill_fragment(dv[g], 0.0f);
    for (int qh = 0; qh < a.group; qh++) {  // the query heads that read this key/value head, in order
        const int h = kvh * a.group + qh, bh = b * a.H + h;
        const size_t head = (size_t)bh * T * HD;  // this query head's rows in the rounded operands
        for (int i0 = a.causal ? k0 : 0; i0 < T; i0 += kRows) {
            const int ni = min(kRows, T - i0);
            __syncthreads();  // the previous tile's reads are done
            copy_tile<HD>(Qs, ops.q_s + head, i0, ni);
            copy_tile<HD>(Qn, ops.q_n + head, i0, ni);
            copy_tile<HD>(dOs, ops.dout + head, i0, ni);
            for (int r = (int)threadIdx.x; r < kRows; r += kThreads) {
                lse_s[r] = r < ni ? stats[(int64_t)bh * T + i0 + r] : 0.0f;
                di_s[r] = r < ni ? dd[(int64_t)bh * T + i0 + r] : 0.0f;
            }
            __syncthreads();
            warp_abt<HD>(S, Ks + 16 * warp * ld_h<HD>(), ld_h<HD>(), Qs, ld_h<HD>());   // S^T: keys x queries
            warp_abt<HD>(D, Vs + 16 * warp * ld_h<HD>(), ld_h<HD>(), dOs, ld_h<HD>());  // dP^T
            __syncwarp();
            const float *s = S + rr * kLdS + 32 * half, *dp = D + rr * kLdS + 32 * half;  // (32,) each
            bf16 *w = W + rr * kLdP + 32 * half, *p = P + rr * kLdP + 32 * half;          // (32,) each
            for (int t = 0; t < 32; t++) {
                const int ii = 32 * half + t, i = i0 + ii;
                float wv = 0.0f, pd = 0.0f;
                if (i < T && j < T && (!a.causal || j <= i)) {
                    const float pr = expf(s[t] - lse_s[ii]);
                    float d = dp[t];
                    pd = pr;
                    if (a.dropout) {
                        const bool keep = kept(a, bh, i, j);
                        pd = keep ? pr * a.keep : 0.0f;
                        d = keep ? d * a.keep : 0.0f;
                    }
                    wv = a.scale * (pr * (d - di_s[ii]));
                }
                w[t] = to_bf16(wv);
                p[t] = to_bf16(pd);
            }
            __syncwarp();
            warp_pb<HD>(dk, W, Qn, ld_h<HD>());
            warp_pb<HD>(dv, P, dOs, ld_h<HD>());
            __syncwarp();
        }
    }
    float *stage = Sf + warp * 16 * kLdS;  // (16, kLdS): 16 columns at a time
    store_rows<HD>(dqkv + a.k_base + (int64_t)kvh * HD, a.row_kv, dk, stage, a, b, k0 + 16 * warp);
    store_rows<HD>(dqkv + a.v_base + (int64_t)kvh * HD, a.row_kv, dv, stage, a, b, k0 + 16 * warp);
}

// one rounded operand's bytes in the scratch, 256-byte aligned: of `heads` heads (H for the queries and
// dO, KV for the keys and values)
size_t operand_bytes(const Args &a, int heads) {
    return (sizeof(bf16) * (size_t)a.B * heads * a.T * a.hd + 255) & ~(size_t)255;
}

// the scratch of the operands: q_s, k, v (forward), then q_n and dO (backward)
size_t operands_bytes(const Args &a, bool backward) {
    return (backward ? 3 : 1) * operand_bytes(a, a.H) + 2 * operand_bytes(a, a.KV);
}

// The rounded operands in scratch (operands_bytes), made on st: q_s, k, v, and q_n and dO when dout is
// not NULL.
template <int HD>
Operands prepare(fsdp_stream *st, unsigned char *scratch, const float *qkv, const float *dout, const Args &a) {
    const size_t nq = operand_bytes(a, a.H), nkv = operand_bytes(a, a.KV);
    Operands o = {(bf16 *)scratch, NULL, (bf16 *)(scratch + nq), (bf16 *)(scratch + nq + nkv), NULL};
    if (dout) o.q_n = (bf16 *)(scratch + nq + 2 * nkv), o.dout = (bf16 *)(scratch + 2 * nq + 2 * nkv);
    const size_t quads = (size_t)a.B * a.H * a.T * (HD / 4);
    k_mma_prepare<HD><<<cu_blocks(quads, 256), 256, 0, cu_stream(st)>>>(o, qkv, dout, a);
    CU_LAUNCHED(st, "attention (bf16 operands)");
    return o;
}

template <int HD>
void forward_hd(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a, int BH) {
    unsigned char *scratch = (unsigned char *)fsdp_cuda_scratch(st, operands_bytes(a, false));  // q_s, k, v
    if (!scratch || !allow_shared(st, k_mma_forward<HD>, fwd_bytes<HD>())) return;  // failures noted on st
    const Operands ops = prepare<HD>(st, scratch, qkv, NULL, a);
    k_mma_forward<HD><<<(unsigned)n_tiles(a.T) * (unsigned)BH, kThreads, fwd_bytes<HD>(), cu_stream(st)>>>(out, stats,
                                                                                                        ops, a, BH);
    CU_LAUNCHED(st, "attention_forward (tensor cores)");
}

template <int HD>
void backward_hd(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                 const float *dd, const Args &a, int BH, unsigned char *scratch) {
    if (!allow_shared(st, k_mma_dq<HD>, dq_bytes<HD>()) || !allow_shared(st, k_mma_dkdv<HD>, dkdv_bytes<HD>())) return;
    const Operands ops = prepare<HD>(st, scratch, qkv, dout, a);
    const unsigned blocks = (unsigned)n_tiles(a.T) * (unsigned)BH, BKV = (unsigned)(BH / a.group);
    k_mma_dq<HD><<<blocks, kThreads, dq_bytes<HD>(), cu_stream(st)>>>(dqkv, ops, stats, dd, a, BH);
    CU_LAUNCHED(st, "attention_backward (dq, tensor cores)");
    k_mma_dkdv<HD><<<(unsigned)n_tiles(a.T) * BKV, kThreads, dkdv_bytes<HD>(), cu_stream(st)>>>(dqkv, ops, stats, dd,
                                                                                               a, (int)BKV);
    CU_LAUNCHED(st, "attention_backward (dk, dv, tensor cores)");
}

}  // namespace

namespace cuattn {

size_t mma_backward_scratch(const Args &a) { return operands_bytes(a, true); }

void mma_forward(fsdp_stream *st, float *out, float *stats, const float *qkv, const Args &a) {
    if (a.hd == 64) forward_hd<64>(st, out, stats, qkv, a, a.B * a.H);
    else forward_hd<128>(st, out, stats, qkv, a, a.B * a.H);
}

void mma_backward(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *stats,
                  const float *dd, const Args &a, void *scratch) {
    unsigned char *sc = (unsigned char *)scratch;
    if (a.hd == 64) backward_hd<64>(st, dqkv, dout, qkv, stats, dd, a, a.B * a.H, sc);
    else backward_hd<128>(st, dqkv, dout, qkv, stats, dd, a, a.B * a.H, sc);
}

}  // namespace cuattn
