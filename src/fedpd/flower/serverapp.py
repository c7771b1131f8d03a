"""The Flower ServerApp that runs fedpd (``fedpd.flower.serverapp:server_app``, the server
component of the app ``fedpd flower app`` writes).

In a deployment it reads its run config (``fedpd-config``: the run's TOML; ``out``: the run
directory on the server machine; ``resume``, ``overwrite``) and runs the fedpd loop with the
remote engine over its ``Grid``: metrics.jsonl and checkpoints are written there, as by
``fedpd run``. The clients' half is :mod:`fedpd.flower.clientapp`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpd.config import load_config
from fedpd.errors import ConfigError
from fedpd.flower.transport import FlowerTransport
from fedpd.runner import run

server_app = ServerApp()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    if "fedpd-config" not in rc:
        raise ConfigError("run config: fedpd-config missing (write the app with: fedpd flower app CONFIG --out DIR)")
    out = Path(str(rc.get("out") or "runs/flower"))
    resume = bool(rc.get("resume", False))
    cfg = load_config(tomllib.loads(str(rc["fedpd-config"])))
    kwargs = {"resume": out} if resume else {"config": cfg, "out": out, "overwrite": bool(rc.get("overwrite", False))}
    result = run(**kwargs, progress=True, transport=FlowerTransport(grid))
    last = result.history[-1] if result.history else {}
    print(f"fedpd: finished round {last.get('round')}; run directory: {out}", flush=True)
