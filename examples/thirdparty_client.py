"""A client of an Accordion cluster written only from its AsyncAPI document.

It imports nothing of Accordion: paho-mqtt and msgpack only, and every topic,
field and rule it uses is in ``docs/reference/asyncapi.yaml`` (rendered as the
site's "Wire contract" page). It logs in as a user, submits one job, reads
the reply, and follows the job's events until the job ends; exit status 0
when it finished, 1 when it was refused, failed or was cancelled, 2 on a
usage error or a timeout.

    python examples/thirdparty_client.py --port 1883 --username alice \\
        --password-file alice.secret --procs 1 --work 2

What the document says a client must do, step by step:

1. connect with its login (the broker makes the login its client id);
2. subscribe, at QoS 1, to its reply topic ``{root}/users/{user}/replies/{client}``
   (``{client}`` an id of its own choosing) and to ``{root}/users/{user}/events``,
   *before* publishing the request;
3. publish one ``submit_jobs`` map at QoS 1 on ``{root}/scheduler/requests/{user}``
   with a fresh ``request_id`` and ``reply_to`` = ``{client}``;
4. match the ``submit_reply`` by ``request_id`` (an ``error_reply`` means the
   request could not be read);
5. take the job's ``job_event`` messages in ``seq`` order (1, 2, ... without
   gaps; a gap is filled with a ``history_request``) until a final state,
   ``finished``, ``failed`` or ``cancelled``; duplicates (QoS 1) are skipped.
"""

from __future__ import annotations

import argparse
import queue
import sys
import time
import uuid
from typing import Any

import msgpack
import paho.mqtt.client as mqtt

PROTOCOL_VERSION = 3
FINAL = ("finished", "failed", "cancelled")


def pack(kind: str, **fields: Any) -> bytes:
    """One message: a msgpack map with its ``kind`` tag and the protocol version ``v``."""
    return msgpack.packb({"kind": kind, "v": PROTOCOL_VERSION, **fields})


class Session:
    """One MQTT connection; deliveries go to a queue the main thread reads."""

    def __init__(self, args: argparse.Namespace, client_id: str) -> None:
        self.inbox: queue.Queue[tuple[str, bytes]] = queue.Queue()
        self.subscribed: queue.Queue[int] = queue.Queue()
        self.connected: queue.Queue[str] = queue.Queue()
        self.mqtt = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id)
        with open(args.password_file, encoding="utf-8") as f:
            password = f.read().strip()
        self.mqtt.username_pw_set(args.username, password)
        self.mqtt.on_connect = self._on_connect
        self.mqtt.on_subscribe = self._on_subscribe
        self.mqtt.on_message = self._on_message

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connected.put(str(reason))

    def _on_subscribe(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        self.subscribed.put(mid)

    def _on_message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self.inbox.put((message.topic, message.payload))


def follow(args: argparse.Namespace) -> int:
    user = args.user or args.username.partition("~")[0]
    client_id = f"tp-{uuid.uuid4().hex[:12]}"
    root = args.root
    replies = f"{root}/users/{user}/replies/{client_id}"
    events = f"{root}/users/{user}/events"
    requests = f"{root}/scheduler/requests/{user}"
    deadline = time.monotonic() + args.timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 0.0)

    session = Session(args, client_id)
    session.mqtt.connect(args.host, args.port)
    session.mqtt.loop_start()
    try:
        reason = session.connected.get(timeout=left())
        if reason != "Success":
            print(f"connection refused: {reason}", file=sys.stderr)
            return 2
        for topic in (replies, events):
            _, mid = session.mqtt.subscribe(topic, qos=1)
            while session.subscribed.get(timeout=left()) != mid:
                pass
        job_id = args.job_id or f"tp-job-{uuid.uuid4().hex[:8]}"
        request_id = uuid.uuid4().hex
        job = {"id": job_id, "procs": args.procs, "walltime": args.walltime, "work": args.work}
        submit = pack("submit_jobs", request_id=request_id, reply_to=client_id, jobs=[job])
        session.mqtt.publish(requests, submit, qos=1)
        print(f"submitted {job_id} as {user}")

        accepted = False
        histories: set[str] = set()
        last_seq = 0
        pending: dict[int, dict[str, Any]] = {}
        while True:
            topic, payload = session.inbox.get(timeout=left())
            if not payload:
                continue  # an empty retained payload clears a topic: not a message
            message = msgpack.unpackb(payload)
            kind = message.get("kind")
            if topic == replies and message.get("request_id") in (request_id, *histories):
                if kind == "error_reply":
                    print(f"refused: {message['error']}", file=sys.stderr)
                    return 1
                if kind == "submit_reply":
                    result = message["results"][0]
                    if not result["accepted"]:
                        print(f"rejected: {result.get('reason')}", file=sys.stderr)
                        return 1
                    accepted = True
                    print(f"accepted{' (duplicate)' if result.get('duplicate') else ''}")
                elif kind == "history_reply":
                    for event in message["events"]:
                        pending.setdefault(event["seq"], event)
                continue
            if kind != "job_event" or message.get("job_id") != job_id:
                continue
            if message["seq"] <= last_seq:
                continue  # a duplicate delivery (QoS 1), or one the history already gave
            pending[message["seq"]] = message
            if message["seq"] > last_seq + 1 and last_seq + 1 not in pending:
                # A gap: ask the scheduler for the job's journalled events.
                history_id = uuid.uuid4().hex
                histories.add(history_id)
                ask = pack(
                    "history_request", request_id=history_id, reply_to=client_id, job_ids=[job_id]
                )
                session.mqtt.publish(requests, ask, qos=1)
            while last_seq + 1 in pending:
                event = pending.pop(last_seq + 1)
                last_seq = event["seq"]
                state, at, detail = event["event"], event["at"], event["detail"]
                print(f"{last_seq:3} {state:10} at {at:.1f} {detail}")
                if state in FINAL:
                    if not accepted:
                        print("ended before its reply arrived", file=sys.stderr)
                    return 0 if state == "finished" else 1
    except queue.Empty:
        print(f"no answer within {args.timeout:g} s", file=sys.stderr)
        return 2
    finally:
        session.mqtt.loop_stop()
        session.mqtt.disconnect()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--root", default="accordion/v3", help="topic root (%(default)s)")
    parser.add_argument("--username", required=True, help="the login")
    parser.add_argument("--password-file", required=True, help="a file holding its password")
    parser.add_argument("--user", help="the identity it speaks for (default: the login's)")
    parser.add_argument("--job-id", help="the job's id (default: a new one)")
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--walltime", type=float, default=60.0, help="estimate, cluster s")
    parser.add_argument("--work", type=float, default=1.0, help="real work, cluster s")
    parser.add_argument("--timeout", type=float, default=60.0, help="give up after, wall s")
    return follow(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
