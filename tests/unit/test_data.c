// test_data.c: token data sets: the window/row formula (with wrap-around), one process with batch N*B
// equal to ranks 0..N-1 with batch B, idx/targets shifted by one, .bin and text loading, the built-in
// corpus (deterministic, vocab 256), and bad inputs (each fails with a message naming the file).
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "test.h"

static char dir[256];  // /tmp/fsdp_data_test.<pid>

// Fills buf with "<dir>/<name>" and returns it. buf: (512,)
static const char *tmp_path(char *buf, const char *name) {
    snprintf(buf, 512, "%s/%s", dir, name);
    return buf;
}

// Writes an llm.c token file: header (magic, version, count_in_header), then `ntok` tokens (little-endian).
// tok: (ntok,)
static void write_bin(const char *path, int32_t magic, int32_t version, int32_t count_in_header,
                      const uint16_t *tok, size_t ntok) {
    size_t bytes = 1024 + 2 * ntok;
    unsigned char *buf = calloc(1, bytes);
    int32_t h[3] = {magic, version, count_in_header};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) buf[4 * k + b] = (unsigned char)((uint32_t)h[k] >> (8 * b));
    for (size_t i = 0; i < ntok; i++) {
        buf[1024 + 2 * i] = (unsigned char)(tok[i] & 0xff);
        buf[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    test_write_bytes(path, buf, bytes);
    free(buf);
}

// Checks a batch against the formula: row i holds tokens (w + i*T + j) mod n, j = 0..T.
static void check_formula(const fsdp_data *d, const uint16_t *tok, int64_t n, int64_t s, int m, int M, int r,
                          int N, int B, int T) {
    int32_t *idx = malloc(sizeof(int32_t) * B * T), *tgt = malloc(sizeof(int32_t) * B * T);
    fsdp_data_batch(d, s, m, M, r, N, B, T, idx, tgt);
    int64_t w = ((s * M + m) * N + r) * (int64_t)B * T;
    int bad = 0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < T; j++) {
            bad += idx[i * T + j] != tok[(w + (int64_t)i * T + j) % n];
            bad += tgt[i * T + j] != tok[(w + (int64_t)i * T + j + 1) % n];
            if (j + 1 < T) bad += tgt[i * T + j] != idx[i * T + j + 1];  // shifted by one
        }
    if (bad) fprintf(stderr, "formula mismatch at s=%lld m=%d/%d r=%d/%d B=%d T=%d\n", (long long)s, m, M, r, N, B, T);
    CHECK_EQ_INT(bad, 0);
    free(idx);
    free(tgt);
}

// One process with batch N*B must equal ranks 0..N-1 with batch B, concatenated.
static void check_ranks_concat(const fsdp_data *d, int N, int M, int B, int T, int steps) {
    size_t per = (size_t)B * T;
    int32_t *gi = malloc(sizeof(int32_t) * N * per), *gt = malloc(sizeof(int32_t) * N * per);
    int32_t *ri = malloc(sizeof(int32_t) * per), *rt = malloc(sizeof(int32_t) * per);
    int bad = 0;
    for (int s = 0; s < steps; s++)
        for (int m = 0; m < M; m++) {
            fsdp_data_batch(d, s, m, M, 0, 1, N * B, T, gi, gt);
            for (int r = 0; r < N; r++) {
                fsdp_data_batch(d, s, m, M, r, N, B, T, ri, rt);
                bad += memcmp(ri, gi + r * per, per * sizeof(int32_t)) != 0;
                bad += memcmp(rt, gt + r * per, per * sizeof(int32_t)) != 0;
            }
        }
    if (bad) fprintf(stderr, "rank concat mismatch for N=%d M=%d\n", N, M);
    CHECK_EQ_INT(bad, 0);
    free(gi);
    free(gt);
    free(ri);
    free(rt);
}

// Opening `path` with T must fail with a message naming the file (and containing `what`).
static void check_bad(const char *path, int T, const char *what) {
    fsdp_data *d = (fsdp_data *)&d;  // must be reset to NULL
    fsdp_clear_error();
    fsdp_status s = fsdp_data_open(path, T, &d);
    CHECK(s != FSDP_OK);
    CHECK(d == NULL);
    const char *msg = fsdp_last_error();
    if (!strstr(msg, path) || !strstr(msg, what))
        fprintf(stderr, "message for %s lacks the path or '%s': %s\n", path, what, msg);
    CHECK(strstr(msg, path) != NULL);
    CHECK(strstr(msg, what) != NULL);
    if (s == FSDP_OK) fsdp_data_close(d);
}

static void test_bin(void) {
    char path[512];
    enum { NT = 1000 };
    uint16_t tok[NT];
    for (int i = 0; i < NT; i++) tok[i] = (uint16_t)((i * 7919 + 3) % 50257);
    int maxtok = 0;
    for (int i = 0; i < NT; i++) maxtok = tok[i] > maxtok ? tok[i] : maxtok;
    write_bin(tmp_path(path, "tokens.bin"), 20240520, 1, NT, tok, NT);
    fsdp_data *d = NULL;
    CHECK_EQ_INT(fsdp_data_open(path, 16, &d), FSDP_OK);
    if (!d) {
        fprintf(stderr, "%s\n", fsdp_last_error());
        return;
    }
    CHECK_EQ_INT(fsdp_data_tokens(d), NT);
    CHECK_EQ_INT(fsdp_data_vocab(d), maxtok + 1);
    CHECK(strcmp(fsdp_data_name(d), path) == 0);

    // The formula over many (s, m, r) including windows that cross the end of the file.
    for (int M = 1; M <= 2; M++)
        for (int N = 1; N <= 4; N++)
            for (int s = 0; s < 30; s++)
                for (int m = 0; m < M; m++)
                    for (int r = 0; r < N; r++) check_formula(d, tok, NT, s, m, M, r, N, 3, 16);
    check_formula(d, tok, NT, 123456789, 1, 3, 2, 5, 7, 13);  // a huge step: w reduced modulo n

    // Explicit wrap-around: T = 8, B = 1, step 124 -> w = 992; row = tokens 992..999, 0.
    int32_t idx[2 * 8], tgt[2 * 8];
    fsdp_data_batch(d, 124, 0, 1, 0, 1, 1, 8, idx, tgt);
    CHECK_EQ_INT(idx[0], tok[992]);
    CHECK_EQ_INT(idx[7], tok[999]);
    CHECK_EQ_INT(tgt[6], tok[999]);
    CHECK_EQ_INT(tgt[7], tok[0]);
    // B = 2 at step 62 (w = 992): row 1 starts at 1000 -> 0 and holds tokens 0..8.
    fsdp_data_batch(d, 62, 0, 1, 0, 1, 2, 8, idx, tgt);
    CHECK_EQ_INT(idx[8], tok[0]);
    CHECK_EQ_INT(tgt[15], tok[8]);
    // step 1, micro 1 of 2, rank 2 of 3, B 2, T 8: w = ((1*2+1)*3+2)*16 = 176.
    fsdp_data_batch(d, 1, 1, 2, 2, 3, 2, 8, idx, tgt);
    CHECK_EQ_INT(idx[0], tok[176]);
    CHECK_EQ_INT(idx[8], tok[184]);
    CHECK_EQ_INT(tgt[15], tok[192]);

    for (int M = 1; M <= 2; M++)
        for (int N = 1; N <= 4; N++) check_ranks_concat(d, N, M, 3, 16, 25);
    fsdp_data_close(d);
    unlink(path);
}

static void test_text(void) {
    char path[512];
    const char *text = "hello, world!\nThe quick brown fox jumps over the lazy dog.\n\xff\x80";
    size_t n = strlen(text);
    test_write_bytes(tmp_path(path, "text.txt"), text, n);
    fsdp_data *d = NULL;
    CHECK_EQ_INT(fsdp_data_open(path, 8, &d), FSDP_OK);
    if (!d) return;
    CHECK_EQ_INT(fsdp_data_tokens(d), (int64_t)n);
    CHECK_EQ_INT(fsdp_data_vocab(d), 256);
    CHECK(strcmp(fsdp_data_name(d), path) == 0);
    uint16_t tok[128];
    for (size_t i = 0; i < n; i++) tok[i] = (unsigned char)text[i];
    for (int s = 0; s < 20; s++)
        for (int r = 0; r < 3; r++) check_formula(d, tok, (int64_t)n, s, 0, 1, r, 3, 2, 8);
    for (int N = 1; N <= 4; N++) check_ranks_concat(d, N, 2, 2, 8, 10);
    fsdp_data_close(d);
    unlink(path);
}

// fsdp_data_split_tail: the last 10% (rounded down) becomes its own data set, the rest stays, with no
// overlap and the batch formula applying to each part alone; too short a part changes nothing.
static void test_split(void) {
    char path[512], text[80];
    for (int i = 0; i < 73; i++) text[i] = (char)('a' + (i * 7) % 26);
    test_write_bytes(tmp_path(path, "split.txt"), text, 73);
    fsdp_data *d = NULL, *tail = (fsdp_data *)&d;
    CHECK_EQ_INT(fsdp_data_open(path, 7, &d), FSDP_OK);
    if (!d) return;
    CHECK(fsdp_data_split_tail(d, 10, 7, &tail) != FSDP_OK);  // 7 held-out tokens < T + 1 = 8
    CHECK(tail == NULL);
    CHECK(strstr(fsdp_last_error(), path) != NULL);
    CHECK_EQ_INT(fsdp_data_tokens(d), 73);
    CHECK_EQ_INT(fsdp_data_split_tail(d, 10, 4, &tail), FSDP_OK);
    if (!tail) return;
    CHECK_EQ_INT(fsdp_data_tokens(d), 66);
    CHECK_EQ_INT(fsdp_data_tokens(tail), 7);
    CHECK_EQ_INT(fsdp_data_vocab(tail), 256);
    char want[600];
    snprintf(want, sizeof want, "%s (last 10%%)", path);
    CHECK(strcmp(fsdp_data_name(tail), want) == 0);
    uint16_t tok[80];
    for (int i = 0; i < 73; i++) tok[i] = (unsigned char)text[i];
    for (int s = 0; s < 30; s++) {
        check_formula(d, tok, 66, s, 0, 1, 0, 1, 2, 4);
        check_formula(tail, tok + 66, 7, s, 0, 1, 0, 1, 1, 4);
    }
    fsdp_data_close(tail);
    fsdp_data_close(d);
    unlink(path);
}

static void test_builtin(void) {
    fsdp_data *a = NULL, *b = NULL;
    CHECK_EQ_INT(fsdp_data_open(NULL, 64, &a), FSDP_OK);
    CHECK_EQ_INT(fsdp_data_open(NULL, 64, &b), FSDP_OK);
    if (!a || !b) return;
    CHECK_EQ_INT(fsdp_data_vocab(a), 256);
    CHECK_EQ_INT(fsdp_data_tokens(a), 1 << 20);
    CHECK(strcmp(fsdp_data_name(a), "built-in corpus") == 0);
    enum { B = 8, T = 64 };
    int32_t ia[B * T], ta[B * T], ib[B * T], tb[B * T];
    int same = 1, printable = 1;
    for (int s = 0; s < 300; s += 7) {
        fsdp_data_batch(a, s, 1, 2, 1, 2, B, T, ia, ta);
        fsdp_data_batch(b, s, 1, 2, 1, 2, B, T, ib, tb);
        same &= !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta);
        for (int i = 0; i < B * T; i++) printable &= (ia[i] >= 32 && ia[i] < 127) || ia[i] == '\n';
    }
    CHECK(same);
    CHECK(printable);
    // A sample, for the log.
    char sample[161];
    int32_t row[160], trow[160];
    fsdp_data_batch(a, 0, 0, 1, 0, 1, 1, 160, row, trow);
    for (int i = 0; i < 160; i++) sample[i] = (char)row[i];
    sample[160] = 0;
    printf("built-in corpus starts:\n%s\n", sample);
    fsdp_data_close(a);
    fsdp_data_close(b);
}

// Writes llm.c's uint32 token file (magic 20240801, version 7 unless told) of tok (ntok,)
static void write_bin_u32(const char *path, int32_t magic, int32_t version, const uint32_t *tok, size_t ntok) {
    size_t bytes = 1024 + 4 * ntok;
    unsigned char *buf = calloc(1, bytes);
    int32_t h[3] = {magic, version, (int32_t)ntok};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) buf[4 * k + b] = (unsigned char)((uint32_t)h[k] >> (8 * b));
    for (size_t i = 0; i < ntok; i++)
        for (int b = 0; b < 4; b++) buf[1024 + 4 * i + b] = (unsigned char)(tok[i] >> (8 * b));
    test_write_bytes(path, buf, bytes);
    free(buf);
}

// llm.c's Llama 3 layout: uint32 ids above 65535 come back exactly; the vocabulary is max id + 1; a
// wrong version, a size for uint16 tokens and an id of 2^24 or more are one-line errors
static void test_bin_u32(void) {
    char path[512];
    enum { NT = 40 };
    uint32_t tok[NT];
    for (int i = 0; i < NT; i++) tok[i] = (uint32_t)(i * 3203 + 65530) % 128256u;
    write_bin_u32(tmp_path(path, "llama.bin"), 20240801, 7, tok, NT);
    fsdp_data *d = NULL;
    CHECK_EQ_INT(fsdp_data_open(path, NT - 1, &d), FSDP_OK);
    if (d) {
        uint32_t top = 0;
        for (int i = 0; i < NT; i++) top = tok[i] > top ? tok[i] : top;
        CHECK_EQ_INT(fsdp_data_tokens(d), NT);
        CHECK_EQ_INT(fsdp_data_vocab(d), (long long)top + 1);
        CHECK(top > 65535);
        int32_t idx[NT - 1], tgt[NT - 1];
        fsdp_data_batch(d, 0, 0, 1, 0, 1, 1, NT - 1, idx, tgt);
        for (int i = 0; i < NT - 1; i++) {
            CHECK_EQ_INT(idx[i], tok[i]);
            CHECK_EQ_INT(tgt[i], tok[i + 1]);
        }
        fsdp_data_close(d);
    }
    write_bin_u32(path, 20240801, 1, tok, NT);
    check_bad(path, 8, "unsupported version 1, expected 7");
    write_bin_u32(path, 20240520, 1, tok, NT);  // uint16's magic over 4-byte tokens
    check_bad(path, 8, "size mismatch");
    tok[5] = 1u << 24;
    write_bin_u32(path, 20240801, 7, tok, NT);
    check_bad(path, 8, "token id 16777216 is too large");
    unlink(path);
}

static void test_bad_inputs(void) {
    char path[512];
    uint16_t tok[64];
    for (int i = 0; i < 64; i++) tok[i] = (uint16_t)i;

    check_bad(tmp_path(path, "missing.bin"), 8, "cannot open");
    check_bad(tmp_path(path, "missing.txt"), 8, "cannot open");
    check_bad(dir, 8, "not a regular file");

    write_bin(tmp_path(path, "magic.bin"), 20240521, 1, 64, tok, 64);
    check_bad(path, 8, "magic");
    unlink(path);
    write_bin(tmp_path(path, "version.bin"), 20240520, 2, 64, tok, 64);
    check_bad(path, 8, "version");
    unlink(path);
    write_bin(tmp_path(path, "short.bin"), 20240520, 1, 64, tok, 63);  // one token missing
    check_bad(path, 8, "size mismatch");
    unlink(path);
    write_bin(tmp_path(path, "long.bin"), 20240520, 1, 63, tok, 64);  // one token too many
    check_bad(path, 8, "size mismatch");
    unlink(path);
    test_write_bytes(tmp_path(path, "header.bin"), tok, 100);  // shorter than the header
    check_bad(path, 8, "truncated");
    unlink(path);

    write_bin(tmp_path(path, "few.bin"), 20240520, 1, 10, tok, 10);
    check_bad(path, 10, "too few");  // needs T+1 = 11
    fsdp_data *d = NULL;
    CHECK_EQ_INT(fsdp_data_open(path, 9, &d), FSDP_OK);  // exactly T+1 is enough
    fsdp_data_close(d);
    check_bad(path, 0, "T must be > 0");
    unlink(path);
    test_write_bytes(tmp_path(path, "few.txt"), "abcde", 5);
    check_bad(path, 5, "too few");
    unlink(path);
    test_write_bytes(tmp_path(path, "empty.txt"), "", 0);
    check_bad(path, 1, "too few");
    unlink(path);

    d = (fsdp_data *)&d;
    CHECK(fsdp_data_open(NULL, 1 << 21, &d) != FSDP_OK);  // more than the corpus holds
    CHECK(d == NULL);
    CHECK(strstr(fsdp_last_error(), "built-in corpus") != NULL);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/fsdp_data_test.%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    test_bin();
    test_bin_u32();
    test_text();
    test_split();
    test_builtin();
    test_bad_inputs();
    rmdir(dir);
    TEST_MAIN_END();
}
