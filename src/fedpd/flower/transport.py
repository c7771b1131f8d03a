"""Envelopes as Flower messages, and the remote engine's transport over a Flower ``Grid``.

One message type, ``query.fedpd``: the ``ConfigRecord`` "config" carries the envelope's kind and
config, the ``ArrayRecord`` "arrays" its arrays (numpy, bit-exact through Flower). Replies are
pulled with ``Grid.pull_messages`` on a short poll (``send_and_receive`` drops late replies and,
in deployment, sleeps 3 s between pulls). A reply that Flower says will never come (node
unavailable, message expired) is ``LOST`` and the engine sends the work again; one from a
ClientApp Flower stopped (it stopped responding: error 8) is said, and sent again at most twice
(:class:`~fedpd.remote.engine.Lost`); a ClientApp that raised is an error reply.

What Flower does not say: a SuperNode that starts a ClientApp process per message (its default,
``--isolation subprocess``) gives the process 30 s from its launch to report; a later one is
stopped ("Task stopped" in the SuperNode's log) and another started, and on a loaded machine that
one may be late too, with no word to the server. A deployment's transport therefore has the
engine say when a connected node has not answered for :data:`STALL_S` (or 3x its slowest reply),
and why that may be (:data:`STALL_HINT`).
"""

from __future__ import annotations

import time

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from fedpd.remote.engine import LOST, Lost
from fedpd.remote.messages import Envelope

MESSAGE_TYPE = "query.fedpd"
#: Flower error codes after which a reply will never come (expired, reply expired, node
#: unavailable): the work is lost and sent again
LOST_CODES = (3, 4, 5)
#: Flower's error code for a ClientApp it stopped (no heartbeat): lost too, and said
STOPPED_CODE = 8
#: seconds without a reply from a connected SuperNode before the server says so
STALL_S = 90.0
STALL_HINT = ("a SuperNode that starts a ClientApp process per message loses the message when the process has not "
              "reported within 30 s of its launch, as on a loaded machine (\"Task stopped\" in the SuperNode's log; "
              "Flower starts another, which may be late too) - warm SuperNodes start none (docs/deployment.md "
              "section 4)")


def to_content(env: Envelope) -> RecordDict:
    config = {k: v for k, v in env.config.items() if v is not None}
    config["kind"] = env.kind
    arrays = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in env.arrays.items()})
    return RecordDict({"config": ConfigRecord(config), "arrays": arrays})


def to_envelope(content: RecordDict) -> Envelope:
    config = dict(content["config"]) if "config" in content else {}
    kind = str(config.pop("kind", ""))
    arrays = content["arrays"] if "arrays" in content else {}
    return Envelope(kind, config, {k: arrays[k].numpy() for k in arrays})


class FlowerTransport:
    """The remote engine's transport through a ServerApp's ``grid``; ``deployed``: a deployment's
    SuperNodes (not Flower's simulation), where each exchange waits for a SuperNode's poll, so a
    round's commits ride with the next message to each node (:class:`~fedpd.remote.engine.RemoteEngine`)."""

    def __init__(self, grid, wait: float = 0.2, deployed: bool = False):
        self.grid, self.wait, self.defer_commits = grid, wait, deployed
        if deployed:  # each pull is a request to the SuperLink; a SuperNode answers in steps of 0.5 s
            self.poll = 0.05
            self.stall_after, self.stall_hint = STALL_S, STALL_HINT

    def nodes(self) -> list[int]:
        return sorted(int(n) for n in self.grid.get_node_ids())

    def wait_for_nodes(self) -> None:
        time.sleep(self.wait)

    def push(self, node, request):
        return self.push_many([(node, request)])[0]

    def push_many(self, requests):
        messages = [Message(to_content(request), dst_node_id=int(node), message_type=MESSAGE_TYPE)
                    for node, request in requests]
        ids = list(self.grid.push_messages(messages)) if messages else []
        return [i if i else None for i in ids]

    def pull(self, handles):
        out = {}
        for reply in self.grid.pull_messages(list(handles)):
            handle = reply.metadata.reply_to_message_id
            if reply.has_error():
                code, why = int(reply.error.code), str(reply.error.reason)[:300]
                if code == STOPPED_CODE:
                    out[handle] = Lost(f"Flower stopped its ClientApp (error {code}: {why.rstrip('.')})")
                elif code in LOST_CODES:
                    out[handle] = LOST
                else:
                    out[handle] = Envelope("error", {"error": f"Flower error {code}: {why}"})
            else:
                out[handle] = to_envelope(reply.content)
        return out
