"""Benchmark: the cost of the reconnecting MQTT bus over a bare aiomqtt client.

Run on demand (not a test): ``.venv/bin/python -m bench.live.bus``. It starts a
Mosquitto (the configuration of ``accordion up``) on a free loopback port and
publishes ``--messages`` QoS 1 messages, ``--in-flight`` at a time, to a topic
the same connection subscribes to, through (a) a bare ``aiomqtt.Client``, the
yardstick, and (b) ``broker.mqtt.MqttBus`` (reconnection, resubscription,
foreign-topic filter). Each is timed from the first publish to the last
delivery; rounds alternate so machine noise falls on both. The ratio is what
matters on a shared 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiomqtt
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.live.private_mosquitto import mosquitto  # noqa: E402
from broker.mqtt import MqttBus, MqttSettings  # noqa: E402


async def _pump(publish: Callable[[str, bytes], Awaitable[None]], n: int, in_flight: int) -> None:
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with sem:
            await publish("bench/x", str(i).encode())

    async with asyncio.TaskGroup() as tg:
        for i in range(n):
            tg.create_task(one(i))


async def bare(port: int, n: int, in_flight: int) -> float:
    # The same socket option as the bus (TCP_NODELAY), so only the bus's own work differs.
    nodelay = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-bare",
                              max_queued_incoming_messages=0,
                              socket_options=[nodelay]) as client:  # fmt: skip
        client.pending_calls_threshold = 10_000
        await client.subscribe("bench/#", qos=1)
        start = time.perf_counter()

        async def drain() -> None:
            got = 0
            async for _ in client.messages:
                got += 1
                if got == n:
                    return

        reader = asyncio.create_task(drain(), name="bench-bare-reader")

        async def publish(topic: str, payload: bytes) -> None:
            await client.publish(topic, payload, qos=1)

        await _pump(publish, n, in_flight)
        await reader
        return time.perf_counter() - start


async def bus(port: int, n: int, in_flight: int) -> float:
    async with MqttBus(MqttSettings("127.0.0.1", port), "bench-bus") as b:
        await b.subscribe("bench/#")
        start = time.perf_counter()

        async def drain() -> None:
            got = 0
            async for _ in b.deliveries():
                got += 1
                if got == n:
                    return

        reader = asyncio.create_task(drain(), name="bench-bus-reader")
        await _pump(b.publish, n, in_flight)
        await reader
        return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with mosquitto() as port:
        times: dict[str, list[float]] = {"aiomqtt.Client (yardstick)": [], "MqttBus": []}
        for _ in range(args.rounds):
            for name, run in (("aiomqtt.Client (yardstick)", bare), ("MqttBus", bus)):
                times[name].append(asyncio.run(run(port, args.messages, args.in_flight)))
    table = Table(title=f"QoS 1 publish + delivery, {args.messages} messages, "
                  f"{args.in_flight} in flight, median of {args.rounds} rounds")  # fmt: skip
    for col in ("client", "messages/s", "vs yardstick"):
        table.add_column(col, justify="right" if col != "client" else "left")
    base = statistics.median(times["aiomqtt.Client (yardstick)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        table.add_row(name, f"{args.messages / med:,.0f}", f"{base / med:.2f}x")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
