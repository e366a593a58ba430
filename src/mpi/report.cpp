#include "mpi/report.hpp"

#include <cstdio>

#include "mpi/shim_stats.hpp"

namespace hmcast::mpi {

int world_rank() {
  int r = -1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int raise(MPI_Comm comm, const BcastError& e, const char* call) {
  ++stats().errors;
  std::fprintf(stderr, "hmcast_mpi: rank %d: %s failed: %s\n", world_rank(), call, e.message.c_str());
  PMPI_Comm_call_errhandler(comm, e.mpi_class);  // MPI_ERRORS_ARE_FATAL (the default) ends the job here
  return e.mpi_class;
}

}  // namespace hmcast::mpi
