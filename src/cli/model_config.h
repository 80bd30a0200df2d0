// model_config.h: self-describing files. Every safetensors file the tools write carries the model's
// configuration (Hugging Face style keys: "model_type" plus, for GPT-2, n_layer, n_embd, n_head,
// vocab_size, n_positions) and the tool's resolved settings ("setting.<flag>" = value, e.g.
// "setting.lr" = "0.001"), as flat __metadata__ strings; torch and Hugging Face loaders ignore them.
// Loading a file that records a configuration takes the model's shape from it.
#pragma once
#include <stdio.h>

#include "cli/cli_args.h"
#include "cli/train_ckpt.h"
#include "fsdp/fsdp.h"

// One configuration value: its metadata key and the flag (in the tool's table) that sets it.
typedef struct {
    const char *key;   // "n_head"
    const char *flag;  // "--heads" (an int, bool or choice flag)
} cli_config_field;

typedef struct {
    const char *prog;                // "fsdp-train"
    const char *model_type;          // "gpt2"
    const cli_config_field *fields;  // (n_fields,)
    int n_fields;
    const cli_arg *args;             // (nargs,) the tool's flags, after parsing
    int nargs;
    int argc;
    char **argv;
} cli_model_config;

// Takes the configuration recorded in `path`'s metadata: a recorded value replaces the flag's, unless
// the flag was given explicitly with another value, which prints one line naming the flag, the given
// value and the file's, and returns -1. A file recording another model_type, or a value that does not
// parse, is an error too. A file without "model_type" (Hugging Face's own, older checkpoints) changes
// nothing. Returns 0 otherwise. A path that is a directory is a Hugging Face model directory: its
// config.json (ckpt/hf_config.h; an invalid one is an error) is read the same way, its keys named as
// the fields name them (GPT-2's n_layer, n_embd, ...: the same names the metadata uses); a tool whose
// model_type is "llama" takes the whole family's (llama, mistral, qwen2).
int cli_config_from_file(const cli_model_config *c, const char *path);

// The configuration recorded by the --init file (init_path, may be NULL) and by the checkpoint --resume
// names, taken as cli_config_from_file does; from the checkpoint also the sequence length its run
// recorded ("setting.seq"), unless --seq is given (on the command line or in --config). Returns 0, or -1
// after printing an error.
int cli_config_from_inputs(const cli_model_config *c, const char *init_path, const cli_ckpt_options *ckpt);

// The model_type the --init file (init_path, may be NULL) or else the checkpoint --resume names records,
// into type (cap,): "" when neither records one (or there is none). A file that cannot be opened is
// an error here only when it is the --init file (the load reports the rest).
fsdp_status cli_config_recorded_model_type(const char *init_path, const cli_ckpt_options *ckpt, char *type, size_t cap);

// Hands the configuration and every flag's value to fs, for every file it writes. Returns 0, or -1
// after printing an error.
int cli_config_to_state(const cli_model_config *c, fsdp_state *fs);

// The resolved configuration (every flag's value after the command line, --config and the files read)
// as one line "  config: --flag value ..." that can be typed again (switches only when on, unset
// strings left out).
void cli_config_print(const cli_model_config *c, FILE *f);
// The same as one JSON record {"config": {"model_type": ..., "<flag without -->": value, ...}} and a
// newline (numbers and switches as JSON numbers and booleans, an unset string as null).
void cli_config_write_json(const cli_model_config *c, FILE *f);
