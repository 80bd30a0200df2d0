// test_gradcheck_models.c: finite-difference checks of the whole GPT-2 model (tied head, with and
// without dropout), the model with bf16 parameter views against fp32 parameters, and bf16 activations
// against fp32 activations (GPT-2 and an encoder stack), bit for bit. The per-module checks are in
// test_gradcheck.c; the method and the device-memory discipline (it passes under FSDP_DEVICE=guard)
// are described in gradcheck_fixture.h.
#include "gradcheck_fixture.h"
#include "nn/encoder_stack.h"
#include "nn/gpt2.h"

// ---------------------------------------------------------------------------------------------
// the whole GPT-2 model (tied head): L = B*T * mean cross-entropy, backward(dloss = B*T)

typedef struct {
    nn_ctx ctx;
    nn_gpt2 m;
    int32_t idx[10], tgt[10];
    int B, T;
} gpt_t;

static double gpt_fwd(void *s) {
    gpt_t *t = s;
    CHECK(nn_gpt2_forward(&t->ctx, &t->m, t->idx, t->tgt, t->B, t->T) == FSDP_OK);
    return read_double(t->m.loss) * (t->B * t->T);
}

static void test_gpt2(float dropout) {
    printf("nn_gpt2 (vocab 11, max_seq 8, 2 layers, C 16, 2 heads, dropout %.1f)\n", dropout);
    gpt_t t;
    memset(&t, 0, sizeof t);
    t.ctx = make_ctx();
    t.B = 2, t.T = 5;
    nn_gpt2_config cfg = {11, 8, 2, 2, 16, dropout, 1e-5f};
    CHECK(nn_gpt2_create(&t.m, cfg) == FSDP_OK);
    pmem pm = bind_params(&t.m.params);
    for (int i = 0; i < 10; i++) {
        t.idx[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 1}, (uint64_t)i) * 11);
        t.tgt[i] = (int32_t)(fsdp_rng_uniform_at((fsdp_rng){3, 2}, (uint64_t)i) * 11);
    }
    // reserved ahead (what fsdp-train does before its first step): the step allocates no activations
    CHECK(nn_gpt2_reserve(&t.ctx, &t.m, t.B, t.T) == FSDP_OK);
    size_t reserved = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    CHECK(reserved > 0);
    double l0 = gpt_fwd(&t);
    CHECK(nn_gpt2_backward(&t.ctx, &t.m, (float)(t.B * t.T)) == FSDP_OK);
    CHECK(fsdp_mem_current(FSDP_MEM_ACTIVATIONS) == reserved);
    unprefill(&pm);
    if (dropout > 0) {
        t.ctx.step++;
        CHECK(gpt_fwd(&t) != l0);
        t.ctx.step--;
    }
    fd_problem pb = {gpt_fwd, &t, {0}, {0}};
    fd_check_params(&pb, &t.m.params, &pm);
    pmem_free(&pm);
    nn_gpt2_free(&t.m);
}

// Mixed precision: the model with every parameter bound as a bf16 view (data NULL), through the bf16
// table, against the same model with fp32 parameters holding the bf16-rounded values. The 1-D parameters
// the fp32 kernels take (LayerNorm weights and biases, Linear biases) are widened on the device into
// their own scratch, which nn_params_destroy frees; the matrices and wpe are read as bf16 directly.
static void test_gpt2_bf16_views(void) {
    printf("nn_gpt2 with bf16 parameter views\n");
    size_t act0 = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    nn_gpt2 m;
    nn_gpt2_config cfg = {11, 8, 2, 2, 16, 0.0f, 1e-5f};
    CHECK(nn_gpt2_create(&m, cfg) == FSDP_OK);
    pmem pm = bind_params(&m.params);
    int64_t n = pm.n;
    fsdp_bf16 *hb = malloc(sizeof(fsdp_bf16) * (size_t)n);
    fsdp_f32_to_bf16_array(hb, pm.h, (size_t)n);
    fsdp_bf16 *b16 = dalloc_bytes(sizeof(fsdp_bf16) * (size_t)n);
    upload(b16, hb, sizeof(fsdp_bf16) * (size_t)n);
    fsdp_bf16_to_f32_array(pm.h, hb, (size_t)n);  // the fp32 run gets the rounded values
    upload(pm.d, pm.h, sizeof(float) * (size_t)n);
    int32_t idx[10], tgt[10];
    for (int i = 0; i < 10; i++) idx[i] = (i * 7 + 2) % 11, tgt[i] = (i * 5 + 1) % 11;
    nn_ctx c = make_ctx();
    c.k = fsdp_dev_kernels(DEV, 1);
    CHECK(nn_gpt2_forward(&c, &m, idx, tgt, 2, 5) == FSDP_OK);
    double l32 = read_double(m.loss);
    int64_t lnf_off = param_offset(&pm, m.ln_f.weight);
    for (int i = 0; i < m.params.count; i++) {  // now bf16 views only
        nn_param *p = &m.params.items[i];
        p->data_b16 = b16 + param_offset(&pm, p);
        p->data = NULL;
    }
    CHECK(nn_gpt2_forward(&c, &m, idx, tgt, 2, 5) == FSDP_OK);
    double l16 = read_double(m.loss);
    CHECK(nn_gpt2_backward(&c, &m, 1.0f) == FSDP_OK);
    printf("  loss fp32 (bf16-rounded values) %.9f, bf16 views %.9f\n", l32, l16);
    CHECK_NEAR(l16, l32, 1e-5 * fabs(l32));
    CHECK(m.ln_f.weight->widened != NULL && m.blocks.blocks[0].fc1.bias->widened != NULL);
    CHECK(m.wte.weight->widened == NULL && m.wpe.weight->widened == NULL);
    CHECK(m.blocks.blocks[0].fc1.weight->widened == NULL);
    float w[16];
    download(w, m.ln_f.weight->widened, sizeof w);  // the widened copy holds the bf16 values exactly
    CHECK(memcmp(w, pm.h + lnf_off, sizeof w) == 0);
    nn_gpt2_free(&m);  // activations and widened copies
    dfree(b16), free(hb), pmem_free(&pm);
    CHECK_EQ_INT(fsdp_mem_current(FSDP_MEM_ACTIVATIONS), act0);
}

// ---------------------------------------------------------------------------------------------
// bf16 activations (nn_ctx.act_bf16): keeping the activations that only feed matrix products in bf16
// gives the same bits as keeping them in fp32 under the bf16 table (its products round them to the same
// values), in less memory. The GPT-2 model (pre-LN: ln_1, ln_2 outputs and the MLP activation in bf16)
// with fp32 parameters (gemm_a16) and with bf16 parameter views (gemm_a16_b16, as FSDP's bf16 gathers
// bind them); an encoder stack (post-LN, ReLU, dropout on: the FFN activation in bf16).

typedef struct {
    double loss;
    float *grads;      // (n,) host: every parameter gradient
    size_t act_bytes;  // activations held after the step
} act_run;

// the bf16 table's context with act_bf16 as given; the gradients reset to GRAD_PREFILL
static nn_ctx act_step_ctx(pmem *pm, int act_bf16) {
    nn_ctx c = make_ctx();
    c.k = fsdp_dev_kernels(DEV, 1);
    c.act_bf16 = act_bf16;
    fill(pm->h + pm->n, (size_t)pm->n, GRAD_PREFILL);
    upload(pm->d + pm->n, pm->h + pm->n, sizeof(float) * (size_t)pm->n);
    return c;
}

static act_run gpt2_step(nn_gpt2 *m, pmem *pm, int act_bf16) {
    int32_t idx[10], tgt[10];
    for (int i = 0; i < 10; i++) idx[i] = (i * 7 + 2) % 11, tgt[i] = (i * 5 + 1) % 11;
    nn_ctx c = act_step_ctx(pm, act_bf16);
    act_run r = {0, falloc((size_t)pm->n), 0};
    CHECK(nn_gpt2_forward(&c, m, idx, tgt, 2, 5) == FSDP_OK);
    CHECK(nn_gpt2_backward(&c, m, 1.0f) == FSDP_OK);
    r.loss = read_double(m->loss);
    download(r.grads, pm->d + pm->n, sizeof(float) * (size_t)pm->n);
    r.act_bytes = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    return r;
}

static act_run encoder_step(nn_encoder_stack *m, pmem *pm, buf x, buf r, int act_bf16) {
    nn_ctx c = act_step_ctx(pm, act_bf16);
    act_run run = {0, falloc((size_t)pm->n), 0};
    const float *out = NULL;
    CHECK(nn_sequential_forward(&c, &m->seq, x.d, 2, 5, &out) == FSDP_OK);
    run.loss = dot_r(out, r.h, x.n);
    CHECK(nn_sequential_backward(&c, &m->seq, r.d, x.d, NULL) == FSDP_OK);
    download(run.grads, pm->d + pm->n, sizeof(float) * (size_t)pm->n);
    run.act_bytes = fsdp_mem_current(FSDP_MEM_ACTIVATIONS);
    return run;
}

static void check_same_bits(const char *what, act_run a, act_run b, int64_t n) {
    int same = memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && memcmp(a.grads, b.grads, sizeof(float) * (size_t)n) == 0;
    printf("  %s: loss %.9f / %.9f, gradients %s, activations %zu -> %zu bytes\n", what, a.loss, b.loss,
           same ? "bit-identical" : "DIFFER", a.act_bytes, b.act_bytes);
    CHECK(isfinite(a.loss) && same);
    CHECK(b.act_bytes < a.act_bytes);
    free(a.grads), free(b.grads);
}

static void test_act_bf16(void) {
    printf("bf16 activations against fp32 activations (bf16 table)\n");
    for (int views = 0; views <= 1; views++) {
        nn_gpt2 m;
        nn_gpt2_config cfg = {11, 8, 2, 2, 16, 0.1f, 1e-5f};
        CHECK(nn_gpt2_create(&m, cfg) == FSDP_OK);
        pmem pm = bind_params(&m.params);
        fsdp_bf16 *b16 = NULL;
        if (views) {  // every parameter a bf16 view of its values
            fsdp_bf16 *hb = malloc(sizeof(fsdp_bf16) * (size_t)pm.n);
            fsdp_f32_to_bf16_array(hb, pm.h, (size_t)pm.n);
            b16 = dalloc_bytes(sizeof(fsdp_bf16) * (size_t)pm.n);
            upload(b16, hb, sizeof(fsdp_bf16) * (size_t)pm.n);
            free(hb);
            for (int i = 0; i < m.params.count; i++) {
                nn_param *p = &m.params.items[i];
                p->data_b16 = b16 + param_offset(&pm, p);
                p->data = NULL;
            }
        }
        act_run f32 = gpt2_step(&m, &pm, 0), a16 = gpt2_step(&m, &pm, 1);
        CHECK(m.blocks.blocks[0].act_b16 != NULL && m.blocks.blocks[0].ln1_b16 != NULL && m.blocks.blocks[0].act == NULL);
        check_same_bits(views ? "GPT-2, bf16 parameter views" : "GPT-2, fp32 parameters", f32, a16, pm.n);
        nn_gpt2_free(&m);
        if (b16) dfree(b16);
        pmem_free(&pm);
    }
    nn_encoder_stack m;
    CHECK(nn_encoder_stack_create(&m, small_cfg(4, FSDP_ACT_RELU, 0, 0, 0, 0.2f), 2) == FSDP_OK);
    pmem pm = bind_params(&m.params);
    buf x = buf_new(2 * 5 * 16), r = buf_new(2 * 5 * 16);
    fill_normal(x.h, x.n, 12, 1.0f);
    fill_uniform(r.h, r.n, 13, -1.0f, 1.0f);
    buf_up(x), buf_up(r);
    act_run f32 = encoder_step(&m, &pm, x, r, 0), a16 = encoder_step(&m, &pm, x, r, 1);
    CHECK(m.seq.blocks[0].act_b16 != NULL && m.seq.blocks[0].ln1_out != NULL && m.seq.blocks[0].ln1_b16 == NULL);
    check_same_bits("encoder stack (post-LN, ReLU, dropout 0.2)", f32, a16, pm.n);
    buf_free(x), buf_free(r), pmem_free(&pm);
    nn_encoder_stack_free(&m);
}

int main(void) {
    gradcheck_setup();
    test_act_bf16();
    test_gpt2(0.0f);
    test_gpt2(0.1f);
    test_gpt2_bf16_views();
    TEST_MAIN_END();
}
