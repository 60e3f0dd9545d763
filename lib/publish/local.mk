# lib/publish/: the /dev/shm statistics segment of each pool (its writer
# thread) and the snapshot format that umpool-inspect reads.
# May call: front (to read), and below.
lib_libumpool_core_la_SOURCES += \
	lib/publish/publish.c lib/publish/publish.h \
	lib/publish/snapshot.c lib/publish/snapshot.h
