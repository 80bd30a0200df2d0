// tokenizer_json.h: Hugging Face tokenizers' tokenizer.json (the Rust library's serialization) as a
// pipeline, behind tokenizer.h's fsdp_tokenizer. What it knows:
// - model BPE: vocab, merges ("a b" strings or [a, b] arrays), byte_fallback (<0xNN> tokens), unk_token,
//   fuse_unk, ignore_merges (a pre-token that is itself a token stays whole, as Llama 3's);
//   merges are applied lowest rank first, leftmost first among equal ranks, one at a time (the library's
//   priority queue). dropout, continuing_subword_prefix and end_of_word_suffix are refused.
// - normalizers: null, NFC (Qwen2's: unicode_nfc.h, Unicode 14's tables), Prepend, Replace (String or
//   Regex pattern), Sequence; the others (NFKC, Lowercase, Precompiled, ...) are refused by name.
// - pre-tokenizers: ByteLevel (add_prefix_space, use_regex: GPT-2's pattern), Split (Regex or String
//   pattern; behavior Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert),
//   Metaspace (replacement, prepend_scheme always/first/never or the older add_prefix_space, split),
//   Digits (individual_digits), Sequence. ByteLevel must come last: pieces stay raw bytes until the model
//   maps them to the byte alphabet.
// - added_tokens: matched in the raw text before anything else, leftmost, longest first (lstrip/rstrip
//   take the (Unicode) white space beside them; single_word is refused); the text between them is normalized and
//   pre-tokenized on its own.
// - post_processor: TemplateProcessing (its "single" template), RobertaProcessing, BertProcessing,
//   ByteLevel (adds nothing), Sequence: the ids before and after $A when special tokens are asked for.
// - decoder: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace (String pattern), Sequence; none:
//   tokens joined by a space, as the library does. Bytes that are not valid UTF-8 stay raw bytes (the
//   library would show U+FFFD).
// Every unsupported type, option or regex is a one-line FSDP_ERR_FORMAT naming the file and the item.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct tok_json tok_json;  // opaque

// Builds the pipeline from the text of tokenizer.json (len bytes; path names it in messages).
fsdp_status tok_json_load(const char *path, const char *text, size_t len, tok_json **out);
void tok_json_free(tok_json *j);  // NULL is fine

int tok_json_vocab(const tok_json *j);  // the largest id (vocab and added tokens) + 1
// *ids (malloc'd, *n of them) = the encoding of text (len bytes); add_special: the post-processor's
// tokens around it, as encode(text, add_special_tokens=True)
fsdp_status tok_json_encode(const tok_json *j, const char *text, size_t len, int add_special, int32_t **ids,
                            size_t *n);
// The bytes token id stands for inside a text (the decoder on that token alone, without the rules for a
// text's first token and without Strip), or NULL (*len 0) for an id that is no token
const unsigned char *tok_json_token_bytes(const tok_json *j, int id, size_t *len);
// *out (malloc'd, *len bytes, NUL-terminated) = the decoder over ids (n,); skip_special leaves out the
// special added tokens. Ids that are no token are left out.
fsdp_status tok_json_decode(const tok_json *j, const int32_t *ids, size_t n, int skip_special, unsigned char **out,
                            size_t *len);
