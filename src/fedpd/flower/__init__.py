"""fedpd on Flower (``pip install "fedpd[flower]"``): any fedpd algorithm, unchanged, on Flower's
simulation runtime (Ray) or on a real SuperLink / SuperNode deployment with TLS and node
authentication.

The fedpd run loop runs inside a Flower ServerApp: sampling, FedPD's coin, attacks, the upload
screen, aggregation, metrics and checkpoints stay on the server, exactly as in process
(:mod:`fedpd.protocol`); the clients' ``local`` runs on the SuperNodes that host them, through
the remote engine (:mod:`fedpd.remote`), whose envelopes travel as Flower messages
(:mod:`fedpd.flower.transport`). Client state lives in a versioned file store on each node, so
a SuperNode that restarts continues with its clients. See docs/deployment.md.
"""

from __future__ import annotations

from fedpd.errors import ConfigError


def require_flower():
    """Import flwr, or say in one line how to get it."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise ConfigError('run.engine: "flower" needs Flower: pip install "fedpd[flower]"') from None
