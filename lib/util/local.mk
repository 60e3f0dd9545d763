# lib/util/: the bottom layer. Logging, error text, the configuration table
# engine and its size parser, crc32c, the intrusive list, the clock and
# bounded polling, and Unix sockets carrying descriptors between a user's
# processes.
# May call: libc only.
lib_libumpool_core_la_SOURCES += \
	lib/util/internal.h lib/util/list.h lib/util/clock.h \
	lib/util/poll.c lib/util/poll.h \
	lib/util/log.c lib/util/log.h \
	lib/util/strerror.c \
	lib/util/conf.c lib/util/conf.h \
	lib/util/crc32c.c lib/util/crc32c.h \
	lib/util/unixsock.c lib/util/unixsock.h
