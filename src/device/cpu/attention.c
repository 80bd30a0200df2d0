// attention.c: scaled dot-product multi-head attention with optional causal mask and dropout on the
// probabilities, as torch.nn.MultiheadAttention computes it (q scaled by 1/sqrt(head_dim)), fused in
// the manner of FlashAttention-2: per (batch, head) pair, blocks of ATT_BR query rows sweep blocks of
// ATT_BC key columns with an online softmax (running row maximum m and sum l, the output rescaled as m
// grows). No T x T matrix is stored: forward keeps each row's log-sum-exp m + log(l), and backward
// recomputes each block's probabilities from it. Memory is linear in T.
//
// Dropout: probability (i, j) of pair bh is kept iff uniform(rng, bh*T*T + i*T + j) >= p, the mask the
// unfused kernel used; backward regenerates it. The softmax sum l is over the undropped probabilities.
// Backward's row term D_i = sum_j P_ij dP_ij equals dO_i . O_i with or without dropout (O = (P o Z) V),
// so it reads the forward output O.
//
// Grouped-query attention (kv_heads < H): query head h reads key/value head h / (H / kv_heads) in place,
// never repeated in memory; qkv rows interleaved (q | k | v per token) or three planes (kernels.h's
// fsdp_attention_layout gives where every head's rows are). Forward: each (b, h) pair is independent;
// threads take pairs and run small single-threaded GEMMs on the head's rows in place (qkv, out with the
// row strides of the layout), the same bits on any thread count. Backward: threads take (b, key/value
// head) groups and run the group's query heads in order, so dk and dv add the query heads' terms in a
// fixed order (the first head's first query block writes them, later blocks and heads accumulate). Under bf16 with the AMX or VDPBF16PS products, a head's keys and values are packed into bf16
// tiles once and each query block's queries and output gradients once, instead of once per product
// (cpu_bf16_tiles_*: the same tiles, so the same bits as cpu_gemm_bf16 per block).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "device/cpu/cpu_kernels.h"
#include "device/cpu/vec_math.h"

#define ATT_BR 64   // query rows per block
#define ATT_BC 256  // key columns per block (T <= 256: one block, no rescaling)

#if FSDP_HAVE_AVX512
static inline __mmask16 lanes(int n) { return (__mmask16)(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1); }
#endif

// row[c] = exp(row[c] - shift) for the n visible keys (c < n), 0 for the rest of the bc; returns the sum
// (16 lanes summed in order of c, then across: the same sum whatever bc is)
static float exp_visible(float *row, int n, int bc, float shift) {
#if FSDP_HAVE_AVX512
    __m512 acc = _mm512_setzero_ps(), sv = _mm512_set1_ps(shift);
    for (int c = 0; c < bc; c += 16) {
        __mmask16 seen = lanes(n - c);
        __m512 e = _mm512_setzero_ps();
        if (seen) e = _mm512_maskz_mov_ps(seen, vexp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(seen, row + c), sv)));
        _mm512_mask_storeu_ps(row + c, lanes(bc - c), e);
        acc = _mm512_add_ps(acc, e);
    }
    return _mm512_reduce_add_ps(acc);
#else
    float sum = 0.0f;
    int c = 0;
    for (; c < n; c++) {
        row[c] = expf(row[c] - shift);
        sum += row[c];
    }
    for (; c < bc; c++) row[c] = 0.0f;
    return sum;
#endif
}

// the largest of mx and row[0..n) (NaNs skipped, as `row[c] > mx` skips them)
static float row_max(const float *row, int n, float mx) {
#if FSDP_HAVE_AVX512
    __m512 m = _mm512_set1_ps(mx);  // VMAXPS returns its second operand when either is NaN
    for (int c = 0; c < n; c += 16) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, lanes(n - c), row + c), m);
    return _mm512_reduce_max_ps(m);
#else
    for (int c = 0; c < n; c++) mx = row[c] > mx ? row[c] : mx;
    return mx;
#endif
}

// Offset of head column `col` of batch b's first token in a buffer (or plane) of `rowlen` floats per token;
// row t of that head is t * (stride_t * rowlen) further, so the products read and write the heads in place.
static size_t head_offset(const fsdp_attention_dims *d, int b, size_t rowlen, size_t col) {
    return (size_t)b * (size_t)d->stride_b * rowlen + col;
}

// keys of block [j0, j0 + bc) that query row i sees
static int visible(const fsdp_attention_dims *d, int i, int j0, int bc) {
    if (!d->causal) return bc;
    int n = i + 1 - j0;
    return n < 0 ? 0 : n < bc ? n : bc;
}

// p (br, bc, leading dimension bc) *= dropout mask / (1 - p) for rows i0.. and columns j0.. of pair bh
static void dropout_tile(float *p, const fsdp_attention_dims *d, int bh, int i0, int br, int j0, int bc) {
    uint64_t T = (uint64_t)d->T;
    for (int r = 0; r < br; r++)
        cpu_dropout_range(p + (size_t)r * bc, p + (size_t)r * bc, (size_t)bc, d->dropout_p, d->rng,
                          ((uint64_t)bh * T + (uint64_t)(i0 + r)) * T + (uint64_t)j0);
}

// floats of one (query block, key block) tile for sequences of T: small sequences get small scratch
static size_t tile_floats(int T) {
    return (size_t)(T < ATT_BR ? T : ATT_BR) * (size_t)(T < ATT_BC ? T : ATT_BC);
}

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static _Atomic int bf16_tiles = 1;  // cpu_attention_bf16_use_tiles

void cpu_attention_bf16_use_tiles(int on) { bf16_tiles = on; }

// The products of one head, on one thread: through `gemm` on the head's rows in place (fp32, or bf16 on
// the emulated path), or (gemm NULL) on bf16 tiles packed once per head (its keys and values) and once
// per query block (its queries and output gradients) instead of once per product: the same tiles and
// micro-kernels as cpu_gemm_bf16 packs and runs per call, hence the same bits.
typedef struct {
    gemm_fn gemm;
    int T, hd, kt_hd, kt_t;  // kt_hd, kt_t: k-groups of 32 in hd and in T
    float scale;
    long ldq, ldkv, ldo;          // row strides of a head in qkv (q and dq; k, v, dk and dv) and in out (dO)
    const float *q, *k, *v, *dO;  // the head's rows: (T, hd) each
    float *dq, *dk, *dv;
    const float *packed_k;        // the keys whose tiles k_t (and k_k, v_k, v_t) hold now (NULL: none yet)
    // packed tiles: per head K^T (B of S = Q K^T, T columns), V (B of O = P V, T k), K (B of dQ = dS K),
    // V^T (B of dP = dO V^T); per query block Q (A of S, scaled), Q (B of dK = dS^T Q), dO (A of dP), dO
    // (B of dV = P^T dO); p_a: P, P^T, dS or dS^T as the A of the product at hand
    uint16_t *k_t, *v_k, *k_k, *v_t, *q_a, *q_b, *do_a, *do_b, *p_a;
} head_products;

// Per-thread state for sequences of T; backward: the tiles backward packs too. NULL tiles without
// packing (gemm given).
static head_products products_new(gemm_fn gemm, const fsdp_attention_dims *d, int backward) {
    int hd = d->C / d->H, br = d->T < ATT_BR ? d->T : ATT_BR, bc = d->T < ATT_BC ? d->T : ATT_BC;
    fsdp_attention_layout lay = fsdp_attention_layout_of(d);
    head_products hp = {.gemm = gemm, .T = d->T, .hd = hd, .kt_hd = (hd + 31) / 32, .kt_t = (d->T + 31) / 32,
                        .scale = 1.0f / sqrtf((float)hd), .ldq = (long)(d->stride_t * lay.row_q),
                        .ldkv = (long)(d->stride_t * lay.row_kv), .ldo = (long)d->stride_t * d->C};
    if (gemm) return hp;
    size_t head = cpu_bf16_tiles_elems(d->T, hd), block = cpu_bf16_tiles_elems(br, hd);
    size_t p = cpu_bf16_tiles_elems(br, bc);  // (br, bc) or (bc, br): the same count
    size_t total = (backward ? 3 : 2) * head + (backward ? 4 : 1) * block + p;
    uint16_t *t = aligned_alloc(64, (sizeof(uint16_t) * total + 63) / 64 * 64);
    FSDP_ASSERT(t != NULL);
    hp.k_t = t, t += head;
    if (backward) hp.k_k = t, t += head, hp.v_t = t, t += head;
    else hp.v_k = t, t += head;
    hp.q_a = t, t += block;
    if (backward) hp.q_b = t, t += block, hp.do_a = t, t += block, hp.do_b = t, t += block;
    hp.p_a = t;
    return hp;
}

static void products_free(head_products *hp) { free(hp->k_t); }

// The query head whose rows start at q (its gradient's at dq) and the key/value head it reads (rows at
// k and v, gradients at dk and dv); dO, dq, dk, dv: NULL in the forward. The key/value tiles are packed
// when the keys are not the ones packed last (the query heads of a group share them).
static void products_head(head_products *hp, const float *q, const float *k, const float *v, const float *dO,
                          float *dq, float *dk, float *dv) {
    hp->q = q, hp->k = k, hp->v = v, hp->dO = dO, hp->dq = dq, hp->dk = dk, hp->dv = dv;
    if (hp->gemm || hp->packed_k == k) return;
    hp->packed_k = k;
    cpu_bf16_tiles_pack_b(hp->k_t, hp->k, 1, hp->ldkv, hp->T, hp->hd);
    if (!dO) cpu_bf16_tiles_pack_b(hp->v_k, hp->v, hp->ldkv, 1, hp->hd, hp->T);
    if (dO) cpu_bf16_tiles_pack_b(hp->k_k, hp->k, hp->ldkv, 1, hp->hd, hp->T);
    if (dO) cpu_bf16_tiles_pack_b(hp->v_t, hp->v, 1, hp->ldkv, hp->T, hp->hd);
}

// The query block of rows i0..i0 + br
static void products_query_block(head_products *hp, int i0, int br) {
    if (hp->gemm) return;
    const float *q = hp->q + i0 * hp->ldq;
    cpu_bf16_tiles_pack_a(hp->q_a, q, hp->ldq, 1, br, hp->hd, hp->scale);
    if (!hp->dO) return;
    const float *dO = hp->dO + i0 * hp->ldo;
    cpu_bf16_tiles_pack_b(hp->q_b, q, hp->ldq, 1, hp->hd, br);
    cpu_bf16_tiles_pack_a(hp->do_a, dO, hp->ldo, 1, br, hp->hd, 1.0f);
    cpu_bf16_tiles_pack_b(hp->do_b, dO, hp->ldo, 1, hp->hd, br);
}

// packed B of T columns (kt_hd k-groups per column group) from key j0; of T k (kt_t) from key j0
static const uint16_t *from_column(const head_products *hp, const uint16_t *b, int j0) {
    return b + (size_t)(j0 / 16) * hp->kt_hd * 512;
}
static const uint16_t *from_k(const uint16_t *b, int j0) { return b + (size_t)(j0 / 32) * 512; }

// s (br, bc) = scale q_i k_j^T: the block's scores
static void product_scores(head_products *hp, int i0, int br, int j0, int bc, float *s) {
    if (hp->gemm) {
        hp->gemm(0, 1, br, bc, hp->hd, hp->scale, hp->q + i0 * hp->ldq, (int)hp->ldq, hp->k + j0 * hp->ldkv,
                 (int)hp->ldkv, 0.0f, s, bc);
        return;
    }
    cpu_bf16_tiles_product(hp->q_a, hp->kt_hd, from_column(hp, hp->k_t, j0), hp->kt_hd, hp->kt_hd, br, bc, s, bc, 0);
}

// o (br, hd, leading dimension ldo) = (accumulate: o +) p (br, bc) v_j
static void product_pv(head_products *hp, int br, int j0, int bc, const float *p, float *o, int accumulate) {
    if (hp->gemm) {
        hp->gemm(0, 0, br, hp->hd, bc, 1.0f, p, bc, hp->v + j0 * hp->ldkv, (int)hp->ldkv, accumulate ? 1.0f : 0.0f,
                 o, (int)hp->ldo);
        return;
    }
    int kt = (bc + 31) / 32;
    cpu_bf16_tiles_pack_a(hp->p_a, p, bc, 1, br, bc, 1.0f);
    cpu_bf16_tiles_product(hp->p_a, kt, from_k(hp->v_k, j0), hp->kt_t, kt, br, hp->hd, o, (int)hp->ldo, accumulate);
}

// c (M = bc, hd, leading dimension ldkv): rows < seen += alpha x^T y, rows from seen on = alpha x^T y, for x
// (br, bc) and y (br, hd, leading dimension ldy); on tiles, x^T is packed into p_a and y is y_b. dV and dK:
// a key block's rows from `seen` on are written for the first time (seen: a multiple of 32).
static void product_key_rows(head_products *hp, int br, int bc, float alpha, const float *x, const float *y, long ldy,
                             const uint16_t *y_b, float *c, int seen) {
    if (hp->gemm) {
        if (seen > 0) hp->gemm(1, 0, seen, hp->hd, br, alpha, x, bc, y, (int)ldy, 1.0f, c, (int)hp->ldkv);
        if (seen < bc)
            hp->gemm(1, 0, bc - seen, hp->hd, br, alpha, x + seen, bc, y, (int)ldy, 0.0f, c + seen * hp->ldkv,
                     (int)hp->ldkv);
        return;
    }
    int kt = (br + 31) / 32;
    cpu_bf16_tiles_pack_a(hp->p_a, x, 1, bc, bc, br, alpha);
    if (seen > 0) cpu_bf16_tiles_product(hp->p_a, kt, y_b, kt, kt, seen, hp->hd, c, (int)hp->ldkv, 1);
    if (seen < bc)
        cpu_bf16_tiles_product(hp->p_a + (size_t)(seen / 16) * kt * 512, kt, y_b, kt, kt, bc - seen, hp->hd,
                               c + seen * hp->ldkv, (int)hp->ldkv, 0);
}

// dv_j (+)= p^T dO_i (rows from `seen` on: =)
static void product_dv(head_products *hp, int i0, int br, int j0, int bc, const float *p, int seen) {
    product_key_rows(hp, br, bc, 1.0f, p, hp->dO + i0 * hp->ldo, hp->ldo, hp->do_b, hp->dv + j0 * hp->ldkv, seen);
}

// dp (br, bc) = dO_i v_j^T
static void product_dp(head_products *hp, int i0, int br, int j0, int bc, float *dp) {
    if (hp->gemm) {
        hp->gemm(0, 1, br, bc, hp->hd, 1.0f, hp->dO + i0 * hp->ldo, (int)hp->ldo, hp->v + j0 * hp->ldkv,
                 (int)hp->ldkv, 0.0f, dp, bc);
        return;
    }
    cpu_bf16_tiles_product(hp->do_a, hp->kt_hd, from_column(hp, hp->v_t, j0), hp->kt_hd, hp->kt_hd, br, bc, dp, bc, 0);
}

// dq_i (+)= scale ds k_j (the first key block: =);  dk_j (+)= scale ds^T q_i (rows from `seen` on: =)
static void product_dq_dk(head_products *hp, int i0, int br, int j0, int bc, const float *ds, int seen) {
    float *dq = hp->dq + i0 * hp->ldq;
    int accumulate = j0 > 0;
    if (hp->gemm) {
        hp->gemm(0, 0, br, hp->hd, bc, hp->scale, ds, bc, hp->k + j0 * hp->ldkv, (int)hp->ldkv,
                 accumulate ? 1.0f : 0.0f, dq, (int)hp->ldq);
    } else {
        int kt = (bc + 31) / 32;
        cpu_bf16_tiles_pack_a(hp->p_a, ds, bc, 1, br, bc, hp->scale);
        cpu_bf16_tiles_product(hp->p_a, kt, from_k(hp->k_k, j0), hp->kt_t, kt, br, hp->hd, dq, (int)hp->ldq,
                               accumulate);
    }
    product_key_rows(hp, br, bc, hp->scale, ds, hp->q + i0 * hp->ldq, hp->ldq, hp->q_b, hp->dk + j0 * hp->ldkv, seen);
}

// stats: (B, H, T) log-sum-exp of each row's scaled scores. q is scaled by the products' alpha (our fp32
// and bf16 kernels apply alpha to A elementwise before multiplying, as a scaled copy of q would; the
// OpenBLAS path scales the product instead).
static void attention_forward(gemm_fn gemm, float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, C = d->C, hd = C / H;
    long ldo = (long)d->stride_t * C;  // row stride of a head in out
    fsdp_attention_layout lay = fsdp_attention_layout_of(d);
    FSDP_ASSERT(lay.kv_heads > 0 && H % lay.kv_heads == 0);
    cpu_gemm_init();
#pragma omp parallel
    {
        // s: (br, bc) scores, then probabilities; m, l: (br,) running maximum and sum
        size_t tile = tile_floats(T);
        float *s = malloc(sizeof(float) * (tile + 2 * ATT_BR));
        FSDP_ASSERT(s != NULL);
        float *m = s + tile, *l = m + ATT_BR;
        head_products hp = products_new(gemm, d, 0);
#pragma omp for schedule(static)
        for (int bh = 0; bh < d->B * H; bh++) {
            int b = bh / H, h = bh % H;
            size_t kv_at = head_offset(d, b, (size_t)lay.row_kv, (size_t)(h / lay.group) * hd);  // its key/value head
            products_head(&hp, qkv + head_offset(d, b, (size_t)lay.row_q, (size_t)h * hd), qkv + lay.k_base + kv_at,
                          qkv + lay.v_base + kv_at, NULL, NULL, NULL, NULL);
            float *o = out + head_offset(d, b, (size_t)C, (size_t)h * hd);  // (T, hd), ld ldo
            float *lse = stats + (size_t)bh * T;
            for (int i0 = 0; i0 < T; i0 += ATT_BR) {
                int br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
                int kv_end = d->causal ? i0 + br : T;
                float *ob = o + i0 * ldo;  // (br, hd) running output, written by the first key block
                for (int r = 0; r < br; r++) m[r] = -INFINITY, l[r] = 0.0f;
                products_query_block(&hp, i0, br);
                for (int j0 = 0; j0 < kv_end; j0 += ATT_BC) {
                    int bc = kv_end - j0 < ATT_BC ? kv_end - j0 : ATT_BC;
                    product_scores(&hp, i0, br, j0, bc, s);
                    for (int r = 0; r < br; r++) {
                        float *row = s + (size_t)r * bc, *orow = ob + r * ldo;
                        int n = visible(d, i0 + r, j0, bc);
                        if (n == 0) {  // a causal row that sees none of these keys
                            exp_visible(row, 0, bc, 0.0f);
                            continue;
                        }
                        float mx = row_max(row, n, m[r]);
                        float sum = exp_visible(row, n, bc, mx);
                        if (m[r] != -INFINITY && mx != m[r]) {  // rescale what earlier blocks summed
                            float corr = expf(m[r] - mx);
                            l[r] *= corr;
                            for (int c = 0; c < hd; c++) orow[c] *= corr;
                        }
                        l[r] += sum;
                        m[r] = mx;
                    }
                    if (d->dropout_p > 0.0f) dropout_tile(s, d, bh, i0, br, j0, bc);
                    product_pv(&hp, br, j0, bc, s, ob, j0 > 0);
                }
                for (int r = 0; r < br; r++) {
                    float inv = 1.0f / l[r], *orow = ob + r * ldo;
                    for (int c = 0; c < hd; c++) orow[c] *= inv;
                    lse[i0 + r] = m[r] + logf(l[r]);
                }
            }
        }
        products_free(&hp);
        free(s);
    }
}

static void attention_backward(gemm_fn gemm, float *dqkv, const float *dout, const float *qkv, const float *out,
                               const float *stats, const fsdp_attention_dims *d) {
    int T = d->T, H = d->H, hd = d->C / d->H, C = d->C;
    long ldo = (long)d->stride_t * C;  // row stride of a head in out and dout
    fsdp_attention_layout lay = fsdp_attention_layout_of(d);
    FSDP_ASSERT(lay.kv_heads > 0 && H % lay.kv_heads == 0);
    cpu_gemm_init();
#pragma omp parallel
    {
        // p pd ds: (br, bc) tiles; dd: (T,) row terms dO . O
        size_t tile = tile_floats(T);
        float *p = malloc(sizeof(float) * (3 * tile + (size_t)T));
        FSDP_ASSERT(p != NULL);
        float *pd = p + tile, *ds = pd + tile, *dd = ds + tile;
        head_products hp = products_new(gemm, d, 1);
#pragma omp for schedule(static)
        for (int bj = 0; bj < d->B * lay.kv_heads; bj++) {  // a key/value head and the query heads that read it
            int b = bj / lay.kv_heads, j = bj % lay.kv_heads;
            size_t kv_at = head_offset(d, b, (size_t)lay.row_kv, (size_t)j * hd);
            for (int g = 0; g < lay.group; g++) {
                int h = j * lay.group + g, bh = b * H + h;
                size_t q_at = head_offset(d, b, (size_t)lay.row_q, (size_t)h * hd);
                size_t at1 = head_offset(d, b, (size_t)C, (size_t)h * hd);
                const float *dO = dout + at1, *o = out + at1;  // (T, hd), ld ldo
                for (int t = 0; t < T; t++) {
                    float acc = 0.0f;
                    for (int c = 0; c < hd; c++) acc += dO[t * ldo + c] * o[t * ldo + c];
                    dd[t] = acc;
                }
                // dq's rows are written by their first key block, dk's and dv's by their first query block of
                // the group's first query head (dq, dk, dv: (T, hd) each, in dqkv's layout)
                products_head(&hp, qkv + q_at, qkv + lay.k_base + kv_at, qkv + lay.v_base + kv_at, dO, dqkv + q_at,
                              dqkv + lay.k_base + kv_at, dqkv + lay.v_base + kv_at);
                const float *lse = stats + (size_t)bh * T;
                for (int i0 = 0; i0 < T; i0 += ATT_BR) {
                    int br = T - i0 < ATT_BR ? T - i0 : ATT_BR;
                    int kv_end = d->causal ? i0 + br : T;
                    products_query_block(&hp, i0, br);
                    for (int j0 = 0; j0 < kv_end; j0 += ATT_BC) {
                        int bc = kv_end - j0 < ATT_BC ? kv_end - j0 : ATT_BC;
                        // rows of this key block written before: by the group's earlier query heads, all of
                        // them; by this head's earlier query blocks, causal, the keys before i0
                        int seen = g > 0         ? bc
                                   : d->causal ? (i0 - j0 < 0 ? 0 : i0 - j0 < bc ? i0 - j0 : bc)
                                               : (i0 > 0 ? bc : 0);
                        product_scores(&hp, i0, br, j0, bc, p);
                        for (int r = 0; r < br; r++)  // P = exp(S - lse), zero where masked
                            exp_visible(p + (size_t)r * bc, visible(d, i0 + r, j0, bc), bc, lse[i0 + r]);
                        const float *pv = p;  // the probabilities that multiplied V
                        if (d->dropout_p > 0.0f) {
                            memcpy(pd, p, sizeof(float) * (size_t)br * bc);
                            dropout_tile(pd, d, bh, i0, br, j0, bc);
                            pv = pd;
                        }
                        // dV += P'^T dO;  dP' = dO V^T (through the dropout: dP = dP' o Z)
                        product_dv(&hp, i0, br, j0, bc, pv, seen);
                        product_dp(&hp, i0, br, j0, bc, ds);
                        if (d->dropout_p > 0.0f) dropout_tile(ds, d, bh, i0, br, j0, bc);
                        for (int r = 0; r < br; r++) {  // dS = P o (dP - D)
                            const float *prow = p + (size_t)r * bc;
                            float *drow = ds + (size_t)r * bc, di = dd[i0 + r];
                            for (int c = 0; c < bc; c++) drow[c] = prow[c] * (drow[c] - di);
                        }
                        // dq += scale dS K;  dk += scale dS^T q (= dS^T q' with q' = scale q)
                        product_dq_dk(&hp, i0, br, j0, bc, ds, seen);
                    }
                }
            }
        }
        products_free(&hp);
        free(p);
    }
}

void cpu_attention_forward(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(cpu_gemm, out, stats, qkv, d);
}

void cpu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out, const float *stats,
                            const fsdp_attention_dims *d) {
    attention_backward(cpu_gemm, dqkv, dout, qkv, out, stats, d);
}

// bf16 mixed precision: the products per block with bf16 operands (softmax stays fp32)
void cpu_attention_forward_bf16(float *out, float *stats, const float *qkv, const fsdp_attention_dims *d) {
    attention_forward(bf16_tiles && cpu_bf16_tiles_available() ? NULL : cpu_gemm_bf16, out, stats, qkv, d);
}

void cpu_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv, const float *out,
                                 const float *stats, const fsdp_attention_dims *d) {
    attention_backward(bf16_tiles && cpu_bf16_tiles_available() ? NULL : cpu_gemm_bf16, dqkv, dout, qkv, out, stats,
                       d);
}
