// fuzz_tokenizer_json.c: tokenizer.json's reader (tok_json_load: the JSON tree, the model, normalizers,
// pre-tokenizers with their regexes, decoders, post-processor) on arbitrary bytes; an accepted
// tokenizer then encodes a fixed text of every kind of character (with and without special tokens, and
// the input's own first bytes as text), its ids lie below the vocabulary, and they decode.
#include <stdint.h>
#include <stdlib.h>

#include "data/tokenizer_json.h"
#include "fuzz_check.h"

static const char TEXT[] = "Hello world! It's 12345 ok   \n\n\t x\xff\xfe <s> <|endoftext|> \xe6\x97\xa5\xe6\x9c\xac "
                           "e\xcc\x81 \xf0\x9f\x8e\x89 \xe2\x96\x81" "a '<0x41>'";

static void encode_decode(const tok_json *j, const char *text, size_t len, int special) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_json_encode(j, text, len, special, &ids, &n) != FSDP_OK) return;  // a regex past its budget
    int vocab = tok_json_vocab(j);
    for (size_t i = 0; i < n; i++) FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < vocab);
    unsigned char *out = NULL;
    size_t out_len = 0;
    FUZZ_REQUIRE(tok_json_decode(j, ids, n, special, &out, &out_len) == FSDP_OK && out != NULL);
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        tok_json_token_bytes(j, ids[i], &k);
    }
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tok_json *j = NULL;
    fsdp_clear_error();
    if (tok_json_load("fuzz.json", (const char *)data, size, &j) != FSDP_OK) {
        FUZZ_REQUIRE(j == NULL);
        fuzz_check_error("fuzz.json");
        return 0;
    }
    encode_decode(j, TEXT, sizeof TEXT - 1, 0);
    encode_decode(j, TEXT, sizeof TEXT - 1, 1);
    encode_decode(j, (const char *)data, size < 64 ? size : 64, 0);
    tok_json_free(j);
    return 0;
}
