# Man pages (issue 11): a man3 page per public call or tight group of calls
# (liburing style; every other name of a group is a one-line ".so" page),
# umpool(7) with the configuration table, and a man1 page per tool.
# Included from the top Makefile.am, after EXTRA_DIST and SOURCE_CHECKS are
# defined; paths are relative to the top. It defines (with '=')
# dist_man_MANS, man_MANS and EXTRA_PROGRAMS: a later addition to one of
# them elsewhere uses '+=' after this include. CLEANFILES is the top's.
#
# umpool(7) is generated: man/gen-conf-table (built here, run at build time)
# reads conf_table, the one table of configuration keys, through the
# internal convenience library, and fills man/umpool.7.in. It is built in
# the build tree (VPATH and distcheck's read-only source tree), not
# distributed; the template and the generator are.

# Where conf.h lives and the library that holds conf_table.
MAN_CONF_CPPFLAGS = -I$(top_srcdir)/lib/util
MAN_CORE_LIB = lib/libumpool-core.la

MAN3_PAGES = \
	man/ump_pool_create.3 \
	man/ump_alloc.3 \
	man/ump_host_alloc.3 \
	man/ump_ipc_get_handle.3 \
	man/ump_pool_share.3 \
	man/ump_pool_checkpoint.3 \
	man/ump_pool_suspend.3 \
	man/ump_process_pool.3 \
	man/umpool_torch.3 \
	man/ump_ptr_info.3 \
	man/ump_set_device.3 \
	man/ump_trim.3 \
	man/ump_acquire.3 \
	man/ump_prefetch.3 \
	man/ump_evict.3 \
	man/ump_advise.3 \
	man/ump_stats.3 \
	man/ump_link_stats.3 \
	man/ump_largest_allocs.3 \
	man/ump_device_props.3 \
	man/ump_model_read_bw.3 \
	man/ump_policy.3 \
	man/ump_stream_create.3 \
	man/ump_stream_wrap.3 \
	man/ump_memcpy_async.3 \
	man/ump_comm_create.3 \
	man/ump_comm_create_oob.3 \
	man/ump_send.3 \
	man/ump_allreduce.3 \
	man/ump_strerror.3

# One line each: ".so man3/PAGE.3" of the page that documents the name.
MAN3_LINKS = \
	man/ump_pool_destroy.3 \
	man/ump_free.3 \
	man/ump_free_async.3 \
	man/ump_host_free.3 \
	man/ump_ipc_open.3 \
	man/ump_ipc_close.3 \
	man/ump_pool_attach.3 \
	man/ump_pool_restore.3 \
	man/ump_pool_set_root.3 \
	man/ump_pool_root.3 \
	man/ump_pool_resume.3 \
	man/ump_get_device.3 \
	man/ump_device_count.3 \
	man/ump_release.3 \
	man/ump_tier_stats.3 \
	man/ump_link_props.3 \
	man/ump_coll_stats.3 \
	man/ump_link_kind_name.3 \
	man/ump_backend_name.3 \
	man/ump_stream_destroy.3 \
	man/ump_stream_synchronize.3 \
	man/ump_memset_async.3 \
	man/ump_launch_host_func.3 \
	man/ump_version.3 \
	man/ump_version_string.3 \
	man/ump_comm_destroy.3 \
	man/ump_comm_shrink.3 \
	man/ump_comm_size.3 \
	man/ump_comm_plan.3 \
	man/ump_comm_last_modeled_us.3 \
	man/ump_broadcast.3 \
	man/ump_reduce.3 \
	man/ump_allgather.3 \
	man/ump_reduce_scatter.3 \
	man/ump_alltoall.3 \
	man/ump_gather.3 \
	man/ump_scatter.3 \
	man/ump_comm_rank.3 \
	man/ump_comm_create_mpi.3 \
	man/ump_recv.3 \
	man/ump_group_start.3 \
	man/ump_group_end.3 \
	man/ump_ptr_lookup.3 \
	man/ump_pool_range.3

dist_man_MANS = \
	man/umpool-inspect.1 \
	man/umpool-bench.1 \
	$(MAN3_PAGES) \
	$(MAN3_LINKS)
man_MANS = man/umpool.7

EXTRA_PROGRAMS = man/gen-conf-table
man_gen_conf_table_SOURCES = man/gen-conf-table.c
man_gen_conf_table_CPPFLAGS = $(AM_CPPFLAGS) $(MAN_CONF_CPPFLAGS)
man_gen_conf_table_LDADD = $(MAN_CORE_LIB) $(PTHREAD_CFLAGS)

man/umpool.7: $(srcdir)/man/umpool.7.in man/gen-conf-table$(EXEEXT)
	$(AM_V_GEN)$(MKDIR_P) man && \
	man/gen-conf-table$(EXEEXT) $(srcdir)/man/umpool.7.in >$@-t && \
	mv -f $@-t $@

EXTRA_DIST += man/umpool.7.in
CLEANFILES += man/umpool.7 man/umpool.7-t man/gen-conf-table$(EXEEXT)

# man -l (or groff -ww) renders every page without a warning; every public
# function has a page; every page is listed above.
SOURCE_CHECKS += man/check-man.sh
