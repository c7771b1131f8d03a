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
   (NaN/Inf, wrong shape: rejected, counted);
7. ``aggregate`` over the accepted uploads; its reply is counted down to the accepted senders;
8. ``clients.commit``: accepted clients take the reply (``receive``) and keep their new state;
   rejected and dropped-out clients keep their state of before the round.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from fedpd.algorithms.base import Algorithm, State
from fedpd.attacks import Attack, finite_rows, screen
from fedpd.comm import CommCounter
from fedpd.context import ServerContext
from fedpd.streams import server_generator


class Clients(Protocol):
    """The client half of a round, as an engine provides it."""

    def train(self, message: State, ids: Tensor, round: int) -> list[tuple[Tensor, State | None]]:
        """Run ``local`` on clients ``ids`` (in any grouping and order) and keep each client's new
        state pending; return the uploads as (ids of a group, its uploads [len, ...]) pairs —
        None for a group whose upload came back unusable (rejected); clients that sent nothing
        at all are left out (the engine counts them as dropouts)."""

    def commit(self, ids: Tensor, reply: State, round: int) -> None:
        """Clients ``ids`` take ``reply`` (``receive``; none when empty) and keep their pending
        state; every other pending state of the round is dropped."""


def run_round(algorithm: Algorithm, server: State, ids: Tensor, round: int, *, clients: Clients,
              comm: CommCounter, attack: Attack, seed: int, num_clients: int) -> State:
    """One round with participants ``ids``; returns the new server state."""
    if ids.numel() == 0:
        comm.end_round()
        return server
    communicates = algorithm.communicates(server, round, server_generator(seed, "communication", round))
    message = algorithm.broadcast(server)
    comm.down(message, ids.numel())
    dropped = attack.dropouts(ids, round, seed)
    comm.dropouts += int(dropped.sum())
    working = ids[~dropped]
    groups = clients.train(message, working, round) if working.numel() else []
    if not communicates:
        clients.commit(working, {}, round)
        comm.end_round()
        return server
    unusable = sum(g.numel() for g, up in groups if up is None)  # a node's reply that cannot be read
    groups = [(g, up) for g, up in groups if up is not None]
    for _, up in groups:
        comm.up(up)  # what was sent, rejected or not
    comm.rejected_uploads += unusable
    senders = torch.cat([g for g, _ in groups]) if groups else working[:0]
    uploads, sizes = [u for _, u in groups], [g.numel() for g, _ in groups]
    del groups  # screen empties ``uploads`` as it stacks them: K uploads are held once, not twice
    upload, keep = screen(uploads, sizes)
    order = senders.argsort()
    if not torch.equal(order.cpu(), torch.arange(order.numel())):  # already in id order: no copy
        senders, keep = senders[order], keep[order]
        upload = {k: v.index_select(0, order.to(v.device)) for k, v in upload.items()}
    upload, _ = attack.corrupt(upload, message, senders, round, seed, algorithm.model_uploads,
                               algorithm.update_uploads)
    keep = keep & finite_rows(upload, senders.numel())
    comm.rejected_uploads += int((~keep).sum())
    accepted = senders[keep]
    reply: State = {}
    if accepted.numel():
        if not bool(keep.all()):
            upload = {k: v[keep.to(v.device)] for k, v in upload.items()}
        server, reply = algorithm.aggregate(server, upload, ServerContext(accepted, round, num_clients))
        comm.down(reply, accepted.numel())
    clients.commit(accepted, reply, round)
    comm.end_round()
    return server
