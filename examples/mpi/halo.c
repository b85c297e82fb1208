/* Halo exchange: a 1-D Jacobi smoother whose ranks swap boundary cells every step.
 *
 * Pattern: nearest-neighbour, communication-bound at the default size. Each rank
 * owns SIZE cells (-n, default 64) of a periodic 1-D domain; every iteration it
 * posts MPI_Irecv for its two ghost cells, MPI_Isend of its two edge cells to the
 * left and right ranks (periodic: rank 0's left is the last rank), MPI_Waitall,
 * then replaces each cell by the mean of itself and its two neighbours. So per
 * iteration: four 8-byte messages per rank and 4 flops per cell.
 *
 * "check" is the sum of all cells, which the periodic three-point mean preserves:
 * it must equal the starting sum whatever the number of ranks and iterations.
 */
#include "kernel.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct kernel_args a = kernel_parse(argc, argv, "halo", 20000, 64);
    int rank = 0, ranks = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    long n = a.size;
    double *u = calloc((size_t)n + 2, sizeof *u), *next = calloc((size_t)n + 2, sizeof *next);
    if (!u || !next) {
        fprintf(stderr, "halo: cannot allocate %ld cells\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* A start that is not uniform, so the smoother has something to smooth. */
    for (long i = 1; i <= n; i++) {
        u[i] = (double)((rank * n + i) % 7);
    }
    int left = (rank - 1 + ranks) % ranks, right = (rank + 1) % ranks;
    double t0 = 0.0;
    long warmup = a.iterations / 10 + 1;
    for (long it = -warmup; it < a.iterations; it++) {
        if (it == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        MPI_Request req[4];
        MPI_Status status[4];
        /* Tag 0 travels rightwards (it fills the receiver's left ghost), tag 1 leftwards. */
        MPI_Irecv(&u[0], 1, MPI_DOUBLE, left, 0, MPI_COMM_WORLD, &req[0]);
        MPI_Irecv(&u[n + 1], 1, MPI_DOUBLE, right, 1, MPI_COMM_WORLD, &req[1]);
        MPI_Isend(&u[n], 1, MPI_DOUBLE, right, 0, MPI_COMM_WORLD, &req[2]);
        MPI_Isend(&u[1], 1, MPI_DOUBLE, left, 1, MPI_COMM_WORLD, &req[3]);
        MPI_Waitall(4, req, status);
        for (long i = 1; i <= n; i++) {
            next[i] = (u[i - 1] + u[i] + u[i + 1]) / 3.0;
        }
        double *swap = u;
        u = next;
        next = swap;
    }
    double seconds = MPI_Wtime() - t0;
    double local = 0.0, total = 0.0;
    for (long i = 1; i <= n; i++) {
        local += u[i];
    }
    MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    kernel_report("halo", a, seconds, total);
    free(u);
    free(next);
    MPI_Finalize();
    return 0;
}
