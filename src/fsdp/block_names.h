// block_names.h: which block a parameter belongs to, from its name, in time independent of the number of
// blocks. Block b's parameters are those whose names start with the model's block prefix formatted for b
// (fsdp_model_desc.block_prefix, a printf format with one integer conversion: "h.%d." for GPT-2, "%d."
// for a Sequential); when several blocks' prefixes start a name, the lowest such b owns it. The lookup
// parses the number out of the name and confirms it, so "h.01.x" and "h.1x" belong to no block of "h.%d.".
#pragma once
#include "nn/param.h"

typedef struct {
    const char *format;  // the block prefix (not owned), e.g. "h.%d."
    int n_blocks;        // blocks 0 .. n_blocks - 1
    // 0: one plain %d (head, digits without leading zeros, tail: no formatting needed); 1: another integer
    // conversion (%5d, %03d, %-3d, %u, ...: candidates confirmed by formatting them); 2: anything else
    // (a scan over the blocks per name: O(blocks))
    int mode;
    char head[NN_NAME_MAX], tail[NN_NAME_MAX];  // the literal text before and after the number ("%%" as "%")
    int head_len, tail_len;
} fsdp_block_names;

// Prepares the lookup for `format` (kept by pointer: it must outlive bn) and n_blocks blocks.
void fsdp_block_names_init(fsdp_block_names *bn, const char *format, int n_blocks);
// The block `name` belongs to (0 .. n_blocks - 1), or -1 (a root parameter).
int fsdp_block_names_find(const fsdp_block_names *bn, const char *name);
