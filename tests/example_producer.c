/* example_producer.c - the smallest libshm producer: ten packets into an
 * SMB.  Build: cc example_producer.c $(pkg-config --cflags --libs libshm) */
#include <stdio.h>
#include <shmtrace/arbiter.h>
#include <shmtrace/trace_writer.h>

/* Whoever moves chunks (the IPC client, in a real producer): print it. */
static int commit(void *ctx, const smb_commit_batch *batch)
{
    (void)ctx;
    printf("commit: %zu chunk(s), %zu patch group(s)\n", batch->nchunks,
           batch->npatch_groups);
    return 0;
}

int main(void)
{
    smb_transport transport = {NULL, commit, NULL, NULL};
    smb_arbiter *arb = smb_arbiter_create_shm(256 * 1024, 4096, &transport,
                                              NULL);
    if (arb == NULL) {
        perror("smb_arbiter_create_shm");
        return 1;
    }
    tw_writer *w = tw_writer_create(arb, 1 /* buffer */, TW_POLICY_DROP);
    for (int i = 0; i < 10; i++) {
        tw_packet_begin(w);
        tw_add_varint(w, 8, 1000 + i);   /* TracePacket.timestamp */
        tw_begin_nested(w, 900);         /* TracePacket.for_testing */
        tw_add_string(w, 1, "hello");    /*   TestEvent.str */
        tw_end_nested(w);
        tw_packet_end(w);
    }
    tw_writer_flush(w);                  /* commit the partial chunk */
    tw_writer_destroy(w);
    smb_arbiter_destroy(arb);
    return 0;
}
