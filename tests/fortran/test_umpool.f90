! The Fortran module (bindings/fortran/umpool.f90) against libumpool on
! sim: a pool, hinted allocations viewed as Fortran arrays, pointer
! information, a communicator and its shrink, statistics, pinned host
! memory, suspend and resume, and
! errors (a double free,
! a foreign pointer, a bad configuration, destroying with live memory).
! Prints one line per failed check; stops with status 1 on any.
program test_umpool
  use, intrinsic :: iso_c_binding
  use umpool
  implicit none
  type(c_ptr) :: pool, p, h, bad, comm, small
  integer(c_int) :: nr, ex(1)
  type(ump_hints_t) :: hints
  type(ump_ptr_info_t) :: info
  type(ump_stats_t) :: st
  type(ump_link_stats_t) :: ls, ls2
  type(ump_coll_stats_t) :: cs
  real(c_double), pointer :: a(:)
  integer(c_int64_t), pointer :: q(:)
  integer(c_size_t), parameter :: n = 100000
  integer(c_int) :: rc
  integer :: failures = 0, i
  real(c_double), target :: local(4)

  call check(ump_pool_create('backend:sim,sim_devices:2,sim_device_mem:64M' &
                             // c_null_char, pool) == 0, 'ump_pool_create')
  call check(ump_device_count(pool) == 2, 'ump_device_count')

  ! On device 1, through hints started from UMP_HINTS_INIT.
  call umpool_hints_init(hints)
  call check(hints%device == UMP_DEVICE_CURRENT, 'umpool_hints_init')
  hints%device = 1
  call check(ump_alloc(pool, n * 8_c_size_t, hints, p) == 0, 'ump_alloc')
  call c_f_pointer(p, a, [n])
  a = [(real(i, c_double), i = 1, int(n))]
  call check(sum(a) == real(n, c_double) * real(n + 1, c_double) / 2, &
             'data through c_f_pointer')
  call check(ump_ptr_info(pool, c_loc(a(n)), info) == 0, 'ump_ptr_info')
  call check(info%device == 1 .and. info%size == n * 8 .and. &
             c_associated(info%base, p) .and. info%kind == UMP_KIND_DEVICE, &
             'ump_ptr_info fields')

  ! No hints: the defaults (device 0).
  call check(ump_alloc(pool, 4096_c_size_t, ptr=bad) == 0, &
             'ump_alloc without hints')
  call check(ump_ptr_info(pool, bad, info) == 0 .and. info%device == 0, &
             'the default device')
  call check(ump_free(pool, bad) == 0, 'ump_free')

  ! A communicator of both devices, shrunk to rank 0 (ump_comm_shrink).
  call check(ump_comm_create(pool, 2_c_int, c_null_ptr, c_null_ptr, comm) &
             == 0, 'ump_comm_create')
  ex(1) = 1
  call check(ump_comm_shrink(comm, 1_c_int, ex, small) == 0, &
             'ump_comm_shrink')
  call check(ump_comm_size(small, nr) == 0 .and. nr == 1, &
             'the shrunk communicator has one rank')
  ex(1) = 2
  call check(ump_comm_shrink(comm, 1_c_int, ex, h) == -22, &
             'shrink: a rank out of range')
  call check(ump_comm_destroy(small) == 0 .and. ump_comm_destroy(comm) == 0, &
             'both communicators destroyed')

  ! Pinned host memory.
  call check(ump_host_alloc(pool, 8000_c_size_t, h) == 0, 'ump_host_alloc')
  call c_f_pointer(h, q, [1000])
  q = 42
  call check(ump_ptr_info(pool, h, info) == 0 .and. &
             info%kind == UMP_KIND_HOST .and. info%tier == UMP_TIER_HOST, &
             'host memory info')
  call check(ump_stats(pool, UMP_LOC_HOST, st) == 0 .and. &
             st%live_count == 1, 'host statistics')
  call check(ump_free(pool, h) == -22, 'ump_free of host memory refused')
  call check(ump_host_free(pool, h) == 0, 'ump_host_free')

  call check(ump_stats(pool, UMP_DEVICE_ALL, st) == 0, 'ump_stats')
  call check(st%live_count == 1 .and. st%live_bytes >= n * 8, &
             'statistics of the live allocation')

  ! Suspend and resume: the array's data back at its address; the root.
  call check(ump_pool_set_root(pool, p) == 0, 'ump_pool_set_root')
  call check(ump_pool_suspend(pool, UMP_TIER_HOST) == 0, 'ump_pool_suspend')
  call check(ump_pool_suspend(pool, UMP_TIER_HOST) == -16, 'suspended twice')
  call check(ump_pool_resume(pool) == 0, 'ump_pool_resume')
  call check(sum(a) == real(n, c_double) * real(n + 1, c_double) / 2, &
             'data after suspend and resume')
  ! The suspend's bytes went down device 1's host link, the resume's up.
  call check(ump_link_stats(pool, 1_c_int, UMP_LOC_HOST, ls) == 0 .and. &
             ump_link_stats(pool, UMP_LOC_HOST, 1_c_int, ls2) == 0 .and. &
             ls%tier_bytes >= n * 8 .and. ls2%tier_bytes == ls%tier_bytes &
             .and. ls%coll_bytes == 0, 'ump_link_stats of suspend, resume')
  call check(ump_link_stats(pool, 1_c_int, 1_c_int, ls) == -22, &
             'ump_link_stats: a link to itself')
  call check(ump_coll_stats(pool, UMP_COLL_ALLREDUCE, cs) == 0 .and. &
             cs%calls == 0, 'ump_coll_stats')
  call check(ump_pool_root(pool, h) == 0 .and. c_associated(h, p), &
             'ump_pool_root')
  call check(ump_pool_checkpoint(pool, c_null_char) == -22, &
             'a checkpoint needs a path')
  ! A failed device (injected on sim at its first operation): it offers
  ! nothing, allocations asked of it land on the other one, none is lost.
  call check(ump_pool_create('backend:sim,sim_devices:2,sim_device_mem:64M,' &
                             // 'sim_fail_device:1,sim_fail_after:1' &
                             // c_null_char, bad) == 0, 'a pool that fails')
  rc = ump_alloc(bad, 4194304_c_size_t, hints, h)
  if (rc == 0) rc = ump_free(bad, h)
  call check(ump_alloc(bad, 4194304_c_size_t, hints, h) == 0, &
             'ump_alloc after the failure')
  call check(ump_ptr_info(bad, h, info) == 0 .and. info%device == 0 .and. &
             info%lost == 0, 'not on the failed device, not lost')
  call check(ump_stats(bad, 1, st) == 0 .and. st%failed_devices == 1 .and. &
             st%capacity == 0 .and. st%lost_count == 0 .and. &
             st%lost_bytes == 0, 'the failed device''s statistics')
  call check(ump_stats(bad, 0, st) == 0 .and. st%failed_devices == 0, &
             'the other device works')
  call check(ump_free(bad, h) == 0 .and. ump_pool_destroy(bad) == 0, &
             'freed and destroyed')

  ! Errors: nothing changes.
  call check(ump_pool_destroy(pool) == -16, 'destroy with live memory')
  call check(ump_free(pool, c_loc(local)) == -22, 'a foreign pointer')
  call check(ump_free(pool, p) == 0, 'ump_free')
  call check(ump_free(pool, p) == -22, 'a second free')
  rc = ump_pool_create('backend:sim,no_such_key:1' // c_null_char, bad)
  call check(rc == -22, 'a bad configuration')
  call check(error_text(-22) /= '', 'ump_strerror')
  call check(ump_pool_destroy(pool) == 0, 'ump_pool_destroy')

  if (failures > 0) then
    print '(a, i0, a)', 'FAIL: ', failures, ' checks'
    stop 1
  end if
  print '(a)', 'PASS: test_umpool (Fortran)'

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(*), intent(in) :: what
    if (.not. ok) then
      print '(a, a)', 'FAIL: ', what
      failures = failures + 1
    end if
  end subroutine check

  ! ump_strerror's text as a Fortran string.
  function error_text(err) result(text)
    integer(c_int), intent(in) :: err
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: s(:)
    integer :: k, j
    call c_f_pointer(ump_strerror(err), s, [256])
    k = 0
    do while (k < 255)
      if (s(k + 1) == c_null_char) exit
      k = k + 1
    end do
    allocate(character(len=k) :: text)
    do j = 1, k
      text(j:j) = s(j)
    end do
  end function error_text
end program test_umpool
