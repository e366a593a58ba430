#include "mpi/datatype_bytes.hpp"

#include <cstring>

namespace hmcast::mpi {

bool contiguous(MPI_Datatype datatype) {
  int ints = 0;
  int addrs = 0;
  int types = 0;
  int combiner = 0;
  PMPI_Type_get_envelope(datatype, &ints, &addrs, &types, &combiner);
  if (combiner != MPI_COMBINER_NAMED) return false;
  MPI_Aint lb = 0;
  MPI_Aint extent = 0;
  int size = 0;
  PMPI_Type_get_true_extent(datatype, &lb, &extent);
  PMPI_Type_size(datatype, &size);
  return lb == 0 && extent == size;
}

int pack_bytes(const void* buffer, int count, MPI_Datatype datatype, bool plain, std::size_t bytes, MPI_Comm comm,
               std::vector<std::byte>& packed, std::span<const std::byte>& out) {
  out = std::span<const std::byte>(static_cast<const std::byte*>(buffer), plain ? bytes : 0);
  // No bytes (a count of 0, or a type of size 0): an empty message, and nothing to
  // pack (Open MPI's MPI_Pack rejects an empty output buffer as MPI_ERR_ARG).
  if (plain || bytes == 0) return MPI_SUCCESS;
  packed.resize(bytes);
  int position = 0;
  const int rc = PMPI_Pack(buffer, count, datatype, packed.data(), static_cast<int>(bytes), &position, comm);
  if (rc == MPI_SUCCESS) out = std::span<const std::byte>(packed.data(), static_cast<std::size_t>(position));
  return rc;
}

int unpack_bytes(std::span<const std::byte> in, void* buffer, int count, MPI_Datatype datatype, bool plain,
                 MPI_Comm comm) {
  if (in.empty()) return MPI_SUCCESS;
  if (plain) {
    std::memcpy(buffer, in.data(), in.size());
    return MPI_SUCCESS;
  }
  int position = 0;
  return PMPI_Unpack(in.data(), static_cast<int>(in.size()), &position, buffer, count, datatype, comm);
}

}  // namespace hmcast::mpi
