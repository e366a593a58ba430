// The Fortran entry points of the shim. Open MPI's Fortran bindings (mpif.h,
// `use mpi`, `use mpi_f08`) call PMPI_Bcast and friends directly, past any C
// interposition, so the shim defines their symbols itself: every spelling a
// Fortran compiler may use (mpi_bcast_, mpi_bcast__, mpi_bcast, MPI_BCAST) and
// Open MPI's ompi_bcast_f, which `use mpi_f08` calls. Each converts the handles and
// calls the shim's C entry point, so Fortran gets the same paths, checks and
// counters as C. Completion calls do the shim's step, then Open MPI's own Fortran
// function (found with dlsym(RTLD_NEXT)), which converts statuses and requests.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include <mpi.h>

#include "mpi/pending_ibcast.hpp"
#include "mpi/shim_stats.hpp"

extern "C" {
// Open MPI's Fortran MPI_BOTTOM: the address of this common block (libmpi).
extern MPI_Fint mpi_fortran_bottom_;
}

namespace hmcast::mpi {
namespace {

void* fortran_buffer(void* buffer) {
  return buffer == static_cast<void*>(&mpi_fortran_bottom_) ? MPI_BOTTOM : buffer;
}

/// Open MPI's own Fortran function `name`, which the shim's definition hides.
template <class Fn>
Fn next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "hmcast_mpi: %s not found after the shim (%s): link the Fortran program with Open MPI's "
                 "Fortran bindings (mpifort)\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

using WaitF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*);
using TestF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);
using WaitallF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);
using TestallF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);
using WaitanyF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);
using TestanyF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);
using SomeF = void (*)(MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*, MPI_Fint*);  // waitsome, testsome

}  // namespace
}  // namespace hmcast::mpi

#define HMCAST_MPI_EXPORT extern "C" __attribute__((visibility("default")))

HMCAST_MPI_EXPORT void ompi_bcast_f(char* buffer, MPI_Fint* count, MPI_Fint* datatype, MPI_Fint* root, MPI_Fint* comm,
                                    MPI_Fint* ierr) {
  ++hmcast::mpi::stats().fortran;
  const int rc = MPI_Bcast(hmcast::mpi::fortran_buffer(buffer), *count, PMPI_Type_f2c(*datatype), *root,
                           PMPI_Comm_f2c(*comm));
  if (ierr != nullptr) *ierr = rc;
}

HMCAST_MPI_EXPORT void ompi_ibcast_f(char* buffer, MPI_Fint* count, MPI_Fint* datatype, MPI_Fint* root,
                                     MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  ++hmcast::mpi::stats().fortran;
  MPI_Request c = MPI_REQUEST_NULL;
  const int rc = MPI_Ibcast(hmcast::mpi::fortran_buffer(buffer), *count, PMPI_Type_f2c(*datatype), *root,
                            PMPI_Comm_f2c(*comm), &c);
  if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(c);
  if (ierr != nullptr) *ierr = rc;
}

HMCAST_MPI_EXPORT void ompi_wait_f(MPI_Fint* request, MPI_Fint* status, MPI_Fint* ierr) {
  hmcast::mpi::pending_ibcasts().advance(PMPI_Request_f2c(*request), true);
  static const auto real = hmcast::mpi::next<hmcast::mpi::WaitF>("ompi_wait_f");
  real(request, status, ierr);
}

HMCAST_MPI_EXPORT void ompi_test_f(MPI_Fint* request, MPI_Fint* flag, MPI_Fint* status, MPI_Fint* ierr) {
  hmcast::mpi::pending_ibcasts().advance(PMPI_Request_f2c(*request), false);
  static const auto real = hmcast::mpi::next<hmcast::mpi::TestF>("ompi_test_f");
  real(request, flag, status, ierr);
}

HMCAST_MPI_EXPORT void ompi_waitall_f(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* statuses, MPI_Fint* ierr) {
  auto& p = hmcast::mpi::pending_ibcasts();
  for (MPI_Fint i = 0; i < *count && !p.empty(); ++i) p.advance(PMPI_Request_f2c(requests[i]), true);
  static const auto real = hmcast::mpi::next<hmcast::mpi::WaitallF>("ompi_waitall_f");
  real(count, requests, statuses, ierr);
}

HMCAST_MPI_EXPORT void ompi_testall_f(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* flag, MPI_Fint* statuses,
                                      MPI_Fint* ierr) {
  auto& p = hmcast::mpi::pending_ibcasts();
  for (MPI_Fint i = 0; i < *count && !p.empty(); ++i) p.advance(PMPI_Request_f2c(requests[i]), false);
  static const auto real = hmcast::mpi::next<hmcast::mpi::TestallF>("ompi_testall_f");
  real(count, requests, flag, statuses, ierr);
}

HMCAST_MPI_EXPORT void ompi_testany_f(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* index, MPI_Fint* flag,
                                      MPI_Fint* status, MPI_Fint* ierr) {
  hmcast::mpi::pending_ibcasts().poll();
  static const auto real = hmcast::mpi::next<hmcast::mpi::TestanyF>("ompi_testany_f");
  real(count, requests, index, flag, status, ierr);
}

HMCAST_MPI_EXPORT void ompi_waitany_f(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* index, MPI_Fint* status,
                                      MPI_Fint* ierr) {
  static const auto testany = hmcast::mpi::next<hmcast::mpi::TestanyF>("ompi_testany_f");
  const bool answered = hmcast::mpi::pending_ibcasts().poll_until([&] {
    MPI_Fint flag = 0;
    testany(count, requests, index, &flag, status, ierr);
    return (ierr != nullptr && *ierr != MPI_SUCCESS) || flag != 0;
  });
  if (answered) return;
  static const auto real = hmcast::mpi::next<hmcast::mpi::WaitanyF>("ompi_waitany_f");
  real(count, requests, index, status, ierr);
}

HMCAST_MPI_EXPORT void ompi_testsome_f(MPI_Fint* incount, MPI_Fint* requests, MPI_Fint* outcount, MPI_Fint* indices,
                                       MPI_Fint* statuses, MPI_Fint* ierr) {
  hmcast::mpi::pending_ibcasts().poll();
  static const auto real = hmcast::mpi::next<hmcast::mpi::SomeF>("ompi_testsome_f");
  real(incount, requests, outcount, indices, statuses, ierr);
}

HMCAST_MPI_EXPORT void ompi_waitsome_f(MPI_Fint* incount, MPI_Fint* requests, MPI_Fint* outcount, MPI_Fint* indices,
                                       MPI_Fint* statuses, MPI_Fint* ierr) {
  static const auto testsome = hmcast::mpi::next<hmcast::mpi::SomeF>("ompi_testsome_f");
  const bool answered = hmcast::mpi::pending_ibcasts().poll_until([&] {
    testsome(incount, requests, outcount, indices, statuses, ierr);
    return (ierr != nullptr && *ierr != MPI_SUCCESS) || *outcount != 0;  // MPI_UNDEFINED: none active
  });
  if (answered) return;
  static const auto real = hmcast::mpi::next<hmcast::mpi::SomeF>("ompi_waitsome_f");
  real(incount, requests, outcount, indices, statuses, ierr);
}

HMCAST_MPI_EXPORT void ompi_comm_free_f(MPI_Fint* comm, MPI_Fint* ierr) {
  MPI_Comm c = PMPI_Comm_f2c(*comm);
  const int rc = MPI_Comm_free(&c);
  if (rc == MPI_SUCCESS) *comm = PMPI_Comm_c2f(c);
  if (ierr != nullptr) *ierr = rc;
}

HMCAST_MPI_EXPORT void ompi_finalize_f(MPI_Fint* ierr) {
  const int rc = MPI_Finalize();
  if (ierr != nullptr) *ierr = rc;
}

// The spellings Fortran compilers give these names (Open MPI's mpif.h and `use mpi`
// call them; gfortran's is the lower case one with one underscore).
#define HMCAST_FORTRAN_NAME(name, target) \
  extern "C" __attribute__((visibility("default"), alias(#target))) decltype(target) name;
#define HMCAST_FORTRAN_NAMES(lower, upper, target) \
  HMCAST_FORTRAN_NAME(lower, target)               \
  HMCAST_FORTRAN_NAME(lower##_, target)            \
  HMCAST_FORTRAN_NAME(lower##__, target)           \
  HMCAST_FORTRAN_NAME(upper, target)

HMCAST_FORTRAN_NAMES(mpi_bcast, MPI_BCAST, ompi_bcast_f)
HMCAST_FORTRAN_NAMES(mpi_ibcast, MPI_IBCAST, ompi_ibcast_f)
HMCAST_FORTRAN_NAMES(mpi_wait, MPI_WAIT, ompi_wait_f)
HMCAST_FORTRAN_NAMES(mpi_test, MPI_TEST, ompi_test_f)
HMCAST_FORTRAN_NAMES(mpi_waitall, MPI_WAITALL, ompi_waitall_f)
HMCAST_FORTRAN_NAMES(mpi_testall, MPI_TESTALL, ompi_testall_f)
HMCAST_FORTRAN_NAMES(mpi_waitany, MPI_WAITANY, ompi_waitany_f)
HMCAST_FORTRAN_NAMES(mpi_testany, MPI_TESTANY, ompi_testany_f)
HMCAST_FORTRAN_NAMES(mpi_waitsome, MPI_WAITSOME, ompi_waitsome_f)
HMCAST_FORTRAN_NAMES(mpi_testsome, MPI_TESTSOME, ompi_testsome_f)
HMCAST_FORTRAN_NAMES(mpi_comm_free, MPI_COMM_FREE, ompi_comm_free_f)
HMCAST_FORTRAN_NAMES(mpi_finalize, MPI_FINALIZE, ompi_finalize_f)
