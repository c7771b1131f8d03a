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
"""

from __future__ import annotations

from typing import Protocol

import sys

import numpy as np
import torch
from torch import Tensor

from fedpd.algorithms.base import Algorithm, State
from fedpd.attacks import Attack
from fedpd.comm import CommCounter
from fedpd.errors import ConfigError
from fedpd.protocol import run_round
from fedpd.remote.messages import Envelope, pack, unpack
from fedpd.remote.node import NodeRuntime


def notice(message: str) -> None:
    """One line on stderr about something the run survives (a node that failed a round)."""
    print(f"fedpd: {message}", file=sys.stderr, flush=True)


class Transport(Protocol):
    """Carries envelopes to nodes and their replies back."""

    def nodes(self) -> list[int]:
        """The ids of the nodes that are connected."""

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | None]:
        """Send every node its request; the replies by node (None: no reply in time)."""


class LoopbackTransport:
    """Nodes in this process: each a :class:`NodeRuntime` (for tests and as the reference)."""

    def __init__(self, runtimes: dict[int, NodeRuntime]):
        self.runtimes = runtimes

    def nodes(self) -> list[int]:
        return sorted(self.runtimes)

    def exchange(self, requests):
        return {node: self.runtimes[node].handle(env) for node, env in requests.items()}


class RemoteStates:
    """The evaluation path's read view of every client's state, gathered from the nodes."""

    def __init__(self, engine: "RemoteEngine", init: State, num_clients: int):
        self.engine, self.init, self.num_clients = engine, init, num_clients

    def full(self, key: str) -> Tensor:
        out = self.init[key].expand(self.num_clients, *self.init[key].shape).clone()
        replies = self.engine.ask({n: Envelope("states", {"key": key}) for n in self.engine.hosted})
        for node, reply in replies.items():
            ids = reply.config.get("ids", [])
            if ids:
                out[torch.tensor(ids, dtype=torch.int64)] = unpack("s", reply.arrays, out.device)[key].to(out.dtype)
        return out

    def mean(self, key: str) -> Tensor:
        return self.full(key).sum(0) / self.num_clients  # summed in ascending client order

    def __len__(self) -> int:
        raise NotImplementedError("the number of materialised clients lives on the nodes")


class RemoteEngine:
    """Clients on nodes reached through ``transport``; see the module docstring."""

    def __init__(self, algorithm: Algorithm, config_toml: str, transport: Transport, *, num_clients: int, seed: int,
                 init_client: State, attack: Attack | None = None, max_reply_bytes: int = 1 << 30):
        self.algorithm, self.config_toml, self.transport = algorithm, config_toml, transport
        self.num_clients, self.seed, self.max_reply_bytes = num_clients, seed, max_reply_bytes
        self.attack = attack if attack is not None else Attack().bind(num_clients)
        self.comm = CommCounter()
        self.store = RemoteStates(self, init_client, num_clients)
        self._sample_grads = 0
        self.prune: int | None = None  # rounds of the last checkpoint written: nodes may drop older versions
        self.node_of = self._federation()
        self.hosted = {n: sorted(i for i, m in self.node_of.items() if m == n) for n in set(self.node_of.values())}
        self._trained: dict[int, list[int]] = {}
        self.rounds = 0  # rounds the nodes' states have seen

    # --- who hosts whom ---------------------------------------------------------------------
    def _federation(self) -> dict[int, int]:
        nodes = self.transport.nodes()
        if not nodes:
            raise ConfigError("run.engine: no node is connected (start the SuperNodes first)")
        replies = self.ask({n: Envelope("hello") for n in nodes})
        node_of: dict[int, int] = {}
        for node in sorted(replies):
            hosted = replies[node].config.get("hosted", [])
            if not hosted:
                raise ConfigError(f"node {node}: hosts no client (give it hosted-clients in its node config)")
            for i in hosted:
                if not 0 <= int(i) < self.num_clients:
                    raise ConfigError(f"node {node}: hosts client {i}, but the problem has clients 0..{self.num_clients - 1}")
                if int(i) in node_of:
                    raise ConfigError(f"client {i} is hosted twice (nodes {node_of[int(i)]} and {node}); each client "
                                      f"must live on exactly one node")
                node_of[int(i)] = node
        missing = [i for i in range(self.num_clients) if i not in node_of]
        if missing:
            raise ConfigError(f"clients {missing[:5]}{' ...' if len(missing) > 5 else ''} are hosted by no node "
                              f"({len(missing)} of {self.num_clients})")
        return node_of

    def ask(self, requests: dict[int, Envelope]) -> dict[int, Envelope]:
        """Requests that must succeed (hello, commit, restore, states): a failure is an error."""
        for env in requests.values():
            env.config["config"] = self.config_toml
        replies = self.transport.exchange(requests)
        for node, reply in replies.items():
            if reply is None:
                raise ConfigError(f"node {node}: no reply to {requests[node].kind}")
            if "error" in reply.config:
                raise ConfigError(f"node {node}: {requests[node].kind} failed: {reply.config['error']}")
        return replies

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
        requests = {n: Envelope("train", {"round": round, "ids": c, "prune": self.prune, "config": self.config_toml},
                                arrays) for n, c in by_node.items()}
        replies = self.transport.exchange(requests)
        self._trained, groups = {}, []
        for node, asked in by_node.items():
            reply = replies.get(node)
            part = torch.tensor(asked, dtype=torch.int64)
            if reply is None:  # the node is gone: its clients dropped out of the round
                self.comm.dropouts += len(asked)
                notice(f"node {node}: no reply to train in round {round}; its {len(asked)} client(s) dropped out")
                continue
            problem = self._problem(reply, asked)
            if problem:  # an error, a malformed or an oversized reply: rejected by the screen, state kept
                notice(f"node {node}: {problem} in round {round}; its {len(asked)} upload(s) rejected")
                groups.append((part, {}))
                continue
            self._trained[node] = asked
            self._sample_grads += int(reply.config.get("sample_grads", 0))
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
        accepted = set(ids.tolist())
        arrays = pack("r", reply)
        requests = {n: Envelope("commit", {"round": round, "accepted": [i for i in asked if i in accepted]}, arrays)
                    for n, asked in self._trained.items()}
        if requests:
            self.ask(requests)
        self._trained = {}

    # --- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"comm": self.comm.state_dict(), "sample_grads": self._sample_grads, "rounds": self.rounds}

    def checkpointed(self, rounds: int) -> None:
        """The run's checkpoint of ``rounds`` rounds is on disk: nodes may prune older versions
        (told with the next round's messages, so a kill before this point loses nothing)."""
        self.prune = rounds

    def load_state_dict(self, sd: dict) -> None:
        """Continue from a checkpoint: the nodes roll their clients back to its round."""
        self.comm.load_state_dict(sd["comm"])
        self._sample_grads, self.rounds = sd["sample_grads"], sd["rounds"]
        self.ask({n: Envelope("restore", {"rounds": self.rounds}) for n in self.hosted})
