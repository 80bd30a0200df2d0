// tokenizer_common.h: what both tokenizer readers share (tokenizer.c: vocab.json + merges.txt;
// tokenizer_json.c: tokenizer.json): a string -> id table, a merge table keyed by id pair, GPT-2's byte
// alphabet, UTF-8 decoding that lets stray bytes through, whole-file reads and FNV-1a.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#define TOK_FNV_OFFSET 14695981039346656037ull

// string -> id (open addressing; keys malloc'd and owned by the table)
typedef struct {
    char **keys;    // (cap,) NUL-terminated, NULL when empty
    int32_t *ids;   // (cap,)
    size_t cap, count;
} tok_str_table;

int tok_str_init(tok_str_table *t);  // 0 when out of memory
// The id of the n bytes at s, or -1
int32_t tok_str_find(const tok_str_table *t, const char *s, size_t n);
// Takes key (malloc'd) into t; 0 when out of memory (key freed) or already present (*dup = 1, key freed).
int tok_str_put(tok_str_table *t, char *key, int32_t id, int *dup);
void tok_str_free(tok_str_table *t);

// (a, b) -> (rank, merged id); a pair put again takes its later rank (as a dict built in order does)
typedef struct {
    uint64_t *key;          // (cap,) (a << 32 | b) + 1, 0 when empty
    int32_t *rank, *to;     // (cap,)
    size_t cap;
} tok_merge_table;

int tok_merge_init(tok_merge_table *m, size_t n);  // room for n merges; 0 when out of memory
void tok_merge_put(tok_merge_table *m, int32_t a, int32_t b, int32_t rank, int32_t to);
// The rank of merge (a, b) (*to its id), or INT_MAX where there is none
int tok_merge_find(const tok_merge_table *m, int32_t a, int32_t b, int32_t *to);
void tok_merge_free(tok_merge_table *m);

// GPT-2's byte alphabet (encoder.py's bytes_to_unicode): the code point standing for byte b
uint32_t tok_byte_char(int b);
// Decodes one UTF-8 character at s (len > 0 bytes left) into *cp; returns its length, or 1 with *cp =
// UINT32_MAX for a byte that starts no valid sequence.
size_t tok_utf8_get(const unsigned char *s, size_t len, uint32_t *cp);
uint64_t tok_fnv1a(uint64_t h, const void *p, size_t n);
// The whole file at path into a malloc'd buffer (NUL-terminated; *len without the NUL).
fsdp_status tok_read_file(const char *path, char **out, size_t *len);
