// fuzz_safetensors.c: the safetensors reader (st_open_mem, the same parser and checks as st_open) on
// arbitrary bytes; every tensor of a file it accepts is then read the way the loaders read them.
#include <stdint.h>
#include <stdlib.h>

#include "ckpt/safetensors.h"
#include "fuzz_check.h"

#define NAME "fuzz.safetensors"

// Reads entry e fully (and its second half by range) with the reader that takes its dtype.
static void read_entry(const st_file *f, const st_entry *e) {
    uint64_t bytes = e->end - e->begin, numel = bytes / st_dtype_size(e->dtype);
    void *buf = malloc(bytes ? bytes * 2 : 1);  // (numel,) floats or int32s, or (bytes,) raw
    FUZZ_REQUIRE(buf != NULL);
    fsdp_status s;
    switch (e->dtype) {
    case ST_F32:
    case ST_BF16:
    case ST_F16:
    case ST_F64:
        s = st_read_f32(f, e->name, buf, e->ndim, e->shape);
        FUZZ_REQUIRE(s == FSDP_OK);
        s = st_read_f32_range(f, e->name, buf, e->ndim, e->shape, (int64_t)(numel / 2), (int64_t)(numel - numel / 2));
        FUZZ_REQUIRE(s == FSDP_OK);
        break;
    case ST_I32:
    case ST_I64:
        s = st_read_i32(f, e->name, buf, e->ndim, e->shape);  // may fail: an I64 beyond int32
        if (s != FSDP_OK) fuzz_check_error(NAME);
        break;
    case ST_U8:
        s = st_read_raw(f, e->name, buf, 0, bytes);
        FUZZ_REQUIRE(s == FSDP_OK);
        break;
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file *f = NULL;
    fsdp_clear_error();
    if (st_open_mem(NAME, data, size, &f) != FSDP_OK) {
        FUZZ_REQUIRE(f == NULL);
        fuzz_check_error(NAME);
        return 0;
    }
    uint64_t covered = 0;
    for (int i = 0; i < st_count(f); i++) {
        const st_entry *e = st_entry_at(f, i);
        FUZZ_REQUIRE(st_find(f, e->name) == e);
        FUZZ_REQUIRE(e->begin <= e->end && e->end <= size);
        covered += e->end - e->begin;
        read_entry(f, e);
    }
    FUZZ_REQUIRE(st_entry_at(f, st_count(f)) == NULL);
    (void)st_metadata(f, "format");
    st_close(f);
    FUZZ_REQUIRE(covered < size);  // the tensors tile the data section, which follows 8 + header bytes
    return 0;
}
