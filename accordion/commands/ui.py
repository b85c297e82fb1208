"""``accordion ui``: serve the live cluster's page (``accordion.ui``) until Ctrl-C.

The page's client connects with the caller's login (the ``--broker`` URL's
user, or ``ACCORDION_MQTT_USERNAME`` and ``_PASSWORD_FILE``) and shows what
that login may see, as ``accordion status`` does. It listens on loopback by
default: anyone who can reach the address sees what the login sees, so
``--host`` wider than that is the caller's choice to make.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Annotated

import typer
import uvicorn

from accordion.client.live_client import DEFAULT_BROKER, DEFAULT_TIMEOUT, connect, run_async
from accordion.commands.options import BrokerOpt, RootOpt, TimeoutOpt
from accordion.display import out_console
from accordion.errors import UserError, user_errors
from accordion.ui.app import create_app
from accordion.ui.feed import ClusterFeed
from broker.topics import DEFAULT_ROOT


def _listen(host: str, port: int) -> socket.socket:
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def ui(  # noqa: PLR0917 (typer reads the options from the parameters)
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="port (0: any free one)")
    ] = 8080,
    refresh: Annotated[
        float,
        typer.Option("--refresh", min=0.1, help="ask the status at least every this many seconds"),
    ] = 5.0,
    keep: Annotated[
        int, typer.Option("--keep", min=0, help="ended jobs the chart keeps (the latest)")
    ] = 10_000,
    broker: BrokerOpt = DEFAULT_BROKER,
    root: RootOpt = DEFAULT_ROOT,
    timeout: TimeoutOpt = DEFAULT_TIMEOUT,
) -> None:
    """Serve a page of the live cluster: machines, queue, running jobs and the schedule."""
    with user_errors():
        sock = _listen(host, port)

        async def serve() -> None:
            async with connect(broker, root, timeout=timeout, watch=True) as client:
                feed = ClusterFeed(client, keep=keep, refresh=refresh)
                app = create_app(feed, identity=client.identity)
                server = uvicorn.Server(
                    uvicorn.Config(
                        app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
                    )
                )
                where = sock.getsockname()
                login = f"as {client.identity}" if client.identity else "without a login"
                out_console.print(
                    f"serving http://{where[0]}:{where[1]}/ ({login}; Ctrl-C stops)",
                    highlight=False,
                    soft_wrap=True,
                )

                async def watch() -> None:
                    try:
                        await feed.run()
                    finally:
                        server.should_exit = True  # the page has nothing left to show

                watching = asyncio.get_running_loop().create_task(watch(), name="ui-feed")
                try:
                    await server.serve(sockets=[sock])
                finally:
                    watching.cancel()
                    await asyncio.wait([watching])
                if not watching.cancelled() and (error := watching.exception()) is not None:
                    raise error  # the connection closed for good (a BusError): one line

        try:
            run_async(serve())
        except KeyboardInterrupt:
            return
        finally:
            sock.close()


def register(app: typer.Typer) -> None:
    app.command()(ui)
