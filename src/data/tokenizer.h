// tokenizer.h: BPE tokenizers from Hugging Face's files: tokenizer.json (the tokenizers library's
// serialization: Llama 3, Qwen2, SmolLM, GPT-2's byte-level BPE, Llama 2 / Mistral / TinyLlama's
// SentencePiece-style BPE with byte fallback; tokenizer_json.h says exactly what is supported), or GPT-2's
// vocab.json + merges.txt.
//
// vocab.json + merges.txt encode as OpenAI's encoder.py: the text is cut into pieces by GPT-2's pattern
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

// path: a tokenizer.json file, or a directory holding tokenizer.json (preferred when present) or
// vocab.json (a JSON object: token -> id, tokens in GPT-2's byte-to-unicode alphabet) and merges.txt (an
// optional "#version" line, then "A B" per line, rank = order). Every merge's parts and their
// concatenation must be tokens, and (vocab.json) every one of the 256 single-byte symbols must be one. On
// failure *out is NULL and the message names the file (or directory) and what is wrong: FSDP_ERR_IO,
// FSDP_ERR_FORMAT (also an unsupported model, normalizer, pre-tokenizer, regex, decoder or
// post-processor of tokenizer.json), FSDP_ERR_NOMEM.
fsdp_status fsdp_tokenizer_open(const char *path, fsdp_tokenizer **out);
void fsdp_tokenizer_free(fsdp_tokenizer *t);  // NULL is fine

int fsdp_tokenizer_vocab(const fsdp_tokenizer *t);  // the largest id (added tokens included) + 1
// FNV-1a (64 bit) of tokenizer.json's bytes, or of vocab.json's and merges.txt's: names the token cache
uint64_t fsdp_tokenizer_fingerprint(const fsdp_tokenizer *t);

// *ids (malloc'd, *n of them; the caller frees) = the encoding of text (len bytes), without special
// tokens (the library's encode(text, add_special_tokens=False))
fsdp_status fsdp_tokenizer_encode(const fsdp_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t *n);
// The same; add_special: with the post-processor's tokens (BOS / EOS) around it, as
// encode(text, add_special_tokens=True) (vocab.json + merges.txt have none)
fsdp_status fsdp_tokenizer_encode_special(const fsdp_tokenizer *t, const char *text, size_t len, int add_special,
                                          int32_t **ids, size_t *n);
// The bytes of token id (*len of them) as it stands inside a text (tokenizer.json: its decoder on that
// token alone, without Strip or the rules for a text's first token), or NULL (*len 0) for an id that is
// no token
const unsigned char *fsdp_tokenizer_token_bytes(const fsdp_tokenizer *t, int id, size_t *len);
// *out (malloc'd, *len bytes, NUL-terminated) = the text of ids (n,) through the decoder, as the library's
// decode(ids, skip_special_tokens); bytes that are not valid UTF-8 stay raw. Ids that are no token are
// left out.
fsdp_status fsdp_tokenizer_decode(const fsdp_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                  unsigned char **out, size_t *len);

// Encodes the text file at path (no special tokens) into the llm.c token file
// `<path>.<16 hex digits: the fingerprint>.bin`: uint16 tokens (magic 20240520, version 1), or uint32
// (magic 20240801, version 7, llm.c's Llama 3 layout) when the vocabulary exceeds 65,536 ids; written
// to a temporary name, then renamed: never half-written; unless that file exists and is not older than
// the text (*reused = 1). cache: (cap,) receives its path; *count: its tokens.
fsdp_status fsdp_tokenizer_cache_file(const fsdp_tokenizer *t, const char *path, char *cache, size_t cap, int *reused,
                                      size_t *count);
