/* The yield shim: self co-scheduling for MPI libraries that spin, and u measured.
 *
 * Loaded with LD_PRELOAD into an MPI program (no recompilation), it interposes the
 * MPI profiling interface (PMPI) and does two things:
 *
 * 1. Yielding. Each blocking call (Recv, Send, Sendrecv, Probe, Wait, Waitall,
 *    Waitany, Barrier, Bcast, Reduce, Allreduce, Allgather, Alltoall) is started
 *    as its non-blocking twin, then tested in a loop that calls sched_yield()
 *    after every unsuccessful test. A waiting rank thus hands its core to a rank
 *    of the same job folded onto that core, instead of spinning until the kernel's
 *    tick takes the core from it: the FCFS-malleable paper's runtime applied
 *    "self co-scheduling" (Utrera et al., "A Job Scheduling Approach for
 *    Multi-core Clusters Based on Virtual Malleability", sec. 3.2). This is for
 *    MPICH's ch4 device, which has no working yield switch; Open MPI has one
 *    (the MCA parameter mpi_yield_when_idle).
 *
 * 2. Timing. The time each rank spends inside MPI calls (the ones above, and the
 *    non-blocking Isend, Irecv, Test and Testall) is summed, and at MPI_Finalize
 *    each rank reports one line
 *
 *      accordion-mpi-rank {"rank":0,"ranks":2,"pid":123,"yield":true,
 *                          "wall_s":1.02,"mpi_s":0.01,"u":0.99,"calls":800,"yields":5}
 *
 *    where wall_s runs from MPI_Init's return to MPI_Finalize's call and
 *    u = 1 - mpi_s / wall_s is the rank's CPU-utilisation fraction (compute over
 *    total). Operating-system CPU accounting cannot measure u, since a waiting
 *    rank burns CPU in the library's polling loop.
 *
 * Environment:
 *   ACCORDION_MPI_YIELD=0     time only: blocking calls go straight to the library
 *                             (default 1: yield).
 *   ACCORDION_MPI_REPORT=PATH append the line to PATH (one write(2) per rank, so
 *                             the lines of concurrent ranks do not interleave)
 *                             instead of writing it to stderr.
 *
 * Calls are timed once, at the outermost wrapper, so a wrapper that calls another
 * MPI function is not counted twice. Counters are atomic, so a program that calls
 * MPI from several threads (MPI_THREAD_MULTIPLE) still sums correctly.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int yield_on = 1;
static int64_t started_ns;
static int64_t mpi_ns;
static int64_t calls;
static int64_t yields;
static _Thread_local int depth;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t enter(void) {
    return depth++ == 0 ? now_ns() : 0;
}

static void leave(int64_t t0) {
    if (--depth == 0) {
        __atomic_add_fetch(&mpi_ns, now_ns() - t0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    }
}

/* Test until done, yielding the core after each miss. */
static int yield_wait(MPI_Request *req, MPI_Status *status) {
    int flag = 0;
    for (;;) {
        int rc = PMPI_Test(req, &flag, status);
        if (rc != MPI_SUCCESS || flag) {
            return rc;
        }
        sched_yield();
        __atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
    }
}

static int yield_waitall(int count, MPI_Request reqs[], MPI_Status statuses[]) {
    int flag = 0;
    for (;;) {
        int rc = PMPI_Testall(count, reqs, &flag, statuses);
        if (rc != MPI_SUCCESS || flag) {
            return rc;
        }
        sched_yield();
        __atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
    }
}

static void start_clock(void) {
    const char *y = getenv("ACCORDION_MPI_YIELD");
    yield_on = !(y != NULL && strcmp(y, "0") == 0);
    started_ns = now_ns();
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    start_clock();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    start_clock();
    return rc;
}

static void report(void) {
    int rank = -1, ranks = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &ranks);
    double wall = (double)(now_ns() - started_ns) * 1e-9;
    double mpi = (double)__atomic_load_n(&mpi_ns, __ATOMIC_RELAXED) * 1e-9;
    double u = wall > 0.0 ? 1.0 - mpi / wall : 0.0;
    char line[512];
    int len = snprintf(line, sizeof line,
                       "accordion-mpi-rank {\"rank\":%d,\"ranks\":%d,\"pid\":%ld,\"yield\":%s,"
                       "\"wall_s\":%.9g,\"mpi_s\":%.9g,\"u\":%.9g,\"calls\":%lld,\"yields\":%lld}\n",
                       rank, ranks, (long)getpid(), yield_on ? "true" : "false", wall, mpi, u,
                       (long long)__atomic_load_n(&calls, __ATOMIC_RELAXED),
                       (long long)__atomic_load_n(&yields, __ATOMIC_RELAXED));
    if (len <= 0 || (size_t)len >= sizeof line) {
        return;
    }
    const char *path = getenv("ACCORDION_MPI_REPORT");
    int fd = 2;
    if (path != NULL && path[0] != '\0') {
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "accordion yield shim: cannot open %s: %s\n", path, strerror(errno));
            fd = 2;
        }
    }
    ssize_t written = write(fd, line, (size_t)len);
    (void)written;
    if (fd != 2) {
        close(fd);
    }
}

int MPI_Finalize(void) {
    report();
    return PMPI_Finalize();
}

/* A blocking call: its non-blocking twin and a yielding wait, or the call itself. */
#define BLOCKING(direct, start)                           \
    do {                                                  \
        int64_t t0 = enter();                             \
        int rc;                                           \
        if (!yield_on || depth > 1) {                     \
            rc = (direct);                                \
        } else {                                          \
            MPI_Request req;                              \
            rc = (start);                                 \
            if (rc == MPI_SUCCESS) {                      \
                rc = yield_wait(&req, MPI_STATUS_IGNORE); \
            }                                             \
        }                                                 \
        leave(t0);                                        \
        return rc;                                        \
    } while (0)

#define TIMED(call)           \
    do {                      \
        int64_t t0 = enter(); \
        int rc = (call);      \
        leave(t0);            \
        return rc;            \
    } while (0)

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
    BLOCKING(PMPI_Send(buf, count, type, dest, tag, comm),
             PMPI_Isend(buf, count, type, dest, tag, comm, &req));
}

int MPI_Recv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status *status) {
    int64_t t0 = enter();
    int rc;
    if (!yield_on || depth > 1) {
        rc = PMPI_Recv(buf, count, type, source, tag, comm, status);
    } else {
        MPI_Request req;
        rc = PMPI_Irecv(buf, count, type, source, tag, comm, &req);
        if (rc == MPI_SUCCESS) {
            rc = yield_wait(&req, status);
        }
    }
    leave(t0);
    return rc;
}

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                 int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype, int source,
                 int recvtag, MPI_Comm comm, MPI_Status *status) {
    int64_t t0 = enter();
    int rc;
    if (!yield_on || depth > 1) {
        rc = PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                           recvtype, source, recvtag, comm, status);
    } else {
        MPI_Request reqs[2];
        MPI_Status statuses[2];
        rc = PMPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &reqs[0]);
        if (rc == MPI_SUCCESS) {
            rc = PMPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &reqs[1]);
            if (rc != MPI_SUCCESS) {
                PMPI_Cancel(&reqs[0]);
                PMPI_Request_free(&reqs[0]);
            }
        }
        if (rc == MPI_SUCCESS) {
            rc = yield_waitall(2, reqs, statuses);
            if (rc == MPI_SUCCESS && status != MPI_STATUS_IGNORE) {
                *status = statuses[0];
            }
        }
    }
    leave(t0);
    return rc;
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status) {
    int64_t t0 = enter();
    int rc;
    if (!yield_on || depth > 1) {
        rc = PMPI_Probe(source, tag, comm, status);
    } else {
        int flag = 0;
        while ((rc = PMPI_Iprobe(source, tag, comm, &flag, status)) == MPI_SUCCESS && !flag) {
            sched_yield();
            __atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
        }
    }
    leave(t0);
    return rc;
}

int MPI_Wait(MPI_Request *req, MPI_Status *status) {
    int64_t t0 = enter();
    int rc = !yield_on || depth > 1 ? PMPI_Wait(req, status) : yield_wait(req, status);
    leave(t0);
    return rc;
}

int MPI_Waitall(int count, MPI_Request reqs[], MPI_Status statuses[]) {
    int64_t t0 = enter();
    int rc = !yield_on || depth > 1 ? PMPI_Waitall(count, reqs, statuses)
                                    : yield_waitall(count, reqs, statuses);
    leave(t0);
    return rc;
}

int MPI_Waitany(int count, MPI_Request reqs[], int *index, MPI_Status *status) {
    int64_t t0 = enter();
    int rc;
    if (!yield_on || depth > 1) {
        rc = PMPI_Waitany(count, reqs, index, status);
    } else {
        int flag = 0;
        while ((rc = PMPI_Testany(count, reqs, index, &flag, status)) == MPI_SUCCESS && !flag) {
            sched_yield();
            __atomic_add_fetch(&yields, 1, __ATOMIC_RELAXED);
        }
    }
    leave(t0);
    return rc;
}

int MPI_Barrier(MPI_Comm comm) {
    BLOCKING(PMPI_Barrier(comm), PMPI_Ibarrier(comm, &req));
}

int MPI_Bcast(void *buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
    BLOCKING(PMPI_Bcast(buf, count, type, root, comm),
             PMPI_Ibcast(buf, count, type, root, comm, &req));
}

int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
               int root, MPI_Comm comm) {
    BLOCKING(PMPI_Reduce(sendbuf, recvbuf, count, type, op, root, comm),
             PMPI_Ireduce(sendbuf, recvbuf, count, type, op, root, comm, &req));
}

int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
    BLOCKING(PMPI_Allreduce(sendbuf, recvbuf, count, type, op, comm),
             PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, &req));
}

int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    BLOCKING(
        PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
        PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &req));
}

int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    BLOCKING(
        PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
        PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, &req));
}

int MPI_Isend(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request *req) {
    TIMED(PMPI_Isend(buf, count, type, dest, tag, comm, req));
}

int MPI_Irecv(void *buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request *req) {
    TIMED(PMPI_Irecv(buf, count, type, source, tag, comm, req));
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
    TIMED(PMPI_Test(req, flag, status));
}

int MPI_Testall(int count, MPI_Request reqs[], int *flag, MPI_Status statuses[]) {
    TIMED(PMPI_Testall(count, reqs, flag, statuses));
}
