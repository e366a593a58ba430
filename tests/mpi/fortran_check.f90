! A Fortran program (it knows nothing of hmcast) that broadcasts integer arrays from
! every root with MPI_BCAST (`use mpi`; `include 'mpif.h'` and `use mpi_f08` in a subroutine each)
! and with MPI_IBCAST completed by MPI_WAIT, MPI_WAITALL, MPI_TEST, MPI_WAITANY,
! MPI_TESTANY, MPI_WAITSOME and MPI_TESTSOME, and checks
! every element at every rank. Run by tests/mpi/run.sh with and without the shim.
! Rank 0 prints one JSON line like bcast_check's: procs, checks, failures, calls,
! seconds, root_wait_ms; the exit status is 1 if any check failed.
module tally_mod
  implicit none
  integer :: checks = 0, failures = 0, calls = 0, myrank = 0
contains
  integer function pattern(tag, root, i)
    integer, intent(in) :: tag, root, i
    pattern = mod(tag * 7919 + root * 104729 + i * 31, 2000000011)
  end function pattern

  subroutine fill(buf, n, tag, root, rank)
    integer, intent(inout) :: buf(:)
    integer, intent(in) :: n, tag, root, rank
    integer :: i
    buf = -1
    if (rank == root) then
      do i = 1, n
        buf(i) = pattern(tag, root, i)
      end do
    end if
  end subroutine fill

  subroutine check(buf, n, tag, root, rc, what)
    integer, intent(in) :: buf(:)
    integer, intent(in) :: n, tag, root, rc
    character(len=*), intent(in) :: what
    integer :: i, bad
    bad = 0
    do i = 1, n
      if (buf(i) /= pattern(tag, root, i)) bad = bad + 1
    end do
    do i = n + 1, size(buf)
      if (buf(i) /= -1) bad = bad + 1  ! guard elements left alone
    end do
    checks = checks + 1
    if (bad /= 0 .or. rc /= 0) then
      failures = failures + 1
      if (failures <= 20) write(0, '(A,I0,A,A,A,I0,A,I0,A,I0,A,I0)') 'FAIL rank ', myrank, ': ', what, &
        ' n=', n, ' root=', root, ' rc=', rc, ' wrong=', bad
    end if
  end subroutine check
end module tally_mod

! One broadcast through the mpif.h interface (no explicit interfaces: the way old codes call it).
subroutine bcast_mpif(buf, n, root)
  implicit none
  include 'mpif.h'
  integer :: buf(*), n, root, ierr
  call MPI_BCAST(buf, n, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
end subroutine bcast_mpif

! The same calls through `use mpi_f08` (its own entry points call Open MPI's ompi_*_f).
subroutine f08_cases(tag, nprocs)
  use mpi_f08
  use tally_mod
  implicit none
  integer, intent(inout) :: tag
  integer, intent(in) :: nprocs
  integer :: a(3000 + 16), root, ierr
  type(MPI_Request) :: req
  do root = 0, nprocs - 1
    tag = tag + 1
    call fill(a, 3000, tag, root, myrank)
    calls = calls + 1
    call MPI_Bcast(a, 3000, MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
    call check(a, 3000, tag, root, ierr, 'MPI_Bcast (mpi_f08)')
    tag = tag + 1
    call fill(a, 3000, tag, root, myrank)
    calls = calls + 1
    call MPI_Ibcast(a, 3000, MPI_INTEGER, root, MPI_COMM_WORLD, req, ierr)
    call MPI_Wait(req, MPI_STATUS_IGNORE, ierr)
    call check(a, 3000, tag, root, ierr, 'MPI_Ibcast + MPI_Wait (mpi_f08)')
  end do
end subroutine f08_cases

program fortran_check
  use mpi
  use tally_mod
  implicit none
  integer, parameter :: guard = 16
  integer :: ierr, nprocs, root, k, tag, style, rc, left, sizes(4), idx, outcount, indices(4)
  logical :: flag
  integer :: reqs(4), mine(3), total(3)
  integer, allocatable :: a(:), b(:), bufs(:, :)
  double precision :: start
  logical :: done(4)

  call MPI_INIT(ierr)
  call MPI_COMM_RANK(MPI_COMM_WORLD, myrank, ierr)
  call MPI_COMM_SIZE(MPI_COMM_WORLD, nprocs, ierr)
  start = MPI_WTIME()
  tag = 0
  ! 4 B to 1.2 MB: the small path and (above 1 MiB) the large one.
  sizes = [1, 500, 20000, 300000]

  ! MPI_BCAST from every root, every size.
  allocate(a(300000 + guard))
  do k = 1, 4
    do root = 0, nprocs - 1
      tag = tag + 1
      call fill(a, sizes(k), tag, root, myrank)
      calls = calls + 1
      call MPI_BCAST(a, sizes(k), MPI_INTEGER, root, MPI_COMM_WORLD, ierr)
      call check(a, sizes(k), tag, root, ierr, 'MPI_BCAST')
    end do
  end do
  ! Through mpif.h.
  do root = 0, nprocs - 1
    tag = tag + 1
    call fill(a, 700, tag, root, myrank)
    calls = calls + 1
    call bcast_mpif(a, 700, root)
    call check(a, 700, tag, root, 0, 'MPI_BCAST (mpif.h)')
  end do

  ! MPI_IBCAST, four in flight (two from root 0), completed seven ways.
  allocate(bufs(300000 + guard, 4))
  do style = 1, 7
    do k = 1, 4
      tag = tag + 1
      root = mod(k / 2, nprocs)
      call fill(bufs(:, k), sizes(k), tag, root, myrank)
      calls = calls + 1
      call MPI_IBCAST(bufs(:, k), sizes(k), MPI_INTEGER, root, MPI_COMM_WORLD, reqs(k), ierr)
    end do
    rc = 0
    if (style == 1) then
      do k = 4, 1, -1
        call MPI_WAIT(reqs(k), MPI_STATUS_IGNORE, ierr)
        rc = max(rc, abs(ierr))
      end do
    else if (style == 2) then
      call MPI_WAITALL(4, reqs, MPI_STATUSES_IGNORE, ierr)
      rc = abs(ierr)
    else if (style == 4) then
      do k = 1, 4
        call MPI_WAITANY(4, reqs, idx, MPI_STATUS_IGNORE, ierr)
        rc = max(rc, abs(ierr))
      end do
    else if (style == 5) then
      left = 4
      do while (left > 0)
        call MPI_TESTANY(4, reqs, idx, flag, MPI_STATUS_IGNORE, ierr)
        rc = max(rc, abs(ierr))
        if (flag) then
          if (idx == MPI_UNDEFINED) exit
          left = left - 1
        end if
      end do
    else if (style == 6 .or. style == 7) then
      left = 4
      do while (left > 0)
        if (style == 6) then
          call MPI_WAITSOME(4, reqs, outcount, indices, MPI_STATUSES_IGNORE, ierr)
        else
          call MPI_TESTSOME(4, reqs, outcount, indices, MPI_STATUSES_IGNORE, ierr)
        end if
        rc = max(rc, abs(ierr))
        if (outcount == MPI_UNDEFINED) exit
        left = left - outcount
      end do
    else
      done = .false.
      left = 4
      do while (left > 0)
        do k = 1, 4
          if (done(k)) cycle
          call MPI_TEST(reqs(k), flag, MPI_STATUS_IGNORE, ierr)
          rc = max(rc, abs(ierr))
          if (flag) then
            done(k) = .true.
            left = left - 1
          end if
        end do
      end do
    end if
    do k = 1, 4
      if (reqs(k) /= MPI_REQUEST_NULL) rc = max(rc, 1)
      call check(bufs(:, k), sizes(k), tag - 4 + k, mod(k / 2, nprocs), rc, 'MPI_IBCAST')
    end do
  end do

  call f08_cases(tag, nprocs)

  ! A communicator of its own, freed afterwards.
  allocate(b(5000 + guard))
  block
    integer :: dup
    call MPI_COMM_DUP(MPI_COMM_WORLD, dup, ierr)
    do root = 0, nprocs - 1
      tag = tag + 1
      call fill(b, 5000, tag, root, myrank)
      calls = calls + 1
      call MPI_BCAST(b, 5000, MPI_INTEGER, root, dup, ierr)
      call check(b, 5000, tag, root, ierr, 'MPI_BCAST (dup)')
    end do
    call MPI_COMM_FREE(dup, ierr)
  end block

  mine = [checks, failures, calls]
  call MPI_REDUCE(mine, total, 3, MPI_INTEGER, MPI_SUM, 0, MPI_COMM_WORLD, ierr)
  if (myrank == 0) write(*, '(A,I0,A,I0,A,I0,A,I0,A,F10.3,A)') '{"procs": ', nprocs, ', "checks": ', total(1), &
    ', "failures": ', total(2), ', "calls": ', total(3), ', "seconds": ', MPI_WTIME() - start, ', "root_wait_ms": 0.0}'
  call MPI_FINALIZE(ierr)
  if (myrank == 0 .and. total(2) /= 0) stop 1
end program fortran_check
