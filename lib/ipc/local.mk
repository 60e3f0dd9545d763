# lib/ipc/: IPC handles (ump_ipc_*): one allocation used by another process
# of the user, its chunks passed as descriptors over the maker pool's Unix
# socket (issue 32). The handle's bytes and the messages, the maker's
# exports and its server thread, the opener's imports; and a pool shared
# by processes (ump_pool_share / ump_pool_attach), served by that thread.
# May call: every layer below.
lib_libumpool_core_la_SOURCES += \
	lib/ipc/ipc.h lib/ipc/state.c \
	lib/ipc/wire.c lib/ipc/wire.h \
	lib/ipc/export.c lib/ipc/server.c lib/ipc/import.c \
	lib/ipc/share.h lib/ipc/share.c lib/ipc/share_serve.c
