// ckpt_output.h: where a tool that reads a checkpoint may write what it makes of it (fsdp-ckpt
// consolidate, reshard, convert). Tools never write into their own source, and never where --resume
// would read what they wrote as a checkpoint.
#pragma once
#include "core/status.h"

typedef enum {
    FSDP_CKPT_OUT_FILE,  // one file (consolidate's OUT.safetensors)
    FSDP_CKPT_OUT_DIR,   // a new checkpoint directory (reshard, convert): it must not exist, or be empty
} fsdp_ckpt_out_kind;

// Checks output `out` against the checkpoint `src` it is made from, both resolved canonically
// (core/path_canon.h: symlinks, "..", relative spellings; out need not exist). Refused:
//   - out is src, lies inside src, or holds src (an ancestor: writing there overwrites it);
//   - out lies directly inside a checkpoint (a directory holding DONE), which it would change;
//   - a file named DONE (the completion marker makes its directory read as a complete checkpoint);
//   - a name of the step_NNNNNNNN form (its directory would read as a --ckpt-dir holding it);
//   - a directory output that exists and is a checkpoint root (it holds step_NNNNNNNN entries:
//     --resume of it would read the files written there), or is not an empty directory.
// FSDP_OK, or FSDP_ERR_INVALID_ARG with one line "OUT: why (the source is SRC)".
fsdp_status fsdp_ckpt_check_output(const char *src, const char *out, fsdp_ckpt_out_kind kind);
