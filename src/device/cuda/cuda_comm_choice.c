// cuda_comm_choice.c: the rule of cuda_comm_choice.h (NCCL or staged, per group), no CUDA in it.
#include "device/cuda/cuda_comm_choice.h"

#include <stdio.h>
#include <string.h>

int cuda_comm_mode_parse(const char *value) {
    if (!value || !*value || strcmp(value, "auto") == 0) return CUDA_COMM_AUTO;
    if (strcmp(value, "nccl") == 0) return CUDA_COMM_NCCL;
    if (strcmp(value, "host") == 0) return CUDA_COMM_HOST;
    return -1;
}

const char *cuda_comm_mode_name(cuda_comm_mode mode) {
    return mode == CUDA_COMM_NCCL ? "nccl" : mode == CUDA_COMM_HOST ? "host" : "auto";
}

// The host NCCL sees rank i on: its NCCL_HOSTID where set, else its host name
static const char *nccl_host(const cuda_rank_card *c) { return c->host_id[0] ? c->host_id : c->host; }

int cuda_comm_choose(cuda_comm_mode mode, const cuda_rank_card *cards, int n, int rank, const char *group,
                     const char *coll, char *msg, size_t cap) {
    if (cap) msg[0] = 0;
    if (mode == CUDA_COMM_HOST) return 0;
    int without = -1;  // a rank without NCCL
    for (int i = 0; i < n && without < 0; i++)
        if (!cards[i].nccl) without = i;
    int a = -1, b = -1;  // two ranks on one GPU of one host
    for (int i = 0; i < n && a < 0; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(nccl_host(&cards[i]), nccl_host(&cards[j])) == 0 && strcmp(cards[i].gpu, cards[j].gpu) == 0) {
                a = i, b = j;
                break;
            }
    if (without < 0 && a < 0) return 1;
    if (mode == CUDA_COMM_AUTO) return 0;
    if (without >= 0)
        snprintf(msg, cap, "rank %d, %s, %s: --comm nccl: rank %d of the group has no NCCL (not in its build, or "
                 "libnccl.so.2 does not load there: FSDP_NCCL_LIBRARY names the file); --comm host stages through "
                 "host memory", rank, group, coll, without);
    else
        snprintf(msg, cap, "rank %d, %s, %s: --comm nccl: ranks %d and %d of the group share GPU %s on host %s "
                 "(NCCL refuses two ranks on one GPU: give each rank its own NCCL_HOSTID, or use --comm host)",
                 rank, group, coll, a, b, cards[a].gpu, cards[a].host);
    return -1;
}
