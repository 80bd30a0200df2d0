// deterministic.c: the deterministic mode (fsdp_config.deterministic): gradients summed exactly, so
// the result cannot depend on which rank computed which chunk of the global batch, nor on the order
// in which any collective adds the ranks' contributions.
//
// Scheme (docs/deterministic.md). The tools cut the global batch into det_chunks chunks whatever the
// world size; each chunk is one micro-step of one rank (a forward and a backward of its own). After a
// chunk's backward, each unit's unsharded gradient is turned into fixed point (kernels.h,
// fsdp_fixed_format: rint(g * 2^frac_bits) as balanced fp32 digits) and reduce-scattered (all-reduced
// for the replicated strategies, both for HYBRID_SHARD) as fp32 digits with FSDP_SUM, then added to
// the unit's digit accumulator: every one of these fp32 additions is exact, so any summation order
// gives the same digits. After each micro-step the gradient shard is rewritten from the digits:
// (the exact sum) / det_chunks, rounded once to fp32. The gradient norm sums exact squares
// (sum_squares_exact) and all-reduces their 16-bit digits, carried before they become one double.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsdp/fsdp_internal.h"
#include "kernels/kernels.h"

#define DET_FRAC_BITS 64   // the grid: 2^-64 (5.4e-20)
#define DET_RANGE_BITS 32  // at least this many integer bits: |g| < 2^32 per chunk

fsdp_fixed_format fsdp_det_format(int contributions) {
    int log2c = 0;
    while ((1LL << log2c) < (long long)(contributions > 1 ? contributions : 1)) log2c++;
    fsdp_fixed_format f;
    f.limb_bits = 25 - log2c > 24 ? 24 : 25 - log2c;  // contributions * 2^(limb_bits - 1) <= 2^24
    f.frac_bits = DET_FRAC_BITS;
    f.limbs = (DET_FRAC_BITS + DET_RANGE_BITS + 1 + f.limb_bits - 1) / f.limb_bits;  // <= 16 (limb_bits >= 9)
    return f;
}

fsdp_status det_setup(fsdp_state *s) {
    if (!s->cfg.deterministic) return FSDP_OK;
    if (s->cfg.det_chunks < 1 || s->cfg.det_chunks > (1 << 16))
        return fsdp_error(FSDP_ERR_INVALID_ARG, "deterministic mode: det_chunks must be 1..65536 (got %d)",
                          s->cfg.det_chunks);
    s->det_fmt = fsdp_det_format(s->cfg.det_chunks);
    size_t K = (size_t)s->det_fmt.limbs;
    int64_t max_padded = 0, max_shard = 0, max_block = 0;
    for (int i = 0; i < s->n_units; i++) {
        fsdp_unit *u = &s->units[i];
        if (u->grad_padded > max_padded) max_padded = u->grad_padded;
        if (u->grad_shard > max_shard) max_shard = u->grad_shard;
        if (u->block >= 0 && u->grad_padded > max_block) max_block = u->grad_padded;
        if (!u->grad_shard) continue;  // every parameter frozen
        u->det_acc = fsdp_dev_alloc(s->dev, sizeof(float) * K * (size_t)u->grad_shard, FSDP_MEM_GRADS);
        if (!u->det_acc) return FSDP_ERR_NOMEM;
    }
    s->det_send = fsdp_dev_alloc(s->dev, sizeof(float) * K * (size_t)(max_padded ? max_padded : 1), FSDP_MEM_COMM);
    s->det_recv = fsdp_dev_alloc(s->dev, sizeof(float) * K * (size_t)(max_shard ? max_shard : 1), FSDP_MEM_COMM);
    s->det_words = fsdp_dev_alloc(s->dev, sizeof(int64_t) * FSDP_XSUM_WORDS, FSDP_MEM_OTHER);
    if (!s->det_send || !s->det_recv || !s->det_words) return FSDP_ERR_NOMEM;
    for (int b = 0; b < 2 && max_block > 0; b++) {
        s->det_grad[b] = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)max_block, FSDP_MEM_UNSHARDED);
        if (!s->det_grad[b]) return FSDP_ERR_NOMEM;
    }
    if (s->root && s->root->grad_padded) {
        s->det_root_grad = fsdp_dev_alloc(s->dev, sizeof(float) * (size_t)s->root->grad_padded, FSDP_MEM_UNSHARDED);
        if (!s->det_root_grad) return FSDP_ERR_NOMEM;
    }
    return FSDP_OK;
}

void det_free(fsdp_state *s) {
    if (!s->dev) return;
    for (int i = 0; i < s->n_units; i++) {
        fsdp_dev_free(s->dev, s->units[i].det_acc);
        s->units[i].det_acc = NULL;
    }
    fsdp_dev_free(s->dev, s->det_grad[0]);
    fsdp_dev_free(s->dev, s->det_grad[1]);
    fsdp_dev_free(s->dev, s->det_root_grad);
    s->det_grad[0] = s->det_grad[1] = s->det_root_grad = NULL;
    fsdp_dev_free(s->dev, s->det_send);
    fsdp_dev_free(s->dev, s->det_recv);
    fsdp_dev_free(s->dev, s->det_words);
    s->det_send = s->det_recv = NULL;
    s->det_words = NULL;
}

void det_zero(fsdp_state *s) {
    size_t K = (size_t)s->det_fmt.limbs;
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].det_acc) fsdp_dev_memset(s->compute, s->units[i].det_acc, 0, sizeof(float) * K * (size_t)s->units[i].grad_shard);
}

// On the comm stream: u's unsharded gradient (this chunk's) in digits, summed over the ranks into the
// unit's digit accumulator.
fsdp_status det_reduce_grads(fsdp_state *s, fsdp_unit *u) {
    const fsdp_kernels *k = s->k;
    fsdp_stream *cs = s->comm_stream;
    size_t K = (size_t)s->det_fmt.limbs, n = (size_t)u->grad_shard;
    k->fixed_quantize(cs, s->det_send, u->full_grad, (size_t)u->grad_padded, n, &s->det_fmt);
    fsdp_status st = FSDP_OK;
    float *digits = s->det_send;  // (K, n): this rank's elements' digits (a one-rank group holds them all)
    if (!s->replicated && fsdp_comm_size(s->shard_comm) > 1) {
        st = fsdp_dev_reduce_scatter(cs, s->shard_comm, s->det_send, s->det_recv, K * n, FSDP_F32, FSDP_SUM);
        digits = s->det_recv;
    }
    fsdp_comm *replicas = s->replicated ? s->world : s->replica_comm;  // ranks holding the same elements
    if (st == FSDP_OK && replicas && fsdp_comm_size(replicas) > 1)
        st = fsdp_dev_all_reduce(cs, replicas, digits, K * n, FSDP_F32, FSDP_SUM);
    if (st == FSDP_OK) k->add_inplace(cs, u->det_acc, digits, K * n);
    return st;
}

// On the compute stream, after the reductions: every gradient shard = its digits' value / det_chunks.
void det_finalize(fsdp_state *s) {
    double scale = 1.0 / (double)s->cfg.det_chunks;
    for (int i = 0; i < s->n_units; i++) {
        fsdp_unit *u = &s->units[i];
        if (u->grad_shard) s->k->fixed_finalize(s->compute, u->shard_grad, u->det_acc, (size_t)u->grad_shard, &s->det_fmt, scale);
    }
}

// The global L2 norm of the gradient shards, the same bits on any world size.
fsdp_status det_grad_norm(fsdp_state *s, double *norm) {
    int64_t words[FSDP_XSUM_WORDS];
    FSDP_CHECK(fsdp_dev_memset(s->compute, s->det_words, 0, sizeof words));
    for (int i = 0; i < s->n_units; i++)
        if (s->units[i].grad_shard) s->k->sum_squares_exact(s->compute, s->det_words, s->units[i].shard_grad, (size_t)s->units[i].grad_shard);
    FSDP_CHECK(fsdp_dev_read(s->compute, words, s->det_words, sizeof words));
    // 16-bit digits (exact in fp32, and so are their sums over up to 256 ranks), then a flag
    enum { D = 2 * FSDP_XSUM_WORDS };
    float digits[D + 1];
    int bad = words[FSDP_XSUM_WORDS - 1] < 0;
    for (int w = 0; w < FSDP_XSUM_WORDS; w++) {
        digits[2 * w] = bad ? 0.0f : (float)(words[w] & 0xffff);
        digits[2 * w + 1] = bad ? 0.0f : (float)((words[w] >> 16) & 0xffff);
    }
    digits[D] = (float)bad;
    if (!s->replicated && fsdp_comm_size(s->shard_comm) > 1) {
        if (fsdp_comm_size(s->shard_comm) > 256)
            return fsdp_error(FSDP_ERR_INVALID_ARG, "deterministic mode: more than 256 ranks in a shard group");
        FSDP_CHECK(fsdp_all_reduce(s->shard_comm, digits, D + 1, FSDP_F32, FSDP_SUM));
    }
    if (digits[D] != 0.0f) {
        *norm = NAN;
        return FSDP_OK;
    }
    int64_t carried[D];  // the same integer in canonical digits, whatever the ranks' partial sums were
    int64_t carry = 0;
    for (int j = 0; j < D; j++) {
        int64_t v = (int64_t)digits[j] + carry;
        carried[j] = v & 0xffff;
        carry = v >> 16;
    }
    double sq = ldexp((double)carry, 16 * D + FSDP_XSUM_LOW);
    for (int j = D - 1; j >= 0; j--) sq += ldexp((double)carried[j], 16 * j + FSDP_XSUM_LOW);
    *norm = sqrt(sq);
    return FSDP_OK;
}

fsdp_status fsdp_det_mean(fsdp_comm *world, const double *mine, int per_rank, int rank_major, double *mean) {
    int N = fsdp_comm_size(world), R = fsdp_comm_rank(world);
    if (per_rank < 1) return fsdp_error(FSDP_ERR_INVALID_ARG, "fsdp_det_mean: per_rank must be >= 1 (got %d)", per_rank);
    size_t need = (size_t)N * (size_t)per_rank;
    double *buf = malloc(sizeof(double) * need);  // (N, per_rank) in rank order
    if (!buf) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    memcpy(buf + (size_t)R * per_rank, mine, sizeof(double) * (size_t)per_rank);
    // doubles travel as pairs of fp32 words: an all-gather only moves bytes
    fsdp_status st = fsdp_all_gather(world, buf + (size_t)R * per_rank, buf, 2 * (size_t)per_rank, FSDP_F32);
    double sum = 0.0;
    for (int a = 0; st == FSDP_OK && a < (rank_major ? N : per_rank); a++)
        for (int b = 0; b < (rank_major ? per_rank : N); b++)
            sum += rank_major ? buf[(size_t)a * per_rank + b] : buf[(size_t)b * per_rank + a];
    free(buf);
    *mean = sum / (double)need;
    return st;
}
