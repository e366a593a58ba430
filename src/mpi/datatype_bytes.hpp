// A broadcast's bytes in and out of the user's buffer: hmcast carries one run of
// bytes, MPI describes the buffer by a datatype that may have holes, a negative
// lower bound or absolute addresses (MPI_BOTTOM). The root packs and receivers
// unpack, except for a predefined type whose bytes already lie in one run.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <mpi.h>

namespace hmcast::mpi {

/// A predefined datatype whose bytes are one run from the buffer's start.
bool contiguous(MPI_Datatype datatype);

/// The root's bytes: the buffer itself when `plain`, else packed into `packed`.
/// `bytes` is count times the type's size. Returns an MPI error code.
int pack_bytes(const void* buffer, int count, MPI_Datatype datatype, bool plain, std::size_t bytes, MPI_Comm comm,
               std::vector<std::byte>& packed, std::span<const std::byte>& out);

/// A receiver's bytes into its buffer (nothing to do for no bytes: the buffer is left
/// alone, as MPI_Bcast leaves it). Returns an MPI error code.
int unpack_bytes(std::span<const std::byte> in, void* buffer, int count, MPI_Datatype datatype, bool plain,
                 MPI_Comm comm);

}  // namespace hmcast::mpi
