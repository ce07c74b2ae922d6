# tests/libshm.mk - Check tests of libshm (SMB ABI, shared memory, reader,
# arbiter, TraceWriter) and the README's producer example.
#
# The tests link the internal libraries the programs use ($(SVC_LIBS):
# libshm_core, the service with its SMB reader, libtb_core), so packets go
# the whole way: writer -> SMB -> reader -> buffer. example_producer links
# the installed libshm.la, as a user's program would.

libshm_test_cflags = $(AM_CFLAGS) $(CHECK_CFLAGS) $(PROTOBUF_C_CFLAGS) \
	-I$(top_srcdir)/libshm -I$(top_srcdir)/service -I$(top_srcdir)/tests
libshm_test_ldadd = $(SVC_LIBS) $(CHECK_LIBS)

noinst_HEADERS += tests/check_smb_harness.h

check_PROGRAMS += tests/check_tw
tests_check_tw_SOURCES = tests/check_tw.c
tests_check_tw_CFLAGS = $(libshm_test_cflags)
tests_check_tw_LDADD = $(libshm_test_ldadd)

TESTS += tests/check_tw

check_PROGRAMS += tests/check_smb
tests_check_smb_SOURCES = tests/check_smb.c
tests_check_smb_CFLAGS = $(libshm_test_cflags)
tests_check_smb_LDADD = $(libshm_test_ldadd)
TESTS += tests/check_smb

check_PROGRAMS += tests/check_arbiter
tests_check_arbiter_SOURCES = tests/check_arbiter.c
tests_check_arbiter_CFLAGS = $(libshm_test_cflags)
tests_check_arbiter_LDADD = $(libshm_test_ldadd)
TESTS += tests/check_arbiter

# The README's producer example: built and run by make check.
check_PROGRAMS += tests/example_producer
tests_example_producer_SOURCES = tests/example_producer.c
tests_example_producer_LDADD = libshm/libshm.la
TESTS += tests/example_producer

check_PROGRAMS += tests/check_tw_flow
tests_check_tw_flow_SOURCES = tests/check_tw_flow.c
tests_check_tw_flow_CFLAGS = $(libshm_test_cflags)
tests_check_tw_flow_LDADD = $(libshm_test_ldadd)
TESTS += tests/check_tw_flow

# White-box: compiles libshm/smb_shm.c itself (the shm_open fallback).
check_PROGRAMS += tests/check_smb_shm
tests_check_smb_shm_SOURCES = tests/check_smb_shm.c
tests_check_smb_shm_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/libshm
tests_check_smb_shm_LDADD = libshm/libshm_core.la $(CHECK_LIBS)
TESTS += tests/check_smb_shm

# Seeded fuzzing of every hostile-input path: IPC decoder and host dispatch,
# the SMB reader (also under concurrent mutation), the inspector.
check_PROGRAMS += tests/check_fuzz
tests_check_fuzz_SOURCES = tests/check_fuzz.c
tests_check_fuzz_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS) \
	-I$(top_srcdir)/libshm -I$(top_srcdir)/service -I$(top_srcdir)/inspector
tests_check_fuzz_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(SQLITE_CFLAGS) \
	$(PROTOBUF_C_CFLAGS) -pthread
tests_check_fuzz_LDADD = inspector/libins.la $(SVC_LIBS) \
	$(SQLITE_LIBS) $(CHECK_LIBS) -lpthread
$(tests_check_fuzz_OBJECTS): $(PROTO_GEN_H)
TESTS += tests/check_fuzz
