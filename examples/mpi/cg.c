/* CG-like: conjugate gradients with one MPI_Allreduce per iteration.
 *
 * Pattern: compute-bound, one global reduction of two doubles per iteration.
 * Each rank owns SIZE unknowns (-n, default 100000) of a block-diagonal SPD system
 * (every block the shifted 1-D Laplacian tridiag(-1, 2.1, -1), right-hand side all
 * ones), so the matrix-vector product needs no neighbour and the only
 * communication is the reduction of CG's two dot products. Chronopoulos and Gear's
 * reordering of CG computes both dot products of an iteration together, hence one
 * MPI_Allreduce (of r.r and w.r) per iteration. When the residual has fallen by
 * 1e10 the solve restarts from x = 0, so every iteration costs the same.
 *
 * Per iteration and rank: about 17 flops and 7 vector sweeps per unknown (about
 * 1 ms at the default size on a 2020s core). "check" is the final residual norm.
 */
#include <math.h>

#include "kernel.h"

static void matvec(const double *restrict v, double *restrict out, long n) {
    const double diag = 2.1;
    if (n == 1) {
        out[0] = diag * v[0];
        return;
    }
    out[0] = diag * v[0] - v[1];
    for (long i = 1; i < n - 1; i++) {
        out[i] = diag * v[i] - v[i - 1] - v[i + 1];
    }
    out[n - 1] = diag * v[n - 1] - v[n - 2];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct kernel_args a = kernel_parse(argc, argv, "cg", 400, 100000);
    long n = a.size;
    double *x = calloc((size_t)n, sizeof *x), *r = calloc((size_t)n, sizeof *r);
    double *p = calloc((size_t)n, sizeof *p), *s = calloc((size_t)n, sizeof *s);
    double *w = calloc((size_t)n, sizeof *w);
    if (!x || !r || !p || !s || !w) {
        fprintf(stderr, "cg: cannot allocate 5 vectors of %ld doubles\n", n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double alpha = 0.0, beta = 0.0, gamma = 0.0, gamma0 = 0.0;
    int fresh = 1; /* the next iteration (re)starts the solve from x = 0 */
    double t0 = 0.0;
    long warmup = a.iterations / 10 + 1;
    for (long it = -warmup; it < a.iterations; it++) {
        if (it == 0) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (fresh) {
            for (long i = 0; i < n; i++) {
                r[i] = 1.0;
                x[i] = p[i] = s[i] = 0.0;
            }
            beta = 0.0;
        } else {
            for (long i = 0; i < n; i++) {
                p[i] = r[i] + beta * p[i];
                s[i] = w[i] + beta * s[i];
                x[i] += alpha * p[i];
                r[i] -= alpha * s[i];
            }
        }
        matvec(r, w, n);
        double local[2] = {0.0, 0.0}, global[2];
        for (long i = 0; i < n; i++) {
            local[0] += r[i] * r[i];
            local[1] += w[i] * r[i];
        }
        MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        if (fresh) {
            gamma0 = global[0];
            alpha = global[0] / global[1];
            fresh = 0;
        } else {
            beta = global[0] / gamma;
            alpha = global[0] / (global[1] - beta * global[0] / alpha);
        }
        gamma = global[0];
        if (gamma < 1e-20 * gamma0) {
            fresh = 1;
        }
    }
    double seconds = MPI_Wtime() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    kernel_report("cg", a, seconds, sqrt(gamma));
    free(x);
    free(r);
    free(p);
    free(s);
    free(w);
    MPI_Finalize();
    return 0;
}
