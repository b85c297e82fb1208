"""A sweep's executor on a Dask ``distributed`` cluster: ``accordion sweep --dask ADDRESS``.

Theory of operation. :func:`run_sweep` takes any ``concurrent.futures.Executor``;
:func:`dask_executor` hands it ``distributed.Client(address).get_executor()``,
so the tasks, the rows and the CSV bytes are those of the local process pool,
and only where the replays run changes. Dask brings the hosts, its dashboard
and its own rescheduling: a task whose worker dies is run again elsewhere.

Before the first task is submitted the cluster is checked, each step bounded by
the caller's timeout, and each failure is a :class:`DaskError`, one line for
the user:

1. the scheduler answers at ``address`` (a wrong scheme or host, or nothing
   listening, is not a hang);
2. at least one worker has joined it;
3. every worker imports ``accordion`` and runs the same code as this host
   (:func:`code_digest`), since a different version would give other rows;
4. every worker sees the trace and cluster files the sweep reads, at the
   same absolute paths.

Step 3 goes first with a standard-library callable only: a task whose
function a worker cannot unpickle breaks that worker's connection instead of
failing the task, so accordion's own functions are sent only once every
worker is known to import them.

During the sweep, the scheduler lost (Dask cancels every future) and a task
that killed its workers too often (``KilledWorker``) are :class:`DaskError`
as well. :func:`run_sweep` then writes no ``sweep.csv``: the rows that
arrived stay in ``sweep.csv.partial``, and the same command resumes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import CancelledError, Executor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from accordion.errors import UserError

if TYPE_CHECKING:  # imported at run time only when --dask is given (an optional extra)
    from distributed import Client

#: The packages whose code decides a sweep row: a worker must hold the same.
ROW_PACKAGES = ("broker", "model", "scheduler", "twin", "workload", "accordion")

#: What a worker runs first (a builtin and a constant), so that a worker
#: without accordion answers with its ImportError rather than dropping off.
_IMPORT_PROBE = "import accordion.experiments.sweep"


class DaskError(UserError):
    """The Dask cluster cannot run the sweep: the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class DaskPool:
    """An executor on a checked Dask cluster, and what to tell the user about it."""

    executor: Executor
    dashboard: str
    workers: int
    threads: int
    #: Dask's version mismatches between this host, the scheduler and the
    #: workers, one line each (Dask warns; a patch release of Python apart is common).
    mismatches: tuple[str, ...] = ()


def code_digest() -> str:
    """SHA-256 of every ``.py`` file of :data:`ROW_PACKAGES`, by path inside its package."""
    digest = hashlib.sha256()
    for package in ROW_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.submodule_search_locations is None:
            raise RuntimeError(f"{package} is not an importable package here")
        for root in spec.submodule_search_locations:
            base = Path(root)
            for path in sorted(base.rglob("*.py")):
                digest.update(f"{package}/{path.relative_to(base).as_posix()}\0".encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()


def worker_facts(paths: Sequence[str]) -> tuple[str, list[str]]:
    """Run on each worker: its :func:`code_digest`, and which of ``paths`` it cannot read."""
    return code_digest(), [p for p in paths if not os.access(p, os.R_OK)]


@contextmanager
def dask_executor(address: str, *, files: Sequence[Path], timeout: float) -> Iterator[DaskPool]:
    """A checked Dask cluster's executor; Dask's failures become :class:`DaskError`.

    ``files`` are read by every task (trace, cluster file, calibration);
    ``timeout`` (s) bounds the connection and the wait for a first worker.
    """
    try:
        import distributed
    except ImportError as exc:
        raise DaskError(
            "--dask needs Dask's distributed package: pip install 'accordion[dask]'"
        ) from exc
    from distributed.comm.addressing import get_address_host_port, parse_address
    from distributed.comm.registry import get_backend

    try:
        # Checked before a Client exists: a half-built one waits on its own close.
        get_backend(parse_address(address, strict=False)[0])
        get_address_host_port(address)
    except ValueError as exc:
        raise DaskError(f"--dask wants a scheduler address like tcp://HOST:8786: {exc}") from exc
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", distributed.versions.VersionMismatchWarning)
            client = distributed.Client(address, timeout=timeout, set_as_default=False)
    except OSError as exc:  # nothing answers in time (TimeoutError is an OSError)
        raise DaskError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc
    mismatches: list[str] = []
    for caught_warning in caught:
        if issubclass(caught_warning.category, distributed.versions.VersionMismatchWarning):
            mismatches.extend(_mismatch_lines(str(caught_warning.message)))
        else:  # not ours to judge: as if never caught
            warnings.warn(caught_warning.message, caught_warning.category, stacklevel=1)
    with _quiet(logging.getLogger("distributed")), client:
        try:
            client.wait_for_workers(1, timeout=timeout)
        except TimeoutError as exc:
            raise DaskError(
                f"no Dask worker joined the scheduler at {address} in {timeout:g} s"
            ) from exc
        _check_workers(client, files)
        info = client.scheduler_info()
        workers = info.get("workers", {})
        threads = sum(int(w.get("nthreads", 0)) for w in workers.values())
        executor = client.get_executor()
        try:
            yield DaskPool(
                executor, client.dashboard_link, len(workers), threads, tuple(mismatches)
            )
        except CancelledError as exc:
            raise DaskError(
                f"lost the Dask scheduler at {address} mid-sweep; the finished rows are "
                "kept in sweep.csv.partial: run the same command again to resume"
            ) from exc
        except distributed.KilledWorker as exc:
            raise DaskError(f"a sweep task killed every Dask worker that ran it: {exc}") from exc
        except ImportError as exc:
            raise DaskError(_cannot_import(exc)) from exc
        finally:
            executor.shutdown(wait=False)


@contextmanager
def _quiet(logger: logging.Logger) -> Iterator[None]:
    """Dask's own log off while it runs our sweep, its level restored after.

    A lost scheduler makes the client log its reconnection's traceback, and a
    killed worker a warning; the sweep reports both in its own one line.
    """
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _mismatch_lines(table: str) -> list[str]:
    """Dask's mismatch table (``| package | client | scheduler | workers |``), a line a row."""
    lines = []
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if row.lstrip().startswith("|") and len(cells) == 4 and cells[0] != "Package":
            package, ours, scheduler, workers = cells
            lines.append(f"{package}: here {ours}, scheduler {scheduler}, workers {workers}")
    return lines or [table.splitlines()[0]]


def _cannot_import(exc: ImportError) -> str:
    return (
        f"a Dask worker cannot import accordion ({type(exc).__name__}: {exc}); "
        "install the same accordion on every worker host"
    )


def _check_workers(client: Client, files: Sequence[Path]) -> None:
    """Steps 3 and 4 of the theory of operation, on every worker that has joined."""
    try:
        client.run(exec, _IMPORT_PROBE)
    except ImportError as exc:
        raise DaskError(_cannot_import(exc)) from exc
    ours = code_digest()
    paths = [str(f) for f in files]
    facts: dict[str, tuple[str, list[str]]] = client.run(worker_facts, paths)
    for worker, (digest, unreadable) in sorted(facts.items()):
        if digest != ours:
            raise DaskError(
                f"Dask worker {worker} runs other accordion code than this host "
                "(its rows could differ): install the same commit on every worker host"
            )
        if unreadable:
            raise DaskError(
                f"Dask worker {worker} cannot read {', '.join(unreadable)}: every worker "
                "reads the sweep's files at the same absolute path"
            )
