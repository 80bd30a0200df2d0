// crc32.c: table-driven CRC-32 (reflected polynomial 0xEDB88320).
#include "ckpt/crc32.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t table[256];
static int table_ready;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    table_ready = 1;
}

uint32_t fsdp_crc32(uint32_t crc, const void *data, size_t n) {
    if (!table_ready) make_table();
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

fsdp_status fsdp_crc32_file(const char *path, uint32_t *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return fsdp_error(FSDP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *buf = malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    }
    uint32_t crc = 0;
    size_t got;
    while ((got = fread(buf, 1, 1 << 20, f)) > 0) crc = fsdp_crc32(crc, buf, got);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad) return fsdp_error(FSDP_ERR_IO, "%s: read error", path);
    *out = crc;
    return FSDP_OK;
}
