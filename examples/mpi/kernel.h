/* What every kernel of examples/mpi shares: argument parsing and the timing line.
 *
 * A kernel runs a warm-up, then ITERATIONS timed iterations between two barriers,
 * and rank 0 prints one line on stdout, the only one it prints there:
 *
 *   accordion-kernel {"kernel":"cg","ranks":2,"iterations":500,"size":200000,
 *                     "seconds":0.48,"us_per_iteration":960.1,"check":1.2e-3}
 *
 * (one line, JSON after the tag). "seconds" is the slowest rank's time between the
 * barriers, so the line is the job's time, not one rank's. "check" is a value the
 * computation produced, printed so that the compiler cannot drop the work and so
 * that a wrong result (a rank lost mid-run, a bad message) shows.
 */
#ifndef ACCORDION_KERNEL_H
#define ACCORDION_KERNEL_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kernel_args {
    long iterations;
    long size;
};

/* "-i N" sets the iterations, "-n N" the size; anything else is a usage error. */
static inline struct kernel_args kernel_parse(int argc, char **argv, const char *name,
                                              long iterations, long size) {
    struct kernel_args a = {iterations, size};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        long *slot = NULL;
        if (strcmp(argv[i], "-i") == 0) {
            slot = &a.iterations;
        } else if (strcmp(argv[i], "-n") == 0) {
            slot = &a.size;
        }
        if (slot == NULL || i + 1 >= argc) {
            fprintf(stderr, "usage: %s [-i ITERATIONS] [-n SIZE]\n", name);
            exit(2);
        }
        *slot = strtol(argv[++i], &end, 10);
        if (*end != '\0' || *slot < 1) {
            fprintf(stderr, "%s: %s wants a whole number >= 1, got '%s'\n", name, argv[i - 1],
                    argv[i]);
            exit(2);
        }
    }
    return a;
}

/* Rank 0 prints the timing line; every rank must call it (it reduces the times). */
static inline void kernel_report(const char *name, struct kernel_args a, double seconds,
                                 double check) {
    int rank = 0, ranks = 0;
    double slowest = 0.0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    MPI_Reduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("accordion-kernel {\"kernel\":\"%s\",\"ranks\":%d,\"iterations\":%ld,"
               "\"size\":%ld,\"seconds\":%.9g,\"us_per_iteration\":%.9g,\"check\":%.17g}\n",
               name, ranks, a.iterations, a.size, slowest, slowest * 1e6 / (double)a.iterations,
               check);
        fflush(stdout);
    }
}

#endif
