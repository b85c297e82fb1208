"""A private Mosquitto on a free loopback port, for the benches that need a real broker."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.local import accepts, free_port, mosquitto_binary, mosquitto_config


@contextmanager
def mosquitto_process(hint: str = "") -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """Its port and process, while it runs with ``accordion up``'s configuration (no logins).

    Without a ``mosquitto`` binary the bench exits with a one-line error (and ``hint``).
    """
    binary = mosquitto_binary()
    if binary is None:
        raise SystemExit(f"mosquitto is not installed{hint}")
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(mosquitto_config(host="127.0.0.1", port=port))
        proc = subprocess.Popen([binary, "-c", str(conf)], stderr=subprocess.DEVNULL)
        try:
            while not accepts("127.0.0.1", port):
                time.sleep(0.02)  # a bench's start-up, not a test's synchronisation
            yield port, proc
        finally:
            proc.terminate()
            proc.wait()


@contextmanager
def mosquitto(hint: str = "") -> Iterator[int]:
    """Its port, while it runs (see :func:`mosquitto_process`)."""
    with mosquitto_process(hint) as (port, _proc):
        yield port
