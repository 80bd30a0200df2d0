// train_ckpt.h: the checkpoint flags shared by fsdp-train and fsdp-minimal (--ckpt-dir, --save-every,
// --ckpt-type, --keep-last, --resume).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "fsdp/fsdp.h"

typedef struct {
    const char *dir;     // --ckpt-dir (NULL: no checkpoints)
    int save_every;      // --save-every N completed steps (0: only after the last step and when interrupted)
    int type;            // --ckpt-type: 0 sharded, 1 full, -1 not given (sharded)
    int keep_last;       // --keep-last K (0: keep all)
    const char *resume;  // --resume DIR|auto
    int allow_lowp;      // --allow-lowp-resume: train on from a checkpoint stored in bf16
    int new_run;         // --new-run: a new lineage in a --ckpt-dir holding another run's checkpoints
    // The run's hold on --ckpt-dir, set by cli_ckpt_open (train_lineage.h) on rank 0 (zeroed elsewhere):
    int opened;              // cli_ckpt_open took the lock
    int lock_fd;             // the lock file (ckpt/ckpt_lock.h), valid while opened
    int created_dir;         // cli_ckpt_open created --ckpt-dir (cli_ckpt_close removes it if nothing was saved)
    int saved;               // checkpoints this run has saved
    char run_id[24];         // the lineage this run's checkpoints record (ckpt/ckpt_dir.h)
    int64_t resumed_from;    // the step this run started from (0: a fresh start)
    int64_t archive_after;   // once the resume has loaded: archive the entries newer than this step (-1: all;
                             // -2: nothing to archive)
    char archive_why[64];    // the archive directory's suffix ("branch-at-step_00000002", "new-run")
} cli_ckpt_options;


// The checkpoint --resume names: DIR (a checkpoint, or a --ckpt-dir holding step_NNNNNNNN checkpoints:
// then its newest complete one, as auto), or for auto the newest complete one under --ckpt-dir
// (*found = 0 when there is none, or no --resume). Returns an error for auto without --ckpt-dir, and
// for a DIR that does not exist ("no such directory") or is not a directory.
fsdp_status cli_ckpt_resume_dir(const cli_ckpt_options *o, char *dir, size_t cap, int *found);

// --save PATH: writes the full weights (fsdp_save_full, collective) and, on rank 0, confirms in one line
// what the file holds: "PROG: saved T tensors (P.PPM parameters) to PATH".
fsdp_status cli_save_weights(const char *prog, fsdp_state *fs, const char *path, int rank);
// Rank 0: "PROG: saved T tensors (P.PPM parameters) to PATH", read back from the file written.
fsdp_status cli_save_weights_report(const char *prog, const char *path, int rank);
// Saves DIR/step_<steps_done>, recording the run's lineage, and rotates (--keep-last: only this run's
// older checkpoints, ckpt/ckpt_dir.h); rank 0 prints where. Collective.
fsdp_status cli_ckpt_save(fsdp_state *fs, cli_ckpt_options *o, int64_t steps_done, int64_t seed,
                          int64_t global_batch, int rank);
// Loads what --resume names (auto: the newest complete checkpoint under --ckpt-dir, or nothing);
// *start_step = steps already done (0 for a fresh start). A checkpoint whose tensors are stored in a
// lower precision than fp32 (fsdp-ckpt convert --dtype bf16: an export format) is refused unless
// --allow-lowp-resume. Then, on rank 0, the archiving cli_ckpt_open decided (a branch, --new-run),
// with one line saying what moved where. Collective.
fsdp_status cli_ckpt_resume(fsdp_state *fs, cli_ckpt_options *o, int64_t global_batch, int rank,
                            int *start_step);
// --steps is the total, counted from the start of training, not the steps to add to a resumed
// checkpoint: fewer than start_step is an error (-1), exactly start_step a note that there is nothing to
// train (0: the run still does its end-of-run work, e.g. --save). Rank 0 prints one line.
int cli_ckpt_check_steps(const char *prog, int steps, int start_step, int rank);
// Whether to save after `steps_done` of `steps` completed steps: with --ckpt-dir, every --save-every
// steps, after the last step, and when stopping on a signal.
int cli_ckpt_due(const cli_ckpt_options *o, int steps_done, int steps, int stopping);

// SIGINT and SIGTERM (to any one rank, or to mpirun, which forwards them) ask the tools to stop after
// the current step, save a checkpoint when --ckpt-dir is set, and exit with 130.
void cli_ckpt_catch_signals(void);
// Collective, once per step: *stop = whether any rank has been signalled, so all stop after the same step.
fsdp_status cli_ckpt_stop_requested(fsdp_comm *world, int *stop);
// Rank 0's one line "PROG: interrupted after step N[; DETAIL]" on stderr, written with write(2) and
// retried on EINTR (the signals are caught without SA_RESTART, and mpirun may signal the ranks again
// while they shut down: a stdio write interrupted then would lose the line).
void cli_ckpt_say_interrupted(const char *prog, int step, const char *detail);
