// ckpt_dir.h: a directory of checkpoints ROOT/step_NNNNNNNN (NNNNNNNN = optimizer steps completed),
// each complete only once it holds the marker DONE.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

void fsdp_ckpt_step_dir(const char *root, int64_t step, char *out, size_t cap);
// 1 (and *step) if name is exactly what fsdp_ckpt_step_dir names a checkpoint ("step_" and at least 8
// digits, zero-padded to 8, nothing else), else 0: other entries of root are not checkpoints.
int fsdp_ckpt_parse_step_name(const char *name, int64_t *step);
// The newest complete checkpoint under root: *found = 0 (and FSDP_OK) when there is none.
fsdp_status fsdp_ckpt_latest(const char *root, char *out, size_t cap, int *found);
// Keeps the `keep` newest complete checkpoints (keep >= 1) and removes older ones, complete or not;
// never touches anything newer than the newest complete checkpoint (a save may be in progress).
fsdp_status fsdp_ckpt_rotate(const char *root, int keep);

// The marker DONE: "complete\n", then a line "<file> <crc32 as 8 lowercase hex digits>\n" for each file
// it vouches for (plain file names in the same directory, each listed once).
#define FSDP_MARKER_NAME_MAX 128
#define FSDP_MARKER_MAX_BYTES 8192
typedef struct {
    char name[FSDP_MARKER_NAME_MAX];
    uint32_t crc;
} fsdp_marker_file;

// Parses the marker text[0..len) (path is for messages) into files[0..*n), at most max of them.
// FSDP_ERR_FORMAT with a one-line message naming path and the line on anything else. text: (len,)
fsdp_status fsdp_ckpt_parse_marker(const char *path, const char *text, size_t len, fsdp_marker_file *files, int max,
                                   int *n);
// Reads and parses dir/DONE; FSDP_ERR_MISSING when there is none. files: (max,)
fsdp_status fsdp_ckpt_read_marker(const char *dir, fsdp_marker_file *files, int max, int *n);
