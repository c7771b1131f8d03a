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
stderr (and in the run's ``status.json``, :mod:`fedpd.status`) and the run goes on — unless the
node refused the config's algorithm (a hook that failed fedpd's check, :mod:`fedpd.hooks`): that
stops the run with the line the in-process engine gives (every node would compute the same). A node the
transport lists no longer (Flower marks a SuperNode offline when it leaves or misses its
heartbeats) is not waited for: one line says it is gone, at once, and its clients drop out of
every round until it, or a node hosting them, is listed again. Bad federations are refused before
the first round with one line: a node hosting no client, a client hosted twice, a client hosted by
nobody (after waiting ``timeout`` for nodes to connect, which is said at once).

In a deployment (a transport with ``defer_commits``) a round's commit is not a message of its own:
every exchange waits for a SuperNode's poll (3 s when it is idle), so the commit rides with the
node's next message (train, restore or states; the node applies it first) and a round costs one
exchange, as in Flower's own strategies. Until then it is pending on the server, kept in the
checkpoint (a resume's restore carries it), and the run's end sends what is left. The numbers
are the same: a commit computes the same thing later.

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
from typing import Callable, Hashable, Protocol

import numpy as np
import torch
from torch import Tensor

from fedpd import advice
from fedpd.algorithms.base import Algorithm, State
from fedpd.attacks import Attack
from fedpd.comm import CommCounter
from fedpd.errors import ConfigError
from fedpd.hooks import HookError
from fedpd.protocol import run_round
from fedpd.remote.filestore import run_key
from fedpd.remote.messages import Envelope, client_ranges, pack, unpack
from fedpd.remote.node import NodeRuntime
from fedpd.store import ordered_mean


def notice(message: str) -> None:
    """One line on stderr about something the run survives (a node that failed a round)."""
    print(f"fedpd: {message}", file=sys.stderr, flush=True)


def hosting_advice(clients: list[int]) -> str:
    """What the operator can do about clients that no connected node hosts."""
    return (f"start a SuperNode hosting them (--node-config \"hosted-clients='{client_ranges(clients)}' "
            f"store-dir='...'\", with the store-dir that holds their states)")


#: a reply the transport knows will never come (node unavailable, message expired)
LOST = "lost"


class Lost(str):
    """:data:`LOST` with the transport's word for why, where it is worth saying (Flower stopped the
    ClientApp that had the message): said on stderr and in the run's record each time, and such
    work is sent again at most :data:`LOSSES` times in all."""

    def __new__(cls, why: str):
        lost = super().__new__(cls, LOST)
        lost.why = why
        return lost


#: sends of one request whose reply was lost with a reason, before it is sent no more: a fault
#: that recurs (a ClientApp stopped on every try) ends the wait with a word, not after the timeout
LOSSES = 3


def refused(replies: dict) -> None:
    """Stop the run where a node refused the config's algorithm (a hook that failed its check,
    :mod:`fedpd.hooks`): the line the in-process engine raises, not rejected uploads — every node
    computes the same, so no round of this config can succeed."""
    for reply in replies.values():
        if reply is not None and reply.config.get("refused"):
            raise HookError(str(reply.config["refused"]))


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

    def __init__(self, runtimes: dict[int, NodeRuntime], defer_commits: bool = False):
        self.runtimes, self.defer_commits = dict(runtimes), defer_commits
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


class _Twice(Exception):
    """Two nodes claim a client (:meth:`RemoteEngine._who_hosts`)."""

    def __init__(self, nodes: tuple[int, int]):
        super().__init__(nodes)
        self.nodes = nodes


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
                 timeout: float = 600.0, poll: float = 0.01, context: dict | None = None,
                 config_hash: str | None = None):
        self.algorithm, self.config_toml, self.transport = algorithm, config_toml, transport
        self.context = dict(context or {})  # sent with every request (e.g. where simulated nodes keep state)
        # the run's key on the nodes: a new token per run (a checkpoint gives back its own)
        self.config_hash = config_hash or hashlib.sha256(config_toml.encode()).hexdigest()[:16]
        self.token = secrets.token_hex(8)
        self.context["run-key"] = run_key(self.token, self.config_hash)
        self._opened = not init_client  # stateless clients (FedAvg) keep nothing: no run to start on the nodes
        self.num_clients, self.seed, self.max_reply_bytes = num_clients, seed, max_reply_bytes
        # how often replies are pulled (a transport may ask for less often: each pull is a request to
        # Flower's SuperLink) and the node list is read
        self.timeout = timeout
        self.poll, self.list_every = getattr(transport, "poll", poll), 0.5
        self.hosted: dict[int, list[int]] = {}
        self._asked: dict[int, list[int]] = {}  # train / commit request key -> the clients it is for
        self.attack = attack if attack is not None else Attack().bind(num_clients)
        self.comm = CommCounter()
        self.store = RemoteStates(self, init_client, num_clients)
        self._sample_grads = 0
        self.prune: int | None = None  # rounds of the last checkpoint written: nodes may drop older versions
        self.on_notice: Callable[[int, str], None] | None = None  # (round from 1, line): the run's record
        self.gone: dict[int, list[int]] = {}  # nodes listed no longer -> their clients (dropped out until back)
        # commits that ride with each node's next message (a deployment: see the module docstring):
        # the clients a node trained -> (round, those accepted); and each such round's reply
        self.defer = bool(getattr(transport, "defer_commits", False))
        self.pending: dict[tuple[int, ...], tuple[int, list[int]]] = {}
        self.replies: dict[int, State] = {}
        self.rounds = 0  # rounds the nodes' states have seen
        self.node_of: dict[int, int] = {}
        # a connected node that has not answered for this long is said (a deployment's transport
        # sets it: Flower may have lost the message on the node); 3x the slowest reply seen, at least
        self.stall_after: float | None = getattr(transport, "stall_after", None)
        self._slowest = 0.0
        self.no_reply: dict[int, str] = {}  # why the last exchange got no reply from a request (when known)
        self.node_of = self._federation()
        self.hosted = {n: sorted(i for i, m in self.node_of.items() if m == n) for n in set(self.node_of.values())}
        self._trained: dict[int, list[int]] = {}
        self.hosts_seen: set[str] = set()  # where clients trained (machine / Ray node), as nodes report it

    # --- who hosts whom ---------------------------------------------------------------------
    def _federation(self) -> dict[int, int]:
        """Who hosts whom, from every node's hello; waits (up to the timeout) until every client
        is hosted, as nodes connect one by one. Each node is asked once (a node started as Flower
        does by default answers from a fresh process, which may take long on a loaded machine):
        the ones that joined since are asked on the next turn. Two nodes claiming a client are
        asked again (one may be a node that died and was restarted under a new id, still listed)."""
        deadline, said = time.monotonic() + self.timeout, False
        heard: dict[int, Envelope | None] = {}
        checked: set[tuple[int, int]] = set()
        while True:
            new = [n for n in self.transport.nodes() if n not in heard]
            if new:
                heard.update(self.exchange({n: Envelope("hello") for n in new}, reroute=False,
                                           timeout=max(1.0, deadline - time.monotonic())))
            heard = {n: r for n, r in heard.items() if r is not None}  # one that went away is asked again
            nodes = self.transport.nodes()
            try:
                node_of = self._who_hosts({n: r for n, r in heard.items() if n in nodes}, checked)
            except _Twice as twice:  # ask both again: the one that does not answer is not there
                checked.add(twice.nodes)
                for node in twice.nodes:
                    heard.pop(node, None)
                continue
            missing = [i for i in range(self.num_clients) if i not in node_of]
            if not missing:
                return node_of
            where = f"{len(nodes)} node(s) connected" if nodes else "no node is connected"
            if time.monotonic() > deadline or not hasattr(self.transport, "wait_for_nodes"):
                raise ConfigError(f"clients {client_ranges(missing)} are hosted by no node ({len(missing)} of "
                                  f"{self.num_clients} clients; {where}): {hosting_advice(missing)}, or raise "
                                  f"run.node_timeout (waited {self.timeout:g} s)")
            if not said:  # the wait is said at once, not only when it ends
                self.notice(f"waiting up to {self.timeout:g} s (run.node_timeout) for nodes hosting clients "
                            f"{client_ranges(missing)} ({where})")
                said = True
            self.transport.wait_for_nodes()

    def _who_hosts(self, replies: dict[int, Envelope], checked: set[tuple[int, int]]) -> dict[int, int]:
        """Client id -> node, from the nodes' hello replies; one line for a federation that is wrong
        (a client hosted twice: once both nodes were asked again, ``checked``)."""
        node_of: dict[int, int] = {}
        for node in sorted(replies):
            reply = replies[node]
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
                    if (node_of[int(i)], node) not in checked:
                        raise _Twice((node_of[int(i)], node))
                    raise ConfigError(f"client {i} is hosted twice (nodes {node_of[int(i)]} and {node}); each "
                                      f"client must live on exactly one node")
                node_of[int(i)] = node
        return node_of

    def ask(self, requests: dict[int, Envelope], timeout: float | None = None) -> dict[int, Envelope]:
        """Requests that must succeed (hello, commit, restore, states): a failure is an error. A node
        that is gone is waited for (up to the timeout): nothing can go on without its clients."""
        listed = set(self.transport.nodes())
        for node in requests:
            if node in self.gone or node not in listed:
                self.notice(f"{self.node_name(node)} is not connected: waiting up to {self.timeout:g} s "
                            f"(run.node_timeout) for it, to {requests[node].kind}; "
                            f"{hosting_advice(self.hosted.get(node, []))}")
        carried = self._carry(requests)
        replies = self.exchange(requests, timeout=timeout)
        refused(replies)
        for node, reply in replies.items():
            if reply is None and node in self.no_reply:
                raise ConfigError(f"{self.node_name(node)}: no reply to {requests[node].kind} ({self.no_reply[node]}): "
                                  f"{hosting_advice(self.hosted.get(node, []))}, then resume")
            if reply is None:
                raise ConfigError(
                    f"{self.node_name(node)}: no reply to {requests[node].kind} within {self.timeout:g} s "
                    f"(run.node_timeout): {hosting_advice(self.hosted.get(node, []))}, then resume"
                )
            if "error" in reply.config:
                raise ConfigError(f"{self.node_name(node)}: {requests[node].kind} failed: {reply.config['error']}")
        self._carried(carried, replies)
        return replies

    def _carry(self, requests: dict[int, Envelope]) -> dict[int, tuple[int, ...]]:
        """Put each pending commit into the request to the node that hosts its clients now; which
        commit went to which node."""
        carried = {}
        for clients, (round, accepted) in self.pending.items():
            node = self._host(list(clients))
            if node in requests and requests[node].kind != "hello":
                env = requests[node]
                env.config.update({"commit-round": round, "commit-accepted": accepted})
                env.arrays = {**env.arrays, **pack("r", self.replies[round])}
                carried[node] = clients
        return carried

    def _carried(self, carried: dict[int, tuple[int, ...]], replies: dict) -> None:
        """The commits of the nodes that answered (no error) are made: no longer pending."""
        for node, clients in carried.items():
            reply = replies.get(node)
            if reply is not None and "error" not in reply.config:
                del self.pending[clients]
        needed = {round for round, _ in self.pending.values()}
        self.replies = {r: v for r, v in self.replies.items() if r in needed}

    def exchange(self, requests: dict[int, Envelope], timeout: float | None = None,
                 reroute: bool = True, drop_gone: bool = False, stall_ends: bool = False) -> dict[int, Envelope | None]:
        """Send every node its request; the replies by node (None: none within the deadline).

        A node that is lost on the way (it vanished from the node list, or the transport says
        its reply will never come) has its request sent again to the node that hosts its clients
        now — a restarted SuperNode comes back under a new id with the same clients and files,
        and the work is deterministic, so the result is the same. ``drop_gone``: a request whose
        clients' node is not listed (Flower marks a node that left, or missed its heartbeats, as
        offline) is not waited for: None at once, and the node is said to be gone (once).

        A reply lost with a reason (:class:`Lost`) is said, and such a request is sent at most
        :data:`LOSSES` times; a connected node that has not answered after ``stall_after`` is said
        once (``stall_ends``: and not waited for any longer). :attr:`no_reply` then says why a
        request got None."""
        for env in requests.values():
            env.config.update(self.context, config=self.config_toml)
        # whose work each request is: the clients asked for (train, commit) or all the node hosts
        clients = {key: list(self._asked.get(key) or self.hosted.get(key, [])) for key in requests}
        wait = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        known = nodes = set(self.transport.nodes())
        listed_at = time.monotonic()
        outstanding: dict[Hashable, tuple[int, int]] = {}  # handle -> (request key, node it went to)
        sent: dict[Hashable, float] = {}  # handle -> when
        replies: dict[int, Envelope | None] = {}
        lost: list[int] = []
        losses: dict[int, int] = {}
        stalled: set[int] = set()
        self.no_reply = {}

        def send(pairs: list[tuple[int, int]]) -> None:  # (request key, node to send it to)
            handles = self.transport.push_many([(node, requests[key]) for key, node in pairs])
            for (key, node), handle in zip(pairs, handles):
                if handle is None:
                    lost.append(key)
                else:
                    outstanding[handle], sent[handle] = (key, node), time.monotonic()

        # to the node that hosts the request's clients now (a restart moves them); nothing to a
        # node that is not listed (it would find stale work when it comes back)
        targets = [(key, self._host(clients[key]) if clients[key] else key) for key in requests]
        lost += [key for key, node in targets if node not in known]
        send([(key, node) for key, node in targets if node in known])
        while outstanding or lost:
            for handle, reply in self.transport.pull(list(outstanding)).items():
                key, node = outstanding.pop(handle)
                took = time.monotonic() - sent.pop(handle)
                if isinstance(reply, str):  # LOST
                    if self._lost_for_good(key, node, requests[key].kind, getattr(reply, "why", ""), losses,
                                           reroute):
                        replies[key] = None
                    else:
                        lost.append(key)
                else:
                    replies[key] = reply
                    self._slowest = max(self._slowest, took)
            if self.stall_after is not None:
                self._stalls(requests, outstanding, sent, nodes, stalled, wait, stall_ends, replies)
            if time.monotonic() >= listed_at + self.list_every:  # (the node list changes slowly)
                nodes, listed_at = set(self.transport.nodes()), time.monotonic()
            for handle, (key, node) in list(outstanding.items()):
                if node not in nodes:  # gone from the federation: its work is lost
                    del outstanding[handle]
                    lost.append(key)
            if not reroute:  # (a hello) nowhere else to send it: no reply
                replies.update((key, None) for key in lost)
                lost.clear()
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
            if drop_gone:  # nowhere to send it: its clients' node is gone
                for key in list(lost):
                    self._gone(self._host(clients[key]) if clients[key] else key)
                    lost.remove(key)
                    replies[key] = None
            if time.monotonic() > deadline:
                break
            if outstanding or lost:
                time.sleep(self.poll)
        for key in requests:
            replies.setdefault(key, None)
        return replies

    def _lost_for_good(self, key: int, node: int, kind: str, why: str, losses: dict[int, int], reroute: bool) -> bool:
        """Say a reply lost with a reason (``why``; a plain loss is not said: the work goes again
        in silence); whether the request is sent no more (:data:`LOSSES`)."""
        if not why:
            return False
        losses[key] = losses.get(key, 0) + 1
        if not reroute:  # (a hello: asked again on the next turn)
            self.no_reply[key] = why
            self.notice(f"{self.node_name(node)}: {why} during {kind}")
            return True
        if losses[key] >= LOSSES:
            self.no_reply[key] = f"{why}, {losses[key]} times"
            self.notice(f"{self.node_name(node)}: {self.no_reply[key]} during {kind}: not sent again")
            return True
        self.notice(f"{self.node_name(node)}: {why} during {kind}; sent again")
        return False

    def _stalls(self, requests, outstanding, sent, nodes, stalled, wait, stall_ends, replies) -> None:
        """Say (once a request) that a connected node has not answered for a while, and why that
        may be (the transport's ``stall_hint``); with ``stall_ends`` its request is waited for no more."""
        limit, now = max(float(self.stall_after), 3 * self._slowest), time.monotonic()
        for handle, (key, node) in list(outstanding.items()):
            if key in stalled or node not in nodes or now - sent[handle] <= limit:
                continue
            stalled.add(key)
            hint = getattr(self.transport, "stall_hint", "")
            more = (": not waited for any longer" if stall_ends
                    else f"; waiting up to {round(wait, 1):g} s (run.node_timeout) in all")
            self.notice(f"{self.node_name(node)}: no reply to {requests[key].kind} after {round(limit, 1):g} s, though "
                        f"it is connected{': ' + hint if hint else ''}{more}")
            if stall_ends:
                del outstanding[handle]
                replies[key] = None
                self.no_reply[key] = f"no reply after {round(limit, 1):g} s"

    def node_name(self, node: int) -> str:
        """A node as its operator knows it: the clients it hosts (its node config's hosted-clients),
        then the transport's id for it (Flower's is a 19-digit number nobody has seen)."""
        hosted = self.hosted.get(node)
        return f"the node of clients {client_ranges(hosted)} (node id {node})" if hosted else f"node {node}"

    def notice(self, text: str, round: int | None = None) -> None:
        """One line on stderr, and in the run's record (round counted from 1; default the round in
        progress)."""
        notice(text)
        if self.on_notice is not None:
            self.on_notice(self.rounds + 1 if round is None else round, text)

    def _gone(self, node: int | None) -> None:
        """``node`` is not listed any more: said once, its clients drop out until it is back."""
        if node is None or node in self.gone:
            return
        clients = self.gone[node] = self.hosted.get(node, [])
        self.notice(f"{self.node_name(node)} is gone (not among the connected nodes): its clients drop out of "
                    f"every round until it is back; {hosting_advice(clients)}")

    def _back(self) -> None:
        """Say so when a gone node, or a node hosting its clients, is listed again."""
        nodes = set(self.transport.nodes())
        for node in sorted(self.gone):
            if node in nodes or node not in self.hosted:  # back, or its clients moved to a node that joined
                self.notice(f"the node of clients {client_ranges(self.gone.pop(node))} is back")

    def _host(self, clients: list[int]) -> int | None:
        """The one node that hosts all of ``clients`` now (None: none, or they are split)."""
        hosts = {self.node_of.get(i) for i in clients}
        return hosts.pop() if len(hosts) == 1 else None

    def _adopt(self, new_nodes: set[int]) -> None:
        """Ask nodes that joined whom they host; they take over those clients (a restarted node)."""
        if not new_nodes:
            return
        replies = self.exchange({n: Envelope("hello") for n in new_nodes}, reroute=False)
        for node, reply in replies.items():
            if reply is not None and "error" in reply.config:  # e.g. another node holds its store-dir
                self.notice(f"{self.node_name(node)} joined and refused the run: {reply.config['error']}")
            if reply is None or "error" in reply.config:
                continue
            for i in reply.config.get("hosted", []):
                if 0 <= int(i) < self.num_clients:
                    self.node_of[int(i)] = node
        self.hosted = {n: sorted(i for i, m in self.node_of.items() if m == n) for n in set(self.node_of.values())}

    # --- the engine contract ----------------------------------------------------------------
    #: the clients' devices, links and clock (``[system]``: fedpd.system.Fleet), set by the run; None: no clock
    fleet = None
    #: what takes the server step in the algorithm's place ([privacy]: fedpd.privacy.PrivateAggregation),
    #: set by the run; None: the algorithm itself
    aggregation = None

    @property
    def sample_grads(self) -> int:
        return self._sample_grads

    def run_round(self, server: State, ids: Tensor, round: int) -> State:
        server = run_round(self.algorithm, server, ids, round, clients=self, comm=self.comm, attack=self.attack,
                           seed=self.seed, num_clients=self.num_clients, fleet=self.fleet,
                           aggregation=self.aggregation)
        self.rounds = round + 1
        return server

    def train(self, message: State, ids: Tensor, round: int) -> list[tuple[Tensor, State]]:
        self._back()
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
        carried = self._carry(requests)
        replies = self.exchange(requests, drop_gone=True)  # a node that is gone is not waited for
        refused(replies)
        answered = {
            n for n, r in replies.items() if r is not None and not (n in by_node and self._problem(r, by_node[n]))
        }
        self._carried({n: c for n, c in carried.items() if n in answered}, replies)  # (a commit sent again is harmless)
        for node in starting:
            reply = replies.get(node)
            if reply is None or "error" in reply.config:
                why = "no reply" if reply is None else reply.config["error"]
                self.notice(f"{self.node_name(node)}: could not start the run ({why}); it will when its clients' "
                            f"work arrives", round + 1)
        self._trained, groups = {}, []
        for node, asked in by_node.items():
            reply = replies.get(node)
            part = torch.tensor(asked, dtype=torch.int64)
            if reply is None:  # no reply in time, or the node is gone: its clients dropped out of the round
                self.comm.dropouts += len(asked)
                if node not in self.gone:  # (a gone node was said once)
                    why = f" ({self.no_reply[node]})" if node in self.no_reply else ""
                    self.notice(f"{self.node_name(node)}: no reply to train in round {round + 1}{why}; its "
                                f"{len(asked)} client(s) dropped out", round + 1)
                continue
            problem = self._problem(reply, asked)
            if problem:  # an error, a malformed or an oversized reply: rejected, state kept
                self.notice(f"{self.node_name(node)}: {problem} in round {round + 1}; its {len(asked)} upload(s) "
                            f"rejected", round + 1)
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
        if self.defer:  # with each node's next message (the run's end sends what is left: finish)
            for asked in self._trained.values():
                self.pending[tuple(asked)] = (round, [i for i in asked if i in accepted])
            if self._trained:
                self.replies[round] = {k: v.detach().cpu().clone() for k, v in reply.items()}
            self._trained = {}
            return
        arrays = pack("r", reply)
        requests = {n: Envelope("commit", {"round": round, "accepted": [i for i in asked if i in accepted]}, arrays)
                    for n, asked in self._trained.items()}
        self._asked = dict(self._trained)
        if requests:
            self.ask(requests)
        self._trained, self._asked = {}, {}

    def finish(self) -> None:
        """The run's end: the commits still pending go to their nodes now. One that does not arrive
        (the node is gone) stays in the last checkpoint, and a resume makes it."""
        requests, asked, rounds = {}, {}, {}
        for clients, (round, accepted) in self.pending.items():
            node = self._host(list(clients))
            if node is not None:
                requests[node] = Envelope(
                    "commit", {"round": round, "accepted": accepted}, pack("r", self.replies[round])
                )
                asked[node], rounds[node] = list(clients), round
        if not requests:
            return
        self._asked = asked
        # (the run is over: a node that does not answer is not waited for past the stall; a resume commits)
        replies = self.exchange(requests, drop_gone=True, stall_ends=True)
        self._asked = {}
        refused(replies)
        for node, reply in replies.items():
            if reply is None or "error" in reply.config:
                why = f" ({self.no_reply[node]})" if reply is None and node in self.no_reply else ""
                self.notice(f"{self.node_name(node)}: the commit of round {rounds[node] + 1} did not reach it{why}; "
                            f"its clients' states of that round stay on it, and a resume commits them")
            else:
                del self.pending[tuple(asked[node])]

    # --- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        sd = {"comm": self.comm.state_dict(), "sample_grads": self._sample_grads, "rounds": self.rounds,
              "run": self.token, "layout": self.layout()}
        if self.pending:  # commits the nodes have not made yet: a resume makes them
            sd["pending"] = [
                {"clients": list(c), "round": r, "accepted": list(a)} for c, (r, a) in self.pending.items()
            ]
            sd["replies"] = {int(r): dict(v) for r, v in self.replies.items()}
        return sd

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
                              f"the run again with {advice.overwrite()}")
        self.comm.load_state_dict(sd["comm"])
        self._sample_grads, self.rounds = sd["sample_grads"], sd["rounds"]
        self.pending = {tuple(int(i) for i in p["clients"]): (int(p["round"]), [int(i) for i in p["accepted"]])
                        for p in sd.get("pending", [])}
        self.replies = {int(r): dict(v) for r, v in sd.get("replies", {}).items()}
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
        self.pending, self.replies = {}, {}
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
