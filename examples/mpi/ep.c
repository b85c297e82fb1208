/* Embarrassingly parallel: Monte Carlo estimate of pi, one reduction at the end.
 *
 * Pattern: no communication while it runs. Every iteration each rank draws SIZE
 * points (-n, default 200000) in the unit square from its own xorshift64*
 * generator (seeded by its rank) and counts those inside the quarter circle; a
 * single MPI_Reduce after the timed loop sums the counts. About 10 integer and 6
 * floating-point operations per point. "check" is the estimate of pi.
 */
#include <stdint.h>

#include "kernel.h"

static inline uint64_t xorshift(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct kernel_args a = kernel_parse(argc, argv, "ep", 50, 200000);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    uint64_t state = 0x9E3779B97F4A7C15ULL * (uint64_t)(rank + 1);
    const double scale = 1.0 / 9007199254740992.0; /* 2^-53 */
    long long inside = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long it = 0; it < a.iterations; it++) {
        for (long k = 0; k < a.size; k++) {
            double x = (double)(xorshift(&state) >> 11) * scale;
            double y = (double)(xorshift(&state) >> 11) * scale;
            inside += x * x + y * y < 1.0;
        }
    }
    double seconds = MPI_Wtime() - t0;
    long long total = 0;
    int ranks = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    MPI_Reduce(&inside, &total, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    double pi = 4.0 * (double)total / ((double)a.iterations * (double)a.size * ranks);
    kernel_report("ep", a, seconds, pi);
    MPI_Finalize();
    return 0;
}
