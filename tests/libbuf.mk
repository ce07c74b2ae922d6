# tests/libbuf.mk - Check tests of libbuf (linked to the internal library).

libbuf_test_cflags = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/libbuf
libbuf_test_ldadd = libbuf/libtb_internal.la $(CHECK_LIBS)

noinst_HEADERS += tests/tb_testutil.h

check_PROGRAMS += tests/check_tb_basic
tests_check_tb_basic_SOURCES = tests/check_tb_basic.c
tests_check_tb_basic_CFLAGS = $(libbuf_test_cflags)
tests_check_tb_basic_LDADD = $(libbuf_test_ldadd)

TESTS += tests/check_tb_basic
