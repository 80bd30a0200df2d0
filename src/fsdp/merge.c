// merge.c: folding low-rank adapters into their base weights (fsdp_merge_low_rank), as PEFT's
// merge_and_unload: every rank gathers a unit, adds scale x (B A) to each weight on the device, zeroes B
// and keeps its own piece of the result.
#include <string.h>

#include "fsdp/fsdp_internal.h"
#include "kernels/kernels.h"

// The unit holding the parameter `name` and its index there, or NULL.
static fsdp_unit *find_param(fsdp_state *s, const char *name, int *index) {
    for (int ui = 0; ui < s->n_units; ui++)
        for (int i = 0; i < s->units[ui].n_params; i++)
            if (strcmp(s->units[ui].params[i]->name, name) == 0) {
                *index = i;
                return &s->units[ui];
            }
    return NULL;
}

// Checks one merge's names and shapes against the model.
static fsdp_status check_merge(fsdp_state *s, const fsdp_low_rank_merge *m) {
    int iw = 0, ia = 0, ib = 0;
    fsdp_unit *uw = find_param(s, m->weight, &iw), *ua = find_param(s, m->a, &ia), *ub = find_param(s, m->b, &ib);
    if (!uw || !ua || !ub)
        return fsdp_error(FSDP_ERR_MISSING, "merge: no parameter '%s'", !uw ? m->weight : !ua ? m->a : m->b);
    if (ua != uw || ub != uw)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "merge: '%s' and its adapter are in different units", m->weight);
    const nn_param *w = uw->params[iw], *a = ua->params[ia], *b = ub->params[ib];
    int64_t in = a->ndim == 2 ? a->shape[1] : -1, out = b->ndim == 2 ? b->shape[0] : -1;
    int64_t rows = m->in_out ? in : out, cols = m->in_out ? out : in;
    if (w->ndim != 2 || a->ndim != 2 || b->ndim != 2 || a->shape[0] != b->shape[1] || w->shape[0] != rows ||
        w->shape[1] != cols)
        return fsdp_error(FSDP_ERR_SHAPE, "merge: '%s' does not fit its adapter's shapes", m->weight);
    return FSDP_OK;
}

fsdp_status fsdp_merge_low_rank(fsdp_state *s, const fsdp_low_rank_merge *merges, int n) {
    for (int j = 0; j < n; j++) FSDP_CHECK(check_merge(s, &merges[j]));
    float *flat = fsdp_alloc_unit_buffer(s);  // (largest padded,) device
    if (!flat) return FSDP_ERR_NOMEM;
    fsdp_status st = FSDP_OK;
    for (int ui = 0; ui < s->n_units && st == FSDP_OK; ui++) {  // the same units on every rank: collective
        fsdp_unit *u = &s->units[ui];
        int any = 0;
        for (int j = 0; j < n && st == FSDP_OK; j++) {
            int iw = 0, ia = 0, ib = 0;
            if (find_param(s, merges[j].weight, &iw) != u) continue;
            find_param(s, merges[j].a, &ia);
            find_param(s, merges[j].b, &ib);
            if (!any) st = fsdp_gather_flat(s, u, u->shard, flat, 0);
            any = 1;
            if (st != FSDP_OK) break;
            const nn_param *a = u->params[ia], *b = u->params[ib];
            int r = (int)a->shape[0], in = (int)a->shape[1], out = (int)b->shape[0];
            float *W = flat + u->offsets[iw], *B = flat + u->offsets[ib];  // (rows, cols), (out, r)
            const float *A = flat + u->offsets[ia];                          // (r, in)
            if (merges[j].in_out)  // W (in, out) += scale A^T B^T
                s->k->gemm(s->compute, 1, 1, in, out, r, merges[j].scale, A, in, B, r, 1.0f, W, out);
            else                   // W (out, in) += scale B A
                s->k->gemm(s->compute, 0, 0, out, in, r, merges[j].scale, B, r, A, in, 1.0f, W, in);
            st = fsdp_dev_memset(s->compute, B, 0, sizeof(float) * (size_t)b->numel);
        }
        if (!any || st != FSDP_OK) continue;
        // this rank's piece of each segment back into its shard (replicated: the shard is the flat buffer)
        for (int g = 0; g < 2 && st == FSDP_OK; g++) {
            unit_segment sg = segment_of(u, g);
            if (sg.per)
                st = fsdp_copy_d2d(s->compute, u->shard + sg.local, flat + sg.flat + sg.begin, sizeof(float) * (size_t)sg.per);
        }
        if (st == FSDP_OK) st = fsdp_stream_synchronize(s->compute);
    }
    fsdp_dev_free(s->dev, flat);
    return st;
}
