// tokenizer.h: GPT-2's byte-level BPE tokenizer from Hugging Face's files (vocab.json + merges.txt).
//
// Encoding, as OpenAI's encoder.py: the text is cut into pieces by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (the first alternative that matches at each position; \p{L}, \p{N} and \s from Unicode's tables:
// unicode_classes.h), each piece's bytes become their single-byte symbols, and adjacent symbols are
// merged, lowest merge rank first, until no pair has a merge; the symbols are the token ids. Text that
// is not valid UTF-8 still encodes: a stray byte counts as a character of no class (neither letter,
// number nor space), and every byte has a symbol, so no input is lost. Decoding concatenates the tokens'
// bytes.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct fsdp_tokenizer fsdp_tokenizer;  // opaque

// Reads DIR/vocab.json (a JSON object: token -> id, tokens in GPT-2's byte-to-unicode alphabet) and
// DIR/merges.txt (an optional "#version" line, then "A B" per line, rank = order). Every merge's parts and
// their concatenation must be tokens, and every one of the 256 single-byte symbols must be one. On
// failure *out is NULL and the message names the file (or directory) and what is wrong: FSDP_ERR_IO,
// FSDP_ERR_FORMAT, FSDP_ERR_NOMEM.
fsdp_status fsdp_tokenizer_open(const char *dir, fsdp_tokenizer **out);
void fsdp_tokenizer_free(fsdp_tokenizer *t);  // NULL is fine

int fsdp_tokenizer_vocab(const fsdp_tokenizer *t);  // the largest id + 1
// FNV-1a (64 bit) of vocab.json's and merges.txt's bytes: names the token cache of a text
uint64_t fsdp_tokenizer_fingerprint(const fsdp_tokenizer *t);

// *ids (malloc'd, *n of them; the caller frees) = the encoding of text (len bytes)
fsdp_status fsdp_tokenizer_encode(const fsdp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n);
// The bytes of token id (*len of them), or NULL (*len 0) for an id that is no token
const unsigned char *fsdp_tokenizer_token_bytes(const fsdp_tokenizer *t, int id, size_t *len);

// Encodes the text file at path into the llm.c token file `<path>.<16 hex digits: the fingerprint>.bin`
// (written to a temporary name, then renamed: never half-written), unless that file exists and is not
// older than the text (*reused = 1). cache: (cap,) receives its path; *count: its tokens.
fsdp_status fsdp_tokenizer_cache_file(const fsdp_tokenizer *t, const char *path, char *cache, size_t cap, int *reused,
                                      size_t *count);
