# tools/inspect/: umpool-inspect, which reads the statistics each pool
# publishes in /dev/shm, its tests and the snapshot parser's fuzz target.
# Included from the top Makefile.am after its own definitions (and after
# tests/local.mk); paths are relative to the top. Uses the public API and,
# as the one exception, lib/publish/snapshot.c (the snapshot format).

# --- the tool: its own sources, the layout, and the public API (topo) --------
bin_PROGRAMS += tools/umpool-inspect
tools_umpool_inspect_SOURCES = tools/inspect/umpool-inspect.c \
	tools/inspect/inspect_seg.c tools/inspect/inspect_seg.h \
	tools/inspect/inspect_fmt.c tools/inspect/inspect_fmt.h \
	tools/inspect/inspect_svg.c tools/inspect/inspect_topo.c \
	tools/inspect/inspect_traffic.c tools/inspect/inspect_share.c \
	tools/inspect/inspect_serve.c tools/inspect/inspect_serve.h \
	tools/inspect/inspect_nvml.c tools/inspect/inspect_nvml.h \
	lib/publish/snapshot.c lib/publish/snapshot.h
tools_umpool_inspect_CFLAGS = $(AM_CFLAGS) $(MICROHTTPD_CFLAGS)
tools_umpool_inspect_LDADD = lib/libumpool.la $(MICROHTTPD_LIBS)

# --- tests ---------------------------------------------------------------------
# test_inspect_parse: the parser, on its own and through the fuzz entry on a
# corpus of broken snapshots, and the tool's segment handling (scan, clean,
# rates); test_inspect_publish: the publisher in a
# process; the scripts: the tool on fixed snapshots (golden output, broken
# and foreign segments, dead processes), promtool (SKIP without it), and a
# live program holding a pool.
UNIT_TESTS += tests/test_inspect_parse tests/test_inspect_publish
SCRIPT_TESTS += tests/test_inspect.sh tests/test_inspect_promtool.sh \
	tests/test_inspect_live.sh tests/test_inspect_serve.sh

INSPECT_SNAPGEN = tests/inspect/snapgen.c tests/inspect/snapgen.h
INSPECT_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools/inspect \
	-I$(top_srcdir)/tests/inspect

tests_test_inspect_parse_SOURCES = tests/test_inspect_parse.c \
	tests/fuzz_snapshot.c tests/inspect/fuzz_entry.h $(INSPECT_SNAPGEN) \
	lib/publish/snapshot.c lib/publish/snapshot.h \
	tools/inspect/inspect_fmt.c tools/inspect/inspect_fmt.h \
	tools/inspect/inspect_svg.c tools/inspect/inspect_traffic.c tools/inspect/inspect_share.c \
	tools/inspect/inspect_seg.c tools/inspect/inspect_seg.h
tests_test_inspect_parse_CPPFLAGS = $(INSPECT_CPPFLAGS)
tests_test_inspect_parse_CFLAGS = $(TEST_CFLAGS)
tests_test_inspect_parse_LDADD = $(CMOCKA_LIBS)

tests_test_inspect_publish_CFLAGS = $(TEST_CFLAGS)
tests_test_inspect_publish_LDADD = $(TEST_LDADD)

# Helpers of the script tests: a fixed snapshot written to a file, and a
# program that holds a pool until told to let go.
INSPECT_HELPERS = tests/inspect/mksnap tests/inspect/holder
if HAVE_CMOCKA
check_PROGRAMS += $(INSPECT_HELPERS)
endif
tests_inspect_mksnap_SOURCES = tests/inspect/mksnap.c $(INSPECT_SNAPGEN) \
	lib/publish/snapshot.c lib/publish/snapshot.h
tests_inspect_mksnap_CPPFLAGS = $(INSPECT_CPPFLAGS)
tests_inspect_mksnap_CFLAGS = $(AM_CFLAGS)
tests_inspect_holder_SOURCES = tests/inspect/holder.c
tests_inspect_holder_LDADD = lib/libumpool.la

AM_TESTS_ENVIRONMENT += \
	UMPOOL_INSPECT='$(abs_top_builddir)/tools/umpool-inspect'; \
	export UMPOOL_INSPECT; \
	UMPOOL_INSPECT_HELPERS='$(abs_top_builddir)/tests/inspect'; \
	export UMPOOL_INSPECT_HELPERS; \
	UMPOOL_INSPECT_GOLDEN='$(abs_top_srcdir)/tests/inspect'; \
	export UMPOOL_INSPECT_GOLDEN;

EXTRA_DIST += tests/inspect/common.sh tests/inspect/show.golden tests/inspect/show.json.golden \
	tests/inspect/show.prom.golden tests/inspect/check_svg.py \
	tests/inspect/check_live.py tests/inspect/check_serve.py

# The exporter's Grafana dashboard and Prometheus configuration (contrib/):
# test_dashboard.sh checks them with check_dashboard.py and promtool. It
# needs nothing built, so it runs with the source checks (without cmocka
# too); it is distributed with them.
SOURCE_CHECKS += tests/test_dashboard.sh
EXTRA_DIST += contrib/grafana/umpool.json contrib/prometheus.yml \
	tests/inspect/check_dashboard.py

# --- the fuzz target (configure --enable-fuzz, clang) -----------------------
# Run it for a bounded time, seeded with valid snapshots of several layouts
# (inputs up to the largest snapshot a reader accepts); any sanitizer
# finding, UBSan's included, ends the run with a failure:
#   make fuzz FUZZ_TIME=60
if FUZZ
noinst_PROGRAMS += tests/fuzz_snapshot
tests_fuzz_snapshot_SOURCES = tests/fuzz_snapshot.c \
	tests/inspect/fuzz_entry.h lib/publish/snapshot.c lib/publish/snapshot.h \
	tools/inspect/inspect_fmt.c tools/inspect/inspect_fmt.h \
	tools/inspect/inspect_svg.c tools/inspect/inspect_traffic.c tools/inspect/inspect_share.c
tests_fuzz_snapshot_CPPFLAGS = $(INSPECT_CPPFLAGS)
tests_fuzz_snapshot_CFLAGS = $(AM_CFLAGS) $(FUZZ_CFLAGS)
tests_fuzz_snapshot_LDFLAGS = $(FUZZ_CFLAGS)

FUZZ_TIME = 60
fuzz: tests/fuzz_snapshot$(EXEEXT) tests/inspect/mksnap$(EXEEXT)
	@$(MKDIR_P) tests/fuzz-corpus
	tests/inspect/mksnap tests/fuzz-corpus/seed.snap --uid 1000
	tests/inspect/mksnap tests/fuzz-corpus/small.snap --uid 1000 \
	  --ndev 1 --map-cap 1 --max-allocs 1
	tests/inspect/mksnap tests/fuzz-corpus/lib.snap --uid 1000 \
	  --ndev 8 --map-cap 1024
	tests/inspect/mksnap tests/fuzz-corpus/max.snap --uid 1000 \
	  --ndev 32 --map-cap 4096 --max-allocs 256
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  tests/fuzz_snapshot -max_total_time=$(FUZZ_TIME) \
	  -max_len=$$(tests/inspect/mksnap --size-max) tests/fuzz-corpus
else
fuzz:
	@echo "make fuzz: configure with --enable-fuzz (and CC=clang) first"; \
	exit 1
endif
.PHONY: fuzz
