// train_arch.h: the model fsdp-train builds, resolved from its options and input files in one place for
// fsdp-train and for `fsdp-plan train` (so the planner plans the model the tool builds): the
// architecture (--arch, else what the --init or --resume file records), the shape (flags, the files'
// recorded configuration, an --init file's tensor shapes), Llama's derived defaults and checks, and the
// nn_llama_config built from them.
#pragma once
#include "cli/train_flags.h"
#include "nn/llama.h"

// Resolves o's model after cli_parse: chooses the architecture, sets o->config (the fields the files
// record for it; Llama's default --lora-targets q_proj,v_proj), takes the --init / --resume file's
// configuration (an --init directory's config.json) and an --init file's shapes (train_hf_prepare: no
// weights are read), resolves Llama's defaults (--kv-heads, --head-dim, --d-ff) and max_seq (0: --seq),
// and checks the shape. args (nargs,) is the tool's table, argc/argv its command line. Returns 0, 1
// after printing that the --init file's shapes cannot be read, or 2 after a one-line flag error; prog
// names the tool in messages ("fsdp-train"; train_hf_prepare's own say fsdp-train).
int train_arch_resolve(const char *prog, train_options *o, const cli_arg *args, int nargs, int argc, char **argv);

// The Llama configuration of o's resolved shape (--rope-scaling parsed into it). Returns 0, or 2 after
// a one-line error naming --rope-scaling.
int train_arch_llama_config(const char *prog, const train_options *o, nn_llama_config *cfg);
