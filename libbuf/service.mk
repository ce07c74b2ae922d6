# libbuf/service.mk - the tracing service (svc_*.c) and its daemon shmtraced.
#
# The service lives in libbuf.la (as the issue asks) and, built a second
# time without -fvisibility=hidden, in the noinst convenience library
# libsvc_internal.la that shmtraced and the Check tests link (the svc_ API
# is private: svc_service.h / svc_ipc.h are not installed).

libbuf_svc_sources = \
	libbuf/svc_int.h \
	libbuf/svc_service.h \
	libbuf/svc_packet.h \
	libbuf/svc_packet.c \
	libbuf/svc_producer.c \
	libbuf/svc_session.c \
	libbuf/svc_commit.c \
	libbuf/svc_read.c \
	libbuf/svc_stats.c \
	libbuf/svc_ipc.h \
	libbuf/svc_ipc.c

libbuf_svc_libadd = ipc/libshmtrace_ipc.la libshm/libsmbreader.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)

libbuf_libbuf_la_SOURCES += $(libbuf_svc_sources)
libbuf_libbuf_la_LIBADD += $(libbuf_svc_libadd)

noinst_LTLIBRARIES += libbuf/libsvc_internal.la
libbuf_libsvc_internal_la_SOURCES = $(libbuf_svc_sources)
libbuf_libsvc_internal_la_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
libbuf_libsvc_internal_la_LIBADD = libbuf/libtb_internal.la \
	$(libbuf_svc_libadd)

# The generated headers must exist before any service object compiles.
$(libbuf_libbuf_la_OBJECTS) $(libbuf_libsvc_internal_la_OBJECTS): \
	$(PROTO_GEN_H)

bin_PROGRAMS += libbuf/shmtraced
libbuf_shmtraced_SOURCES = libbuf/shmtraced.c
libbuf_shmtraced_CFLAGS = $(AM_CFLAGS) $(PROTOBUF_C_CFLAGS)
libbuf_shmtraced_LDADD = libbuf/libsvc_internal.la
