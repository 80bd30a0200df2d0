// crc32.h: CRC-32 (IEEE 802.3, as zlib's crc32) of buffers and files, for checkpoint checksums.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

uint32_t fsdp_crc32(uint32_t crc, const void *data, size_t n);  // start with crc = 0
fsdp_status fsdp_crc32_file(const char *path, uint32_t *out);
