"""The server side of a remote engine: the client half of the round protocol, by messages.

:class:`RemoteEngine` meets the engine contract of :mod:`fedpd.engine` by sending each node
the work of the clients it hosts (a ``train`` envelope), keeping the nodes' uploads and telling
each node which of its clients' new states to keep (``commit``). Everything else — the coin,
counting, attacks, the screen, aggregation — is :func:`fedpd.protocol.run_round`, exactly as in
process. Nodes are reached through a :class:`Transport`: :class:`LoopbackTransport` calls
:class:`~fedpd.remote.node.NodeRuntime` objects in this process (the reference, and what the
unit tests use); :mod:`fedpd.flower` sends the same envelopes as Flower messages.

A node that answers a ``train`` with an error, a malformed or an oversized reply has its
clients' uploads rejected (counted in ``rejected_uploads``); one that does not answer at all has
its clients counted as ``dropouts``; either way their states are kept, one line says so on
stderr and the run goes on. Bad federations are refused before the first round with one line: a node hosting
no client, a client hosted twice, a client hosted by nobody.

Node state is run-scoped: every request carries the run's key (a token drawn when the run
starts, kept in its checkpoints, and the config's hash; :func:`~fedpd.remote.filestore.run_key`).
A new run's folder on a node is made by the first message about its clients (a fresh key:
initial states); in the first round the nodes that do not train get ``restore`` of 0 rounds
instead, so every node holds the run's folder. A resumed run tells every node to roll back to
its checkpoint's round, in its own folder.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
import time
from typing import Hashable, Protocol

import numpy as np
import torch
from torch import Tensor

from fedpd.algorithms.base import Algorithm, State
from fedpd.attacks import Attack
from fedpd.comm import CommCounter
from fedpd.errors import ConfigError
from fedpd.protocol import run_round
from fedpd.remote.filestore import run_key
from fedpd.remote.messages import Envelope, client_ranges, pack, unpack
from fedpd.remote.node import NodeRuntime
from fedpd.store import ordered_mean


def notice(message: str) -> None:
    """One line on stderr about something the run survives (a node that failed a round)."""
    print(f"fedpd: {message}", file=sys.stderr, flush=True)


#: a reply the transport knows will never come (node unavailable, message expired)
LOST = "lost"


class Transport(Protocol):
    """Carries envelopes to nodes and their replies back (push, then pull what has arrived)."""

    def nodes(self) -> list[int]:
        """The ids of the nodes connected now."""

    def push(self, node: int, request: Envelope) -> Hashable | None:
        """Send ``request`` to ``node``; a handle for its reply (None: no such node)."""

    def push_many(self, requests: list[tuple[int, Envelope]]) -> list[Hashable | None]:
        """:meth:`push` for several at once (Flower then delivers them in the same sweep)."""

    def pull(self, handles: list[Hashable]) -> dict[Hashable, Envelope | str]:
        """The replies that have arrived for ``handles`` (``LOST`` for those that never will)."""


class LoopbackTransport:
    """Nodes in this process, each a :class:`NodeRuntime` (for tests and as the reference).

    Faults, as tests inject them: ``lose[node] = n`` loses the node's next n replies (the
    transport reports them lost, as Flower's "node unavailable"); ``crash_on[node] = kind``
    kills the node when a request of that kind reaches it — the request is never answered, the
    dead id stays listed (as a kill -9'ed SuperNode does for a minute) and the node comes back
    at once under a new id with the same clients and files (a restart without registered keys)."""

    def __init__(self, runtimes: dict[int, NodeRuntime]):
        self.runtimes = dict(runtimes)
        self._replies: dict[int, Envelope | str] = {}
        self._count = 0
        self.lose: dict[int, int] = {}
        self.crash_on: dict[int, str] = {}
        self.dead: set[int] = set()

    def nodes(self) -> list[int]:
        return sorted({*self.runtimes, *self.dead})

    def push(self, node, request):
        if node in self.dead:
            self._count += 1
            return self._count  # accepted, never answered
        runtime = self.runtimes.get(node)
        if runtime is None:
            return None
        self._count += 1
        if self.crash_on.get(node) == request.kind:
            del self.crash_on[node]
            self.dead.add(node)
            self.runtimes[max(self.nodes()) + 1] = self.runtimes.pop(node)
        elif self.lose.get(node, 0) > 0:
            self.lose[node] -= 1
            self._replies[self._count] = LOST
        else:
            self._replies[self._count] = runtime.handle(request)
        return self._count

    def push_many(self, requests):
        return [self.push(node, request) for node, request in requests]

    def pull(self, handles):
        return {h: self._replies.pop(h) for h in handles if h in self._replies}


class RemoteStates:
    """The evaluation path's read view of every client's state, gathered from the nodes."""

    def __init__(self, engine: "RemoteEngine", init: State, num_clients: int):
        self.engine, self.init, self.num_clients = engine, init, num_clients

    def _stored(self, key: str) -> tuple[Tensor, Tensor]:
        """(ids ascending, their rows of ``key``) of the clients that have taken part, from every node."""
        init = self.init[key]
        ids, rows = [], []
        replies = self.engine.ask({n: Envelope("states", {"key": key}) for n in self.engine.hosted})
        for node, reply in replies.items():
            if reply.config.get("ids"):
                ids += reply.config["ids"]
                rows.append(unpack("s", reply.arrays, init.device)[key].to(init.dtype))
        if not ids:
            return torch.zeros(0, dtype=torch.int64), init.new_zeros(0, *init.shape)
        ids = torch.tensor(ids, dtype=torch.int64)
        order = torch.argsort(ids)
        return ids[order], torch.cat(rows)[order.to(init.device)]

    def full(self, key: str) -> Tensor:
        out = self.init[key].expand(self.num_clients, *self.init[key].shape).clone()
        ids, rows = self._stored(key)
        out[ids.to(out.device)] = rows
        return out

    def mean(self, key: str) -> Tensor:
        """The in-process store's sum (:func:`fedpd.store.ordered_mean`): the same bits on every engine."""
        ids, rows = self._stored(key)
        return ordered_mean(lambda a, b: rows[a:b], len(ids), self.init[key], self.num_clients)

    def __len__(self) -> int:
        raise NotImplementedError("the number of materialised clients lives on the nodes")


class RemoteEngine:
    """Clients on nodes reached through ``transport``; see the module docstring."""

    def __init__(self, algorithm: Algorithm, config_toml: str, transport: Transport, *, num_clients: int, seed: int,
                 init_client: State, attack: Attack | None = None, max_reply_bytes: int = 1 << 30,
                 timeout: float = 600.0, hello_timeout: float = 30.0, poll: float = 0.01, context: dict | None = None,
                 config_hash: str | None = None):
        self.algorithm, self.config_toml, self.transport = algorithm, config_toml, transport
        self.context = dict(context or {})  # sent with every request (e.g. where simulated nodes keep state)
        # the run's key on the nodes: a new token per run (a checkpoint gives back its own)
        self.config_hash = config_hash or hashlib.sha256(config_toml.encode()).hexdigest()[:16]
        self.token = secrets.token_hex(8)
        self.context["run-key"] = run_key(self.token, self.config_hash)
        self._opened = not init_client  # stateless clients (FedAvg) keep nothing: no run to start on the nodes
        self.num_clients, self.seed, self.max_reply_bytes = num_clients, seed, max_reply_bytes
        self.timeout, self.hello_timeout, self.poll = timeout, hello_timeout, poll
        self.hosted: dict[int, list[int]] = {}
        self._asked: dict[int, list[int]] = {}  # train / commit request key -> the clients it is for
        self.attack = attack if attack is not None else Attack().bind(num_clients)
        self.comm = CommCounter()
        self.store = RemoteStates(self, init_client, num_clients)
        self._sample_grads = 0
        self.prune: int | None = None  # rounds of the last checkpoint written: nodes may drop older versions
        self.node_of: dict[int, int] = {}
        self.node_of = self._federation()
        self.hosted = {n: sorted(i for i, m in self.node_of.items() if m == n) for n in set(self.node_of.values())}
        self._trained: dict[int, list[int]] = {}
        self.rounds = 0  # rounds the nodes' states have seen
        self.hosts_seen: set[str] = set()  # where clients trained (machine / Ray node), as nodes report it

    # --- who hosts whom ---------------------------------------------------------------------
    def _federation(self) -> dict[int, int]:
        """Who hosts whom, from every node's hello; waits (up to the timeout) until every client
        is hosted, as nodes connect one by one."""
        deadline = time.monotonic() + self.timeout
        while True:
            nodes = self.transport.nodes()
            replies = self.exchange({n: Envelope("hello") for n in nodes}, timeout=self.hello_timeout,
                                    reroute=False) if nodes else {}
            node_of: dict[int, int] = {}
            for node in sorted(replies):
                reply = replies[node]
                if reply is None:
                    continue  # a node that went away
                if "error" in reply.config:
                    raise ConfigError(f"node {node}: {reply.config['error']}")
                hosted = reply.config.get("hosted", [])
                if not hosted:
                    raise ConfigError(f"node {node}: hosts no client (give it hosted-clients in its node config)")
                for i in hosted:
                    if not 0 <= int(i) < self.num_clients:
                        raise ConfigError(f"node {node}: hosts client {i}, but the problem has clients "
                                          f"0..{self.num_clients - 1}")
                    if int(i) in node_of:
                        raise ConfigError(f"client {i} is hosted twice (nodes {node_of[int(i)]} and {node}); each "
                                          f"client must live on exactly one node")
                    node_of[int(i)] = node
            missing = [i for i in range(self.num_clients) if i not in node_of]
            if not missing:
                return node_of
            if time.monotonic() > deadline or not hasattr(self.transport, "wait_for_nodes"):
                where = f" ({len(nodes)} node(s) connected)" if nodes else " (no node is connected: start the SuperNodes)"
                raise ConfigError(f"clients {missing[:5]}{' ...' if len(missing) > 5 else ''} are hosted by no node "
                                  f"({len(missing)} of {self.num_clients}){where}")
            self.transport.wait_for_nodes()

    def ask(self, requests: dict[int, Envelope], timeout: float | None = None) -> dict[int, Envelope]:
        """Requests that must succeed (hello, commit, restore, states): a failure is an error."""
        replies = self.exchange(requests, timeout=timeout)
        for node, reply in replies.items():
            if reply is None:
                raise ConfigError(f"{self.node_name(node)}: no reply to {requests[node].kind} within {self.timeout:g} s "
                                  f"(run.node_timeout)")
            if "error" in reply.config:
                raise ConfigError(f"{self.node_name(node)}: {requests[node].kind} failed: {reply.config['error']}")
        return replies

    def exchange(self, requests: dict[int, Envelope], timeout: float | None = None,
                 reroute: bool = True) -> dict[int, Envelope | None]:
        """Send every node its request; the replies by node (None: none within the deadline).

        A node that is lost on the way (it vanished from the node list, or the transport says
        its reply will never come) has its request sent again to the node that hosts its clients
        now — a restarted SuperNode comes back under a new id with the same clients and files,
        and the work is deterministic, so the result is the same."""
        for env in requests.values():
            env.config.update(self.context, config=self.config_toml)
        # whose work each request is: the clients asked for (train, commit) or all the node hosts
        clients = {key: list(self._asked.get(key) or self.hosted.get(key, [])) for key in requests}
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        known = set(self.transport.nodes())
        outstanding: dict[Hashable, tuple[int, int]] = {}  # handle -> (request key, node it went to)
        replies: dict[int, Envelope | None] = {}
        lost: list[int] = []

        def send(pairs: list[tuple[int, int]]) -> None:  # (request key, node to send it to)
            handles = self.transport.push_many([(node, requests[key]) for key, node in pairs])
            for (key, node), handle in zip(pairs, handles):
                if handle is None:
                    lost.append(key)
                else:
                    outstanding[handle] = (key, node)

        # to the node that hosts the request's clients now (a restart moves them)
        send([(key, self._host(clients[key]) if clients[key] else key) for key in requests])
        while outstanding or lost:
            for handle, reply in self.transport.pull(list(outstanding)).items():
                key, _ = outstanding.pop(handle)
                if isinstance(reply, str):  # LOST
                    lost.append(key)
                else:
                    replies[key] = reply
            nodes = set(self.transport.nodes())
            for handle, (key, node) in list(outstanding.items()):
                if node not in nodes:  # gone from the federation: its work is lost
                    del outstanding[handle]
                    lost.append(key)
            if reroute and (lost or nodes - known):
                self._adopt(nodes - known)
                known = nodes
                for handle, (key, node) in list(outstanding.items()):  # clients that moved to a new node
                    if self._host(clients[key]) not in (None, node):
                        del outstanding[handle]
                        lost.append(key)
                again = [(key, self._host(clients[key])) for key in lost]
                again = [(key, target) for key, target in again if target is not None and target in nodes]
                for key, _ in again:
                    lost.remove(key)
                send(again)
            if time.monotonic() > deadline:
                break
            if outstanding or lost:
                time.sleep(self.poll)
        for key in requests:
            replies.setdefault(key, None)
        return replies

    def node_name(self, node: int) -> str:
        """A node as its operator knows it: the clients it hosts (its node config's hosted-clients),
        then the transport's id for it (Flower's is a 19-digit number nobody has seen)."""
        hosted = self.hosted.get(node)
        return f"the node of clients {client_ranges(hosted)} (node id {node})" if hosted else f"node {node}"

    def _host(self, clients: list[int]) -> int | None:
        """The one node that hosts all of ``clients`` now (None: none, or they are split)."""
        hosts = {self.node_of.get(i) for i in clients}
        return hosts.pop() if len(hosts) == 1 else None

    def _adopt(self, new_nodes: set[int]) -> None:
        """Ask nodes that joined whom they host; they take over those clients (a restarted node)."""
        if not new_nodes:
            return
        replies = self.exchange({n: Envelope("hello") for n in new_nodes}, timeout=self.hello_timeout, reroute=False)
        for node, reply in replies.items():
            if reply is None or "error" in reply.config:
                continue
            for i in reply.config.get("hosted", []):
                if 0 <= int(i) < self.num_clients:
                    self.node_of[int(i)] = node
        self.hosted = {n: sorted(i for i, m in self.node_of.items() if m == n) for n in set(self.node_of.values())}

    # --- the engine contract ----------------------------------------------------------------
    @property
    def sample_grads(self) -> int:
        return self._sample_grads

    def run_round(self, server: State, ids: Tensor, round: int) -> State:
        server = run_round(self.algorithm, server, ids, round, clients=self, comm=self.comm, attack=self.attack,
                           seed=self.seed, num_clients=self.num_clients)
        self.rounds = round + 1
        return server

    def train(self, message: State, ids: Tensor, round: int) -> list[tuple[Tensor, State]]:
        by_node: dict[int, list[int]] = {}
        for i in ids.tolist():
            by_node.setdefault(self.node_of[i], []).append(i)
        arrays = pack("m", message)
        config = {"round": round} if self.prune is None else {"round": round, "prune": self.prune}
        requests = {n: Envelope("train", {**config, "ids": c}, arrays) for n, c in by_node.items()}
        # a new run's first round: the nodes that do not train now start it too (its folder, so
        # that a resume finds one on every node), in the same exchange
        starting = [] if self._opened else [n for n in self.hosted if n not in requests]
        self._opened = True
        requests.update({n: Envelope("restore", {"rounds": self.rounds}) for n in starting})
        self._asked = dict(by_node)
        replies = self.exchange(requests)
        for node in starting:
            reply = replies.get(node)
            if reply is None or "error" in reply.config:
                why = "no reply" if reply is None else reply.config["error"]
                notice(f"{self.node_name(node)}: could not start the run ({why}); it will when its clients' work "
                       f"arrives")
        self._trained, groups = {}, []
        for node, asked in by_node.items():
            reply = replies.get(node)
            part = torch.tensor(asked, dtype=torch.int64)
            if reply is None:  # the node is gone: its clients dropped out of the round
                self.comm.dropouts += len(asked)
                notice(f"{self.node_name(node)}: no reply to train in round {round + 1}; its {len(asked)} client(s) "
                       f"dropped out")
                continue
            problem = self._problem(reply, asked)
            if problem:  # an error, a malformed or an oversized reply: rejected, state kept
                notice(f"{self.node_name(node)}: {problem} in round {round + 1}; its {len(asked)} upload(s) rejected")
                groups.append((part, None))
                continue
            self._trained[node] = asked
            self._sample_grads += int(reply.config.get("sample_grads", 0))
            if "host" in reply.config:
                self.hosts_seen.add(str(reply.config["host"]))
            groups.append((part, unpack("u", reply.arrays)))
        return groups

    def _problem(self, reply: Envelope, asked: list[int]) -> str:
        """What is wrong with a node's reply to ``train`` ("" when nothing)."""
        if "error" in reply.config:
            return f"train failed ({reply.config['error']})"
        if reply.kind != "train" or [int(i) for i in reply.config.get("ids", [])] != asked:
            return "a malformed reply (not the clients asked for)"
        if not all(isinstance(a, np.ndarray) and k.startswith("u/") for k, a in reply.arrays.items()):
            return "a malformed reply (arrays that are not uploads)"
        if reply.nbytes() > self.max_reply_bytes:
            return f"an oversized reply ({reply.nbytes()} bytes; at most {self.max_reply_bytes})"
        return ""

    def commit(self, ids: Tensor, reply: State, round: int) -> None:
        if not self.store.init and not reply:  # stateless clients, nothing sent back: nothing to commit
            self._trained = {}
            return
        accepted = set(ids.tolist())
        arrays = pack("r", reply)
        requests = {n: Envelope("commit", {"round": round, "accepted": [i for i in asked if i in accepted]}, arrays)
                    for n, asked in self._trained.items()}
        self._asked = dict(self._trained)
        if requests:
            self.ask(requests)
        self._trained, self._asked = {}, {}

    # --- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"comm": self.comm.state_dict(), "sample_grads": self._sample_grads, "rounds": self.rounds,
                "run": self.token, "layout": self.layout()}

    def layout(self) -> str:
        """A digest of who hosts whom (the clients of each node, not the nodes' ids): a resume on
        another layout moves the states (:mod:`fedpd.handover`)."""
        blocks = sorted(sorted(ids) for ids in self.hosted.values())
        return hashlib.sha256(json.dumps(blocks).encode()).hexdigest()[:16]

    def checkpointed(self, rounds: int) -> None:
        """The run's checkpoint of ``rounds`` rounds is on disk: nodes may prune older versions
        (told with the next round's messages, so a kill before this point loses nothing)."""
        self.prune = rounds

    def load_state_dict(self, sd: dict) -> None:
        """Continue from a checkpoint: the nodes roll their clients back to its round, in the folder
        of its run."""
        if not sd.get("run") and self.store.init:
            raise ConfigError("the checkpoint has no run token (written before node state was kept per run): start "
                              "the run again with --overwrite")
        self.comm.load_state_dict(sd["comm"])
        self._sample_grads, self.rounds = sd["sample_grads"], sd["rounds"]
        if sd.get("run"):
            try:
                self.context["run-key"] = run_key(str(sd["run"]), self.config_hash)
            except ValueError as err:
                raise ConfigError(f"the checkpoint's run token: {err}") from None
            self.token = str(sd["run"])
        if self.store.init:  # stateless clients have nothing to roll back
            self._opened = True
            self.ask({n: Envelope("restore", {"rounds": self.rounds}) for n in self.hosted})

    def take_over(self, sd: dict, states, rounds: int) -> None:
        """Continue a run whose client states were elsewhere (another engine, or nodes hosting
        other clients): the counters from its checkpoint entry ``sd``, and ``states`` — (ids, their
        states) in chunks, after ``rounds`` rounds — to the nodes that host them, under this run's
        new key (:mod:`fedpd.handover`)."""
        self.comm.load_state_dict(sd["comm"])
        self._sample_grads, self.rounds = int(sd["sample_grads"]), rounds
        if not self.store.init:
            return
        self._opened = True
        self.ask({n: Envelope("seed", {"rounds": rounds, "ids": []}) for n in self.hosted})  # every node: the folder
        for ids, state in states:
            by_node: dict[int, list[int]] = {}
            for row, i in enumerate(ids.tolist()):
                by_node.setdefault(self.node_of[i], []).append(row)
            self.ask({n: Envelope("seed", {"rounds": rounds, "ids": ids[rows].tolist()},
                                  pack("s", {k: v[rows] for k, v in state.items()})) for n, rows in by_node.items()})
