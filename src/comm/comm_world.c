// comm_world.c: the public process groups: the world (MPI or the local backend), splits, and their
// teardown; each MPI group gets its transports' state here (comm_group.c, comm_hier.c).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm/comm_group.h"
#include "comm/comm_hier.h"
#include "comm/comm_host.h"
#include "comm/comm_mpi.h"
#include "core/alloc.h"

static int launched_by_mpi(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static fsdp_comm *comm_new(comm_backend b) {
    fsdp_comm *c = calloc(1, sizeof *c);
    if (c) c->backend = b;
    return c;
}

// Takes m into c, with every transport that applies, and hands c to *out; or frees c (and m) and
// returns the error.
static fsdp_status adopt(fsdp_comm *c, MPI_Comm m, fsdp_comm **out) {
    fsdp_status s = comm_group_init(c, m);
    if (s == FSDP_OK && c->size > 1) s = comm_hier_setup(c);
    if (s != FSDP_OK) {
        fsdp_comm_free(c);
        return s;
    }
    *out = c;
    return FSDP_OK;
}

fsdp_status fsdp_comm_world(fsdp_comm **world, int *argc, char ***argv) {
    fsdp_mem_init();  // Open MPI's temporary buffers must not go back to the kernel on every call
    *world = NULL;
    if (!launched_by_mpi()) {
        fsdp_comm *c = comm_new(COMM_LOCAL);
        if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
        c->size = 1;
        *world = c;
        return FSDP_OK;
    }
    int initialized = 0, provided = 0;
    FSDP_CHECK(comm_mpi_check(MPI_Initialized(&initialized), "MPI_Initialized"));
    if (!initialized && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return fsdp_error(FSDP_ERR_COMM, "MPI_Init_thread failed");
    fsdp_comm *c = comm_new(COMM_MPI);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    c->owns_mpi = !initialized;
    MPI_Comm dup;
    fsdp_status s = comm_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    // Errors come back as return codes (checked everywhere, turned into fsdp_status) instead of
    // aborting inside MPI; communicators split from this one inherit it.
    if (s == FSDP_OK) s = comm_mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    if (s != FSDP_OK) {
        if (c->owns_mpi) MPI_Finalize();
        free(c);
        return s;
    }
    return adopt(c, dup, world);
}

// A group of parent's ranks: those on this host (by_host), or those of equal color ordered by key
static fsdp_status split(fsdp_comm *parent, int by_host, int color, int key, fsdp_comm **out) {
    *out = NULL;
    fsdp_comm *c = comm_new(parent->backend);
    if (!c) return fsdp_error(FSDP_ERR_NOMEM, "out of memory");
    if (parent->backend == COMM_LOCAL) {
        c->size = 1;
        *out = c;
        return FSDP_OK;
    }
    MPI_Comm m;
    int rc = by_host ? comm_host_split(parent->mpi, parent->rank, &m) : MPI_Comm_split(parent->mpi, color, key, &m);
    fsdp_status s = comm_mpi_check(rc, by_host ? "MPI_Comm_split_type" : "MPI_Comm_split");
    if (s != FSDP_OK) {
        free(c);
        return s;
    }
    return adopt(c, m, out);
}

fsdp_status fsdp_comm_split(fsdp_comm *parent, int color, int key, fsdp_comm **out) {
    return split(parent, 0, color, key, out);
}

fsdp_status fsdp_comm_split_node(fsdp_comm *parent, fsdp_comm **out) { return split(parent, 1, 0, 0, out); }

void fsdp_comm_free(fsdp_comm *c) {
    if (!c) return;
    comm_device_detach(c);
    if (c->backend == COMM_MPI) {
        comm_hier_free_groups(c);
        comm_group_release(c);
        if (c->owns_mpi) (void)MPI_Finalize();
    }
    free(c);
}

int fsdp_comm_rank(const fsdp_comm *c) { return c->rank; }
int fsdp_comm_size(const fsdp_comm *c) { return c->size; }
const char *fsdp_comm_backend(const fsdp_comm *c) {
    return c->backend == COMM_LOCAL ? "local" : c->shm ? "mpi+shm" : "mpi";
}

void fsdp_comm_describe(const fsdp_comm *c, char *buf, size_t cap) {
    if (!cap) return;
    if (c->backend != COMM_MPI) {
        snprintf(buf, cap, "local (1 rank)");
        return;
    }
    int world_size = 0, same = MPI_UNEQUAL;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_compare(c->mpi, MPI_COMM_WORLD, &same);
    if (c->size == world_size && (same == MPI_CONGRUENT || same == MPI_IDENT)) {
        snprintf(buf, cap, "world (%d rank%s)", c->size, c->size == 1 ? "" : "s");
        return;
    }
    enum { SHOWN = 8 };  // the first ranks named
    int mine[SHOWN], world[SHOWN], n = c->size < SHOWN ? c->size : SHOWN;
    for (int i = 0; i < n; i++) mine[i] = i, world[i] = -1;
    MPI_Group g, wg;
    if (MPI_Comm_group(c->mpi, &g) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS) {
        MPI_Group_translate_ranks(g, n, mine, wg, world);
        MPI_Group_free(&g);
        MPI_Group_free(&wg);
    }
    int k = snprintf(buf, cap, "group of %d rank%s (world ranks ", c->size, c->size == 1 ? "" : "s");
    for (int i = 0; i < n && k > 0 && (size_t)k < cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%d", i ? "," : "", world[i]);
    if (k > 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, "%s)", c->size > n ? ",..." : "");
}

const char *fsdp_comm_host(fsdp_comm *c) {
    if (!c->host[0]) {
        int len = 0;
        if (c->backend != COMM_MPI || MPI_Get_processor_name(c->host, &len) != MPI_SUCCESS || len <= 0)
            if (gethostname(c->host, sizeof c->host) != 0) snprintf(c->host, sizeof c->host, "?");
        c->host[sizeof c->host - 1] = 0;
    }
    return c->host;
}
