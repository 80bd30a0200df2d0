// comm_mpi.h: MPI calls that take a count, with 64-bit counts (comm_mpi.c), and MPI's error codes as
// fsdp_status. The layer every transport builds on; not part of the public API.
#pragma once
#include <mpi.h>

#include "comm/comm.h"

// FSDP_OK for MPI_SUCCESS, else an FSDP_ERR_COMM error "<what> failed: <MPI's message>".
fsdp_status comm_mpi_check(int rc, const char *what);

// The MPI datatype of an element of dt (bf16 travels as 16-bit words)
static inline MPI_Datatype comm_mpi_type(fsdp_dtype dt) { return dt == FSDP_F32 ? MPI_FLOAT : MPI_UINT16_T; }

// Counts are size_t; each MPI call carries at most fsdp_comm_max_count() elements, so a larger
// collective runs as pieces, one MPI call each, in the same order on every rank; one that fits is a
// single call with the arguments MPI would get unsplit. esize: bytes per element of t. Each returns
// FSDP_OK or the failing call's error (comm_mpi_check); on an error the remaining pieces are not issued.
// buf (count,) = op over ranks of buf, in place
fsdp_status comm_mpi_allreduce(void *buf, size_t count, size_t esize, MPI_Datatype t, MPI_Op op, MPI_Comm m);
// buf (count,) = root's buf. Count 0 still makes one call (MPI checks the arguments).
fsdp_status comm_mpi_bcast(void *buf, size_t count, size_t esize, MPI_Datatype t, int root, MPI_Comm m);
// recv (size, count) = every rank's send (count,), in rank order; in place when send is MPI_IN_PLACE or
// recv + rank * count * esize. Split: piece by piece through a strided derived datatype, no copies.
fsdp_status comm_mpi_allgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                               int rank);
// recv (size, count): block q = rank q's send block `rank`; send (size, count)
fsdp_status comm_mpi_alltoall(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m);
// recv (count,) = op over ranks of their send (size, count) block `rank`. Split: each piece's
// (size, piece) elements are packed into a temporary (at most 256 MiB) and reduced from there.
fsdp_status comm_mpi_reduce_scatter(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t,
                                    MPI_Op op, MPI_Comm m, int size);
// Nonblocking, one MPI call: count must be <= fsdp_comm_max_count() (a larger one goes through the
// blocking forms above). Same shapes as their blocking forms.
fsdp_status comm_mpi_iallgather(const void *send, void *recv, size_t count, size_t esize, MPI_Datatype t, MPI_Comm m,
                                int rank, MPI_Request *req);
fsdp_status comm_mpi_ireduce_scatter(const void *send, void *recv, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m,
                                     MPI_Request *req);
fsdp_status comm_mpi_iallreduce(void *buf, size_t count, MPI_Datatype t, MPI_Op op, MPI_Comm m, MPI_Request *req);
// MPI calls with a count this process has issued so far, every piece counted (for tests)
size_t fsdp_comm_mpi_calls(void);
// Counts one MPI call with a count (fsdp_comm_mpi_calls): a point-to-point round counts as one.
void fsdp_comm_mpi_count_call(void);
