# libshm/ipc.mk - libshm's producer IPC client (prod_*, <shmtrace/producer.h>)
# over the shared IPC layer (ipc/libshmtrace_ipc.la).

libshm_libshm_la_SOURCES += libshm/producer_client.c \
	libshm/producer_commit.c libshm/producer_int.h
libshm_libshm_la_CPPFLAGS = $(AM_CPPFLAGS) $(IPC_CPPFLAGS)
libshm_libshm_la_LIBADD += ipc/libshmtrace_ipc.la \
	protos/libshmtrace_protos.la $(PROTOBUF_C_LIBS)
shmtraceinclude_HEADERS += libshm/include/shmtrace/producer.h
$(libshm_libshm_la_OBJECTS): $(PROTO_GEN_H)
