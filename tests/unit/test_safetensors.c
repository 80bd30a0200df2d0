// test_safetensors.c: safetensors round trips (F32/BF16/F16/F64/I32/I64/U8, metadata, escaped names),
// files laid out the way Hugging Face's library writes them, malformed files and what the format
// forbids (each must fail with the right status and a one-line message naming the file), the
// in-memory reader, and atomic commits (a failed commit leaves the old file and no temporary file).
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "tensor/tensor.h"
#include "test.h"

static char dir[256];  // /tmp/fsdp_st_test.<pid>

// Fills buf with "<dir>/<name>" and returns it. buf: (512,)
static const char *tmp_path(char *buf, const char *name) {
    snprintf(buf, 512, "%s/%s", dir, name);
    return buf;
}

// Writes a safetensors file by hand: u64 header length `hlen` (as given), the header text, then
// `ndata` bytes of data.
static void write_st(const char *path, uint64_t hlen, const char *header, size_t ndata) {
    unsigned char buf[4096] = {0};
    size_t n = strlen(header);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < ndata; i++) buf[8 + n + i] = (unsigned char)i;
    test_write_bytes(path, buf, 8 + n + ndata);
}

// A file with a correct header length.
static void write_json(const char *path, const char *header, size_t ndata) {
    write_st(path, strlen(header), header, ndata);
}

// Checks that the last error message contains the file's path and `needle` (if any).
static void check_msg(const char *path, const char *needle) {
    const char *msg = fsdp_last_error();
    CHECK(strstr(msg, path) == msg);
    if (needle && !strstr(msg, needle)) fprintf(stderr, "message lacks '%s': %s\n", needle, msg);
    CHECK(!needle || strstr(msg, needle));
    CHECK(!strchr(msg, '\n'));
}

// Opening path must fail with status `want` and a message naming the file and `needle`.
static void expect_open_fail(const char *path, fsdp_status want, const char *needle) {
    st_file *f = (st_file *)&f;
    fsdp_clear_error();
    fsdp_status s = st_open(path, &f);
    if (s != want) fprintf(stderr, "st_open(%s): %s: %s\n", path, fsdp_status_name(s), fsdp_last_error());
    CHECK_EQ_INT(s, want);
    CHECK(f == NULL);
    check_msg(path, needle);
    st_close(s == FSDP_OK ? f : NULL);
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_round_trip(void) {
    char path[512];
    tmp_path(path, "rt.safetensors");
    float a[6] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
    fsdp_bf16 b[4];
    uint16_t h[4];
    float bsrc[4] = {1.0f, -0.5f, 3.140625f, 100.0f}, hsrc[4] = {0.5f, -1.25f, 65504.0f, 6.1035156e-05f};
    for (int i = 0; i < 4; i++) b[i] = fsdp_f32_to_bf16(bsrc[i]), h[i] = fsdp_f32_to_f16(hsrc[i]);
    int64_t ids64[3] = {7, -3, 2147483647};
    int32_t ids32[2] = {-1, 42};
    uint8_t bytes[5] = {1, 2, 3, 4, 255};
    float scalar = 9.0f;
    int64_t sa[2] = {2, 3}, sb[1] = {4}, sh[2] = {2, 2}, s64[1] = {3}, s32[1] = {2}, s8[1] = {5}, s0[2] = {0, 4};
    const char *odd = "odd \"name\"\\with\tescapes/é";

    st_writer *w = st_writer_new(path);
    CHECK(w != NULL);
    CHECK_EQ_INT(st_writer_add(w, "a.weight", ST_F32, 2, sa, a), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "b", ST_BF16, 1, sb, b), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "h", ST_F16, 2, sh, h), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "ids64", ST_I64, 1, s64, ids64), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "ids32", ST_I32, 1, s32, ids32), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "u8", ST_U8, 1, s8, bytes), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "scalar", ST_F32, 0, NULL, &scalar), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, "empty", ST_F32, 2, s0, NULL), FSDP_OK);
    CHECK_EQ_INT(st_writer_add(w, odd, ST_F32, 1, s32, a), FSDP_OK);
    // Bad adds fail without spoiling the writer.
    CHECK_EQ_INT(st_writer_add(w, "b", ST_F32, 1, sb, a), FSDP_ERR_INVALID_ARG);
    check_msg(path, "'b'");
    CHECK_EQ_INT(st_writer_add(w, "__metadata__", ST_F32, 1, sb, a), FSDP_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_writer_add(w, "x", ST_F32, ST_MAX_DIMS + 1, sa, a), FSDP_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_writer_add_metadata(w, "format", "pt"), FSDP_OK);
    CHECK_EQ_INT(st_writer_add_metadata(w, "step", "12\n\"quoted\""), FSDP_OK);
    CHECK_EQ_INT(st_writer_add_metadata(w, "format", "np"), FSDP_ERR_INVALID_ARG);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);

    // The header length keeps the data section 8-byte aligned.
    FILE *fp = fopen(path, "rb");
    unsigned char lenbuf[8] = {0};
    CHECK(fp && fread(lenbuf, 1, 8, fp) == 8);
    if (fp) fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenbuf[i];
    CHECK_EQ_INT(hlen % 8, 0);

    st_file *f = NULL;
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    if (!f) return;
    CHECK(!strcmp(st_path(f), path));
    CHECK_EQ_INT(st_count(f), 9);
    const char *order[9] = {"a.weight", "b", "h", "ids64", "ids32", "u8", "scalar", "empty", odd};
    for (int i = 0; i < 9; i++) CHECK(!strcmp(st_entry_at(f, i)->name, order[i]));
    CHECK(st_entry_at(f, 9) == NULL);
    CHECK(st_find(f, "nope") == NULL);
    const st_entry *e = st_find(f, "h");
    CHECK(e && e->dtype == ST_F16 && e->ndim == 2 && e->shape[0] == 2 && e->shape[1] == 2);
    CHECK(e && e->end - e->begin == 8);
    CHECK(!strcmp(st_metadata(f, "format"), "pt"));
    CHECK(!strcmp(st_metadata(f, "step"), "12\n\"quoted\""));
    CHECK(st_metadata(f, "missing") == NULL);

    float out[6];
    CHECK_EQ_INT(st_read_f32(f, "a.weight", out, 2, sa), FSDP_OK);
    for (int i = 0; i < 6; i++) CHECK(out[i] == a[i]);
    CHECK_EQ_INT(st_read_f32(f, "b", out, 1, sb), FSDP_OK);
    for (int i = 0; i < 4; i++) CHECK(out[i] == bsrc[i]);
    CHECK_EQ_INT(st_read_f32(f, "h", out, 2, sh), FSDP_OK);
    for (int i = 0; i < 4; i++) CHECK(out[i] == hsrc[i]);
    CHECK_EQ_INT(st_read_f32(f, "scalar", out, 0, NULL), FSDP_OK);
    CHECK(out[0] == 9.0f);
    CHECK_EQ_INT(st_read_f32(f, "empty", out, 2, s0), FSDP_OK);
    CHECK_EQ_INT(st_read_f32(f, odd, out, 1, s32), FSDP_OK);
    CHECK(out[0] == a[0] && out[1] == a[1]);
    int32_t iout[3];
    CHECK_EQ_INT(st_read_i32(f, "ids64", iout, 1, s64), FSDP_OK);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(iout[i], ids64[i]);
    CHECK_EQ_INT(st_read_i32(f, "ids32", iout, 1, s32), FSDP_OK);
    CHECK(iout[0] == -1 && iout[1] == 42);
    uint8_t raw[8];
    CHECK_EQ_INT(st_read_raw(f, "u8", raw, 1, 4), FSDP_OK);
    CHECK(raw[0] == 2 && raw[1] == 3 && raw[2] == 4);
    CHECK_EQ_INT(st_read_raw(f, "ids64", raw, 8, 16), FSDP_OK);
    int64_t v;
    memcpy(&v, raw, 8);
    CHECK_EQ_INT(v, -3);
    CHECK_EQ_INT(st_read_raw(f, "u8", raw, 2, 6), FSDP_ERR_INVALID_ARG);

    // Read errors: missing, wrong shape, wrong dtype.
    CHECK_EQ_INT(st_read_f32(f, "0.linear1.weight", out, 2, sa), FSDP_ERR_MISSING);
    check_msg(path, "missing tensor '0.linear1.weight'");
    int64_t wrong[2] = {3, 2};
    CHECK_EQ_INT(st_read_f32(f, "a.weight", out, 2, wrong), FSDP_ERR_SHAPE);
    check_msg(path, "tensor 'a.weight' has shape [2, 3], expected [3, 2]");
    CHECK_EQ_INT(st_read_f32(f, "a.weight", out, 1, sa), FSDP_ERR_SHAPE);
    CHECK_EQ_INT(st_read_f32(f, "ids64", out, 1, s64), FSDP_ERR_DTYPE);
    check_msg(path, "'ids64'");
    CHECK_EQ_INT(st_read_f32(f, "u8", out, 1, s8), FSDP_ERR_DTYPE);
    CHECK_EQ_INT(st_read_i32(f, "a.weight", iout, 2, sa), FSDP_ERR_DTYPE);
    check_msg(path, "'a.weight'");
    CHECK_EQ_INT(st_read_i32(f, "nope", iout, 1, s64), FSDP_ERR_MISSING);
    st_close(f);

    // Committing over an existing file replaces it.
    w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_add(w, "only", ST_F32, 1, s32, a + 4), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    if (!f) return;
    CHECK_EQ_INT(st_count(f), 1);
    CHECK(st_metadata(f, "format") == NULL);
    CHECK_EQ_INT(st_read_f32(f, "only", out, 1, s32), FSDP_OK);
    CHECK(out[0] == a[4] && out[1] == a[5]);
    st_close(f);

    // An empty writer makes a valid empty file.
    w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    if (f) CHECK_EQ_INT(st_count(f), 0);
    if (f) CHECK(st_find(f, "only") == NULL);
    st_close(f);
    st_writer_free(st_writer_new(path));  // discarding a writer leaves the file alone
    CHECK(file_exists(path));
    unlink(path);
}

static void test_out_of_range_i64(void) {
    char path[512];
    tmp_path(path, "big.safetensors");
    int64_t big[2] = {1, (int64_t)1 << 40}, s[1] = {2};
    st_writer *w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_add(w, "ids", ST_I64, 1, s, big), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    st_file *f = NULL;
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    int32_t out[2];
    if (f) CHECK_EQ_INT(st_read_i32(f, "ids", out, 1, s), FSDP_ERR_FORMAT);
    check_msg(path, "'ids'");
    st_close(f);
    unlink(path);
}

static void test_malformed(void) {
    char path[512], missing[512];
    tmp_path(path, "bad.safetensors");
    expect_open_fail(tmp_path(missing, "does_not_exist.safetensors"), FSDP_ERR_IO,
                     "cannot open: No such file or directory");

    test_write_bytes(path, "\x10\0\0\0", 4);
    expect_open_fail(path, FSDP_ERR_FORMAT, "truncated");
    test_write_bytes(path, "", 0);
    expect_open_fail(path, FSDP_ERR_FORMAT, "truncated");

    write_st(path, 1234, "{}", 0);  // header length past the end of the file
    expect_open_fail(path, FSDP_ERR_FORMAT, "truncated: header says 1234 bytes but file has 10");
    write_st(path, 200000000, "{}", 0);
    expect_open_fail(path, FSDP_ERR_FORMAT, "100 MB");

    const char *bad_json[] = {
        "",
        "[]",
        "{",
        "{\"a\" 1}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}} x",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], \"x\": 1}}",
        "{\"a\\q\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\\u00\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\\ud800\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [99999999999999999999], \"data_offsets\": [0, 4]}}",
        "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}",
        "{\"__metadata__\": {\"k\": 1}}",
        "{\"__metadata__\": {\"k\": \"v\", \"k\": \"w\"}}",
        "{\"__metadata__\": {}, \"__metadata__\": {}}",
        "{\"unterminated: 1}",
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof bad_json[0]; i++) {
        write_json(path, bad_json[i], 64);
        expect_open_fail(path, FSDP_ERR_FORMAT, NULL);
    }

    // Valid JSON, inconsistent contents.
    write_json(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8);
    expect_open_fail(path, FSDP_ERR_FORMAT, "'w'");  // data past the end of the file
    write_json(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8);
    expect_open_fail(path, FSDP_ERR_FORMAT, "tensor 'w' has 8 bytes but dtype F32 and shape [3] need 12");
    write_json(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 4]}}", 8);
    expect_open_fail(path, FSDP_ERR_FORMAT, "'w'");
    write_json(path, "{\"w\": {\"dtype\": \"BOOL\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1);
    expect_open_fail(path, FSDP_ERR_DTYPE, "tensor 'w' has unsupported dtype 'BOOL'");
    write_json(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
                     "\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8);
    expect_open_fail(path, FSDP_ERR_FORMAT, "duplicate tensor 'w'");
    write_json(path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                     "\"v\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8);
    expect_open_fail(path, FSDP_ERR_FORMAT, "overlaps");

    // A hand-written valid file with padding, escapes and an empty tensor opens fine.
    write_json(path, "{\"__metadata__\":{\"k\":\"\\u00e9\\n\"}, \"w\\u0041\": {\"dtype\": \"U8\", "
                     "\"shape\": [2, 0], \"data_offsets\": [4, 4]}, \"z\": {\"dtype\": \"I32\", "
                     "\"shape\": [], \"data_offsets\": [0, 4]}}   ", 4);
    st_file *f = NULL;
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    if (f) {
        CHECK(st_find(f, "wA") != NULL);
        CHECK(!strcmp(st_metadata(f, "k"), "\xc3\xa9\n"));
        int32_t z = 0;
        CHECK_EQ_INT(st_read_i32(f, "z", &z, 0, NULL), FSDP_OK);
        CHECK_EQ_INT(z, 0x03020100);
    }
    st_close(f);
    unlink(path);
}

// Writes a file byte by byte as Hugging Face's safetensors library lays it out: the header padded
// with spaces to a multiple of 8 bytes when pad is set, then `ndata` bytes of data. data: (ndata,)
static void write_hf(const char *path, const char *header, int pad, const void *data, size_t ndata) {
    unsigned char buf[4096] = {0};
    size_t n = strlen(header), padded = pad ? (n + 7) / 8 * 8 : n;
    CHECK(8 + padded + ndata <= sizeof buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, header, n);
    memset(buf + 8 + n, ' ', padded - n);
    if (ndata) memcpy(buf + 8 + padded, data, ndata);
    test_write_bytes(path, buf, 8 + padded + ndata);
}

// Files as Hugging Face writes them: padded headers, "__metadata__" present or absent, tensors listed
// in another order than their data, zero-size tensors, F16/BF16/F64 (read as f32), read from a file
// and from memory alike.
static void test_hf_layout(void) {
    char path[512];
    tmp_path(path, "hf.safetensors");
    // data: h (F16 [2]) at [0, 4), b (BF16 [2]) at [4, 8), d (F64 [4]) at [8, 40), f (F32 [1]) at [40, 44)
    unsigned char data[44];
    uint16_t h[2] = {fsdp_f32_to_f16(-1.5f), fsdp_f32_to_f16(65504.0f)};
    fsdp_bf16 b[2] = {fsdp_f32_to_bf16(3.0e38f), fsdp_f32_to_bf16(-0.15625f)};
    double d[4] = {0.1, -3.5, 1e300, 1e-310};
    float fv = 42.0f;
    memcpy(data, h, 4);
    memcpy(data + 4, b, 4);
    memcpy(data + 8, d, 32);
    memcpy(data + 40, &fv, 4);
    const char *with_meta =
        "{\"__metadata__\":{\"format\":\"pt\"},\"d\":{\"dtype\":\"F64\",\"shape\":[2,2],\"data_offsets\":[8,40]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[44,44]},\"f\":{\"dtype\":\"F32\","
        "\"shape\":[1],\"data_offsets\":[40,44]},\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
        "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},\"first\":{\"dtype\":\"BF16\","
        "\"shape\":[0],\"data_offsets\":[0,0]}}";
    const char *without_meta =
        "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},\"d\":{\"dtype\":\"F64\",\"shape\":[2,2],"
        "\"data_offsets\":[8,40]},\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[40,44]},\"h\":{\"dtype\":"
        "\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},\"mid\":{\"dtype\":\"F64\",\"shape\":[3,0],\"data_offsets\":"
        "[8,8]},\"empty\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[44,44]}}";
    for (int variant = 0; variant < 4; variant++) {
        int meta = variant < 2, from_memory = variant % 2;
        write_hf(path, meta ? with_meta : without_meta, 1, data, sizeof data);
        unsigned char bytes[4096];
        FILE *fp = fopen(path, "rb");
        size_t nbytes = fp ? fread(bytes, 1, sizeof bytes, fp) : 0;
        if (fp) fclose(fp);
        CHECK_EQ_INT((nbytes - sizeof data - 8) % 8, 0);  // the header really is padded
        CHECK(bytes[8 + strlen(meta ? with_meta : without_meta)] == ' ' || (strlen(meta ? with_meta : without_meta) % 8) == 0);
        st_file *f = NULL;
        CHECK_EQ_INT(from_memory ? st_open_mem(path, bytes, nbytes, &f) : st_open(path, &f), FSDP_OK);
        if (!f) {
            fprintf(stderr, "%s\n", fsdp_last_error());
            continue;
        }
        CHECK_EQ_INT(st_count(f), 6);
        CHECK(meta ? st_metadata(f, "format") && !strcmp(st_metadata(f, "format"), "pt") : !st_metadata(f, "format"));
        float out[4] = {-1, -1, -1, -1};
        int64_t s2[1] = {2}, s22[2] = {2, 2}, s1[1] = {1}, s03[2] = {0, 3};
        CHECK_EQ_INT(st_read_f32(f, "h", out, 1, s2), FSDP_OK);
        CHECK(out[0] == -1.5f && out[1] == 65504.0f);
        CHECK_EQ_INT(st_read_f32(f, "b", out, 1, s2), FSDP_OK);
        CHECK(out[0] == fsdp_bf16_to_f32(b[0]) && out[1] == -0.15625f);
        CHECK_EQ_INT(st_read_f32(f, "d", out, 2, s22), FSDP_OK);  // F64 rounded to the nearest f32
        CHECK(out[0] == 0.1f && out[1] == -3.5f && isinf(out[2]) && out[2] > 0 && out[3] == 0.0f);
        CHECK_EQ_INT(st_read_f32_range(f, "d", out, 2, s22, 1, 2), FSDP_OK);
        CHECK(out[0] == -3.5f && isinf(out[1]));
        CHECK_EQ_INT(st_read_f32(f, "f", out, 1, s1), FSDP_OK);
        CHECK(out[0] == 42.0f);
        CHECK_EQ_INT(st_read_f32(f, "empty", out, 2, s03), FSDP_OK);
        int32_t iout[1];
        CHECK_EQ_INT(st_read_i32(f, "d", iout, 2, s22), FSDP_ERR_DTYPE);
        check_msg(path, "'d' has dtype F64");
        st_close(f);
    }
    // An unpadded header (our writer pads too, but the format does not require it) reads the same.
    write_hf(path, "{\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 0, &fv, 4);
    st_file *f = NULL;
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    float one = 0;
    if (f) CHECK_EQ_INT(st_read_f32(f, "f", &one, 0, NULL), FSDP_OK);
    CHECK(one == 42.0f);
    st_close(f);

    // Our writer's F64 round-trips through the f32 reader.
    double dd[2] = {2.5, -1e-3};
    int64_t s2[1] = {2};
    st_writer *w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_add(w, "x", ST_F64, 1, s2, dd), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    float o2[2] = {0, 0};
    if (f) CHECK_EQ_INT(st_read_f32(f, "x", o2, 1, s2), FSDP_OK);
    CHECK(o2[0] == 2.5f && o2[1] == (float)-1e-3);
    st_close(f);
    unlink(path);
}

// What the format forbids, each in a file built here: the open fails with a one-line message that
// names the file and the problem.
static void test_format_rules(void) {
    char path[512];
    tmp_path(path, "rules.safetensors");
    unsigned char zeros[64] = {0};
    static const struct {
        const char *header;
        size_t ndata;
        fsdp_status status;
        const char *message;
    } cases[] = {
        // not a JSON object
        {"[]", 0, FSDP_ERR_FORMAT, "the header does not start with '{' (not a JSON object)"},
        {"\"w\"", 0, FSDP_ERR_FORMAT, "does not start with '{'"},
        {"7", 0, FSDP_ERR_FORMAT, "does not start with '{'"},
        {"null", 0, FSDP_ERR_FORMAT, "does not start with '{'"},
        {" {}", 0, FSDP_ERR_FORMAT, "does not start with '{'"},  // padding goes after the JSON only
        {"{\"w\":[0,4]}", 4, FSDP_ERR_FORMAT, "expected '{'"},
        // a gap between tensors, before the first one, and bytes after the last one
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, FSDP_ERR_FORMAT,
         "gap in the data section: bytes [4, 8) before tensor 'v' belong to no tensor"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, FSDP_ERR_FORMAT,
         "gap in the data section: bytes [0, 4) before tensor 'w'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, FSDP_ERR_FORMAT,
         "the data section has 8 bytes but the tensors cover only the first 4 (trailing bytes)"},
        {"{\"__metadata__\":{\"format\":\"pt\"}}", 8, FSDP_ERR_FORMAT, "trailing bytes"},
        // overlapping offsets, a zero-size tensor inside another, offsets out of bounds
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, FSDP_ERR_FORMAT,
         "tensor 'v' (data_offsets [4, 8]) overlaps tensor 'w'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, FSDP_ERR_FORMAT,
         "tensor 'e' (data_offsets [4, 4]) overlaps tensor 'w'"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, FSDP_ERR_FORMAT,
         "truncated: tensor 'w' ends at byte 8 of the data section but it has only 4 bytes"},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[12,12]}}", 4, FSDP_ERR_FORMAT,
         "truncated: tensor 'w' ends at byte 12"},
        // duplicate names (also with identical entries)
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, FSDP_ERR_FORMAT, "duplicate tensor 'w'"},
        // a header that is not UTF-8: a stray continuation byte, an overlong '/', a surrogate
        {"{\"\x80\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, FSDP_ERR_FORMAT,
         "the header is not valid UTF-8 (byte 2)"},
        {"{\"\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, FSDP_ERR_FORMAT,
         "not valid UTF-8 (byte 2)"},
        {"{\"\xed\xa0\x80\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0, FSDP_ERR_FORMAT,
         "not valid UTF-8 (byte 2)"},
        // a name that would break the message in two lines is printed on one
        {"{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, FSDP_ERR_FORMAT,
         "before tensor 'a?b'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_hf(path, cases[i].header, 1, zeros, cases[i].ndata);
        expect_open_fail(path, cases[i].status, cases[i].message);
    }
    // The in-memory reader applies the same rules and names what it was given.
    write_hf(path, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 1, zeros, 8);
    unsigned char bytes[512];
    FILE *fp = fopen(path, "rb");
    size_t n = fp ? fread(bytes, 1, sizeof bytes, fp) : 0;
    if (fp) fclose(fp);
    st_file *f = (st_file *)&f;
    CHECK_EQ_INT(st_open_mem("in-memory", bytes, n, &f), FSDP_ERR_FORMAT);
    CHECK(f == NULL);
    check_msg("in-memory", "gap in the data section");
    CHECK_EQ_INT(st_open_mem("in-memory", bytes, 7, &f), FSDP_ERR_FORMAT);
    check_msg("in-memory", "truncated");
    unlink(path);
}

static void test_failed_commit(void) {
    char path[512], tmp[600], nodir[512];
    float x[2] = {1, 2};
    int64_t s[1] = {2};

    // A path in a missing directory fails and names the path.
    tmp_path(nodir, "no_such_dir/x.safetensors");
    st_writer *w = st_writer_new(nodir);
    CHECK_EQ_INT(st_writer_add(w, "x", ST_F32, 1, s, x), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_ERR_IO);
    check_msg(nodir, NULL);

    // An existing good file.
    tmp_path(path, "atomic.safetensors");
    w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_add(w, "old", ST_F32, 1, s, x), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_OK);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());

    // The temporary file cannot be created (a directory is in the way): the old file survives,
    // and the directory is not removed.
    CHECK_EQ_INT(mkdir(tmp, 0700), 0);
    w = st_writer_new(path);
    CHECK_EQ_INT(st_writer_add(w, "new", ST_F32, 1, s, x), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_ERR_IO);
    check_msg(path, NULL);
    CHECK(file_exists(tmp));
    rmdir(tmp);
    st_file *f = NULL;
    CHECK_EQ_INT(st_open(path, &f), FSDP_OK);
    if (f) CHECK(st_find(f, "old") != NULL && st_find(f, "new") == NULL);
    st_close(f);

    // The rename fails (the target is a non-empty directory): no temporary file is left behind.
    char target[512], inner[600];
    tmp_path(target, "target_dir.safetensors");
    snprintf(inner, sizeof inner, "%s/keep", target);
    CHECK_EQ_INT(mkdir(target, 0700), 0);
    test_write_bytes(inner, "keep", 4);
    w = st_writer_new(target);
    CHECK_EQ_INT(st_writer_add(w, "new", ST_F32, 1, s, x), FSDP_OK);
    CHECK_EQ_INT(st_writer_commit(w), FSDP_ERR_IO);
    check_msg(target, "rename");
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", target, (long)getpid());
    CHECK(!file_exists(tmp));
    CHECK(file_exists(inner));
    unlink(inner);
    rmdir(target);
    unlink(path);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/fsdp_st_test.%ld", (long)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    test_round_trip();
    test_out_of_range_i64();
    test_malformed();
    test_hf_layout();
    test_format_rules();
    test_failed_commit();
    if (rmdir(dir) != 0) perror("rmdir");
    CHECK(!file_exists(dir));  // every test cleaned up, including temporary files
    TEST_MAIN_END();
}
