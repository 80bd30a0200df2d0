// comm_mpi_transport.h: MPI's own collectives as a transport (comm_mpi_transport.c): every kind, any
// group; nonblocking where one MPI call carries it (fp32 sums; all-gathers of any dtype). Not part of
// the public API.
#pragma once
#include "comm/comm_group.h"

extern const fsdp_comm_transport comm_mpi_transport;
