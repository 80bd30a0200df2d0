// attention_cuda.cu: the CUDA device's fused attention (attention_forward, attention_backward), in the
// fp32 table and the bf16 one: what device/cpu/attention.c computes, with no T x T matrix stored.
//
// Layout (kernels.h): qkv holds H query heads and kv_heads key/value heads of hd = C / H floats, as rows
// of (H + 2 kv_heads) hd (q | k | v) or as three planes (fsdp_attention_layout; Args' q_at, k_at, v_at);
// out / dout rows of C, token (b, t) at row b * stride_b + t * stride_t; query head h reads key/value
// head h / (H / kv_heads) (grouped-query attention: the keys and values are never repeated).
//
// Forward: one block of kThreads threads per (b, h, query row i). Keys go by in tiles of kTile = 256
// starting at key 0 (attention.c's ATT_BC key blocks), with the CPU's online softmax per tile: the
// row's running maximum m takes the tile's largest visible score, P = exp(s - m) for the tile, the
// running sum l (of the undropped P) and the output rescaled by exp(m_old - m) when m moved, then
// out += dropout(P) V for the tile. At the end out *= 1 / l and stats = m + log(l). Scores are
// (scale q) . k, scale = 1 / sqrt(hd) joined to q first (as the CPU's GEMM applies alpha to A). A
// warp computes a key's score (lanes over the head's columns, then a butterfly sum); P V is split over
// kThreads / hd groups of hd threads (group g sums keys g, g + G, ...), the groups' sums then added in
// group order by thread c of column c: fixed orders, no atomics, deterministic.
//
// Backward (attention.c's formulas): D_i = dO_i . O_i (fp32, in order of columns, as the CPU), then
// P_ij = exp(s_ij - stats_i), dP_ij = (dO_i . v_j) * dropout mask * 1/(1-p) (or 0), dS_ij = P_ij
// (dP_ij - D_i), dq_i = sum_j (scale dS_ij) k_j, dk_j = sum_i (scale dS_ij) q_i, dv_j = sum_i
// dropout(P_ij) dO_i. Two kernels, each recomputing P: dq with one block per query row (looping over
// its visible keys), dk and dv with one block per key row of a key/value head (looping over the group's
// query heads in order, and over each one's queries that see the key); each element of dqkv is written
// once (overwritten), no atomics.
//
// Dropout: probability (i, j) of pair bh = b*H + h is kept iff uniform(rng, (bh*T + i)*T + j) >= p
// (cu_uniform_at: the CPU's Philox stream, so the same mask), kept values times 1/(1-p) in fp32 (the
// CPU's cpu_dropout_range scale); applied only when p > 0, as the CPU.
//
// bf16 table: the products take bf16-rounded operands (cu_round_bf16, nearest even) with fp32
// accumulation, at the CPU's rounding points (cpu_gemm_bf16 rounds alpha * A and B): scores
// round(scale q) . round(k); out += round(dropout(P)) round(v) (P relative to the tile's running
// maximum, as the CPU's key blocks); dP' = round(dO) . round(v); dq += round(scale dS) round(k);
// dk += round(scale dS) round(q); dv += round(dropout(P)) round(dO). The softmax, D and dS stay fp32.
//
// Head dims 64 and 128 go to 64 x 64 tiles (each K and V row read once per 64 query rows): the fp32
// table's on CUDA cores (attention_tiles_cuda.cu), the bf16 table's on tensor cores
// (attention_mma_cuda.cu); these row kernels take the others. Head dims up to kMaxHd (256); larger ones
// (or C % H != 0, or H % kv_heads != 0) note an error on the stream and compute nothing.
#include <cublas_v2.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "attention_cuda.cuh"

namespace {

using namespace cuattn;

constexpr int kThreads = 256;             // threads per block (8 warps)
constexpr int kWarps = kThreads / 32;     // warps per block
constexpr int kTile = 256;                // keys (forward, dq) or queries (dk, dv) per tile: attention.c's ATT_BC
constexpr int kMaxHd = kThreads;          // largest head dim: thread c < hd holds column c of the output row
constexpr unsigned kRowdotThreads = 256;  // threads per block of the D kernel

// butterfly sum / maximum over a warp: every lane gets the same bits
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// The sum (block_sum) or maximum (block_max) of v over the block's kThreads threads, the warps' results
// combined in warp order; every thread gets it. All threads must call. red: (kWarps,) shared.
__device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    __syncthreads();  // red is free: the previous reduction's reads are done
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
    for (int w = 1; w < kWarps; w++) s += red[w];
    return s;
}
__device__ float block_max(float v, float *red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = red[0];
    for (int w = 1; w < kWarps; w++) s = fmaxf(s, red[w]);
    return s;
}

// One block per (b, h, i): blockIdx.x = bh * T + i. out: rows of C; stats: (B, H, T); qkv: Args' layout.
template <bool kB16>
__global__ void __launch_bounds__(kThreads) k_attention_forward(float *out, float *stats, const float *qkv, Args a) {
    __shared__ float qs[kMaxHd];      // (hd,) the query row, scaled (and rounded): the scores' A
    __shared__ float sp[kTile];       // (kTile,) the tile's scores, then its probabilities (dropped, rounded)
    __shared__ float part[kThreads];  // (G, hd) the groups' partial sums of P V
    __shared__ float red[kWarps];     // (kWarps,) block reductions
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int T = a.T, C = a.C, hd = a.hd;
    const int i = (int)(blockIdx.x % (unsigned)T), bh = (int)(blockIdx.x / (unsigned)T);
    const int b = bh / a.H, h = bh % a.H;
    const int64_t step = kv_step(a);  // floats from one token's key (value) row to the next's
    const float *kh = qkv + k_at(a, b, 0, h / a.group), *vh = qkv + v_at(a, b, 0, h / a.group);  // (T, hd), ld step
    const float *q = qkv + q_at(a, b, i, h);                                                      // (hd,)
    for (int c = tid; c < hd; c += kThreads) qs[c] = opnd<kB16>(a.scale * q[c]);
    __syncthreads();

    const int G = kThreads / hd, g = tid / hd, col = tid % hd;  // P V: group g of G, column col
    const int kv_end = a.causal ? i + 1 : T;                    // keys the row sees: 0 .. kv_end
    float o = 0.0f, m = -INFINITY, l = 0.0f;  // output column tid (tid < hd), running maximum and sum
    for (int j0 = 0; j0 < kv_end; j0 += kTile) {
        const int n = kv_end - j0 < kTile ? kv_end - j0 : kTile;
        for (int jj = warp; jj < n; jj += kWarps) {
            const float *k = kh + (int64_t)(j0 + jj) * step;  // (hd,)
            float acc = 0.0f;
            for (int c = lane; c < hd; c += 32) acc += qs[c] * opnd<kB16>(k[c]);
            acc = warp_sum(acc);
            if (lane == 0) sp[jj] = acc;
        }
        __syncthreads();
        const float s = tid < n ? sp[tid] : -INFINITY;
        const float mx = fmaxf(block_max(s, red), m);
        const float e = tid < n ? expf(s - mx) : 0.0f;
        const float sum = block_sum(e, red);
        if (m != -INFINITY && mx != m) {  // rescale what earlier tiles summed
            const float corr = expf(m - mx);
            l *= corr;
            o *= corr;
        }
        l += sum;
        m = mx;
        float pe = e;
        if (a.dropout && tid < n) pe = kept(a, bh, i, j0 + tid) ? pe * a.keep : 0.0f;
        sp[tid] = opnd<kB16>(pe);  // this thread's own element: the others' reads of sp were before block_max
        __syncthreads();
        if (g < G) {
            const float *v = vh + col;  // column col of the values, ld step
            float acc = 0.0f;
            for (int jj = g; jj < n; jj += G) acc += sp[jj] * opnd<kB16>(v[(int64_t)(j0 + jj) * step]);
            part[g * hd + col] = acc;
        }
        __syncthreads();
        if (tid < hd) {
            float acc = 0.0f;
            for (int gg = 0; gg < G; gg++) acc += part[gg * hd + tid];
            o += acc;
        }
    }
    if (tid < hd) out[token_row(a, b, i) * (size_t)C + (size_t)h * hd + tid] = o * (1.0f / l);
    if (tid == 0) stats[(size_t)bh * T + i] = m + logf(l);
}

// dd (B*H*T,) = dO_i . O_i per (bh, i) (index bh * T + i), summed in order of columns (attention.c's dd);
// dout, out: rows of C. n = B*H*T.
__global__ void k_attention_rowdot(float *dd, const float *dout, const float *out, Args a, size_t n) {
    for (size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % (size_t)a.T), bh = (int)(idx / (size_t)a.T);
        const int b = bh / a.H, h = bh % a.H;
        const size_t at = token_row(a, b, i) * (size_t)a.C + (size_t)h * a.hd;
        const float *dO = dout + at, *o = out + at;  // (hd,) each
        float acc = 0.0f;
        for (int c = 0; c < a.hd; c++) acc = __fadd_rn(acc, __fmul_rn(dO[c], o[c]));
        dd[idx] = acc;
    }
}

// One block per (b, h, query row i): blockIdx.x = bh * T + i. dqkv: qkv's layout (query head h of row i
// written); dout: rows of C; qkv: Args' layout; stats, dd: (B, H, T).
template <bool kB16>
__global__ void __launch_bounds__(kThreads)
    k_attention_dq(float *dqkv, const float *dout, const float *qkv, const float *stats, const float *dd, Args a) {
    __shared__ float qs[kMaxHd];      // (hd,) the query row, scaled (and rounded)
    __shared__ float dos[kMaxHd];     // (hd,) the row's output gradient (rounded)
    __shared__ float sp[kTile];       // (kTile,) scale dS of the tile's keys (rounded)
    __shared__ float part[kThreads];  // (G, hd) the groups' partial sums of dS K
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int T = a.T, C = a.C, hd = a.hd;
    const int i = (int)(blockIdx.x % (unsigned)T), bh = (int)(blockIdx.x / (unsigned)T);
    const int b = bh / a.H, h = bh % a.H;
    const int64_t step = kv_step(a);
    const float *kh = qkv + k_at(a, b, 0, h / a.group), *vh = qkv + v_at(a, b, 0, h / a.group);  // (T, hd), ld step
    const float *q = qkv + q_at(a, b, i, h);                                                      // (hd,)
    const float *dO = dout + token_row(a, b, i) * (size_t)C + (size_t)h * hd;                     // (hd,)
    for (int c = tid; c < hd; c += kThreads) {
        qs[c] = opnd<kB16>(a.scale * q[c]);
        dos[c] = opnd<kB16>(dO[c]);
    }
    const float lse = stats[(size_t)bh * T + i], di = dd[(size_t)bh * T + i];
    __syncthreads();

    const int G = kThreads / hd, g = tid / hd, col = tid % hd;
    const int kv_end = a.causal ? i + 1 : T;
    float dq = 0.0f;  // column tid (tid < hd)
    for (int j0 = 0; j0 < kv_end; j0 += kTile) {
        const int n = kv_end - j0 < kTile ? kv_end - j0 : kTile;
        for (int jj = warp; jj < n; jj += kWarps) {
            const float *k = kh + (int64_t)(j0 + jj) * step, *v = vh + (int64_t)(j0 + jj) * step;  // (hd,) each
            float s = 0.0f, dp = 0.0f;
            for (int c = lane; c < hd; c += 32) {
                s += qs[c] * opnd<kB16>(k[c]);
                dp += dos[c] * opnd<kB16>(v[c]);
            }
            s = warp_sum(s);
            dp = warp_sum(dp);
            if (lane == 0) {
                const float pr = expf(s - lse);
                if (a.dropout) dp = kept(a, bh, i, j0 + jj) ? dp * a.keep : 0.0f;
                sp[jj] = opnd<kB16>(a.scale * (pr * (dp - di)));
            }
        }
        __syncthreads();
        if (g < G) {
            const float *k = kh + col;  // column col of the keys, ld step
            float acc = 0.0f;
            for (int jj = g; jj < n; jj += G) acc += sp[jj] * opnd<kB16>(k[(int64_t)(j0 + jj) * step]);
            part[g * hd + col] = acc;
        }
        __syncthreads();
        if (tid < hd) {
            float acc = 0.0f;
            for (int gg = 0; gg < G; gg++) acc += part[gg * hd + tid];
            dq += acc;
        }
    }
    if (tid < hd) dqkv[q_at(a, b, i, h) + tid] = dq;
}

// One block per (b, key/value head kvh, key row j): blockIdx.x = (b * KV + kvh) * T + j. dqkv: qkv's
// layout (key and value head kvh of row j written: the sums over the group's query heads, in head order);
// dout: rows of C; qkv: Args' layout; stats, dd: (B, H, T).
template <bool kB16>
__global__ void __launch_bounds__(kThreads)
    k_attention_dkdv(float *dqkv, const float *dout, const float *qkv, const float *stats, const float *dd, Args a) {
    __shared__ float ks[kMaxHd];        // (hd,) the key row (rounded)
    __shared__ float vs[kMaxHd];        // (hd,) the value row (rounded)
    __shared__ float ws[kTile];         // (kTile,) scale dS of the tile's queries (rounded)
    __shared__ float ps[kTile];         // (kTile,) dropout(P) of the tile's queries (rounded)
    __shared__ float part_k[kThreads];  // (G, hd) the groups' partial sums of dS^T Q
    __shared__ float part_v[kThreads];  // (G, hd) the groups' partial sums of P^T dO
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int T = a.T, C = a.C, hd = a.hd;
    const int j = (int)(blockIdx.x % (unsigned)T), bkv = (int)(blockIdx.x / (unsigned)T);
    const int b = bkv / a.KV, kvh = bkv % a.KV;
    const int64_t step = q_step(a), ostep = (int64_t)a.stride_t * C;
    const float *k = qkv + k_at(a, b, j, kvh), *v = qkv + v_at(a, b, j, kvh);  // (hd,) each
    for (int c = tid; c < hd; c += kThreads) {
        ks[c] = opnd<kB16>(k[c]);
        vs[c] = opnd<kB16>(v[c]);
    }
    __syncthreads();

    const int G = kThreads / hd, g = tid / hd, col = tid % hd;
    float dk = 0.0f, dv = 0.0f;  // column tid (tid < hd)
    for (int qh = 0; qh < a.group; qh++) {  // the query heads that read this key/value head, in order
        const int h = kvh * a.group + qh, bh = b * a.H + h;
        const float *head = qkv + q_at(a, b, 0, h);                                  // (T, hd) q, ld step
        const float *dhead = dout + token_row(a, b, 0) * (size_t)C + (size_t)h * hd;  // (T, hd) dO, ld ostep
        const float *lse = stats + (size_t)bh * T, *di = dd + (size_t)bh * T;        // (T,) each
        for (int i0 = a.causal ? j : 0; i0 < T; i0 += kTile) {  // the queries that see key j
            const int n = T - i0 < kTile ? T - i0 : kTile;
            for (int ii = warp; ii < n; ii += kWarps) {
                const int i = i0 + ii;
                const float *q = head + (int64_t)i * step, *dO = dhead + (int64_t)i * ostep;  // (hd,) each
                float s = 0.0f, dp = 0.0f;
                for (int c = lane; c < hd; c += 32) {
                    s += opnd<kB16>(a.scale * q[c]) * ks[c];
                    dp += opnd<kB16>(dO[c]) * vs[c];
                }
                s = warp_sum(s);
                dp = warp_sum(dp);
                if (lane == 0) {
                    const float pr = expf(s - lse[i]);
                    float pd = pr;
                    if (a.dropout) {
                        const bool keep = kept(a, bh, i, j);
                        pd = keep ? pr * a.keep : 0.0f;
                        dp = keep ? dp * a.keep : 0.0f;
                    }
                    ws[ii] = opnd<kB16>(a.scale * (pr * (dp - di[i])));
                    ps[ii] = opnd<kB16>(pd);
                }
            }
            __syncthreads();
            if (g < G) {
                const float *qc = head + col, *dc = dhead + col;  // column col of the queries (ld step), of dO (ld ostep)
                float acc_k = 0.0f, acc_v = 0.0f;
                for (int ii = g; ii < n; ii += G) {
                    const int64_t i = i0 + ii;
                    acc_k += ws[ii] * opnd<kB16>(qc[i * step]);
                    acc_v += ps[ii] * opnd<kB16>(dc[i * ostep]);
                }
                part_k[g * hd + col] = acc_k;
                part_v[g * hd + col] = acc_v;
            }
            __syncthreads();
            if (tid < hd) {
                float acc_k = 0.0f, acc_v = 0.0f;
                for (int gg = 0; gg < G; gg++) acc_k += part_k[gg * hd + tid], acc_v += part_v[gg * hd + tid];
                dk += acc_k;
                dv += acc_v;
            }
        }
    }
    if (tid < hd) {
        dqkv[k_at(a, b, j, kvh) + tid] = dk;
        dqkv[v_at(a, b, j, kvh) + tid] = dv;
    }
}

// The kernels' arguments for d; false (an error noted on st naming `what`, nothing to run) when the
// shapes are unsupported; *blocks = B*H*T, 0 when there is nothing to compute.
bool make_args(fsdp_stream *st, const fsdp_attention_dims *d, const char *what, Args *a, unsigned *blocks) {
    *blocks = 0;
    if (d->B <= 0 || d->T <= 0 || d->H <= 0) return false;  // no rows
    const int hd = d->C / d->H;
    const size_t n = (size_t)d->B * (size_t)d->H * (size_t)d->T;
    const fsdp_attention_layout lay = fsdp_attention_layout_of(d);
    if (d->C <= 0 || d->C % d->H != 0 || hd > kMaxHd || n > 0x7fffffffu || lay.kv_heads <= 0 ||
        d->H % lay.kv_heads != 0) {
        // head dim over 256, C % H, H % kv_heads, or too many rows
        fsdp_cuda_check(st, what, (int)CUBLAS_STATUS_NOT_SUPPORTED);
        return false;
    }
    a->B = d->B, a->T = d->T, a->H = d->H, a->C = d->C, a->hd = hd;
    a->KV = lay.kv_heads, a->group = lay.group;
    a->row_q = lay.row_q, a->row_kv = lay.row_kv, a->k_base = lay.k_base, a->v_base = lay.v_base;
    a->stride_b = d->stride_b, a->stride_t = d->stride_t;
    a->causal = d->causal;
    a->dropout = d->dropout_p > 0.0f;
    a->p = d->dropout_p;
    a->keep = d->dropout_p < 1.0f ? 1.0f / (1.0f - d->dropout_p) : 0.0f;
    a->scale = 1.0f / sqrtf((float)hd);
    a->rng = d->rng;
    *blocks = (unsigned)n;
    return true;
}

template <bool kB16>
void t_attention_forward(fsdp_stream *st, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    Args a;
    unsigned blocks;
    if (!make_args(st, d, "attention_forward (head dim over 256, C % H != 0 or H % kv_heads != 0)", &a, &blocks)) return;
    if (tiles_fit(a)) {  // head dims 64 and 128
        if (kB16) mma_forward(st, out, stats, qkv, a);  // tensor cores: attention_mma_cuda.cu
        else tiles_forward(st, out, stats, qkv, a);
        return;
    }
    k_attention_forward<kB16><<<blocks, kThreads, 0, cu_stream(st)>>>(out, stats, qkv, a);
    CU_LAUNCHED(st, "attention_forward");
}

template <bool kB16>
void t_attention_backward(fsdp_stream *st, float *dqkv, const float *dout, const float *qkv, const float *out,
                          const float *stats, const fsdp_attention_dims *d) {
    Args a;
    unsigned blocks;
    if (!make_args(st, d, "attention_backward (head dim over 256, C % H != 0 or H % kv_heads != 0)", &a, &blocks)) return;
    // dd (B, H, T): the row terms dO . O; then, for the tensor-core kernels, their bf16 operands
    const size_t dd_bytes = (sizeof(float) * blocks + 255) & ~(size_t)255;
    const bool mma = kB16 && tiles_fit(a);
    char *scratch = (char *)fsdp_cuda_scratch(st, dd_bytes + (mma ? mma_backward_scratch(a) : 0));
    if (!scratch) return;  // the failure is noted on st
    float *dd = (float *)scratch;
    k_attention_rowdot<<<cu_blocks(blocks, kRowdotThreads), kRowdotThreads, 0, cu_stream(st)>>>(dd, dout, out, a,
                                                                                                (size_t)blocks);
    CU_LAUNCHED(st, "attention_backward (dO . O)");
    if (tiles_fit(a)) {
        if (mma) mma_backward(st, dqkv, dout, qkv, stats, dd, a, scratch + dd_bytes);
        else tiles_backward(st, dqkv, dout, qkv, stats, dd, a);
        return;
    }
    k_attention_dq<kB16><<<blocks, kThreads, 0, cu_stream(st)>>>(dqkv, dout, qkv, stats, dd, a);
    CU_LAUNCHED(st, "attention_backward (dq)");
    k_attention_dkdv<kB16><<<blocks / (unsigned)a.group, kThreads, 0, cu_stream(st)>>>(dqkv, dout, qkv, stats, dd, a);
    CU_LAUNCHED(st, "attention_backward (dk, dv)");
}

}  // namespace

// fp32 table: fp32 products; bf16 table: the products' operands rounded to bf16 (fp32 accumulation)
extern "C" void fsdp_cuda_fill_attention(struct fsdp_kernels *t, int bf16) {
    if (bf16) {
        t->attention_forward = t_attention_forward<true>;
        t->attention_backward = t_attention_backward<true>;
    } else {
        t->attention_forward = t_attention_forward<false>;
        t->attention_backward = t_attention_backward<false>;
    }
}
