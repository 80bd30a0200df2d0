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

// One step_NNNNNNNN entry of a checkpoint root.
typedef struct {
    int64_t step;
    int complete;  // it holds DONE
} fsdp_ckpt_entry;
// The step_* entries of root that count (not those an unfinished archiving has set aside, below),
// sorted by step; *list is malloc'ed (NULL when *n = 0). A missing root has none.
fsdp_status fsdp_ckpt_list(const char *root, fsdp_ckpt_entry **list, int *n);
// The newest complete checkpoint under root: *found = 0 (and FSDP_OK) when there is none.
fsdp_status fsdp_ckpt_latest(const char *root, char *out, size_t cap, int *found);

// Lineages. Every checkpoint records the run it belongs to in its metadata file (index.safetensors of
// a sharded checkpoint, optimizer.safetensors of a full one): FSDP_CKPT_RUN_KEY, an id of 16 lowercase
// hex digits made at a fresh start and kept across resumes, and FSDP_CKPT_RESUMED_KEY, the step the
// writing process started from (0: a fresh start). Checkpoints written before lineages existed have
// neither: their run id reads as "".
#define FSDP_CKPT_RUN_KEY "run_id"
#define FSDP_CKPT_RESUMED_KEY "resumed_from"
#define FSDP_CKPT_RUN_ID_LEN 16
// A new run id: FSDP_CKPT_RUN_ID_LEN hex digits from the system's random source (getrandom), then a
// NUL. out: (FSDP_CKPT_RUN_ID_LEN + 1,)
fsdp_status fsdp_ckpt_new_run_id(char *out);
// The file of checkpoint dir that holds its metadata (trainer state, run id, model configuration).
void fsdp_ckpt_meta_file(const char *dir, char *path, size_t cap);
// The run id and step recorded by the complete checkpoint dir (run_id "" and *step -1 when its
// metadata file cannot be read or records none). run_id: (cap,)
void fsdp_ckpt_run_of(const char *dir, char *run_id, size_t cap, int64_t *step);

// Rotation (--keep-last): keeps the `keep` newest complete checkpoints of run `run_id` (keep >= 1) and
// removes that run's older complete ones and every incomplete entry older than the newest kept (a
// crashed save's leftovers: the directory's lock rules out a save in progress). Checkpoints of other
// runs, and those without a run id, are never removed. Each is first renamed to a hidden name
// (".trash-step_NNNNNNNN"), then deleted: a kill part-way leaves no half-deleted step_* that resume
// could pick, and fsdp_ckpt_recover clears the hidden rest.
fsdp_status fsdp_ckpt_rotate(const char *root, int keep, const char *run_id);

// Archiving: moves the step_* entries of root newer than `after` (every one: after < 0) into
// root/archive/NAME/, kept whole and never deleted, where NAME = "<UTC yyyymmdd-HHMMSS>-<why>" (made
// unique); root/archive/NAME/ARCHIVED says why in one line. The move is journalled: root/.archiving is
// written first (atomically), and while it exists fsdp_ckpt_list and fsdp_ckpt_latest ignore the
// entries it sets aside, so a kill part-way never lets resume pick one; fsdp_ckpt_recover finishes the
// move. *moved = entries moved; where: (cap,) the archive directory (when *moved > 0).
fsdp_status fsdp_ckpt_archive(const char *root, int64_t after, const char *why, const char *reason, char *where,
                              size_t cap, int *moved);
// Finishes what a killed job left in root: an archiving journal, hidden rotation leftovers.
fsdp_status fsdp_ckpt_recover(const char *root);

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
