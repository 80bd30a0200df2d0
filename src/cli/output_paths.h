// output_paths.h: the start-up check of the tools' output paths. Every file a run will write and every
// directory it will write into is checked after parsing and before anything is built or trained, so an
// unwritable --ckpt-dir or --save stops the run in a second, not after the training it was meant to keep.
#pragma once
#include "comm/comm.h"

typedef enum {
    CLI_OUT_FILE,             // a file rank 0 writes: its directory exists and is writable (the file is not touched)
    CLI_OUT_DIR_CREATE,       // a directory rank 0 writes into (shared by all ranks): created when missing
                              // (its parent must exist), then it must be writable
    CLI_OUT_DIR_EVERY_RANK,   // an existing directory every rank writes its own files into (node-local is fine)
} cli_output_kind;

typedef struct {
    const char *flag;  // "--save"
    const char *path;  // NULL: the flag was not given (skipped)
    cli_output_kind kind;
} cli_output_path;

// Checks paths[0..n) on the ranks the kind names: writability is proved by creating and removing a probe
// file. Collective over world; every rank returns the same value: 0, or 2 after the lowest failing rank
// printed one line "prog: FLAG PATH: what is wrong". On failure a directory this call created is removed,
// so nothing is left behind.
int cli_check_output_paths(const char *prog, const cli_output_path *paths, int n, fsdp_comm *world);
