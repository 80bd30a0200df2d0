// data.c: token data sets (llm.c .bin files, byte-level text, a built-in corpus) and the batch
// formula shared by every rank. Whole files are read into malloc'd memory as uint32 tokens.
#include "data/data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define BIN_MAGIC 20240520            // llm.c's GPT-2 files: version 1, uint16 tokens
#define BIN_VERSION 1
#define BIN_MAGIC_U32 20240801        // llm.c's Llama 3 files (dev/data/data_common.py): version 7, uint32
#define BIN_VERSION_U32 7
#define BIN_HEADER_BYTES 1024        // 256 int32
#define CORPUS_BYTES (1 << 20)       // the built-in corpus: exactly 1 MiB of text
#define CORPUS_NAME "built-in corpus"

struct fsdp_data {
    uint32_t *tok;  // tok: (n,)
    int64_t n;
    int vocab;
    char *name;     // the path, or CORPUS_NAME
};

// ---- the built-in corpus: English-like sentences from fixed word lists, chosen by an LCG ----

static const char *const names[] = {"Anna", "Ben", "Clara", "David", "Emma", "Frank", "Grace", "Henry",
                                    "Iris", "Jack", "Kate", "Leo", "Mia", "Noah", "Olga", "Paul"};
static const char *const nouns[] = {
    "cat", "dog", "bird", "horse", "fish", "house", "tree", "river", "garden", "city", "road", "king",
    "queen", "child", "friend", "teacher", "doctor", "farmer", "boat", "ship", "door", "window", "table",
    "book", "letter", "song", "story", "mountain", "forest", "village", "market", "school", "bridge",
    "field", "flower", "stone", "fire", "bread", "apple", "cup", "box", "bag", "hat", "coat", "key",
    "clock", "lamp", "chair", "wall", "hill", "lake", "sea", "island", "castle", "train", "car", "egg",
    "orange", "umbrella", "owl"};
static const char *const adjectives[] = {
    "old", "young", "small", "big", "red", "green", "blue", "happy", "sad", "quiet", "loud", "dark",
    "bright", "warm", "cold", "tall", "short", "kind", "strange", "little", "good", "new", "long", "heavy",
    "empty", "busy", "clever", "gentle", "brave", "tired", "white", "black", "yellow", "wooden", "golden",
    "ancient", "early", "open", "odd", "ugly"};
static const char *const verbs_t[] = {
    "saw", "found", "took", "made", "gave", "kept", "held", "bought", "sold", "opened", "closed", "watched",
    "wanted", "liked", "loved", "carried", "painted", "cleaned", "built", "broke", "lost", "moved", "fixed",
    "washed", "followed", "visited", "remembered", "forgot", "needed", "touched", "pushed", "pulled",
    "filled", "dropped", "caught", "hid", "called", "heard", "read", "wrote"};
static const char *const verbs_i[] = {"slept", "ran", "walked", "laughed", "cried", "smiled", "waited",
                                      "sang", "danced", "fell", "stayed", "worked", "swam", "jumped",
                                      "rested", "listened", "played", "talked", "sat", "left"};
static const char *const adverbs[] = {"slowly", "quickly", "quietly", "softly", "happily", "sadly",
                                      "often", "again", "together", "alone", "early", "late", "well",
                                      "carefully", "suddenly"};
static const char *const preps[] = {"in", "on", "near", "under", "behind", "over", "by", "across",
                                    "through", "into", "from", "with"};
static const char *const times[] = {"in the morning", "at night", "every day", "last week",
                                    "after dinner", "before noon", "in the spring", "at noon"};
// Slots: $N noun, $A adjective, $T transitive verb, $I intransitive verb, $D adverb, $P preposition,
// $M name, $W time phrase, $Q "a"/"an" + adjective + noun. Sentences are capitalised when emitted.
static const char *const templates[] = {
    "the $A $N $T the $N.",
    "$M $T $Q $P the $N.",
    "$M and $M $I $D.",
    "the $N $I $P the $A $N $W.",
    "where is the $N? it is $P the $N.",
    "\"I $T the $N,\" said $M.",
    "$M $I, and the $N $I too.",
    "$W, $M $T the $A $N.",
    "$M $T the $N $D.",
    "the $N was $A, and the $N was $A.",
};

#define COUNT(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

typedef struct {
    char *buf;  // buf: (cap,)
    size_t len, cap;
    uint64_t lcg;
} corpus_builder;

static uint32_t lcg_below(corpus_builder *b, uint32_t n) {
    b->lcg = b->lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(b->lcg >> 33) % n;
}

static void put(corpus_builder *b, const char *s) {
    size_t k = strlen(s);
    FSDP_ASSERT(b->len + k <= b->cap);
    memcpy(b->buf + b->len, s, k);
    b->len += k;
}

#define PICK(b, list) ((list)[lcg_below((b), COUNT(list))])

// Appends one sentence from a random template, its first letter capitalised.
static void put_sentence(corpus_builder *b) {
    const char *t = PICK(b, templates);
    size_t start = b->len;
    for (; *t; t++) {
        if (*t != '$') {
            FSDP_ASSERT(b->len < b->cap);
            b->buf[b->len++] = *t;
            continue;
        }
        switch (*++t) {
        case 'N': put(b, PICK(b, nouns)); break;
        case 'A': put(b, PICK(b, adjectives)); break;
        case 'T': put(b, PICK(b, verbs_t)); break;
        case 'I': put(b, PICK(b, verbs_i)); break;
        case 'D': put(b, PICK(b, adverbs)); break;
        case 'P': put(b, PICK(b, preps)); break;
        case 'M': put(b, PICK(b, names)); break;
        case 'W': put(b, PICK(b, times)); break;
        case 'Q': {
            const char *adj = PICK(b, adjectives);
            put(b, strchr("aeiou", adj[0]) ? "an " : "a ");
            put(b, adj);
            put(b, " ");
            put(b, PICK(b, nouns));
            break;
        }
        default: FSDP_ASSERT(0);
        }
    }
    for (size_t i = start; i < b->len; i++) {
        char c = b->buf[i];
        if (c >= 'a' && c <= 'z') b->buf[i] = (char)(c - 'a' + 'A');
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) break;
    }
}

// Generates exactly CORPUS_BYTES of text: paragraphs of 2-6 sentences separated by blank lines.
// bytes: (CORPUS_BYTES,)
static fsdp_status build_corpus(uint32_t *bytes) {
    corpus_builder b = {malloc(CORPUS_BYTES + 4096), 0, CORPUS_BYTES + 4096, 0x5eedc0de2024ULL};
    if (!b.buf) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", CORPUS_NAME);
    while (b.len < CORPUS_BYTES) {
        int sentences = 2 + (int)lcg_below(&b, 5);
        for (int s = 0; s < sentences; s++) {
            put_sentence(&b);
            put(&b, s + 1 < sentences ? " " : "\n\n");
        }
    }
    for (size_t i = 0; i < CORPUS_BYTES; i++) bytes[i] = (unsigned char)b.buf[i];
    free(b.buf);
    return FSDP_OK;
}

// ---- files ----

static int32_t le32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

static int ends_with_bin(const char *path) {
    size_t k = strlen(path);
    return k >= 4 && strcmp(path + k - 4, ".bin") == 0;
}

// Reads exactly `bytes` bytes from fp into dst, or fails naming path.
static fsdp_status read_exact(FILE *fp, const char *path, void *dst, size_t bytes) {
    if (bytes && fread(dst, 1, bytes, fp) != bytes) {
        if (ferror(fp)) return fsdp_error(FSDP_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: unexpected end of file", path);
    }
    return FSDP_OK;
}

// Loads an llm.c token file (fp open at the start, `size` bytes) into d.
static fsdp_status load_bin(FILE *fp, const char *path, int64_t size, fsdp_data *d) {
    unsigned char header[BIN_HEADER_BYTES];  // header: (1024,)
    if (size < BIN_HEADER_BYTES)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: truncated: %lld bytes, an llm.c token file starts with a "
                          "%d-byte header", path, (long long)size, BIN_HEADER_BYTES);
    FSDP_CHECK(read_exact(fp, path, header, sizeof header));
    int32_t magic = le32(header), version = le32(header + 4), count = le32(header + 8);
    if (magic != BIN_MAGIC && magic != BIN_MAGIC_U32)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: bad magic %d, expected %d (uint16 tokens) or %d (uint32 tokens) (not "
                          "an llm.c token file)", path, (int)magic, BIN_MAGIC, BIN_MAGIC_U32);
    int wide = magic == BIN_MAGIC_U32, want_version = wide ? BIN_VERSION_U32 : BIN_VERSION;
    if (version != want_version)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: unsupported version %d, expected %d with magic %d", path, (int)version,
                          want_version, (int)magic);
    if (count < 0) return fsdp_error(FSDP_ERR_FORMAT, "%s: negative token count %d", path, (int)count);
    int64_t width = wide ? 4 : 2, want = BIN_HEADER_BYTES + width * (int64_t)count;
    if (size != want)
        return fsdp_error(FSDP_ERR_FORMAT, "%s: size mismatch: file has %lld bytes, but the header's %d tokens "
                          "need %lld", path, (long long)size, (int)count, (long long)want);
    d->n = count;
    d->tok = malloc((size_t)count * sizeof(uint32_t) + 1);
    if (!d->tok) return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for %d tokens", path, (int)count);
    // read into the array's top part, then widen from the front (stored little-endian)
    unsigned char *raw = (unsigned char *)d->tok + (size_t)count * (size_t)(4 - width);
    FSDP_CHECK(read_exact(fp, path, raw, (size_t)count * (size_t)width));
    uint32_t maxtok = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const unsigned char *p = raw + i * width;
        uint32_t v = wide ? (uint32_t)le32(p) : (uint32_t)(p[0] | p[1] << 8);
        d->tok[i] = v;
        if (v > maxtok) maxtok = v;
    }
    if (maxtok >= (1u << 24))
        return fsdp_error(FSDP_ERR_FORMAT, "%s: token id %u is too large (ids must be below 16777216)", path,
                          (unsigned)maxtok);
    d->vocab = (int)maxtok + 1;
    return FSDP_OK;
}

// Loads a byte-level text file (fp open at the start, `size` bytes) into d.
static fsdp_status load_text(FILE *fp, const char *path, int64_t size, fsdp_data *d) {
    unsigned char *bytes = malloc((size_t)size + 1);  // bytes: (size,)
    d->tok = malloc((size_t)size * sizeof(uint32_t) + 1);
    if (!bytes || !d->tok) {
        free(bytes);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for %lld bytes", path, (long long)size);
    }
    fsdp_status s = read_exact(fp, path, bytes, (size_t)size);
    for (int64_t i = 0; s == FSDP_OK && i < size; i++) d->tok[i] = bytes[i];
    free(bytes);
    d->n = size;
    d->vocab = 256;
    return s;
}

// Loads `size` bytes from fp, open at their start: an llm.c token file if path ends in ".bin", else text.
static fsdp_status load_stream(FILE *fp, const char *path, int64_t size, fsdp_data *d) {
    return ends_with_bin(path) ? load_bin(fp, path, size, d) : load_text(fp, path, size, d);
}

static fsdp_status load_file(const char *path, fsdp_data *d) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    fsdp_status s = FSDP_OK;
    if (fstat(fileno(fp), &st) != 0) s = fsdp_error(FSDP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode)) s = fsdp_error(FSDP_ERR_IO, "%s: cannot open: not a regular file", path);
    else s = load_stream(fp, path, (int64_t)st.st_size, d);
    fclose(fp);
    return s;
}

// Loads the `len` bytes at `bytes` as the file `name` would be loaded. bytes: (len,)
static fsdp_status load_mem(const char *name, const void *bytes, size_t len, fsdp_data *d) {
    static char none[1];  // fmemopen wants a non-empty buffer; nothing is read from it when len == 0
    FILE *fp = fmemopen(len ? (void *)bytes : none, len ? len : 1, "rb");
    if (!fp) return fsdp_error(FSDP_ERR_NOMEM, "%s: cannot open the bytes in memory: %s", name, strerror(errno));
    fsdp_status s = load_stream(fp, name, (int64_t)len, d);
    fclose(fp);
    return s;
}

// ---- the API ----

// Opens the built-in corpus (path == NULL), the file `path`, or (bytes != NULL) the `len` bytes at
// `bytes` standing for a file called `path`. bytes: (len,) or NULL
static fsdp_status open_impl(const char *path, const void *bytes, size_t len, int T, fsdp_data **out) {
    FSDP_ASSERT(out);
    *out = NULL;
    const char *name = path ? path : CORPUS_NAME;
    if (T <= 0) return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: sequence length T must be > 0, got %d", name, T);
    fsdp_data *d = calloc(1, sizeof *d);
    size_t k = strlen(name);
    if (d) d->name = malloc(k + 1);
    if (!d || !d->name) {
        free(d);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", name);
    }
    memcpy(d->name, name, k + 1);
    fsdp_status s;
    if (bytes) {
        s = load_mem(path, bytes, len, d);
    } else if (path) {
        s = load_file(path, d);
    } else {
        d->tok = malloc(CORPUS_BYTES * sizeof(uint32_t));
        d->n = CORPUS_BYTES;
        d->vocab = 256;
        s = d->tok ? build_corpus(d->tok) : fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory", name);
    }
    if (s == FSDP_OK && d->n < (int64_t)T + 1)
        s = fsdp_error(FSDP_ERR_INVALID_ARG, "%s: %lld tokens is too few for sequence length %d (need at least "
                       "T+1 = %lld)", name, (long long)d->n, T, (long long)T + 1);
    if (s != FSDP_OK) {
        fsdp_data_close(d);
        return s;
    }
    *out = d;
    return FSDP_OK;
}

fsdp_status fsdp_data_open(const char *path, int T, fsdp_data **out) { return open_impl(path, NULL, 0, T, out); }

fsdp_status fsdp_data_open_mem(const char *name, const void *bytes, size_t len, int T, fsdp_data **out) {
    FSDP_ASSERT(name && bytes);
    return open_impl(name, bytes, len, T, out);
}

void fsdp_data_close(fsdp_data *d) {
    if (!d) return;
    free(d->tok);
    free(d->name);
    free(d);
}

fsdp_status fsdp_data_split_tail(fsdp_data *d, int percent, int T, fsdp_data **tail) {
    FSDP_ASSERT(d && tail && percent > 0 && percent < 100 && T > 0);
    *tail = NULL;
    int64_t held = d->n / 100 * percent + d->n % 100 * percent / 100;  // floor(n * percent / 100)
    if (held < (int64_t)T + 1 || d->n - held < (int64_t)T + 1)
        return fsdp_error(FSDP_ERR_INVALID_ARG, "%s: %lld tokens: holding out the last %d%% needs at least %d "
                          "tokens in each part (seq + 1)", d->name, (long long)d->n, percent, T + 1);
    fsdp_data *t = calloc(1, sizeof *t);
    size_t name_len = strlen(d->name) + 16;
    if (t) t->tok = malloc(sizeof(uint32_t) * (size_t)held);  // (held,)
    if (t) t->name = malloc(name_len);
    if (!t || !t->tok || !t->name) {
        fsdp_data_close(t);
        return fsdp_error(FSDP_ERR_NOMEM, "%s: out of memory for the held-out split", d->name);
    }
    memcpy(t->tok, d->tok + (d->n - held), sizeof(uint32_t) * (size_t)held);
    t->n = held;
    t->vocab = d->vocab;
    snprintf(t->name, name_len, "%s (last %d%%)", d->name, percent);
    d->n -= held;
    *tail = t;
    return FSDP_OK;
}

int64_t fsdp_data_tokens(const fsdp_data *d) { return d->n; }
int fsdp_data_vocab(const fsdp_data *d) { return d->vocab; }
const char *fsdp_data_name(const fsdp_data *d) { return d->name; }

void fsdp_data_batch(const fsdp_data *d, int64_t step, int micro, int micro_steps, int rank, int world, int B,
                     int T, int32_t *idx, int32_t *targets) {
    FSDP_ASSERT(d && idx && targets && step >= 0 && B > 0 && T > 0);
    FSDP_ASSERT(micro_steps > 0 && micro >= 0 && micro < micro_steps && world > 0 && rank >= 0 && rank < world);
    // w = ((s*M + m)*N + r)*B*T mod n, reduced after every product so nothing overflows
    // (n < 2^31 tokens for .bin files; every factor is < 2^31).
    const int64_t n = d->n;
    int64_t w = step % n;
    w = (w * micro_steps + micro) % n;
    w = (w * world + rank) % n;
    w = (w * B) % n;
    w = (w * T) % n;
    for (int i = 0; i < B; i++) {
        int64_t pos = (w + ((int64_t)i * T) % n) % n;
        int32_t *row_idx = idx + (size_t)i * T, *row_tgt = targets + (size_t)i * T;  // (T,) each
        for (int j = 0; j <= T; j++) {
            int32_t tok = (int32_t)d->tok[pos];
            if (j < T) row_idx[j] = tok;
            if (j > 0) row_tgt[j - 1] = tok;
            if (++pos == n) pos = 0;
        }
    }
}
