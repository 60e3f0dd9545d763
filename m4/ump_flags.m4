# AX_UMP_APPEND_CFLAGS(VAR, FLAGS): append to VAR each flag the C compiler accepts.
AC_DEFUN([AX_UMP_APPEND_CFLAGS], [
  for ump_flag in $2; do
    AC_MSG_CHECKING([whether $CC accepts $ump_flag])
    ump_save_CFLAGS=$CFLAGS
    CFLAGS="$CFLAGS -Werror $ump_flag"
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
      [AC_MSG_RESULT([yes]); $1="$$1 $ump_flag"], [AC_MSG_RESULT([no])])
    CFLAGS=$ump_save_CFLAGS
  done
])

# AX_PTHREAD_SIMPLE: use -pthread (glibc and every compiler we target take it).
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  AC_MSG_CHECKING([whether $CC accepts -pthread])
  ump_save_CFLAGS=$CFLAGS
  CFLAGS="$CFLAGS -pthread"
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>
static void *run(void *arg) { return arg; }]],
      [[pthread_t t; return pthread_create(&t, 0, run, 0);]])],
    [AC_MSG_RESULT([yes]); PTHREAD_CFLAGS=-pthread],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([POSIX threads are required])])
  CFLAGS=$ump_save_CFLAGS
  AC_SUBST([PTHREAD_CFLAGS])
])
