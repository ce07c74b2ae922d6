# tests/libbuf.mk - Check tests of libbuf (linked to the internal library).

libbuf_test_cflags = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/libbuf
libbuf_test_ldadd = libbuf/libtb_core.la $(CHECK_LIBS)

# tck_main.h: TCK_CASE / TCK_MAIN, used by every Check program; trng.h:
# the tests' deterministic random streams; bstr.h: protobuf bytes by hand.
noinst_HEADERS += tests/tb_testutil.h tests/tck_main.h tests/trng.h \
	tests/bstr.h
# Which fixture serves which layer of tests.
EXTRA_DIST += tests/README.md

check_PROGRAMS += tests/check_tb_basic
tests_check_tb_basic_SOURCES = tests/check_tb_basic.c
tests_check_tb_basic_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_basic_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_basic

check_PROGRAMS += tests/check_tb_frag
tests_check_tb_frag_SOURCES = tests/check_tb_frag.c
tests_check_tb_frag_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_frag_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_frag

check_PROGRAMS += tests/check_tb_patch
tests_check_tb_patch_SOURCES = tests/check_tb_patch.c
tests_check_tb_patch_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_patch_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_patch

check_PROGRAMS += tests/check_tb_recommit
tests_check_tb_recommit_SOURCES = tests/check_tb_recommit.c
tests_check_tb_recommit_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_recommit_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_recommit

check_PROGRAMS += tests/check_tb_loss
tests_check_tb_loss_SOURCES = tests/check_tb_loss.c
tests_check_tb_loss_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_loss_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_loss

check_PROGRAMS += tests/check_tb_malicious
tests_check_tb_malicious_SOURCES = tests/check_tb_malicious.c
tests_check_tb_malicious_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_malicious_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_malicious

check_PROGRAMS += tests/check_tb_clone
tests_check_tb_clone_SOURCES = tests/check_tb_clone.c
tests_check_tb_clone_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_clone_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_clone

check_PROGRAMS += tests/check_tb_random
tests_check_tb_random_SOURCES = tests/check_tb_random.c
tests_check_tb_random_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_random_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_random


check_PROGRAMS += tests/check_tb_mem
tests_check_tb_mem_SOURCES = tests/check_tb_mem.c tests/tb_workload.h
tests_check_tb_mem_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_mem_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_mem

check_PROGRAMS += tests/check_tb_rewind
tests_check_tb_rewind_SOURCES = tests/check_tb_rewind.c tests/tb_workload.h
tests_check_tb_rewind_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_rewind_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_rewind

# The installed libraries export only their contracts (nm / readelf).
dist_check_SCRIPTS += tests/check_exports.sh
TESTS += tests/check_exports.sh

# Exact per-sequence loss accounting, one deterministic case per cause.
check_PROGRAMS += tests/check_tb_lossacct
tests_check_tb_lossacct_SOURCES = tests/check_tb_lossacct.c
tests_check_tb_lossacct_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_lossacct_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_lossacct

# The per-writer tables stay bounded while producers come and go.
check_PROGRAMS += tests/check_tb_writers
tests_check_tb_writers_SOURCES = tests/check_tb_writers.c
tests_check_tb_writers_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_writers_LDADD = $(libbuf_test_ldadd)
TESTS += tests/check_tb_writers
