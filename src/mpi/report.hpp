// How the shim tells the application that a broadcast through hmcast failed: a line
// on stderr saying what happened, then the communicator's error handler (which ends
// the job under MPI_ERRORS_ARE_FATAL, the default) and the MPI error class.
#pragma once

#include <mpi.h>

#include "mpi/comm_group.hpp"

namespace hmcast::mpi {

int world_rank();

/// `call` names the MPI function ("MPI_Bcast", "MPI_Ibcast"). Returns e.mpi_class.
int raise(MPI_Comm comm, const BcastError& e, const char* call);

}  // namespace hmcast::mpi
