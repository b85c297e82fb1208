/* Latency-bound ring: a token travels round all ranks, one lap per iteration.
 *
 * Pattern: point-to-point, pure latency. Rank 0 sends a message of SIZE bytes
 * (-n, default 8) to rank 1 with a blocking MPI_Send, each rank MPI_Recv's it
 * from its left neighbour, adds one to the counter it carries and passes it on,
 * and rank 0 receives it back from the last rank. Nothing is computed, so at
 * every moment all ranks but one are waiting. "check" is the counter at the end,
 * which must be ITERATIONS * RANKS.
 */
#include "kernel.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct kernel_args a = kernel_parse(argc, argv, "ring", 20000, 8);
    int rank = 0, ranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    long bytes = a.size < (long)sizeof(double) ? (long)sizeof(double) : a.size;
    char *buf = calloc((size_t)bytes, 1);
    if (!buf) {
        fprintf(stderr, "ring: cannot allocate %ld bytes\n", bytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int left = (rank - 1 + ranks) % ranks, right = (rank + 1) % ranks;
    double token = 0.0, t0 = 0.0;
    long warmup = a.iterations / 10 + 1;
    for (long it = -warmup; it < a.iterations; it++) {
        if (it == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            token = 0.0;
            t0 = MPI_Wtime();
        }
        if (ranks == 1) {
            token += 1.0;
            continue;
        }
        if (rank == 0) {
            token += 1.0;
            memcpy(buf, &token, sizeof token);
            MPI_Send(buf, (int)bytes, MPI_BYTE, right, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)bytes, MPI_BYTE, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            memcpy(&token, buf, sizeof token);
        } else {
            MPI_Recv(buf, (int)bytes, MPI_BYTE, left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            memcpy(&token, buf, sizeof token);
            token += 1.0;
            memcpy(buf, &token, sizeof token);
            MPI_Send(buf, (int)bytes, MPI_BYTE, right, 0, MPI_COMM_WORLD);
        }
    }
    double seconds = MPI_Wtime() - t0;
    MPI_Bcast(&token, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    kernel_report("ring", a, seconds, token);
    free(buf);
    MPI_Finalize();
    return 0;
}
