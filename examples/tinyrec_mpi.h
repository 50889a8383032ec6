/* tinyrec_mpi.h: an MPI implementation of tinyrec.h's communicator (tr_comm), for data-parallel training
   with mpirun (tinyrec-train built with `make MPI=1`). Include it after tinyrec.h in one file; build with
   mpicc. Any MPI (Open MPI, MPICH) with MPI-3's non-blocking collectives.

       tr_mpi mpi;
       if (tr_mpi_init(&argc, &argv, &mpi) != 0) ...;   tc.comm = &mpi.comm;   ...   tr_mpi_finalize(&mpi);

   Every collective is started non-blocking and waited on with a deadline (TINYREC_MPI_TIMEOUT seconds,
   default 600; 0 waits forever): a rank that died or hangs makes the others' call fail with a reason
   (tr_mpi_error) instead of blocking forever; the program then ends every rank with tr_mpi_abort. Errors
   of MPI are returned, not fatal (MPI_ERRORS_RETURN). The buffers are host memory: a device's gradients
   are staged through pinned memory by the library (no GPU-aware MPI needed).

   Environment (rank 0's value counts for TINYREC_MPI_OVERLAP, which every rank must share):
     TINYREC_MPI_TIMEOUT  seconds a collective may wait (default 600; 0: no limit)
     TINYREC_MPI_OVERLAP  1 (default): all-reduce each layer's gradients while the backward goes on
                          (tr_comm.overlap); 0: one all-reduce after the backward
     TINYREC_MPI_SPIN     seconds a wait polls MPI without sleeping (default 0.05): Open MPI moves a
                          non-blocking collective on only inside MPI calls, so a large all-reduce wants
                          polling; after that the wait naps between polls, leaving its core to others */
#ifndef TINYREC_MPI_H
#define TINYREC_MPI_H
#include <mpi.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct tr_mpi {
    tr_comm comm;     /* hand &comm to tr_train_config.comm */
    double timeout;   /* seconds a collective may wait; 0: no limit */
    double spin;      /* seconds a wait polls before it naps */
    char error[512];  /* why the last call failed */
    /* every all-reduce so far: calls, floats summed, seconds from its start to its end on this rank (the
       time the rank waited on it: with overlap, the part the backward did not hide) */
    long reduce_calls;
    double reduce_floats, reduce_seconds;
} tr_mpi;

static void tr_mpi__sleep_us(long us) {
    struct timespec ts;
    ts.tv_sec = us / 1000000, ts.tv_nsec = (us % 1000000) * 1000;
    nanosleep(&ts, NULL);
}

/* An MPI call's failure, MPI's reason kept for tr_mpi_error. */
static tr_status tr_mpi__failed(tr_mpi *m, int rc, const char *what) {
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    snprintf(m->error, sizeof m->error, "rank %d: MPI %s failed: %s", m->comm.rank, what, s);
    return TR_ERR_IO;
}

/* Waits for req until it completes or the deadline passes. Polls MPI_Test for m->spin seconds (MPI
   progresses the collective inside it), then sleeps up to 200 us between tests so that a rank waiting
   for a much slower one leaves its core to the others. */
static tr_status tr_mpi__wait(tr_mpi *m, MPI_Request *req, const char *what) {
    double t0 = MPI_Wtime();
    long nap = 0;
    for (;;) {
        int done = 0, rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        double waited;
        if (rc != MPI_SUCCESS) return tr_mpi__failed(m, rc, what);
        if (done) return TR_OK;
        waited = MPI_Wtime() - t0;
        if (m->timeout > 0 && waited > m->timeout) {
            snprintf(m->error, sizeof m->error,
                     "rank %d: the other ranks did not answer for %.0f s (MPI %s): a rank died or hangs (TINYREC_MPI_TIMEOUT sets the limit)", m->comm.rank, waited, what);
            return TR_ERR_IO;
        }
        if (waited > m->spin) {
            nap = nap < 200 ? nap + 20 : nap;
            tr_mpi__sleep_us(nap);
        }
    }
}

static tr_status tr_mpi__started(tr_mpi *m, int rc, MPI_Request *req, const char *what) {
    return rc != MPI_SUCCESS ? tr_mpi__failed(m, rc, what) : tr_mpi__wait(m, req, what);
}

static tr_status tr_mpi__allreduce(void *user, float *data, size_t n) {
    tr_mpi *m = (tr_mpi *)user;
    double t0 = MPI_Wtime();
    m->reduce_calls++, m->reduce_floats += (double)n;
    while (n > 0) { /* MPI counts are ints */
        int c = n > (size_t)(INT_MAX / 2) ? INT_MAX / 2 : (int)n;
        MPI_Request req;
        tr_status st = tr_mpi__started(m, MPI_Iallreduce(MPI_IN_PLACE, data, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req), &req, "all-reduce");
        if (st != TR_OK) return st;
        data += c, n -= (size_t)c;
    }
    m->reduce_seconds += MPI_Wtime() - t0;
    return TR_OK;
}

static tr_status tr_mpi__allgather(void *user, const void *send, void *recv, size_t bytes) {
    tr_mpi *m = (tr_mpi *)user;
    MPI_Request req;
    if (bytes > (size_t)INT_MAX) {
        snprintf(m->error, sizeof m->error, "rank %d: an all-gather of %zu bytes per rank is more than MPI's int count", m->comm.rank, bytes);
        return TR_ERR_OVERFLOW;
    }
    return tr_mpi__started(m, MPI_Iallgather((void *)send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req), &req, "all-gather");
}

static tr_status tr_mpi__broadcast(void *user, void *data, size_t bytes, int root) {
    tr_mpi *m = (tr_mpi *)user;
    MPI_Request req;
    if (bytes > (size_t)INT_MAX) {
        snprintf(m->error, sizeof m->error, "rank %d: a broadcast of %zu bytes is more than MPI's int count", m->comm.rank, bytes);
        return TR_ERR_OVERFLOW;
    }
    return tr_mpi__started(m, MPI_Ibcast(data, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req), &req, "broadcast");
}

static tr_status tr_mpi__barrier(void *user) {
    tr_mpi *m = (tr_mpi *)user;
    MPI_Request req;
    return tr_mpi__started(m, MPI_Ibarrier(MPI_COMM_WORLD, &req), &req, "barrier");
}

/* MPI_Init and the communicator: rank, size, and the rank among the processes of this machine.
   Returns 0, or -1 with a message on stderr. */
static int tr_mpi_init(int *argc, char ***argv, tr_mpi *m) {
    MPI_Comm local;
    const char *to = getenv("TINYREC_MPI_TIMEOUT"), *ov = getenv("TINYREC_MPI_OVERLAP"), *sp = getenv("TINYREC_MPI_SPIN");
    memset(m, 0, sizeof *m);
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "tinyrec: MPI_Init failed\n");
        return -1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &m->comm.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->comm.size);
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
        MPI_Comm_rank(local, &m->comm.local_rank);
        MPI_Comm_free(&local);
    }
    m->timeout = to && *to ? atof(to) : 600.0;
    m->spin = sp && *sp ? atof(sp) : 0.05;
    /* rank 0's choice for all: another bucketing on one rank would pair all-reduces of different sizes */
    m->comm.overlap = ov && *ov ? atoi(ov) != 0 : 1;
    if (MPI_Bcast(&m->comm.overlap, 1, MPI_INT, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "tinyrec: rank %d: MPI_Bcast failed\n", m->comm.rank);
        return -1;
    }
    m->comm.user = m;
    m->comm.allreduce_sum = tr_mpi__allreduce;
    m->comm.allgather = tr_mpi__allgather;
    m->comm.broadcast = tr_mpi__broadcast;
    m->comm.barrier = tr_mpi__barrier;
    return 0;
}

/* The reason of the last failed collective ("" when none failed). */
/* The all-reduces of a run of `steps` steps (the gradients', the stop flag's, the evaluations'), one line. */
static void tr_mpi_report(const tr_mpi *m, FILE *f, long steps) {
    fprintf(f, "all-reduce (rank 0): %.2f MB a step in %.1f calls, %.2f ms a step waited on\n", 4e-6 * m->reduce_floats / (double)steps,
            (double)m->reduce_calls / (double)steps, 1e3 * m->reduce_seconds / (double)steps);
}

static const char *tr_mpi_error(const tr_mpi *m) { return m->error; }

/* Ends every rank of the job (after this rank printed why). mpirun forwards a rank's output through a
   pipe and kills the job on MPI_Abort: a pause first lets the reason reach the terminal. */
static void tr_mpi_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    tr_mpi__sleep_us(300000);
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void tr_mpi_finalize(tr_mpi *m) {
    (void)m;
    MPI_Finalize();
}
#endif
