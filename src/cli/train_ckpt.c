// train_ckpt.c: checkpoint saving, rotation and resuming for the command-line tools.
#include "cli/train_ckpt.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt_dir.h"
#include "core/alloc.h"
#include "core/timer.h"

fsdp_status cli_ckpt_save(fsdp_state *fs, const cli_ckpt_options *o, int64_t steps_done, int64_t seed,
                          int64_t global_batch, int rank) {
    char dir[4096];
    if (rank == 0 && mkdir(o->dir, 0755) != 0 && errno != EEXIST)
        return fsdp_error(FSDP_ERR_IO, "--ckpt-dir %s: cannot create: %s", o->dir, strerror(errno));
    fsdp_ckpt_step_dir(o->dir, steps_done, dir, sizeof dir);
    fsdp_trainer_state ts = {steps_done, seed, global_batch};
    double t0 = fsdp_now_sec();
    size_t before = fsdp_mem_current_total();
    fsdp_mem_reset_peaks();
    FSDP_CHECK(o->type == 0 ? fsdp_checkpoint_save(fs, dir, &ts) : fsdp_checkpoint_save_full(fs, dir, &ts));
    if (rank == 0) {
        printf("checkpoint: %s (%.2f s, peak extra memory %.1f MiB on rank 0)\n", dir, fsdp_now_sec() - t0,
               (double)(fsdp_mem_peak_total() - before) / 1048576.0);
        fflush(stdout);
        if (o->keep_last > 0) FSDP_CHECK(fsdp_ckpt_rotate(o->dir, o->keep_last));
    }
    return FSDP_OK;
}

fsdp_status cli_ckpt_resume(fsdp_state *fs, const cli_ckpt_options *o, int64_t global_batch, int rank,
                            int *start_step) {
    *start_step = 0;
    if (!o->resume) return FSDP_OK;
    char dir[4096];
    int found = 1;
    if (strcmp(o->resume, "auto") == 0) {
        if (!o->dir) return fsdp_error(FSDP_ERR_INVALID_ARG, "--resume auto needs --ckpt-dir");
        FSDP_CHECK(fsdp_ckpt_latest(o->dir, dir, sizeof dir, &found));
    } else {
        snprintf(dir, sizeof dir, "%s", o->resume);
    }
    if (!found) {
        if (rank == 0) printf("no complete checkpoint under %s: starting fresh\n", o->dir);
        return FSDP_OK;
    }
    fsdp_trainer_state ts;
    double t0 = fsdp_now_sec();
    size_t before = fsdp_mem_current_total();
    fsdp_mem_reset_peaks();
    FSDP_CHECK(fsdp_checkpoint_load(fs, dir, &ts));
    *start_step = (int)ts.step;
    if (rank == 0) {
        printf("resumed from %s: %lld steps done (loaded in %.2f s, peak extra memory %.1f MiB on rank 0)\n", dir,
               (long long)ts.step, fsdp_now_sec() - t0, (double)(fsdp_mem_peak_total() - before) / 1048576.0);
        if (ts.global_batch != global_batch)
            printf("  note: the global batch changed (%lld -> %lld sequences): the data position is recomputed for "
                   "the new batch\n", (long long)ts.global_batch, (long long)global_batch);
        fflush(stdout);
    }
    return FSDP_OK;
}

static volatile sig_atomic_t stop_signal;  // the SIGINT/SIGTERM received, 0 until then
static void on_signal(int sig) { stop_signal = sig; }

void cli_ckpt_catch_signals(void) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

fsdp_status cli_ckpt_stop_requested(fsdp_comm *world, int *stop) {
    double any = stop_signal;
    FSDP_CHECK(fsdp_all_reduce_double(world, &any));
    *stop = any > 0;
    return FSDP_OK;
}
