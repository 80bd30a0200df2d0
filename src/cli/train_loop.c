// train_loop.c: the optimizer-step loop of fsdp-train and fsdp-minimal (train_loop.h).
#include "cli/train_loop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "core/fault_inject.h"
#include "core/timer.h"
#include "optim/optim.h"

// The micro-steps of one step; *loss: this rank's mean over them. micro_losses: (grad_accum,) each
// micro-step's mean loss (for the exact sum under --deterministic).
static fsdp_status run_micro_steps(const train_loop *l, int step, double *micro_losses, double *loss) {
    int M = l->grad_accum, N = fsdp_comm_size(l->world), R = fsdp_comm_rank(l->world);
    // --deterministic: each micro-step's loss gradient is that of its own mean (the engine divides the
    // exact sum by det_chunks), its dropout keyed on its chunk
    float grad_scale = l->deterministic ? 1.0f : 1.0f / (float)M;
    *loss = 0.0;
    for (int m = 0; m < M; m++) {
        uint64_t micro_id = (uint64_t)step * (uint64_t)M + (uint64_t)m;
        if (l->deterministic)
            micro_id = l->det_rank_major ? ((uint64_t)step * (uint64_t)N + (uint64_t)R) * (uint64_t)M + (uint64_t)m
                                         : ((uint64_t)step * (uint64_t)M + (uint64_t)m) * (uint64_t)N + (uint64_t)R;
        int sync = !l->no_sync || m == M - 1;  // --no-sync: reduce-scatter only after the last micro-step
        double micro_loss = 0.0;
        FSDP_CHECK(l->micro_step(l->tool, step, m, micro_id, sync, grad_scale, &micro_loss));
        *loss += micro_loss / M;
        micro_losses[m] = micro_loss;
    }
    return FSDP_OK;
}

// The step's global mean loss from this rank's: the chunks' losses summed in chunk order under
// --deterministic, else all-reduced.
static fsdp_status global_loss(const train_loop *l, const double *micro_losses, double *loss) {
    if (l->deterministic) return fsdp_det_mean(l->world, micro_losses, l->grad_accum, l->det_rank_major, loss);
    FSDP_CHECK(fsdp_all_reduce_double(l->world, loss));
    *loss /= fsdp_comm_size(l->world);
    return FSDP_OK;
}

// The global gradient norm (computed when clipping, checking or deterministic), then the non-finite
// check: a non-finite loss or norm stops the run (*rc 1) or, with skip_nonfinite, skips the update
// (*skip). The decision is collective: the loss is all-reduced, and so is a rank's verdict on its norm
// (replicated strategies compute it locally). A skipped step changes neither the parameters nor the
// AdamW state (its step count and moments), as PyTorch's GradScaler skips optimizer.step(); the
// schedule still advances.
static fsdp_status check_gradients(const train_loop *l, int step, double loss, double *norm, int *skip, int *rc) {
    *norm = 0.0;
    *skip = *rc = 0;
    if (!l->check_nonfinite && !(l->clip > 0.0f) && !l->deterministic) return FSDP_OK;
    FSDP_CHECK(fsdp_grad_norm(l->fs, norm));  // clip_grad_norm_'s true global norm of the sharded gradients
    if (!l->check_nonfinite) return FSDP_OK;
    double bad_norm = isfinite(*norm) ? 0.0 : 1.0;
    FSDP_CHECK(fsdp_all_reduce_double(l->world, &bad_norm));
    if (isfinite(loss) && bad_norm == 0.0) return FSDP_OK;
    const char *what = !isfinite(loss) ? "loss" : "gradient norm";
    double value = !isfinite(loss) ? loss : isfinite(*norm) ? NAN : *norm;  // rank 0's norm may be finite
    int R = fsdp_comm_rank(l->world);
    if (!l->skip_nonfinite) {
        if (R == 0)
            fprintf(stderr, "%s: step %d: %s is %g; stopping before the update (lower --lr, add --clip-grad-norm, or "
                    "pass --skip-nonfinite)\n", l->prog, step, what, value);
        *rc = 1;
        return FSDP_OK;
    }
    if (R == 0)
        fprintf(stderr, "%s: step %d: %s is %g; skipping this update (parameters and AdamW state unchanged)\n",
                l->prog, step, what, value);
    *skip = 1;
    return FSDP_OK;
}

// After the step: SIGINT/SIGTERM stop every rank after the same step (*stop), with a checkpoint when
// --ckpt-dir is set (and every --save-every steps, and after the last).
static fsdp_status save_and_stop(const train_loop *l, int step, int *stop) {
    int R = fsdp_comm_rank(l->world);
    FSDP_CHECK(cli_ckpt_stop_requested(l->world, stop));
    if (*stop && R == 0)  // said before the save: mpirun may stop forwarding output once the ranks exit
        cli_ckpt_say_interrupted(l->prog, step, l->stop_detail);
    if (cli_ckpt_due(l->ckpt, step + 1, l->steps, *stop))
        FSDP_CHECK(cli_ckpt_save(l->fs, l->ckpt, step + 1, l->seed, l->global_batch, R));
    if (*stop && l->save_on_stop) FSDP_CHECK(l->save_on_stop(l->tool));
    return FSDP_OK;
}

// One optimizer step; *rc as train_loop_result's (0: go on).
static fsdp_status run_step(const train_loop *l, int step, double *micro_losses, train_loop_result *out) {
    int R = fsdp_comm_rank(l->world);
    double t0 = fsdp_now_sec(), c0 = fsdp_exposed_comm_seconds(l->fs), loss = 0.0;
    fsdp_zero_grad(l->fs);
    FSDP_CHECK(run_micro_steps(l, step, micro_losses, &loss));
    FSDP_CHECK(global_loss(l, micro_losses, &loss));
    if (l->check_nonfinite && fsdp_fault_at_step(FSDP_ENV_TEST_NAN_LOSS, step, R)) loss = NAN;
    double norm = 0.0;
    int skip = 0;
    FSDP_CHECK(check_gradients(l, step, loss, &norm, &skip, &out->rc));
    if (out->rc) return FSDP_OK;
    if (l->clip > 0.0f && !skip) fsdp_scale_grads(l->fs, fsdp_clip_coefficient(norm, l->clip));
    // the gradients the optimizer sees (after clipping), for the parity tests
    if (step == 0 && l->dump_grads_path) FSDP_CHECK(fsdp_save_full(l->fs, l->dump_grads_path, 1));
    float lr = l->lr_at ? l->lr_at(l->tool, step) : l->lr;
    if (!skip) FSDP_CHECK(fsdp_optimizer_step(l->fs, lr));
    double dt = fsdp_now_sec() - t0, dc = fsdp_exposed_comm_seconds(l->fs) - c0;
    if (step > l->start_step) {
        out->seconds += dt;
        out->exposed_comm_seconds += dc;
    }
    train_loop_step s = {step, loss, norm, lr, dt, dc};
    FSDP_CHECK(l->log_step(l->tool, &s));
    int stop = 0;
    FSDP_CHECK(save_and_stop(l, step, &stop));
    if (stop) out->rc = 130;
    return FSDP_OK;
}

fsdp_status train_loop_run(const train_loop *l, train_loop_result *out) {
    *out = (train_loop_result){0, 0.0, 0.0};
    double *micro_losses = malloc(sizeof(double) * (size_t)l->grad_accum);  // (grad_accum,)
    if (!micro_losses) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    fsdp_status st = FSDP_OK;
    for (int step = l->start_step; step < l->steps && st == FSDP_OK && out->rc == 0; step++)
        st = run_step(l, step, micro_losses, out);
    free(micro_losses);
    return st;
}
