// train_ckpt.c: checkpoint saving, rotation and resuming for the command-line tools.
#include "cli/train_ckpt.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_dir.h"
#include "ckpt/safetensors.h"
#include "core/alloc.h"
#include "core/timer.h"

fsdp_status cli_ckpt_save(fsdp_state *fs, cli_ckpt_options *o, int64_t steps_done, int64_t seed,
                          int64_t global_batch, int rank) {
    char dir[4096];
    if (rank == 0 && mkdir(o->dir, 0755) != 0 && errno != EEXIST)
        return fsdp_error(FSDP_ERR_IO, "--ckpt-dir %s: cannot create: %s", o->dir, strerror(errno));
    fsdp_ckpt_step_dir(o->dir, steps_done, dir, sizeof dir);
    fsdp_trainer_state ts = {steps_done, seed, global_batch, "", o->resumed_from};
    snprintf(ts.run_id, sizeof ts.run_id, "%s", o->run_id);
    double t0 = fsdp_now_sec();
    size_t before = fsdp_mem_current_total();
    fsdp_mem_reset_peaks();
    FSDP_CHECK(o->type == 1 ? fsdp_checkpoint_save_full(fs, dir, &ts) : fsdp_checkpoint_save(fs, dir, &ts));
    if (rank == 0) {
        printf("checkpoint: %s (%.2f s, peak extra memory %.1f MiB on rank 0)\n", dir, fsdp_now_sec() - t0,
               (double)(fsdp_mem_peak_total() - before) / 1048576.0);
        fflush(stdout);
        o->saved++;
        if (o->keep_last > 0) FSDP_CHECK(fsdp_ckpt_rotate(o->dir, o->keep_last, o->run_id));
    }
    return FSDP_OK;
}

fsdp_status cli_save_weights(const char *prog, fsdp_state *fs, const char *path, int rank) {
    FSDP_CHECK(fsdp_save_full(fs, path, 0));
    return cli_save_weights_report(prog, path, rank);
}

fsdp_status cli_save_weights_report(const char *prog, const char *path, int rank) {
    if (rank != 0) return FSDP_OK;
    st_file *f = NULL;
    FSDP_CHECK(st_open(path, &f));  // read back: the line states what is on disk
    int64_t numel = 0;
    for (int i = 0; i < st_count(f); i++) {
        const st_entry *e = st_entry_at(f, i);
        int64_t n = 1;
        for (int d = 0; d < e->ndim; d++) n *= e->shape[d];
        numel += n;
    }
    printf("%s: saved %d tensors (%.2fM parameters) to %s\n", prog, st_count(f), (double)numel / 1e6, path);
    fflush(stdout);
    st_close(f);
    return FSDP_OK;
}

fsdp_status cli_ckpt_resume_dir(const cli_ckpt_options *o, char *dir, size_t cap, int *found) {
    *found = 0;
    if (!o->resume) return FSDP_OK;
    *found = 1;
    if (strcmp(o->resume, "auto") != 0) {
        struct stat st;
        if (stat(o->resume, &st) != 0)
            return fsdp_error(FSDP_ERR_MISSING, "--resume %s: no such directory", o->resume);
        if (!S_ISDIR(st.st_mode))
            return fsdp_error(FSDP_ERR_INVALID_ARG, "--resume %s: not a directory (expected a checkpoint directory, "
                              "or a --ckpt-dir holding step_NNNNNNNN checkpoints)", o->resume);
        char marker[4200];
        snprintf(marker, sizeof marker, "%s/DONE", o->resume);
        snprintf(dir, cap, "%s", o->resume);
        if (access(marker, F_OK) == 0) return FSDP_OK;  // a checkpoint itself
        // no marker: the parent --ckpt-dir, whose newest complete step_* checkpoint is meant (as auto)
        int latest = 0;
        char newest[4096];
        FSDP_CHECK(fsdp_ckpt_latest(o->resume, newest, sizeof newest, &latest));
        if (latest) snprintf(dir, cap, "%s", newest);
        // else: dir stays o->resume, and the load names what is missing (an incomplete checkpoint's DONE)
        return FSDP_OK;
    }
    if (!o->dir) return fsdp_error(FSDP_ERR_INVALID_ARG, "--resume auto needs --ckpt-dir");
    return fsdp_ckpt_latest(o->dir, dir, cap, found);
}

// The first tensor dtype other than F32 in the checkpoint's parameter files (shard 0 of a sharded one,
// which rank 0 always writes; model.safetensors of a full one), or NULL when all are F32.
static const char *low_precision_dtype(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (access(path, F_OK) != 0) snprintf(path, sizeof path, "%s/shard_00000.safetensors", dir);
    st_file *f = NULL;
    if (st_open(path, &f) != FSDP_OK) return NULL;  // the load reports what is wrong with the file
    const char *found = NULL;
    for (int i = 0; i < st_count(f) && !found; i++)
        if (st_entry_at(f, i)->dtype != ST_F32) found = st_dtype_name(st_entry_at(f, i)->dtype);
    st_close(f);
    return found;
}

// rank 0, once the run's starting point is loaded: the archiving cli_ckpt_open decided, said in one line.
static fsdp_status archive_superseded(cli_ckpt_options *o, int64_t start_step) {
    if (!o->opened || o->archive_after < -1) return FSDP_OK;
    char reason[512], where[4400];
    int moved = 0;
    if (o->archive_after < 0)
        snprintf(reason, sizeof reason, "--new-run (run %s) set these checkpoints of an earlier run aside", o->run_id);
    else
        snprintf(reason, sizeof reason, "a run resumed from step %lld (run %s) branched off before these; resume one "
                 "with --resume DIR --new-run", (long long)o->archive_after, o->run_id);
    FSDP_CHECK(fsdp_ckpt_archive(o->dir, o->archive_after, o->archive_why, reason, where, sizeof where, &moved));
    o->archive_after = -2;
    if (moved > 0) {
        if (o->new_run)
            printf("note: --new-run: the %d checkpoint entr%s in %s moved to %s (kept, not resumed by --resume auto)\n",
                   moved, moved == 1 ? "y" : "ies", o->dir, where);
        else
            printf("note: resumed from step %lld of %s, which went on further: %d newer entr%s moved to %s (kept, not "
                   "resumed by --resume auto; this run continues from step %lld)\n", (long long)start_step, o->dir,
                   moved, moved == 1 ? "y" : "ies", where, (long long)start_step);
        fflush(stdout);
    }
    return FSDP_OK;
}

fsdp_status cli_ckpt_resume(fsdp_state *fs, cli_ckpt_options *o, int64_t global_batch, int rank,
                            int *start_step) {
    *start_step = 0;
    char dir[4096];
    int found = 0;
    FSDP_CHECK(cli_ckpt_resume_dir(o, dir, sizeof dir, &found));
    if (!o->resume || !found) {
        if (o->resume && rank == 0) printf("no complete checkpoint under %s: starting fresh\n", o->dir);
        return rank == 0 ? archive_superseded(o, 0) : FSDP_OK;
    }
    const char *lowp = low_precision_dtype(dir);
    if (lowp && !o->allow_lowp)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "--resume %s: the checkpoint stores its weights and AdamW moments in %s "
                          "(an export, e.g. fsdp-ckpt convert --dtype bf16): training on from rounded master weights "
                          "and moments needs --allow-lowp-resume", dir, lowp);
    fsdp_trainer_state ts;
    double t0 = fsdp_now_sec();
    size_t before = fsdp_mem_current_total();
    fsdp_mem_reset_peaks();
    FSDP_CHECK(fsdp_checkpoint_load(fs, dir, &ts));
    *start_step = (int)ts.step;
    o->resumed_from = ts.step;
    if (rank == 0) {
        printf("resumed from %s: %lld steps done (loaded in %.2f s, peak extra memory %.1f MiB on rank 0)\n", dir,
               (long long)ts.step, fsdp_now_sec() - t0, (double)(fsdp_mem_peak_total() - before) / 1048576.0);
        if (ts.global_batch != global_batch)
            printf("  note: the global batch changed (%lld -> %lld sequences): the data position is recomputed for "
                   "the new batch\n", (long long)ts.global_batch, (long long)global_batch);
        fflush(stdout);
        FSDP_CHECK(archive_superseded(o, ts.step));
    }
    return FSDP_OK;
}

int cli_ckpt_check_steps(const char *prog, int steps, int start_step, int rank) {
    if (start_step == 0 || steps > start_step) return 0;
    if (rank == 0)
        fprintf(stderr, "%s: %s--steps %d %s the %d steps the checkpoint has done (--steps is the total, not the "
                "steps to add)%s\n", prog, steps == start_step ? "note: " : "", steps,
                steps == start_step ? "equals" : "is fewer than", start_step,
                steps == start_step ? ": nothing to train" : "");
    return steps == start_step ? 0 : -1;
}

int cli_ckpt_due(const cli_ckpt_options *o, int steps_done, int steps, int stopping) {
    return o->dir && (stopping || steps_done == steps || (o->save_every > 0 && steps_done % o->save_every == 0));
}

static volatile sig_atomic_t stop_signal;  // the SIGINT/SIGTERM received, 0 until then
static void on_signal(int sig) { stop_signal = sig; }

// Without SA_RESTART: a rank blocked writing its log to a launcher that stopped reading (Open MPI's
// mpirun, signalled itself, stops forwarding output and signals the ranks seconds later) gets EINTR, loses
// that log line and goes on to the stop check and the checkpoint, instead of blocking until SIGKILL.
void cli_ckpt_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

fsdp_status cli_ckpt_stop_requested(fsdp_comm *world, int *stop) {
    double any = stop_signal;
    FSDP_CHECK(fsdp_all_reduce_double(world, &any));
    *stop = any > 0;
    return FSDP_OK;
}

void cli_ckpt_say_interrupted(const char *prog, int step, const char *detail) {
    char line[512];
    int n = snprintf(line, sizeof line, "%s: interrupted after step %d%s%s\n", prog, step, detail[0] ? "; " : "",
                     detail);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof line ? (size_t)n : sizeof line - 1, done = 0;
    fflush(stderr);
    while (done < len) {
        ssize_t w = write(STDERR_FILENO, line + done, len - done);
        if (w > 0) done += (size_t)w;
        else if (w < 0 && errno != EINTR) break;
    }
}
