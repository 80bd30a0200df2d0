// lora_sites.h: where a model's adapters go. A model lists the layers of its block that may carry an
// adapter (its sites); --lora-targets picks some by name, and nn_lora_attach gives each picked layer of
// every block its adapter. Shared by GPT-2 (nn/gpt2.c) and the Llama family (nn/llama.c).
#pragma once
#include "nn/linear.h"
#include "nn/lora.h"

// A layer of a block that may carry an adapter: its name within the block ("attn.c_attn",
// "self_attn.q_proj") and its bit in the model's target mask.
typedef struct {
    unsigned bit;
    const char *name;
} nn_lora_site;

// --lora-targets: a comma-separated list of sites (sites: (n_sites,)), each named in full or by its
// last part ("c_proj" picks every site that ends so) -> *mask. model: the block in the error's words ("a
// GPT-2 block"); expected: the names the error offers.
fsdp_status nn_lora_parse_targets(const nn_lora_site *sites, int n_sites, const char *list, const char *model,
                                  const char *expected, unsigned *mask);

// The adapters of the sites in targets, in every one of n_layer blocks: *pool (calloc'd: (*n,); the
// caller nn_lora_free's each, then frees it), registered in ps in block order, then site order.
// layers: (n_layer * n_sites,), block b's site i at [b * n_sites + i]; each picked one gets its adapter.
// prefix_format: a block's name with one %d for its index ("h.%d.", "model.layers.%d.").
fsdp_status nn_lora_attach(nn_lora **pool, int *n, nn_params *ps, const nn_lora_site *sites, int n_sites,
                           nn_linear *const *layers, int n_layer, const char *prefix_format, unsigned targets,
                           int r, float alpha, float dropout);
