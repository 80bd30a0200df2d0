// fuzz_data_bin.c: the token data reader (fsdp_data_open_mem, the same code as fsdp_data_open on a
// file) on arbitrary bytes. The first byte picks the sequence length T (1..64) and whether the bytes
// are an llm.c .bin token file (bit 7 clear) or byte-level text; batches of accepted data are then cut
// and every token checked against the vocabulary.
#include <stdint.h>
#include <stdlib.h>

#include "data/data.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int T = 1 + (data[0] & 63);
    const char *name = data[0] & 128 ? "fuzz.txt" : "fuzz.bin";
    fsdp_data *d = NULL;
    fsdp_clear_error();
    if (fsdp_data_open_mem(name, data + 1, size - 1, T, &d) != FSDP_OK) {
        FUZZ_REQUIRE(d == NULL);
        fuzz_check_error(name);
        return 0;
    }
    int64_t n = fsdp_data_tokens(d);
    int vocab = fsdp_data_vocab(d);
    FUZZ_REQUIRE(n >= T + 1 && vocab >= 1 && vocab <= (1 << 24));  // uint32 files: ids below 2^24
    enum { B = 2 };
    int32_t idx[B * 64], tgt[B * 64];  // (B, T)
    for (int64_t step = 0; step < 3; step++) {
        fsdp_data_batch(d, step * 1000003, 1, 2, 1, 3, B, T, idx, tgt);
        for (int i = 0; i < B * T; i++) FUZZ_REQUIRE(idx[i] >= 0 && idx[i] < vocab && tgt[i] >= 0 && tgt[i] < vocab);
        for (int i = 0; i < B; i++)
            for (int j = 0; j + 1 < T; j++) FUZZ_REQUIRE(tgt[i * T + j] == idx[i * T + j + 1]);
    }
    fsdp_data_close(d);
    return 0;
}
