// test_tokenizer_json.c: tokenizer.json's pipeline (data/tokenizer_json.h) and the regex engine of its
// Split pre-tokenizers (data/tok_regex.h).
// - With no arguments, the unit checks: the regex engine against matches worked out by hand (Llama 3's
//   pattern: contractions under (?i:...), letters after one non-letter, digits in threes, the lookahead
//   leaving a run's last space; U+017F under (?i:'s)); a pattern that backtracks exponentially stops at
//   the step budget; patterns outside what it supports are one-line errors naming the pattern; a small
//   SentencePiece-style tokenizer.json encodes a text to the ids worked out by hand (Prepend + Replace,
//   merges, byte fallback, <s> added by TemplateProcessing) and decodes back; a vocabulary over 65,536
//   ids (an added token) writes llm.c's uint32 token cache (magic 20240801, version 7), which data.h
//   reads back; malformed files, an unknown model type, an unsupported normalizer, an unsupported regex
//   and a post-processor id that is no token are one-line errors naming the file.
// - With `encode TOKENIZER TEXTFILE`, the driver of tests/train/test_hf_tokenizers.py: prints one JSON
//   object: "vocab", "ids" (no special tokens), "ids_special" (with them), "decoded" and
//   "decoded_skip" (hex of decode(ids_special) keeping / skipping special tokens), "decoded_plain" (hex of
//   decode(ids)), "token_bytes" (hex of each id's bytes in "ids").
// - With `nfc TEXTFILE` (valid UTF-8): prints its NFC (unicode_nfc.h), for the same test to compare with
//   Python's unicodedata.
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"
#include "data/data.h"
#include "data/tok_regex.h"
#include "data/tokenizer.h"
#include "data/unicode_nfc.h"
#include "test.h"

static char dir[256];  // /tmp/fsdp_tokjson_test.<pid>

#define LLAMA3_PATTERN                                                                                      \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

// The pieces re cuts ascii text into, joined by '|' into out (cap,)
static void split_text(const tok_regex *re, const char *text, char *out, size_t cap) {
    uint32_t cp[256];
    size_t n = strlen(text), at = 0, s, e, k = 0;
    for (size_t i = 0; i < n; i++) cp[i] = (unsigned char)text[i];
    out[0] = 0;
    while (tok_regex_find(re, cp, n, at, &s, &e) == 1) {
        k += (size_t)snprintf(out + k, cap - k, "%s%.*s", k ? "|" : "", (int)(e - s), text + s);
        at = e;
    }
}

static void test_regex(void) {
    tok_regex *re = NULL;
    CHECK_EQ_INT(tok_regex_compile(LLAMA3_PATTERN, "test", &re), FSDP_OK);
    char out[1024];
    if (re) {
        split_text(re, "He'S 12345 ok   go\n\n x!!\n", out, sizeof out);
        const char *want = "He|'S| |123|45| ok|  | go|\n\n| x|!!\n";
        if (strcmp(out, want) != 0) fprintf(stderr, "got '%s'\nwant '%s'\n", out, want);
        CHECK(strcmp(out, want) == 0);
        split_text(re, "", out, sizeof out);
        CHECK(out[0] == 0);
        // (?i:'s) takes U+017F (long s), whose simple case folding is 's', as Oniguruma does
        const uint32_t longs[] = {'i', 't', '\'', 0x17F, 'o'};
        size_t s = 0, e = 0;
        CHECK(tok_regex_find(re, longs, 5, 2, &s, &e) && s == 2 && e == 4);
    }
    tok_regex_free(re);
    CHECK_EQ_INT(tok_regex_compile("a{2,3}?b|[a-c]+(?=d)", "test", &re), FSDP_OK);
    if (re) {
        split_text(re, "aaab abcd", out, sizeof out);
        CHECK(strcmp(out, "aaab|abc") == 0);
    }
    tok_regex_free(re);
    // nested quantifiers that backtrack exponentially stop at the step budget (-1), not hours later
    CHECK_EQ_INT(tok_regex_compile("(a|aa)+b", "test", &re), FSDP_OK);
    if (re) {
        uint32_t as[64];
        size_t s = 0, e = 0;
        for (int i = 0; i < 64; i++) as[i] = 'a';
        CHECK_EQ_INT(tok_regex_find(re, as, 64, 0, &s, &e), -1);
        as[63] = 'b';
        CHECK_EQ_INT(tok_regex_find(re, as + 50, 14, 0, &s, &e), 1);
    }
    tok_regex_free(re);
    const char *bad[] = {"\\w+", "(?<=a)b", "a++", "^a", "\\p{Lu}", "(a", "[a", "(a*)*"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        re = (tok_regex *)&re;
        fsdp_clear_error();
        CHECK(tok_regex_compile(bad[i], "file.json", &re) != FSDP_OK);
        CHECK(re == NULL);
        const char *msg = fsdp_last_error();
        CHECK(strstr(msg, "file.json: unsupported regex '") != NULL && strstr(msg, bad[i]) != NULL && !strchr(msg, '\n'));
    }
}

static const char *write_file(char *path, const char *name, const char *text) {
    snprintf(path, 512, "%s/%s", dir, name);
    test_write_bytes(path, text, strlen(text));
    return path;
}

// Llama 2's configuration over a vocabulary small enough to work out by hand:
// "ab c" -> normalized "▁ab▁c" -> chars ▁ a b ▁ c; merges (▁ a) rank 0, (▁a b) rank 1, (▁ c) missing;
// c is no token: byte fallback <0x63>.
static const char *SENTENCEPIECE =
    "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
    "{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"<0x63>\":2,\"\\u2581\":3,\"a\":4,\"b\":5,\"\\u2581a\":6,\"\\u2581ab\":7},"
    "\"merges\":[\"\\u2581 a\",[\"\\u2581a\",\"b\"]]}}";

static void test_sentencepiece(void) {
    char path[512];
    fsdp_tokenizer *t = NULL;
    CHECK_EQ_INT(fsdp_tokenizer_open(write_file(path, "sp.json", SENTENCEPIECE), &t), FSDP_OK);
    if (!t) return;
    CHECK_EQ_INT(fsdp_tokenizer_vocab(t), 8);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_EQ_INT(fsdp_tokenizer_encode_special(t, "ab c<s>a", 8, 1, &ids, &n), FSDP_OK);
    // <s> ▁ab ▁ <0x63> <s> ▁a   (the text after the added <s> is prepended its own ▁)
    const int32_t want[] = {1, 7, 3, 2, 1, 6};
    CHECK_EQ_INT(n, 6);
    for (size_t i = 0; i < n && i < 6; i++) CHECK_EQ_INT(ids[i], want[i]);
    unsigned char *text = NULL;
    size_t len = 0;
    CHECK_EQ_INT(fsdp_tokenizer_decode(t, ids, n, 1, &text, &len), FSDP_OK);
    CHECK(text && len == 6 && memcmp(text, "ab c a", 6) == 0);  // Strip takes the first space only
    free(text);
    size_t nb = 0;
    const unsigned char *b = fsdp_tokenizer_token_bytes(t, 7, &nb);
    CHECK(b && nb == 3 && memcmp(b, " ab", 3) == 0);
    b = fsdp_tokenizer_token_bytes(t, 2, &nb);
    CHECK(b && nb == 1 && b[0] == 'c');
    free(ids);
    CHECK_EQ_INT(fsdp_tokenizer_encode(t, "", 0, &ids, &n), FSDP_OK);
    CHECK_EQ_INT(n, 0);
    free(ids);
    fsdp_tokenizer_free(t);
    unlink(path);
}

// A byte-level vocabulary of the 256 byte symbols plus an added token with id 70000: the cache is uint32
static void test_wide_cache(void) {
    static char json[16384];
    size_t k = (size_t)snprintf(json, sizeof json, "{\"added_tokens\":[{\"id\":70000,\"content\":\"<|end|>\","
                                "\"special\":true}],\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                                "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"merges\":[],\"vocab\":{");
    for (int b = 0; b < 256; b++) {  // GPT-2's byte alphabet as \u escapes
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255), c = b;
        if (!printable) {
            c = 256;
            for (int x = 0; x < b; x++) c += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        }
        k += (size_t)snprintf(json + k, sizeof json - k, "%s\"\\u%04x\":%d", b ? "," : "", c, b);
    }
    snprintf(json + k, sizeof json - k, "}}}");
    char path[512], text[512], cache[4096];
    fsdp_tokenizer *t = NULL;
    CHECK_EQ_INT(fsdp_tokenizer_open(write_file(path, "wide.json", json), &t), FSDP_OK);
    if (!t) return;
    CHECK_EQ_INT(fsdp_tokenizer_vocab(t), 70001);
    write_file(text, "wide.txt", "hi<|end|>there, \xff\xfe ok<|end|>");
    int reused = 1;
    size_t count = 0;
    CHECK_EQ_INT(fsdp_tokenizer_cache_file(t, text, cache, sizeof cache, &reused, &count), FSDP_OK);
    CHECK_EQ_INT(reused, 0);
    CHECK_EQ_INT(count, 2 + 1 + 12 + 1);  // hi <|end|> "there, \xff\xfe ok" <|end|>
    FILE *f = fopen(cache, "rb");
    int32_t header[3] = {0};
    CHECK(f && fread(header, 4, 3, f) == 3);
    if (f) fclose(f);
    CHECK_EQ_INT(header[0], 20240801);
    CHECK_EQ_INT(header[1], 7);
    CHECK_EQ_INT(header[2], 16);
    fsdp_data *d = NULL;
    CHECK_EQ_INT(fsdp_data_open(cache, 15, &d), FSDP_OK);
    if (d) {
        int32_t idx[15], tgt[15];
        fsdp_data_batch(d, 0, 0, 1, 0, 1, 1, 15, idx, tgt);
        CHECK_EQ_INT(idx[0], 'h');
        CHECK_EQ_INT(idx[2], 70000);
        CHECK_EQ_INT(idx[10], 0xff);
        CHECK_EQ_INT(tgt[14], 70000);
        CHECK_EQ_INT(fsdp_data_vocab(d), 70001);
        fsdp_data_close(d);
    }
    fsdp_tokenizer_free(t);
    unlink(cache), unlink(text), unlink(path);
}

static void check_bad(const char *name, const char *json, const char *what) {
    char path[512];
    write_file(path, name, json);
    fsdp_tokenizer *t = (fsdp_tokenizer *)&t;
    fsdp_clear_error();
    CHECK(fsdp_tokenizer_open(path, &t) != FSDP_OK);
    CHECK(t == NULL);
    const char *msg = fsdp_last_error();
    if (!strstr(msg, path) || !strstr(msg, what) || strchr(msg, '\n'))
        fprintf(stderr, "message for %s lacks the path or '%s' (or is not one line): %s\n", name, what, msg);
    CHECK(strstr(msg, path) != NULL && strstr(msg, what) != NULL && !strchr(msg, '\n'));
    unlink(path);
}

static void test_bad(void) {
    check_bad("trunc.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "invalid JSON");
    check_bad("wordpiece.json", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "model type is not supported (only BPE): 'WordPiece'");
    check_bad("nfkc.json", "{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "normalizer is not supported");
    check_bad("regex.json", "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?<=x)\\\\w+\"},\"behavior\":\"Isolated\"},"
              "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "unsupported regex '(?<=x)\\w+'");
    check_bad("merge.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}", "model.merges[0]: the token it makes is not in model.vocab");
    check_bad("post.json", "{\"post_processor\":{\"type\":\"RobertaProcessing\",\"cls\":[\"a\",5],\"sep\":[\"a\",0]},"
              "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "post_processor: id 5 is no token");
    check_bad("dup.json", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}", "one id to two tokens");
}

// The driver: prints the encodings and decodings of textfile as one JSON object
static int drive(const char *tokenizer, const char *textfile) {
    fsdp_tokenizer *t = NULL;
    if (fsdp_tokenizer_open(tokenizer, &t) != FSDP_OK) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return 2;
    }
    FILE *f = fopen(textfile, "rb");
    static char text[1 << 20];
    size_t len = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    int32_t *ids = NULL, *sp = NULL;
    size_t n = 0, ns = 0;
    unsigned char *dec = NULL, *skip = NULL, *plain = NULL;
    size_t ndec = 0, nskip = 0, nplain = 0;
    if (!f || fsdp_tokenizer_encode(t, text, len, &ids, &n) != FSDP_OK ||
        fsdp_tokenizer_encode_special(t, text, len, 1, &sp, &ns) != FSDP_OK ||
        fsdp_tokenizer_decode(t, sp, ns, 0, &dec, &ndec) != FSDP_OK ||
        fsdp_tokenizer_decode(t, sp, ns, 1, &skip, &nskip) != FSDP_OK ||
        fsdp_tokenizer_decode(t, ids, n, 0, &plain, &nplain) != FSDP_OK) {
        fprintf(stderr, "%s: %s\n", textfile, f ? fsdp_last_error() : "cannot read");
        return 2;
    }
    printf("{\"vocab\": %d, \"ids\": [", fsdp_tokenizer_vocab(t));
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
    printf("], \"ids_special\": [");
    for (size_t i = 0; i < ns; i++) printf("%s%d", i ? ", " : "", sp[i]);
    printf("], \"decoded\": \"");
    for (size_t i = 0; i < ndec; i++) printf("%02x", dec[i]);
    printf("\", \"decoded_skip\": \"");
    for (size_t i = 0; i < nskip; i++) printf("%02x", skip[i]);
    printf("\", \"decoded_plain\": \"");
    for (size_t i = 0; i < nplain; i++) printf("%02x", plain[i]);
    printf("\", \"token_bytes\": [");
    for (size_t i = 0; i < n; i++) {
        size_t nb = 0;
        const unsigned char *b = fsdp_tokenizer_token_bytes(t, ids[i], &nb);
        printf("%s\"", i ? ", " : "");
        for (size_t k = 0; k < nb; k++) printf("%02x", b[k]);
        printf("\"");
    }
    printf("]}\n");
    free(ids), free(sp), free(dec), free(skip), free(plain);
    fsdp_tokenizer_free(t);
    return 0;
}

// The NFC of textfile's code points, written as UTF-8 to stdout
static int drive_nfc(const char *textfile) {
    FILE *f = fopen(textfile, "rb");
    static char text[1 << 23];
    static uint32_t cp[1 << 23];
    size_t len = f ? fread(text, 1, sizeof text, f) : 0, n = 0, m = 0;
    if (f) fclose(f);
    for (size_t at = 0; at < len; n++) {
        size_t k = 1;
        unsigned char c = (unsigned char)text[at];
        k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        cp[n] = k == 1 ? c : c & (0x7F >> k);
        for (size_t i = 1; i < k && at + i < len; i++) cp[n] = cp[n] << 6 | ((unsigned char)text[at + i] & 0x3F);
        at += k;
    }
    uint32_t *out = NULL;
    if (!f || !fsdp_unicode_nfc(cp, n, &out, &m)) return 2;
    for (size_t i = 0; i < m; i++) {
        uint32_t c = out[i];
        if (c < 0x80) putchar((int)c);
        else if (c < 0x800) putchar((int)(0xC0 | c >> 6)), putchar((int)(0x80 | (c & 0x3F)));
        else if (c < 0x10000) putchar((int)(0xE0 | c >> 12)), putchar((int)(0x80 | (c >> 6 & 0x3F))), putchar((int)(0x80 | (c & 0x3F)));
        else putchar((int)(0xF0 | c >> 18)), putchar((int)(0x80 | (c >> 12 & 0x3F))), putchar((int)(0x80 | (c >> 6 & 0x3F))), putchar((int)(0x80 | (c & 0x3F)));
    }
    free(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "encode") == 0) return drive(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "nfc") == 0) return drive_nfc(argv[2]);
    snprintf(dir, sizeof dir, "/tmp/fsdp_tokjson_test.%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    test_regex();
    test_sentencepiece();
    test_wide_cache();
    test_bad();
    rmdir(dir);
    TEST_MAIN_END();
}
