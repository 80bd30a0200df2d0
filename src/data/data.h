// data.h: token data for the GPT trainer: llm.c token files (.bin), byte-level text, or a built-in
// English-like corpus, cut into (idx, targets) batches by a formula that depends only on
// (step, micro-step, rank), so N ranks with batch B see together exactly what one process with batch
// N*B sees.
//
// Files are read fully into memory (plain malloc; the data sets here are a few MB) and kept as uint32
// tokens; nothing is mapped and the file is closed when fsdp_data_open returns.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct fsdp_data fsdp_data;  // opaque

// Opens a dataset for sequence length T (> 0).
// - path ending in ".bin": an llm.c token file: a header of 256 little-endian int32 ([0] magic, [1]
//   version, [2] number of tokens), then that many little-endian tokens: magic 20240520 version 1 for
//   uint16 tokens (GPT-2's files), magic 20240801 version 7 for uint32 tokens (llm.c's Llama 3 files,
//   dev/data/data_common.py); the file size must be exactly 1024 + 2 (or 4) * count, ids below 2^24.
// - any other path: byte-level text (tokens are the bytes 0..255).
// - path == NULL: the built-in corpus (1 MiB of English-like text generated deterministically).
// The data must hold at least T + 1 tokens. On failure *out is NULL and the message names the file
// (or "built-in corpus") and what was wrong: FSDP_ERR_IO (cannot open/read), FSDP_ERR_FORMAT (bad
// magic, version, count or size), FSDP_ERR_INVALID_ARG (T <= 0 or too few tokens), FSDP_ERR_NOMEM.
fsdp_status fsdp_data_open(const char *path, int T, fsdp_data **out);
// The same over a file's bytes in memory (copied): name decides .bin or text and names the data in
// messages. bytes: (len,)
fsdp_status fsdp_data_open_mem(const char *name, const void *bytes, size_t len, int T, fsdp_data **out);
void fsdp_data_close(fsdp_data *d);  // NULL is fine

// Holds out the last `percent` % of d's tokens (rounded down) as a new data set *tail, named
// "<name> (last P%)", and shortens d to the tokens before them, so the two never overlap. Both parts
// must keep at least T + 1 tokens: otherwise FSDP_ERR_INVALID_ARG naming the data, and d is unchanged.
// The tail keeps d's vocab (the id range the model must cover). 0 < percent < 100.
fsdp_status fsdp_data_split_tail(fsdp_data *d, int percent, int T, fsdp_data **tail);

int64_t fsdp_data_tokens(const fsdp_data *d);
int fsdp_data_vocab(const fsdp_data *d);         // 256 for text and the built-in corpus; .bin: max token + 1
const char *fsdp_data_name(const fsdp_data *d);  // the path, or "built-in corpus"

// The batch of (step s, micro-step m of M, rank r of N) with per-rank batch B and sequence length T:
// window start w = ((s*M + m)*N + r)*B*T; row i (0 <= i < B) holds tokens w + i*T .. w + i*T + T
// (T + 1 tokens: idx = the first T, targets = the last T); every position is taken modulo the token
// count (wrapping to the start). Requires s >= 0, 0 <= m < M, 0 <= r < N, B > 0, T > 0 (asserted).
// idx, targets: (B, T)
void fsdp_data_batch(const fsdp_data *d, int64_t step, int micro, int micro_steps, int rank, int world, int B,
                     int T, int32_t *idx, int32_t *targets);
