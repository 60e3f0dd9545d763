! heat2d.f90: the Fortran version of examples/heat2d.c, on the umpool
! module (bindings/fortran/umpool.f90): 2D heat diffusion, its grid in pool
! memory seen through c_f_pointer.
!
! The plate is NY rows by NX columns, its edges fixed: the row above held
! at 1, the row below and the outermost columns at 0. Each step is a Jacobi
! sweep of the 5-point stencil. The rows are split in blocks over one rank
! per device of the pool; a block (NX x rows+2: a halo row above and below)
! lives on its rank's device, and each step fills the halos with the
! neighbours' edge rows (ump_send/ump_recv in one group). Every K steps the
! ranks add up the residual with ump_allreduce. At the end rank 0 gathers
! the plate (ump_gather) and checks it against the same computation done
! serially on an ordinary Fortran array: the per-cell arithmetic is the
! same, so the plates must be bitwise equal.
!
! A block is an array b(1:nx, 0:rows+1) (a C row is a Fortran column), the
! same layout as the C example's.
!
!   heat2d-f [-n N] [-x NX] [-y NY] [-s STEPS] [-k K] [--config STR]
!
! Exit status: 0 when the plate matches the serial one, 1 when it does not
! or a call fails, 2 on a usage error or a setup it cannot run.
program heat2d_f
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  use umpool
  implicit none

  type block_t
    real(c_double), pointer :: cur(:, :) => null(), next(:, :) => null()
    real(c_double), pointer :: res_send(:) => null(), res_recv(:) => null()
    type(c_ptr) :: pcur = c_null_ptr, pnext = c_null_ptr
    integer :: rows = 0, start = 0, grank = 0
  end type block_t

  integer :: nx = 256, ny = 256, steps = 200, every = 50
  character(len=512) :: config = 'backend:sim,sim_devices:2'
  type(c_ptr) :: pool, comm, pall
  type(block_t), allocatable :: b(:)
  type(c_ptr), allocatable :: rsend(:), rrecv(:), gsend(:), grecv(:)
  type(c_ptr) :: ptmp
  real(c_double), pointer :: all(:, :), tmp(:, :)
  real(c_double), allocatable :: ref(:, :)
  real(c_double) :: residual, ref_res, rel, maxdiff, d
  integer :: ndev, nranks, max_rows, r, s, g, i, n, r0, ndiff
  integer(c_int) :: rank

  call parse_args()
  call check(ump_pool_create(trim(config) // c_null_char, pool), &
             'ump_pool_create')
  if (c_string(ump_backend_name(pool)) /= 'sim') then
    write (error_unit, '(a)') 'heat2d-f: this example computes on the ' // &
      'CPU on pool memory, which needs backend:sim'
    stop 2
  end if
  ndev = ump_device_count(pool)
  call check(ump_comm_create(pool, int(ndev, c_int), c_null_ptr, c_null_ptr, &
                             comm), 'ump_comm_create')
  call check(ump_comm_size(comm, rank), 'ump_comm_size')
  nranks = rank
  if (nranks > ny) then
    write (error_unit, '(a, i0, a, i0, a)') 'heat2d-f: ', ny, &
      ' rows over ', nranks, ' ranks: every rank needs at least one row'
    stop 2
  end if

  ! One block per local rank, on its device; max_rows + 2 rows each, so
  ! that the gather takes the same count from every rank.
  max_rows = block_rows(0)
  allocate (b(0:ndev - 1), rsend(0:ndev - 1), rrecv(0:ndev - 1), &
            gsend(0:ndev - 1), grecv(0:ndev - 1))
  do r = 0, ndev - 1
    call check(ump_comm_rank(comm, int(r, c_int), rank), 'ump_comm_rank')
    b(r)%grank = rank
    b(r)%rows = block_rows(b(r)%grank)
    b(r)%start = block_start(b(r)%grank)
    b(r)%pcur = doubles(int(nx, c_size_t) * (max_rows + 2), r)
    b(r)%pnext = doubles(int(nx, c_size_t) * (max_rows + 2), r)
    call c_f_pointer(b(r)%pcur, b(r)%cur, [nx, max_rows + 2])
    call c_f_pointer(b(r)%pnext, b(r)%next, [nx, max_rows + 2])
    b(r)%cur(1:, 0:) => b(r)%cur
    b(r)%next(1:, 0:) => b(r)%next
    rsend(r) = doubles(1_c_size_t, r)
    rrecv(r) = doubles(1_c_size_t, r)
    call c_f_pointer(rsend(r), b(r)%res_send, [1])
    call c_f_pointer(rrecv(r), b(r)%res_recv, [1])
    ! Both buffers get the edges: the sweeps never write the fixed
    ! columns, nor the halo rows that are the plate's top and bottom.
    do i = 0, max_rows + 1
      if (i <= b(r)%rows + 1) then
        b(r)%cur(:, i) = initial(b(r)%start + i)
      else
        b(r)%cur(:, i) = 0
      end if
    end do
    b(r)%next = b(r)%cur
  end do

  residual = 0
  do s = 1, steps
    call check(ump_group_start(), 'ump_group_start')
    do r = 0, ndev - 1
      g = b(r)%grank
      if (g > 0) then
        call check(ump_send(comm, int(r, c_int), c_loc(b(r)%cur(1, 1)), &
                            int(nx, c_size_t), UMP_FLOAT64, &
                            int(g - 1, c_int), c_null_ptr), 'ump_send')
        call check(ump_recv(comm, int(r, c_int), c_loc(b(r)%cur(1, 0)), &
                            int(nx, c_size_t), UMP_FLOAT64, &
                            int(g - 1, c_int), c_null_ptr), 'ump_recv')
      end if
      if (g < nranks - 1) then
        call check(ump_send(comm, int(r, c_int), &
                            c_loc(b(r)%cur(1, b(r)%rows)), &
                            int(nx, c_size_t), UMP_FLOAT64, &
                            int(g + 1, c_int), c_null_ptr), 'ump_send')
        call check(ump_recv(comm, int(r, c_int), &
                            c_loc(b(r)%cur(1, b(r)%rows + 1)), &
                            int(nx, c_size_t), UMP_FLOAT64, &
                            int(g + 1, c_int), c_null_ptr), 'ump_recv')
      end if
    end do
    call check(ump_group_end(), 'ump_group_end')

    do r = 0, ndev - 1
      call sweep(b(r)%cur, b(r)%next, b(r)%rows)
    end do
    if (mod(s, every) == 0 .or. s == steps) then
      do r = 0, ndev - 1
        b(r)%res_send(1) = sq_change(b(r)%cur, b(r)%next, b(r)%rows)
      end do
      call check(ump_allreduce(comm, rsend, rrecv, 1_c_size_t, UMP_FLOAT64, &
                               UMP_SUM, c_null_ptr), 'ump_allreduce')
      residual = b(0)%res_recv(1)
      if (b(0)%grank == 0 .and. s /= steps) &
        print '(a, i0, a, es13.6)', 'heat2d-f: step ', s, ': residual ', &
          residual
    end if
    do r = 0, ndev - 1
      tmp => b(r)%cur
      b(r)%cur => b(r)%next
      b(r)%next => tmp
      ptmp = b(r)%pcur
      b(r)%pcur = b(r)%pnext
      b(r)%pnext = ptmp
    end do
  end do

  ! Rank 0 gathers every block's max_rows rows, from its first plate row.
  pall = doubles(int(nx, c_size_t) * max_rows * nranks, 0)
  call c_f_pointer(pall, all, [nx, max_rows * nranks])
  do r = 0, ndev - 1
    gsend(r) = c_loc(b(r)%cur(1, 1))
    grecv(r) = c_null_ptr
  end do
  grecv(0) = pall
  call check(ump_gather(comm, gsend, grecv, int(nx, c_size_t) * max_rows, &
                        UMP_FLOAT64, 0_c_int, c_null_ptr), 'ump_gather')

  call serial(ref, ref_res)
  ndiff = 0
  maxdiff = 0
  do g = 0, nranks - 1
    n = block_rows(g)
    r0 = block_start(g)
    do i = 1, n
      if (any(all(:, g * max_rows + i) /= ref(:, r0 + i))) then
        ndiff = ndiff + count(all(:, g * max_rows + i) /= ref(:, r0 + i))
        d = maxval(abs(all(:, g * max_rows + i) - ref(:, r0 + i)))
        maxdiff = max(maxdiff, d)
      end if
    end do
  end do
  rel = abs(residual - ref_res) / merge(ref_res, 1.0_c_double, ref_res > 0)
  if (ndiff == 0) then
    print '(a, i0, a, i0, a, i0, a, i0, a, es10.3, a)', 'heat2d-f: ', nx, &
      'x', ny, ', ', steps, ' steps, ', nranks, &
      ' ranks: max |diff| vs serial 0 (bitwise equal), residual ', &
      residual, trim(merge('           ', ' (MISMATCH)', rel <= 1e-9_c_double))
  else
    print '(a, i0, a, es10.3)', 'heat2d-f: MISMATCH: ', ndiff, &
      ' cells differ from the serial plate, max |diff| ', maxdiff
  end if
  call check(ump_free(pool, pall), 'ump_free')
  call check(ump_comm_destroy(comm), 'ump_comm_destroy')
  do r = 0, ndev - 1
    call check(ump_free(pool, b(r)%pcur), 'ump_free')
    call check(ump_free(pool, b(r)%pnext), 'ump_free')
    call check(ump_free(pool, rsend(r)), 'ump_free')
    call check(ump_free(pool, rrecv(r)), 'ump_free')
  end do
  call check(ump_pool_destroy(pool), 'ump_pool_destroy')
  ! The main program's variables live to the end: given back by hand, so
  ! that a leak checker sees none.
  deallocate (b, rsend, rrecv, gsend, grecv, ref)
  if (ndiff /= 0 .or. rel > 1e-9_c_double) stop 1

contains

  ! Stops with status 1 naming the call when rc is an error.
  subroutine check(rc, what)
    integer(c_int), intent(in) :: rc
    character(*), intent(in) :: what
    if (rc < 0) then
      write (error_unit, '(a, a, a, a)') 'heat2d-f: ', what, ': ', &
        c_string(ump_strerror(rc))
      stop 1
    end if
  end subroutine check

  ! A C string as a Fortran one.
  function c_string(p) result(text)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: c(:)
    integer :: k, j
    call c_f_pointer(p, c, [4096])
    k = 0
    do while (c(k + 1) /= c_null_char)
      k = k + 1
    end do
    allocate (character(len=k) :: text)
    do j = 1, k
      text(j:j) = c(j)
    end do
  end function c_string

  ! n doubles of pool memory on device.
  function doubles(cnt, device) result(p)
    integer(c_size_t), intent(in) :: cnt
    integer, intent(in) :: device
    type(c_ptr) :: p
    type(ump_hints_t) :: h
    call umpool_hints_init(h)
    h%device = device
    call check(ump_alloc(pool, cnt * 8, h, p), 'ump_alloc')
  end function doubles

  ! Serial row 0 is the hot edge above the plate.
  pure real(c_double) function initial(row)
    integer, intent(in) :: row
    initial = merge(1.0_c_double, 0.0_c_double, row == 0)
  end function initial

  pure integer function block_start(gr)
    integer, intent(in) :: gr
    block_start = gr * (ny / nranks) + min(gr, mod(ny, nranks))
  end function block_start

  pure integer function block_rows(gr)
    integer, intent(in) :: gr
    block_rows = ny / nranks + merge(1, 0, gr < mod(ny, nranks))
  end function block_rows

  ! One Jacobi sweep over rows 1..rows; the same operations in the same
  ! order as the C example's (Fortran keeps the parentheses).
  subroutine sweep(old, new, rows)
    real(c_double), intent(in) :: old(:, 0:)
    real(c_double), intent(inout) :: new(:, 0:)
    integer, intent(in) :: rows
    integer :: row, j
    do row = 1, rows
      do j = 2, nx - 1
        new(j, row) = 0.25_c_double * ((old(j, row - 1) + old(j, row + 1)) &
                                       + (old(j - 1, row) + old(j + 1, row)))
      end do
    end do
  end subroutine sweep

  real(c_double) function sq_change(old, new, rows)
    real(c_double), intent(in) :: old(:, 0:), new(:, 0:)
    integer, intent(in) :: rows
    integer :: row, j
    sq_change = 0
    do row = 1, rows
      do j = 2, nx - 1
        sq_change = sq_change + (new(j, row) - old(j, row))**2
      end do
    end do
  end function sq_change

  ! The whole computation on one ordinary array, for the check.
  subroutine serial(plate, res)
    real(c_double), allocatable, intent(out) :: plate(:, :)
    real(c_double), intent(out) :: res
    real(c_double), allocatable :: a(:, :), c(:, :)
    integer :: st, row
    allocate (a(nx, 0:ny + 1), c(nx, 0:ny + 1))
    do row = 0, ny + 1
      a(:, row) = initial(row)
    end do
    c = a
    res = 0
    do st = 1, steps
      call sweep(a, c, ny)
      if (st == steps) res = sq_change(a, c, ny)
      call move_alloc(a, plate)
      call move_alloc(c, a)
      call move_alloc(plate, c)
    end do
    call move_alloc(a, plate)
  end subroutine serial

  subroutine parse_args()
    character(len=512) :: a, v
    integer :: k, nargs
    nargs = command_argument_count()
    k = 1
    do while (k <= nargs)
      call get_command_argument(k, a)
      v = ''
      if (k < nargs) call get_command_argument(k + 1, v)
      select case (trim(a))
      case ('-n')
        nx = number(v)
        ny = nx
      case ('-x')
        nx = number(v)
      case ('-y')
        ny = number(v)
      case ('-s')
        steps = number(v)
      case ('-k')
        every = number(v)
      case ('--config')
        config = v
      case default
        write (error_unit, '(a, a, a)') 'heat2d-f: unknown option ', &
          trim(a), ' (-n N -x NX -y NY -s STEPS -k K --config STR)'
        stop 2
      end select
      k = k + 2
    end do
    if (nx < 3) then
      write (error_unit, '(a)') 'heat2d-f: the plate needs at least 3 columns'
      stop 2
    end if
  end subroutine parse_args

  integer function number(text)
    character(*), intent(in) :: text
    integer :: ios
    read (text, *, iostat=ios) number
    if (ios /= 0 .or. number < 1 .or. number > 1000000) then
      write (error_unit, '(a, a)') 'heat2d-f: expected a number from 1 ' // &
        'to 1000000, got ', trim(text)
      stop 2
    end if
  end function number
end program heat2d_f
