// ckpt_dir.h: a directory of checkpoints ROOT/step_NNNNNNNN (NNNNNNNN = optimizer steps completed),
// each complete only once it holds the marker DONE.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

void fsdp_ckpt_step_dir(const char *root, int64_t step, char *out, size_t cap);
// The newest complete checkpoint under root: *found = 0 (and FSDP_OK) when there is none.
fsdp_status fsdp_ckpt_latest(const char *root, char *out, size_t cap, int *found);
// Keeps the `keep` newest complete checkpoints (keep >= 1) and removes older ones, complete or not;
// never touches anything newer than the newest complete checkpoint (a save may be in progress).
fsdp_status fsdp_ckpt_rotate(const char *root, int keep);
