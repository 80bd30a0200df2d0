// train_loop.h: the optimizer-step loop behind fsdp-train and fsdp-minimal, written once. A step zeroes
// the gradients, runs --grad-accum micro-steps (the tool's forward and backward, with no_sync on all but
// the last under --no-sync), reduces the step's mean loss over the ranks (in chunk order under
// --deterministic), takes the global gradient norm, stops or skips on a non-finite loss or norm (when
// the tool checks), clips (--clip-grad-norm), writes --dump-grads after the first step, steps AdamW,
// hands the step's numbers to the tool's log, and then saves the checkpoints --ckpt-dir asks for and
// stops every rank together on SIGINT/SIGTERM. What differs between the tools (the model, the micro-step,
// the learning rate, the log) comes in through hooks.
#pragma once
#include <stdint.h>

#include "cli/train_ckpt.h"
#include "fsdp/fsdp.h"

// One finished step, handed to the tool's log hook.
typedef struct {
    int step;
    double loss;     // the global mean loss (non-finite only when skipped)
    double norm;     // the global gradient norm before clipping (0 when not computed)
    float lr;        // the learning rate of the update
    double seconds;  // the step's wall time, the update included
    double exposed_comm_seconds;  // the communication the step waited for
} train_loop_step;

typedef struct {
    const char *prog;  // "fsdp-train", for messages
    fsdp_state *fs;
    fsdp_comm *world;
    int start_step, steps;  // runs steps [start_step, steps)
    int grad_accum;         // micro-steps per step
    int no_sync;            // --no-sync: reduce gradients only after the last micro-step
    float clip;             // --clip-grad-norm (0: off)
    int deterministic;      // --deterministic: a micro-step is one chunk; losses summed in chunk order
    // the chunk order of the step's micro-steps under --deterministic (fsdp_det_mean): rank-major
    // (chunk r x grad_accum + m, fsdp-minimal's) or micro-step-major (chunk m x world + r, fsdp-train's)
    int det_rank_major;
    int check_nonfinite;  // a non-finite loss or norm stops the run (exit 1), or with skip_nonfinite skips
    int skip_nonfinite;   //   the update (parameters and AdamW state unchanged)
    const char *dump_grads_path;  // --dump-grads, or NULL
    cli_ckpt_options *ckpt;       // --ckpt-dir and friends
    int64_t seed;                 // recorded in the checkpoints
    int64_t global_batch;         // sequences per step, recorded in the checkpoints
    const char *stop_detail;      // the detail of the "interrupted after step N" line ("" for none)

    void *tool;  // the tool's context, passed to every hook
    // Micro-step m of step: forward (no_sync unless sync; fsdp_begin_forward), backward with the loss
    // gradient scaled by grad_scale (fsdp_end_backward), and the micro-batch's mean loss in *loss.
    // micro_id keys the micro-step's dropout (the chunk's id under --deterministic).
    fsdp_status (*micro_step)(void *tool, int step, int m, uint64_t micro_id, int sync, float grad_scale,
                              double *loss);
    float (*lr_at)(void *tool, int step);                    // NULL: lr for every step
    float lr;
    fsdp_status (*log_step)(void *tool, const train_loop_step *s);  // rank 0 prints (every rank calls it)
    fsdp_status (*save_on_stop)(void *tool);                         // NULL: nothing beyond the checkpoint
} train_loop;

// What the loop did: the exit status for the tool (0 done, 1 stopped on a non-finite loss or norm
// after rank 0 said so, 130 interrupted after saving) and the time of the steps after the first one run
// (the first one warms up).
typedef struct {
    int rc;
    double seconds, exposed_comm_seconds;
} train_loop_result;

// Runs the loop. Returns FSDP_OK (the outcome in *out), or the failure of a step (the tool prints
// fsdp_last_error()).
fsdp_status train_loop_run(const train_loop *loop, train_loop_result *out);
