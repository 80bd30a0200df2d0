// tokenizer_json_impl.h: the pipeline tokenizer_json.c builds from tokenizer.json and
// tokenizer_json_run.c runs (encode, decode). Internal to those two files.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "data/tok_regex.h"
#include "data/tokenizer_common.h"
#include "data/tokenizer_json.h"

enum { NORM_PREPEND, NORM_REPLACE, NORM_NFC };
typedef struct {
    int kind;
    char *a, *b;     // Prepend: a the prefix; Replace: a the String pattern (or NULL: re), b the content
    tok_regex *re;   // Replace with a Regex pattern
} tj_normalizer;

enum { PRE_BYTE_LEVEL, PRE_SPLIT, PRE_METASPACE, PRE_DIGITS };
enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREVIOUS, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };
enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER };
typedef struct {
    int kind;
    tok_regex *re;      // Split (a String pattern is compiled as its escaped literal); ByteLevel: GPT-2's
                        // pattern where use_regex
    int behavior, invert;
    int add_prefix_space;
    char replacement[5];  // Metaspace: the replacement character's UTF-8 (NUL-terminated)
    int prepend_scheme, split, individual_digits;
} tj_pretokenizer;

enum { DEC_BYTE_LEVEL, DEC_METASPACE, DEC_BYTE_FALLBACK, DEC_FUSE, DEC_STRIP, DEC_REPLACE };
typedef struct {
    int kind;
    char *a, *b;            // Replace: pattern a, content b; Strip: a the content character
    int start, stop;        // Strip
    char replacement[5];    // Metaspace
    int prepend_scheme;     // Metaspace
} tj_decoder;

typedef struct {
    char *content;  // UTF-8, (len,)
    size_t len;
    int32_t id;
    int special, lstrip, rstrip;
} tj_added;

struct tok_json {
    int vocab;                     // largest id + 1
    char **token;                  // (vocab,) each id's token string (NUL-terminated), NULL where none
    unsigned char **bytes;         // (vocab,) tok_json_token_bytes of each id, NULL where none
    size_t *nbytes;                // (vocab,)
    unsigned char *is_special;     // (vocab,) 1 for special added tokens
    tok_str_table strs;            // model vocabulary: token string -> id
    tok_merge_table merges;
    int byte_level;                // a ByteLevel pre-tokenizer: pieces' bytes map to GPT-2's alphabet
    int32_t byte_id[256];          // byte_level: each byte's alphabet token, -1 where none
    int byte_fallback;
    int32_t fallback_id[256];      // byte_fallback: the id of <0xNN>, -1 where none
    int32_t unk;                   // unk_token's id, -1 for none
    int fuse_unk, ignore_merges;
    tj_normalizer *norms;          // (nnorms,) in order
    int nnorms;
    tj_pretokenizer *pres;         // (npres,) in order
    int npres;
    tj_decoder *decs;              // (ndecs,) in order
    int ndecs, has_decoder;
    tj_added *added;               // (nadded,) longest content first
    int nadded;
    unsigned char added_first[256];  // 1 for a byte that starts some added token
    int32_t *before, *after;       // (nbefore,), (nafter,) the post-processor's ids around $A
    int nbefore, nafter;
};

// A list of byte strings (the decoders work on one)
typedef struct {
    char **s;      // (n,) malloc'd
    size_t *len;   // (n,)
    size_t n, cap;
} tj_strings;

int tj_strings_push(tj_strings *l, const char *s, size_t len);  // copies; 0 when out of memory
void tj_strings_free(tj_strings *l);
// Runs j's decoders over l in place; first: whether l[0] is the text's first token (Metaspace's rule),
// strip: whether Strip applies. 0 when out of memory.
int tj_decode_chain(const tok_json *j, tj_strings *l, int first, int strip);
