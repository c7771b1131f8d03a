"""The round protocol: what the server does in a round, the same for every engine.

An engine supplies only the client half — running ``local`` on the participants wherever they
live, and delivering the reply — through :class:`Clients`; this module does the rest, so the
sampler's draw, FedPD's communicate-or-skip coin, faults and attacks, the upload screen, the
aggregation and every counted float are identical whichever engine runs the clients:

1. ``communicates`` — the server's own seeded coin for this round (FedPD's skip);
2. ``broadcast`` — sent to every participant, counted down;
3. faults: participants that drop out after receiving it (``dropout``) send nothing;
4. ``clients.train`` — the others run ``local``; each keeps its new state pending;
5. if the round does not communicate, every client that trained commits its state: done;
6. uploads are counted up as sent, then put in ascending client order (so the aggregate does
   not depend on the order replies arrived or clients ran), attacked (update attacks), screened
   (NaN/Inf, wrong shape: rejected, counted); when fewer rows pass than the rule needs
   (``min_uploads``: Krum 2f + 3, a pre-aggregation's K > 2f) every upload of the round is
   rejected and the server stays as it was — the same as a round in which none passes;
7. ``aggregate`` over the accepted uploads; its reply is counted down to the accepted senders;
   a rule whose server step is a plain mean (``means_only``), in a round with no update attack,
   on an engine that trains its clients in id order (``in_id_order``) takes 6–7 streamed
   instead: each group is screened and summed into the mean as it arrives and let go, so the
   round holds one group's uploads, not K — the same aggregate bit for bit (both paths add the
   clients in ascending id order, one at a time: :class:`fedpd.algorithms.base.UploadMean`);
8. ``clients.commit``: accepted clients take the reply (``receive``) and keep their new state;
   rejected and dropped-out clients keep their state of before the round.
"""

from __future__ import annotations

from typing import Iterable, Protocol

import numpy as np
import torch
from torch import Tensor

from fedpd.algorithms.base import Algorithm, State, UploadMean, streams_means
from fedpd.attacks import Attack
from fedpd.comm import WORK, CommCounter
from fedpd.context import ServerContext
from fedpd.errors import ConfigError
from fedpd.hooks import check_server, check_tensors, check_upload_models
from fedpd.names import what
from fedpd.screen import finite_rows, screen
from fedpd.streams import server_generator
from fedpd.system import Fleet, RoundTime


class Clients(Protocol):
    """The client half of a round, as an engine provides it."""

    #: ``train`` yields its groups in ascending client id order, each as soon as it is trained,
    #: with uploads as ``local`` made them (this process: never malformed); the round then sums
    #: a ``means_only`` rule's uploads as they come (optional; absent: False)
    in_id_order: bool

    def train(self, message: State, ids: Tensor, round: int) -> Iterable[tuple[Tensor, State | None]]:
        """Run ``local`` on clients ``ids`` (in any grouping and order) and keep each client's new
        state pending; give the uploads as (ids of a group, its uploads [len, ...]) pairs —
        None for a group whose upload came back unusable (rejected); clients that sent nothing
        at all are left out (the engine counts them as dropouts)."""

    def commit(self, ids: Tensor, reply: State, round: int) -> None:
        """Clients ``ids`` take ``reply`` (``receive``; none when empty) and keep their pending
        state; every other pending state of the round is dropped."""


def run_round(algorithm: Algorithm, server: State, ids: Tensor, round: int, *, clients: Clients,
              comm: CommCounter, attack: Attack, seed: int, num_clients: int, fleet: Fleet | None = None,
              aggregation=None) -> State:
    """One round with participants ``ids``; returns the new server state. With a ``fleet``
    (``[system]``) the round also takes simulated time: uploads that arrive after the deadline,
    beyond the over-selection target or after their client's available period count as dropouts,
    and the fleet's clock moves to the round's end (:class:`fedpd.system.RoundTime`).
    ``aggregation`` takes the server step in the algorithm's place (``aggregate``, or ``mean_terms``
    and ``aggregate_means``): ``[privacy]``'s mechanism wrapped around the algorithm's own step
    (:class:`fedpd.privacy.PrivateAggregation`); None: the algorithm itself."""
    if ids.numel() == 0:
        comm.end_round()
        return server
    communicates = algorithm.communicates(server, round, server_generator(seed, "communication", round))
    message = algorithm.broadcast(server)
    comm.down(message, ids.numel())
    dropped = attack.dropouts(ids, round, seed)
    comm.dropouts += int(dropped.sum())
    working = ids[~dropped]
    clock = RoundTime(fleet, ids, message, fleet.target, round) if fleet is not None else None
    trained = clients.train(message, working, round) if working.numel() else []
    if not communicates:
        for ids, up in trained:  # every client trains (an engine may train a group as it is read)
            if clock is not None:
                clock.trained(ids, _without_work(up)[1])
        clients.commit(working, {}, round)
        if clock is not None:
            clock.end_without_uploads()
        comm.end_round()
        return server
    # (the work key rides only with a clock: without one the groups go through untouched, let go as read)
    groups = _OnTime(trained, clock, comm, missing=bool(dropped.any())) if clock is not None else trained
    streamed = streams_means(algorithm) and attack.family != "update" and getattr(clients, "in_id_order", False)
    aggregate = _streamed if streamed else _stacked
    server, reply, accepted = aggregate(algorithm, server, groups, message, round, comm=comm, attack=attack,
                                        seed=seed, num_clients=num_clients, aggregation=aggregation or algorithm)
    if accepted.numel():
        comm.down(reply, accepted.numel())
    if clock is not None:
        groups.close_round(accepted, reply)
    clients.commit(accepted, reply, round)
    comm.end_round()
    return server


class _OnTime:
    """The round's groups, with each client's counted work (:data:`fedpd.comm.WORK`) taken off, whose
    uploads arrive in time on the fleet's clock — those after the deadline, outside the client's
    available period, or (over-selection) after the first K to arrive are dropouts, unread."""

    def __init__(self, groups, clock: RoundTime, comm: CommCounter, missing: bool):
        self.groups, self.clock, self.comm, self.missing = groups, clock, comm, missing
        self.kept: list[np.ndarray] = []  # arrival ticks of the uploads passed on

    def __iter__(self):
        if self.clock.target is None:
            for ids, up in self.groups:
                ids, up, times = self._delivered(ids, up)
                self.kept.append(times)
                if ids.numel():
                    yield ids, up
            return
        timed = [self._delivered(ids, up) for ids, up in self.groups]  # the first K need every arrival
        arrivals = [(t, i) for ids, _, times in timed for i, t in zip(ids.tolist(), times.tolist())]
        ties = self.clock.tie_breaks([i for _, i in arrivals])
        order = sorted((t, ties[i], i) for t, i in arrivals)[:self.clock.target]
        first = {i for _, _, i in order}
        self.kept.append(np.array([t for t, _, _ in order], dtype=np.int64))
        for ids, up, _ in timed:
            keep = torch.tensor([i in first for i in ids.tolist()], dtype=torch.bool)
            if up is not None and not bool(keep.all()):
                self._drop(int((~keep).sum()))
                ids, up = ids[keep], {k: v[keep.to(v.device)] for k, v in up.items()}
            if ids.numel():
                yield ids, up

    def _drop(self, count: int) -> None:
        self.comm.dropouts += count
        self.missing |= count > 0

    def _delivered(self, ids: Tensor, up: State | None) -> tuple[Tensor, State | None, np.ndarray]:
        """(ids, uploads, arrival ticks) of the group's clients whose uploads arrive in time."""
        up, work = _without_work(up)
        if up is None:  # a reply that could not be read: it came, so nobody is waited for
            return ids, up, np.zeros(0, dtype=np.int64)
        arrival, delivered = self.clock.arrivals(ids, up, work)
        if delivered.all():
            return ids, up, arrival
        self._drop(int((~delivered).sum()))
        keep = torch.from_numpy(delivered)
        return ids[keep], {k: v[keep.to(v.device)] for k, v in up.items()}, arrival[delivered]

    def close_round(self, accepted: Tensor, reply: State) -> None:
        kept = np.concatenate(self.kept) if self.kept else np.zeros(0, dtype=np.int64)
        self.clock.end(kept, self.missing, accepted, reply)


def _without_work(up: State | None) -> tuple[State | None, Tensor | None]:
    """(the uploads without the work key, each client's counted work or None)."""
    if up is None or WORK not in up:
        return up, None
    return {k: v for k, v in up.items() if k != WORK}, up[WORK]


def _stacked(algorithm: Algorithm, server: State, groups, message: State, round: int, *, comm: CommCounter,
             attack: Attack, seed: int, num_clients: int, aggregation) -> tuple[State, State, Tensor]:
    """Steps 6–7 over all K uploads at once (attacks and robust aggregators need them together):
    (new server state, reply, accepted senders)."""
    groups = list(groups)
    unusable = sum(g.numel() for g, up in groups if up is None)  # a node's reply that cannot be read
    groups = [(g, up) for g, up in groups if up is not None]
    for _, up in groups:
        comm.up(up)  # what was sent, rejected or not
    comm.rejected_uploads += unusable
    senders = torch.cat([g for g, _ in groups]) if groups else torch.zeros(0, dtype=torch.int64)
    uploads, sizes = [u for _, u in groups], [g.numel() for g, _ in groups]
    del groups  # screen empties ``uploads`` as it stacks them: K uploads are held once, not twice
    upload, keep = screen(uploads, sizes)
    check_upload_models(algorithm, {k: v.shape[1:] for k, v in upload.items()}, message)  # (most clients sent these)
    order = senders.argsort()
    if not torch.equal(order.cpu(), torch.arange(order.numel())):  # already in id order: no copy
        senders, keep = senders[order], keep[order]
        upload = {k: v.index_select(0, order.to(v.device)) for k, v in upload.items()}
    upload, _ = attack.corrupt(upload, message, senders, round, seed, algorithm.model_uploads,
                               algorithm.update_uploads)
    keep = keep & finite_rows(upload, senders.numel())
    if int(keep.sum()) < algorithm.min_uploads():  # too few usable rows for the rule (Krum: 2f + 3):
        keep = torch.zeros_like(keep)  # the round is void, as when none is usable, not a crash
    comm.rejected_uploads += int((~keep).sum())
    accepted = senders[keep]
    if not accepted.numel():
        return server, {}, accepted
    if not bool(keep.all()):
        upload = {k: v[keep.to(v.device)] for k, v in upload.items()}
    step = server_step(algorithm, "aggregate", server, upload, ServerContext(accepted, round, num_clients, seed),
                       aggregation)
    return step + (accepted,)


def _streamed(algorithm: Algorithm, server: State, groups, message: State, round: int, *, comm: CommCounter,
              attack: Attack, seed: int, num_clients: int, aggregation) -> tuple[State, State, Tensor]:
    """Steps 6–7 for a ``means_only`` rule with no update attack, on groups that arrive in ascending
    id order: each group is counted, screened and added into the mean as it arrives, then let go,
    so the round never holds K uploads. The same rows in the same order as :func:`_stacked`: the
    same aggregate, bitwise."""
    running = _RunningMean(algorithm, UploadMean(aggregation, server), comm, round)
    for ids, up in groups:
        running.add(ids, up)
        del up  # let the group's uploads go before the engine trains the next
    accepted = torch.cat(running.accepted) if running.accepted else torch.zeros(0, dtype=torch.int64)
    if not accepted.numel():
        return server, {}, accepted
    return server_step(algorithm, "aggregate_means", server, running.mean.means(),
                        ServerContext(accepted, round, num_clients, seed), aggregation) + (accepted,)


def server_step(algorithm: Algorithm, hook: str, server: State, given: State, ctx: ServerContext,
                aggregation=None) -> tuple[State, State]:
    """(new server state, reply) of the hook ``aggregate`` or ``aggregate_means`` — the algorithm's, or
    that of the ``aggregation`` wrapped around it (:func:`run_round`) — checked to keep the server
    model's shape (:mod:`fedpd.hooks`)."""
    x0_shape = server["x0"].shape if "x0" in server else None
    out = getattr(aggregation or algorithm, hook)(server, given, ctx)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ConfigError(f"algorithm.name: {type(algorithm).__qualname__}.{hook} returned {what(out)} (allowed: "
                          f"(new server state, reply), two dicts of tensors)")
    check_server(algorithm, hook, out[0], x0_shape)
    check_tensors(algorithm, hook, out[1], "reply")
    return out


class _RunningMean:
    """The streamed round's screen and sum: a group is rejected whole when it is unusable or laid
    out unlike the first group (keys, trailing shapes, dtypes), a row when it is not finite."""

    def __init__(self, algorithm: Algorithm, mean: UploadMean, comm: CommCounter, round: int):
        self.algorithm, self.mean, self.comm, self.round = algorithm, mean, comm, round
        self.accepted: list[Tensor] = []
        self.last, self.layout = -1, None

    def add(self, ids: Tensor, up: State | None) -> None:
        if up is None:
            self.comm.rejected_uploads += ids.numel()
            return
        self.comm.up(up)  # what was sent, rejected or not
        if int(ids[0]) <= self.last or not bool((ids[1:] > ids[:-1]).all()):
            raise RuntimeError(
                f"round {self.round}: the engine gave clients out of id order (after client {self.last})"
            )
        self.last = int(ids[-1])
        if self.layout is None:  # the first group's: a later group laid out otherwise is rejected
            self.layout = {k: (v.shape[1:], v.dtype) for k, v in up.items()}
            check_upload_models(self.algorithm, {k: s for k, (s, _) in self.layout.items()}, self.mean.server)
        if {k: (v.shape, v.dtype) for k, v in up.items()} != {
            k: ((ids.numel(), *s), d) for k, (s, d) in self.layout.items()
        }:
            self.comm.rejected_uploads += ids.numel()
            return
        keep = finite_rows(up, ids.numel())
        self.comm.rejected_uploads += int((~keep).sum())
        if not bool(keep.all()):
            ids, up = ids[keep], {k: v[keep.to(v.device)] for k, v in up.items()}
        self.mean.add(up)
        self.accepted.append(ids)
