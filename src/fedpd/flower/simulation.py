"""``run.engine = "flower"``: a fedpd run on Flower's simulation runtime (Ray backend).

``fedpd run`` (or :func:`fedpd.run`, through :func:`fedpd.engines.open_runtime`) holds a
:class:`FlowerSession` open: ``flwr.simulation.run_simulation`` with ``run.nodes`` virtual
SuperNodes; the fedpd loop runs in the ServerApp, which Flower runs in a
thread of this process, and writes the run directory as usual; virtual node k hosts the k-th
block of clients and keeps their states under ``<run>/nodes/node<k>``. With ``RAY_ADDRESS`` set
the virtual nodes run on that Ray cluster (``ray start --head`` here, ``ray start --address=…``
on other machines): one simulation spread over several machines.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
import warnings

from fedpd.config import Config
from fedpd.flower import require_flower
from fedpd.flower.transport import FlowerTransport


def backend_config(cfg: Config) -> dict:
    """Ray settings: one CPU per virtual-node worker; a private local Ray unless RAY_ADDRESS
    names a cluster (then Ray's own resources decide how many run at once)."""
    if os.environ.get("RAY_ADDRESS"):
        init_args = {"logging_level": logging.ERROR, "log_to_driver": False}
    else:  # "local": never join a cluster a stale /tmp/ray/ray_current_cluster points at
        cpus = max(1, min(cfg.run.nodes, os.cpu_count() or 1))
        init_args = {"address": "local", "num_cpus": cpus, "include_dashboard": False,
                     "logging_level": logging.ERROR, "log_to_driver": False}
    return {"client_resources": {"num_cpus": 1, "num_gpus": 0.0}, "init_args": init_args}


class FlowerSession:
    """Flower's simulation runtime kept running while fedpd sends it work.

    ``run_simulation`` runs in a background thread; its ServerApp serves calls on its ``Grid``
    from a queue until the session closes, so :attr:`transport` reaches the virtual nodes from
    the caller's thread — the fedpd loop (progress, Ctrl-C, checkpoints) stays where it always
    is, and several runs (the tests, a benchmark) can share one Ray start. Use it as a context
    manager: closing it ends the simulation and shuts Ray down."""

    def __init__(self, nodes: int, backend: dict):
        require_flower()
        from flwr.serverapp import ServerApp

        self._jobs: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        app = ServerApp()

        @app.main()
        def _serve(grid, context) -> None:
            self._ready.set()
            while (job := self._jobs.get()) is not None:
                fn, box, done = job
                try:
                    box["value"] = fn(grid)
                except BaseException as err:  # handed to the caller
                    box["error"] = err
                done.set()

        for name in ("flwr", "ray"):
            logging.getLogger(name).setLevel(logging.ERROR)
        os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
        self._thread = threading.Thread(target=self._simulate, args=(app, nodes, backend), daemon=True,
                                        name="fedpd-flower-simulation")
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        self.transport = SessionTransport(self)

    def _simulate(self, app, nodes: int, backend: dict) -> None:
        from flwr.simulation import run_simulation

        from fedpd.flower.clientapp import client_app

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run_simulation(server_app=app, client_app=client_app, num_supernodes=nodes, backend_config=backend)
        except BaseException as err:
            self._error = err
        finally:
            self._ready.set()

    def call(self, fn):
        """``fn(grid)`` in the ServerApp's thread; its result (or its exception)."""
        if not self._thread.is_alive():
            raise RuntimeError(f"Flower's simulation has stopped ({self._error!r})")
        box: dict = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        while not done.wait(1.0):
            if not self._thread.is_alive():
                raise RuntimeError(f"Flower's simulation has stopped ({self._error!r})")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()

    def __enter__(self) -> "FlowerSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SessionTransport:
    """:class:`~fedpd.flower.transport.FlowerTransport` calls, made in the session's ServerApp."""

    def __init__(self, session: FlowerSession):
        self.session = session

    def nodes(self) -> list[int]:
        return self.session.call(lambda grid: FlowerTransport(grid).nodes())

    def wait_for_nodes(self) -> None:
        time.sleep(0.2)

    def push(self, node, request):
        return self.session.call(lambda grid: FlowerTransport(grid).push(node, request))

    def push_many(self, requests):
        return self.session.call(lambda grid: FlowerTransport(grid).push_many(requests))

    def pull(self, handles):
        return self.session.call(lambda grid: FlowerTransport(grid).pull(handles))
