"""CG-like in Python: the C kernel ``cg.c``'s solver with mpi4py and numpy.

Pattern: compute-bound, one ``Allreduce`` of two doubles per iteration
(Chronopoulos and Gear's conjugate gradients on a block-diagonal system: every
rank owns SIZE unknowns of the shifted 1-D Laplacian tridiag(-1, 2.1, -1), right-hand
side all ones, and restarts from x = 0 once the residual has fallen by 1e10).
Options and the timing line are the C kernels' (``kernel.h``)::

    mpirun -np 2 python examples/mpi/cg.py [-i ITERATIONS] [-n SIZE]

prints, from rank 0 only, ``accordion-kernel {"kernel":"cg.py", ...}``.
"""

from __future__ import annotations

import argparse
import json
import os

# One thread per rank: an MPI rank is pinned to its slot, and a BLAS that starts
# a thread per core would fight the other ranks for the cores the job was given.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

DIAG = 2.1


def matvec(v: np.ndarray, out: np.ndarray) -> None:
    np.multiply(v, DIAG, out=out)
    out[:-1] -= v[1:]
    out[1:] -= v[:-1]


def main() -> None:
    parser = argparse.ArgumentParser(prog="cg.py", description=__doc__.splitlines()[0])
    parser.add_argument("-i", dest="iterations", type=int, default=400)
    parser.add_argument("-n", dest="size", type=int, default=100_000)
    args = parser.parse_args()
    if args.iterations < 1 or args.size < 1:
        parser.error("-i and -n want whole numbers >= 1")
    comm = MPI.COMM_WORLD
    n = args.size
    x, r, p, s, w = (np.zeros(n) for _ in range(5))
    local, total = np.zeros(2), np.zeros(2)
    alpha = beta = gamma = gamma0 = 0.0
    fresh = True
    t0 = 0.0
    warmup = args.iterations // 10 + 1
    for it in range(-warmup, args.iterations):
        if it == 0:
            comm.Barrier()
            t0 = MPI.Wtime()
        if fresh:
            r.fill(1.0)
            x.fill(0.0)
            p.fill(0.0)
            s.fill(0.0)
            beta = 0.0
        else:
            p *= beta
            p += r
            s *= beta
            s += w
            x += alpha * p
            r -= alpha * s
        matvec(r, w)
        local[0] = r @ r
        local[1] = w @ r
        comm.Allreduce(local, total, op=MPI.SUM)
        if fresh:
            gamma0 = total[0]
            alpha = total[0] / total[1]
            fresh = False
        else:
            beta = total[0] / gamma
            alpha = total[0] / (total[1] - beta * total[0] / alpha)
        gamma = float(total[0])
        if gamma < 1e-20 * gamma0:
            fresh = True
    seconds = MPI.Wtime() - t0
    slowest = comm.reduce(seconds, op=MPI.MAX, root=0)
    if comm.rank == 0:
        line = {
            "kernel": "cg.py",
            "ranks": comm.size,
            "iterations": args.iterations,
            "size": n,
            "seconds": slowest,
            "us_per_iteration": slowest * 1e6 / args.iterations,
            "check": gamma**0.5,
        }
        print("accordion-kernel", json.dumps(line, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
