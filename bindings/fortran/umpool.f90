! umpool for Fortran: ISO_C_BINDING interfaces over libumpool's public C
! API (include/umpool.h), with its structs as bind(c) types and its
! constants as parameters. Interfaces only: nothing to link but libumpool.
!
! Conventions, as in C: a pool, a communicator and a stream are type(c_ptr)
! handles; sizes are integer(c_size_t); every call returns an
! integer(c_int) status, 0 or a negative errno (ump_strerror names it).
! Strings passed in end with c_null_char ('backend:sim' // c_null_char).
! Pool memory becomes a Fortran array with c_f_pointer (on sim, where the
! CPU reaches it; on cuda it is the GPU's). Hints start from
! umpool_hints_init (UMP_HINTS_INIT, a C macro, does not cross).
module umpool
  use, intrinsic :: iso_c_binding
  implicit none
  private :: c_int, c_size_t, c_ptr, c_char, c_double, c_int64_t

  integer(c_int), parameter :: UMP_DEVICE_CURRENT = -1
  integer(c_int), parameter :: UMP_DEVICE_ALL = -2
  integer(c_int), parameter :: UMP_LOC_HOST = -3
  integer(c_int), parameter :: UMP_LOC_NVME = -4, UMP_LOC_NET = -5
  ! UMP_COLL_*, for ump_coll_stats
  integer(c_int), parameter :: UMP_COLL_ALLREDUCE = 0, &
                               UMP_COLL_BROADCAST = 1, UMP_COLL_REDUCE = 2, &
                               UMP_COLL_ALLGATHER = 3, &
                               UMP_COLL_REDUCE_SCATTER = 4, &
                               UMP_COLL_ALLTOALL = 5, UMP_COLL_GATHER = 6, &
                               UMP_COLL_SCATTER = 7
  integer(c_int), parameter :: UMP_TIER_DEVICE = 0, UMP_TIER_HOST = 1, &
                               UMP_TIER_NVME = 2
  integer(c_int), parameter :: UMP_HINT_NO_SPILL = 1, UMP_HINT_OFFLOAD = 2
  integer(c_int), parameter :: UMP_KIND_DEVICE = 0, UMP_KIND_HOST = 1
  ! ump_dtype_t (NCCL's numbers) and ump_redop_t
  integer(c_int), parameter :: UMP_INT8 = 0, UMP_UINT8 = 1, UMP_INT32 = 2, &
                               UMP_UINT32 = 3, UMP_INT64 = 4, &
                               UMP_UINT64 = 5, UMP_FLOAT16 = 6, &
                               UMP_FLOAT32 = 7, UMP_FLOAT64 = 8, &
                               UMP_BFLOAT16 = 9
  integer(c_int), parameter :: UMP_SUM = 0, UMP_PROD = 1, UMP_MAX = 2, &
                               UMP_MIN = 3, UMP_AVG = 4

  type, bind(c) :: ump_hints_t
    integer(c_int) :: device
    type(c_ptr) :: policy       ! a C string, or c_null_ptr
    integer(c_int) :: flags     ! unsigned in C
    integer(c_int) :: group     ! unsigned in C
    integer(c_int) :: access
  end type ump_hints_t

  type, bind(c) :: ump_ptr_info_t
    type(c_ptr) :: base
    integer(c_size_t) :: size
    integer(c_int) :: device
    integer(c_int) :: tier
    type(c_ptr) :: chunk_base
    integer(c_size_t) :: chunk_size
    integer(c_int) :: kind
    integer(c_int) :: lost
  end type ump_ptr_info_t

  ! uint64_t fields are integer(c_int64_t): the same bits.
  type, bind(c) :: ump_stats_t
    integer(c_size_t) :: capacity, live_bytes, mapped_bytes, cached_bytes, &
                         peak_bytes
    integer(c_int64_t) :: live_count, alloc_count, free_count, &
                          chunks_created, chunks_released
    integer(c_size_t) :: host_bytes, nvme_bytes
    integer(c_int64_t) :: spill_count, spill_bytes, restore_count, &
                          restore_bytes, evictions
    integer(c_size_t) :: largest_free
    real(c_double) :: fragmentation
    integer(c_size_t) :: reserved_bytes, peak_reserved_bytes
    integer(c_int64_t) :: driver_ns
    integer(c_int) :: failed_devices
    integer(c_int64_t) :: lost_count
    integer(c_size_t) :: lost_bytes
  end type ump_stats_t

  type, bind(c) :: ump_link_stats_t
    integer(c_int64_t) :: tier_bytes, coll_bytes
    real(c_double) :: bandwidth_gbs
  end type ump_link_stats_t

  type, bind(c) :: ump_coll_stats_t
    integer(c_int64_t) :: calls, bytes, timed_calls, timed_bus_bytes, timed_ns
  end type ump_coll_stats_t

  interface
    subroutine umpool_hints_init(hints) bind(c, name="umpool_hints_init")
      import :: ump_hints_t
      type(ump_hints_t), intent(out) :: hints
    end subroutine umpool_hints_init

    function ump_strerror(err) bind(c, name="ump_strerror")
      import :: c_int, c_ptr
      integer(c_int), value :: err
      type(c_ptr) :: ump_strerror
    end function ump_strerror

    function ump_pool_create(config, pool) bind(c, name="ump_pool_create")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: config
      type(c_ptr), intent(out) :: pool
      integer(c_int) :: ump_pool_create
    end function ump_pool_create

    function ump_process_pool(config, pool) bind(c, name="ump_process_pool")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: config
      type(c_ptr), intent(out) :: pool
      integer(c_int) :: ump_process_pool
    end function ump_process_pool

    function ump_pool_destroy(pool) bind(c, name="ump_pool_destroy")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int) :: ump_pool_destroy
    end function ump_pool_destroy

    function ump_backend_name(pool) bind(c, name="ump_backend_name")
      import :: c_ptr
      type(c_ptr), value :: pool
      type(c_ptr) :: ump_backend_name
    end function ump_backend_name

    function ump_device_count(pool) bind(c, name="ump_device_count")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int) :: ump_device_count
    end function ump_device_count

    function ump_set_device(pool, device) bind(c, name="ump_set_device")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int), value :: device
      integer(c_int) :: ump_set_device
    end function ump_set_device

    ! hints: absent is NULL (the defaults).
    function ump_alloc(pool, size, hints, ptr) bind(c, name="ump_alloc")
      import :: c_int, c_size_t, c_ptr, ump_hints_t
      type(c_ptr), value :: pool
      integer(c_size_t), value :: size
      type(ump_hints_t), intent(in), optional :: hints
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: ump_alloc
    end function ump_alloc

    function ump_free(pool, ptr) bind(c, name="ump_free")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool, ptr
      integer(c_int) :: ump_free
    end function ump_free

    function ump_free_async(pool, ptr, stream) bind(c, name="ump_free_async")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool, ptr, stream
      integer(c_int) :: ump_free_async
    end function ump_free_async

    function ump_host_alloc(pool, size, ptr) bind(c, name="ump_host_alloc")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: pool
      integer(c_size_t), value :: size
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: ump_host_alloc
    end function ump_host_alloc

    function ump_host_free(pool, ptr) bind(c, name="ump_host_free")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool, ptr
      integer(c_int) :: ump_host_free
    end function ump_host_free

    function ump_ptr_info(pool, ptr, info) bind(c, name="ump_ptr_info")
      import :: c_int, c_ptr, ump_ptr_info_t
      type(c_ptr), value :: pool, ptr
      type(ump_ptr_info_t), intent(out) :: info
      integer(c_int) :: ump_ptr_info
    end function ump_ptr_info

    function ump_stats(pool, device, stats) bind(c, name="ump_stats")
      import :: c_int, c_ptr, ump_stats_t
      type(c_ptr), value :: pool
      integer(c_int), value :: device
      type(ump_stats_t), intent(out) :: stats
      integer(c_int) :: ump_stats
    end function ump_stats

    function ump_link_stats(pool, src, dst, stats) &
        bind(c, name="ump_link_stats")
      import :: c_int, c_ptr, ump_link_stats_t
      type(c_ptr), value :: pool
      integer(c_int), value :: src, dst
      type(ump_link_stats_t), intent(out) :: stats
      integer(c_int) :: ump_link_stats
    end function ump_link_stats

    function ump_coll_stats(pool, coll, stats) bind(c, name="ump_coll_stats")
      import :: c_int, c_ptr, ump_coll_stats_t
      type(c_ptr), value :: pool
      integer(c_int), value :: coll
      type(ump_coll_stats_t), intent(out) :: stats
      integer(c_int) :: ump_coll_stats
    end function ump_coll_stats

    function ump_trim(pool) bind(c, name="ump_trim")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int) :: ump_trim
    end function ump_trim

    ! Checkpoints, suspend and resume (strings NUL-terminated:
    ! "file.ckpt" // c_null_char; a config of c_null_char alone: none).
    function ump_pool_checkpoint(pool, path) bind(c, name="ump_pool_checkpoint")
      import :: c_int, c_char, c_ptr
      type(c_ptr), value :: pool
      character(kind=c_char), dimension(*), intent(in) :: path
      integer(c_int) :: ump_pool_checkpoint
    end function ump_pool_checkpoint

    function ump_pool_restore(path, config, pool) &
        bind(c, name="ump_pool_restore")
      import :: c_int, c_char, c_ptr
      character(kind=c_char), dimension(*), intent(in) :: path, config
      type(c_ptr), intent(out) :: pool
      integer(c_int) :: ump_pool_restore
    end function ump_pool_restore

    function ump_pool_set_root(pool, ptr) bind(c, name="ump_pool_set_root")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool, ptr
      integer(c_int) :: ump_pool_set_root
    end function ump_pool_set_root

    function ump_pool_root(pool, ptr) bind(c, name="ump_pool_root")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      type(c_ptr), intent(out) :: ptr
      integer(c_int) :: ump_pool_root
    end function ump_pool_root

    function ump_pool_suspend(pool, tier) bind(c, name="ump_pool_suspend")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int), value :: tier
      integer(c_int) :: ump_pool_suspend
    end function ump_pool_suspend

    function ump_pool_resume(pool) bind(c, name="ump_pool_resume")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool
      integer(c_int) :: ump_pool_resume
    end function ump_pool_resume

    ! Tiers (size 0: the whole allocation).
    function ump_acquire(pool, ptr, size, device, stream) &
        bind(c, name="ump_acquire")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: pool, ptr, stream
      integer(c_size_t), value :: size
      integer(c_int), value :: device
      integer(c_int) :: ump_acquire
    end function ump_acquire

    function ump_release(pool, ptr, size) bind(c, name="ump_release")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: pool, ptr
      integer(c_size_t), value :: size
      integer(c_int) :: ump_release
    end function ump_release

    function ump_evict(pool, ptr, size, tier) bind(c, name="ump_evict")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: pool, ptr
      integer(c_size_t), value :: size
      integer(c_int), value :: tier
      integer(c_int) :: ump_evict
    end function ump_evict

    ! Communicators: devices and config may be c_null_ptr (every device,
    ! the defaults); buffers are arrays of c_ptr, one per local rank;
    ! streams c_null_ptr (the default streams).
    function ump_comm_create(pool, ndev, devices, config, comm) &
        bind(c, name="ump_comm_create")
      import :: c_int, c_ptr
      type(c_ptr), value :: pool, devices, config
      integer(c_int), value :: ndev
      type(c_ptr), intent(out) :: comm
      integer(c_int) :: ump_comm_create
    end function ump_comm_create

    function ump_comm_destroy(comm) bind(c, name="ump_comm_destroy")
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int) :: ump_comm_destroy
    end function ump_comm_destroy

    ! The ranks not in exclude(1:nexclude) (global ranks), renumbered in
    ! order: the survivors of a failed device (ump_comm_shrink).
    function ump_comm_shrink(comm, nexclude, exclude, newcomm) &
        bind(c, name="ump_comm_shrink")
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), value :: nexclude
      integer(c_int), intent(in) :: exclude(*)
      type(c_ptr), intent(out) :: newcomm
      integer(c_int) :: ump_comm_shrink
    end function ump_comm_shrink

    function ump_comm_size(comm, nranks) bind(c, name="ump_comm_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), intent(out) :: nranks
      integer(c_int) :: ump_comm_size
    end function ump_comm_size

    function ump_comm_rank(comm, local, rank) bind(c, name="ump_comm_rank")
      import :: c_int, c_ptr
      type(c_ptr), value :: comm
      integer(c_int), value :: local
      integer(c_int), intent(out) :: rank
      integer(c_int) :: ump_comm_rank
    end function ump_comm_rank

    function ump_allreduce(comm, send, recv, count, dt, op, streams) &
        bind(c, name="ump_allreduce")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: comm, streams
      type(c_ptr), dimension(*), intent(in) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dt, op
      integer(c_int) :: ump_allreduce
    end function ump_allreduce

    function ump_broadcast(comm, send, recv, count, dt, root, streams) &
        bind(c, name="ump_broadcast")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: comm, streams
      type(c_ptr), dimension(*), intent(in) :: send, recv
      integer(c_size_t), value :: count
      integer(c_int), value :: dt, root
      integer(c_int) :: ump_broadcast
    end function ump_broadcast

    function ump_gather(comm, send, recv, sendcount, dt, root, streams) &
        bind(c, name="ump_gather")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: comm, streams
      type(c_ptr), dimension(*), intent(in) :: send, recv
      integer(c_size_t), value :: sendcount
      integer(c_int), value :: dt, root
      integer(c_int) :: ump_gather
    end function ump_gather

    function ump_send(comm, local, buf, count, dt, peer, stream) &
        bind(c, name="ump_send")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: comm, buf, stream
      integer(c_int), value :: local, dt, peer
      integer(c_size_t), value :: count
      integer(c_int) :: ump_send
    end function ump_send

    function ump_recv(comm, local, buf, count, dt, peer, stream) &
        bind(c, name="ump_recv")
      import :: c_int, c_size_t, c_ptr
      type(c_ptr), value :: comm, buf, stream
      integer(c_int), value :: local, dt, peer
      integer(c_size_t), value :: count
      integer(c_int) :: ump_recv
    end function ump_recv

    function ump_group_start() bind(c, name="ump_group_start")
      import :: c_int
      integer(c_int) :: ump_group_start
    end function ump_group_start

    function ump_group_end() bind(c, name="ump_group_end")
      import :: c_int
      integer(c_int) :: ump_group_end
    end function ump_group_end
  end interface
end module umpool
