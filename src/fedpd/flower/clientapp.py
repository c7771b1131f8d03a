"""The Flower ClientApp that runs fedpd's clients (``fedpd.flower.clientapp:client_app``, the
client component of the app ``fedpd flower app`` writes, and the ClientApp of a simulation).

Every message is a fedpd envelope for this node's :class:`~fedpd.remote.node.NodeRuntime`:

* in a deployment, the node's own config names the clients it hosts and where their states live:
  ``flower-supernode --node-config "hosted-clients='0-49' store-dir='/var/lib/fedpd/n0'"``
  (``hosted-clients``: ids and ranges, comma-separated); its data is read from ``FEDPD_DATA`` or
  the config's ``problem.data_dir`` on that machine; it imports only the plug-in modules its
  ``allowed-plugins`` lists (module prefixes, comma-separated; none by default), from its own
  Python path; it keeps each run's client states in a folder of their own under ``store-dir`` and,
  when a run starts, removes older runs' folders beyond the ``keep-runs`` (default 3) most recently
  used (:mod:`fedpd.remote.filestore`); it holds ``store-dir`` exclusively — another node started
  on the same folder is refused in one line naming this one (:mod:`fedpd.remote.storelock`);
* in Flower's simulation runtime, virtual node k of n hosts the k-th contiguous block of the
  client ids and keeps their states under the run directory (``<run>/nodes/node<k>``); it imports
  the config's plug-ins from the run's plug-in path (one user, one machine).
"""

from __future__ import annotations

import os
import socket
import sys
import tomllib
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedpd import plugins
from fedpd.build import hosted_clients
from fedpd.flower.transport import to_content, to_envelope
from fedpd.threads import use_threads
from fedpd.remote.filestore import KEEP_RUNS
from fedpd.remote.messages import Envelope
from fedpd.remote.node import NodeRuntime, _pieces
from fedpd.remote.storelock import holder


def parse_hosted(text: str) -> list[int]:
    """``"0-3,7,9-10"`` → [0, 1, 2, 3, 7, 9, 10]; a malformed list is a ValueError naming it."""
    out: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"hosted-clients {text!r}: expected ids and ranges like '0-49,60'")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return out


def serving_pid() -> int:
    """The process that lives as long as this node, which holds its store-dir: this one — a warm
    ClientApp (``fedpd flower clientapp``), which serves its SuperNode across the SuperNode's
    restarts — or, in a ClientApp process Flower starts for one message (``flwr-clientapp``), the
    SuperNode itself: the ``--parent-pid`` of Flower's SuperExec that started this process (the
    SuperExec outlives a stopped SuperNode by up to 20 s), or the SuperExec where it names none."""
    if Path(sys.argv[0]).name != "flwr-clientapp":
        return os.getpid()
    parent = os.getppid()
    try:
        args = (Path("/proc") / str(parent) / "cmdline").read_bytes().split(b"\0")
        return int(args[args.index(b"--parent-pid") + 1])
    except (OSError, ValueError, IndexError):  # no /proc, or a SuperExec started without it
        return parent


def node_runtime(context: Context, request: Envelope) -> NodeRuntime:
    """This node's runtime, from its node config (deployment) or its partition (simulation)."""
    node_config = dict(context.node_config)
    if "hosted-clients" in node_config:
        hosted = parse_hosted(node_config["hosted-clients"])
        if "store-dir" not in node_config:
            raise ValueError("node config: store-dir missing (where this node keeps its clients' states)")
        allowed = plugins.parse_allowed(node_config.get("allowed-plugins", ""))
        keep = str(node_config.get("keep-runs", KEEP_RUNS))
        if not keep.isdigit() or int(keep) < 1:
            raise ValueError(f"node config: keep-runs {keep!r}: expected a whole number of runs, at least 1")
        return NodeRuntime(hosted, Path(str(node_config["store-dir"])), durable=True, allowed=allowed,
                           keep_runs=int(keep),
                           holder=holder(hosted, node=str(getattr(context, "node_id", "") or ""), pid=serving_pid()))
    if "partition-id" in node_config:  # a virtual node of Flower's simulation runtime
        plugins.search(request.config.get("plugin-path") or ())  # the run's own plug-ins, as in process
        cfg, problem, _, _ = _pieces(request.config["config"], request.config.get("run-key", ""))
        k, n = int(node_config["partition-id"]), int(node_config["num-partitions"])
        root = request.config.get("store-root")
        if not root:
            raise ValueError("the server sent no store-root for simulated nodes")
        return NodeRuntime(hosted_clients(problem.num_clients, n, k), Path(root) / f"node{k}", durable=False)
    raise ValueError("node config: hosted-clients missing (the client ids this SuperNode hosts, e.g. '0-49')")


client_app = ClientApp()


@client_app.query("fedpd")
def _handle(msg: Message, context: Context) -> Message:
    request = to_envelope(msg.content)
    try:
        cfg = tomllib.loads(request.config["config"])
        use_threads(int(cfg.get("run", {}).get("threads", 0)) or 1)
        reply = node_runtime(context, request).handle(request)
    except Exception as err:  # a node that cannot even start: the server reads the reason, and its log says it
        reply = Envelope(request.kind, {"error": f"{type(err).__name__}: {err}"[:500]})
        print(f"fedpd node: {request.kind} refused: {reply.config['error']}", file=sys.stderr, flush=True)
    reply.config["host"] = _where()
    return Message(to_content(reply), reply_to=msg)


def _where() -> str:
    """Where this ClientApp runs: the machine, and the Ray node in a simulation on a cluster."""
    where = socket.gethostname()
    try:
        import ray

        if ray.is_initialized():
            where += "/" + ray.get_runtime_context().get_node_id()
    except Exception:  # no Ray here (a deployment)
        pass
    return where
