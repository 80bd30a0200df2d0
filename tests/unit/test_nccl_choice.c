// test_nccl_choice.c: the cuda device's rule for a process group's collectives, NCCL or staged through
// host memory (device/cuda/cuda_comm_choice.h), on the host: no GPU needed, every build. The modes of
// --comm, ranks each with a GPU, two ranks on one GPU (with and without a NCCL_HOSTID each), a rank
// without NCCL, and the one-line errors of --comm nccl where it cannot run.
#include <stdio.h>
#include <string.h>

#include "device/cuda/cuda_comm_choice.h"
#include "test.h"

// card i: host, NCCL_HOSTID ("" unset), GPU bus id, NCCL loads
static cuda_rank_card card(const char *host, const char *host_id, const char *gpu, int nccl) {
    cuda_rank_card c;
    memset(&c, 0, sizeof c);
    snprintf(c.host, sizeof c.host, "%s", host);
    snprintf(c.host_id, sizeof c.host_id, "%s", host_id);
    snprintf(c.gpu, sizeof c.gpu, "%s", gpu);
    c.nccl = nccl;
    return c;
}

static int choose(cuda_comm_mode mode, const cuda_rank_card *cards, int n, char *msg, size_t cap) {
    return cuda_comm_choose(mode, cards, n, 1, "world (2 ranks)", "all_gather", msg, cap);
}

int main(void) {
    CHECK_EQ_INT(cuda_comm_mode_parse(NULL), CUDA_COMM_AUTO);
    CHECK_EQ_INT(cuda_comm_mode_parse(""), CUDA_COMM_AUTO);
    CHECK_EQ_INT(cuda_comm_mode_parse("auto"), CUDA_COMM_AUTO);
    CHECK_EQ_INT(cuda_comm_mode_parse("nccl"), CUDA_COMM_NCCL);
    CHECK_EQ_INT(cuda_comm_mode_parse("host"), CUDA_COMM_HOST);
    CHECK_EQ_INT(cuda_comm_mode_parse("NCCL"), -1);
    CHECK_EQ_INT(cuda_comm_mode_parse("mpi"), -1);
    CHECK(strcmp(cuda_comm_mode_name(CUDA_COMM_NCCL), "nccl") == 0 && strcmp(cuda_comm_mode_name(CUDA_COMM_HOST), "host") == 0);
    CHECK_EQ_INT(sizeof(cuda_rank_card) % 4, 0);  // gathered as 4-byte words

    char msg[512];
    const cuda_rank_card own_gpus[2] = {card("n1", "", "0000:1b:00.0", 1), card("n1", "", "0000:1c:00.0", 1)};
    const cuda_rank_card two_hosts[2] = {card("n1", "", "0000:1b:00.0", 1), card("n2", "", "0000:1b:00.0", 1)};
    const cuda_rank_card shared[2] = {card("n1", "", "0000:1b:00.0", 1), card("n1", "", "0000:1b:00.0", 1)};
    const cuda_rank_card shared_ids[2] = {card("n1", "r0", "0000:1b:00.0", 1), card("n1", "r1", "0000:1b:00.0", 1)};
    const cuda_rank_card same_id[2] = {card("n1", "x", "0000:1b:00.0", 1), card("n2", "x", "0000:1b:00.0", 1)};
    const cuda_rank_card no_nccl[3] = {card("n1", "", "0000:1b:00.0", 1), card("n1", "", "0000:1c:00.0", 1),
                                       card("n1", "", "0000:1d:00.0", 0)};

    // host: always staged, whatever the ranks have
    CHECK_EQ_INT(choose(CUDA_COMM_HOST, own_gpus, 2, msg, sizeof msg), 0);
    CHECK_EQ_INT(choose(CUDA_COMM_HOST, shared, 2, msg, sizeof msg), 0);
    // auto: NCCL where each rank has its own GPU (by host, or by NCCL_HOSTID where set), else staged
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, own_gpus, 2, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, two_hosts, 2, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, own_gpus, 1, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, shared, 2, msg, sizeof msg), 0);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, shared_ids, 2, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, same_id, 2, msg, sizeof msg), 0);  // one host id: one host to NCCL
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, no_nccl, 3, msg, sizeof msg), 0);
    CHECK_EQ_INT(choose(CUDA_COMM_AUTO, no_nccl, 2, msg, sizeof msg), 1);  // the two that have it
    CHECK(msg[0] == 0);
    // nccl: where it can run, NCCL; where not, -1 and one line naming the rank, group, collective, reason
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, own_gpus, 2, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, shared_ids, 2, msg, sizeof msg), 1);
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, shared, 2, msg, sizeof msg), -1);
    printf("two ranks on one GPU: %s\n", msg);
    CHECK(strstr(msg, "rank 1, world (2 ranks), all_gather: --comm nccl: ranks 0 and 1 of the group share GPU "
                      "0000:1b:00.0 on host n1") == msg);
    CHECK(strstr(msg, "NCCL_HOSTID") && strstr(msg, "--comm host") && !strchr(msg, '\n'));
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, same_id, 2, msg, sizeof msg), -1);
    CHECK(strstr(msg, "ranks 0 and 1 of the group share GPU") != NULL);
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, no_nccl, 3, msg, sizeof msg), -1);
    printf("a rank without NCCL: %s\n", msg);
    CHECK(strstr(msg, "rank 2 of the group has no NCCL") && strstr(msg, "FSDP_NCCL_LIBRARY") && !strchr(msg, '\n'));
    // a small buffer: cut, terminated
    char small[24];
    memset(small, 'x', sizeof small);
    CHECK_EQ_INT(choose(CUDA_COMM_NCCL, shared, 2, small, sizeof small), -1);
    CHECK_EQ_INT(strlen(small), sizeof small - 1);

    if (test_failures) return 1;
    printf("all checks passed\n");
    return 0;
}
