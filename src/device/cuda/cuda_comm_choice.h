// cuda_comm_choice.h: which path a process group's collectives take on the cuda device, NCCL or staged
// through pinned host memory, decided once per group from what every rank of it says (its host, its
// NCCL_HOSTID, its GPU, whether NCCL loads there). Plain C, no CUDA: built in every build, so the rule
// is unit-tested on hosts without a GPU (tests/unit/test_nccl_choice.c). cuda_nccl.c gathers the
// cards and applies the decision; every rank of the group computes the same one from the same cards.
#pragma once
#include <stddef.h>
#include <stdint.h>

// --comm / FSDP_DEVICE_COMM
typedef enum { CUDA_COMM_AUTO = 0, CUDA_COMM_NCCL = 1, CUDA_COMM_HOST = 2 } cuda_comm_mode;

// What one rank tells its group before the group's first collective (gathered as raw bytes: its size is
// a multiple of 4, strings NUL-terminated, cut to fit).
typedef struct {
    char host[64];     // host name (fsdp_comm_host)
    char host_id[64];  // $NCCL_HOSTID, "" when unset: NCCL takes ranks of distinct host ids for distinct hosts
    char gpu[32];      // the GPU's PCI bus id ("0000:1b:00.0"), as cudaDeviceGetPCIBusId writes it
    int32_t nccl;      // 1: NCCL is in the build and loads on this rank
    int32_t reserved;  // 0
} cuda_rank_card;

// "auto" (also NULL or ""), "nccl", "host" -> the mode; -1 for anything else.
int cuda_comm_mode_parse(const char *value);
const char *cuda_comm_mode_name(cuda_comm_mode mode);

// The path of a group of n ranks whose cards are cards (n,), for the message's rank (this rank's index in
// the group), group (fsdp_comm_describe's words) and coll (the collective that asked first):
//   1  NCCL: mode nccl or auto, every rank has NCCL, no two ranks on one GPU of one host (host: NCCL_HOSTID
//      where set, else the host name);
//   0  staged: mode host, or auto where NCCL cannot run;
//  -1  mode nccl where it cannot run: msg (cap bytes) holds one line naming this rank, the group, the
//      collective and the reason (the ranks without NCCL, or the two ranks sharing a GPU and what to do).
int cuda_comm_choose(cuda_comm_mode mode, const cuda_rank_card *cards, int n, int rank, const char *group,
                     const char *coll, char *msg, size_t cap);
