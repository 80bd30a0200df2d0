// output_paths.h: the start-up check of the tools' output paths. Every file a run will write and every
// directory it will write into is checked after parsing and before anything is built or trained, so an
// unwritable --ckpt-dir or --save stops the run in a second, not after the training it was meant to keep.
#pragma once
#include "cli/train_ckpt.h"
#include "comm/comm.h"
#include "nn/param.h"

typedef enum {
    CLI_OUT_FILE,             // a file rank 0 writes: its directory exists and is writable (the file is not touched)
    CLI_OUT_DIR_CREATE,       // a directory rank 0 writes into (shared by all ranks): created when missing
                              // (its parent must exist), then it must be writable
    CLI_OUT_DIR_EVERY_RANK,   // an existing directory every rank writes its own files into (node-local is fine)
    CLI_OUT_HF_DIR,           // a Hugging Face model directory rank 0 writes (ckpt/hf_dir.h): its parent writable,
                              // and the directory absent or one fsdp.c wrote (it is not touched)
} cli_output_kind;

typedef struct {
    const char *flag;  // "--save"
    const char *path;  // NULL: the flag was not given (skipped)
    cli_output_kind kind;
} cli_output_path;

// Checks paths[0..n) on the ranks the kind names: writability is proved by creating a probe file,
// writing and fsyncing a 64 KiB block into it (a full filesystem refuses that) and removing it.
// Collective over world; every rank returns the same value: 0, or 2 after the lowest failing rank
// printed one line "prog: FLAG PATH: what is wrong". On failure a directory this call created is removed,
// so nothing is left behind.
int cli_check_output_paths(const char *prog, const cli_output_path *paths, int n, fsdp_comm *world);

// The free-space check, once the model's parameter list exists and before anything is trained: the
// space the run's saves will write must be free where they go, so that a run does not train to the end
// and then lose its work at the save. The rule (P = parameters, T = those not frozen, e.g. by
// --lora-rank):
//   --save FILE     4 B x P (fp32 weights);
//   --ckpt-dir DIR  one checkpoint = 4 B x P + 8 B x T (fp32 weights and AdamW's two moments), twice
//                   that when the run saves more than once (--save-every below --steps: the next
//                   checkpoint is written before --keep-last removes an older one);
// summed for outputs on the same filesystem, against the space free to unprivileged writers (statvfs
// f_bavail). ckpt: NULL when the run saves no checkpoint (--eval-only). Checked on rank 0; collective.
// Every rank returns 0, or 2 after rank 0 printed one line "prog: FLAG PATH: the run's saves need N
// bytes (...) but only M bytes are free there".
int cli_check_save_space(const char *prog, const nn_params *ps, const cli_ckpt_options *ckpt, const char *save_path,
                         int steps, fsdp_comm *world);
