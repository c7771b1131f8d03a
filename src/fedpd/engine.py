"""The in-process engine: runs an algorithm's rules for one round, counting every message.

Participants are processed in chunks of ``chunk`` clients, each chunk as one vectorised
[chunk, d] computation (``None``: all participants at once; 1: one client at a time). The
engine knows nothing about which algorithm it runs.

Every upload passes one screen here (:mod:`fedpd.attacks`): a configured update attack corrupts
the chosen parties' rows first, then rows with NaN/Inf or a wrong shape are rejected — never
aggregated, counted as ``rejected_uploads`` — and their clients keep their state of before the
round, as if they had dropped out.
"""

from __future__ import annotations

import torch

from fedpd.algorithms.base import Algorithm
from fedpd.attacks import finite_rows, screen
from fedpd.comm import CommCounter
from fedpd.store import ClientStore, State


class InProcessEngine:
    def __init__(self, chunk: int | None = None, attack=None):
        self.chunk = chunk
        self.attack = attack  # a bound fedpd.attacks.Attack corrupting uploads, or None

    def run_round(self, algorithm: Algorithm, server: State, store: ClientStore, comm: CommCounter,
                  ids: torch.Tensor, make_ctx, algo_gen: torch.Generator) -> State:
        """One round with participants ``ids``; returns the new server state (store updated in place)."""
        if ids.numel() == 0:
            comm.end_round()
            return server
        communicates = algorithm.communicates(server, make_ctx(ids).round, algo_gen)
        message = algorithm.broadcast(server)
        comm.down(message, ids.numel())
        parts = [ids] if self.chunk is None else list(torch.split(ids, self.chunk))
        uploads, clients = [], []
        for part in parts:
            ctx = make_ctx(part)
            up, cl = algorithm.local(message, store.get(part), ctx)
            uploads.append(up)
            clients.append(cl)
        keep = None  # rows accepted by the screen (None: all)
        if communicates:
            for up in uploads:
                comm.up(up)  # what was sent, rejected or not
            # every upload passes here: faults are injected, then NaN/Inf/misshapen rows are
            # rejected and counted, and a rejected client is treated as dropped out of the round
            upload, keep = screen(uploads, [p.numel() for p in parts])
            if self.attack is not None:
                upload, _ = self.attack.corrupt(upload, message, ids, make_ctx(ids).round, algorithm.model_uploads)
                keep = keep & finite_rows(upload, ids.numel())
            comm.rejected_uploads += int((~keep).sum())
            if bool(keep.all()):
                keep = None
            else:
                upload = {k: v[keep] for k, v in upload.items()}
            accepted = ids if keep is None else ids[keep]
            if accepted.numel():
                server, reply = algorithm.aggregate(server, upload, make_ctx(accepted))
                comm.down(reply, accepted.numel())
            else:
                reply = {}
        else:
            reply = {}
        kept = [None] * len(parts) if keep is None else torch.split(keep, [p.numel() for p in parts])
        for part, cl, ok in zip(parts, clients, kept):
            if ok is not None:  # rejected clients keep their old state
                part, cl = part[ok], {k: v[ok] for k, v in cl.items()}
                if not part.numel():
                    continue
            if reply:
                cl = algorithm.receive(cl, reply, make_ctx(part))
            store.put(part, cl)
        comm.end_round()
        return server
