"""The Flower ServerApp that runs fedpd (``fedpd.flower.serverapp:server_app``, the server
component of the app ``fedpd flower app`` writes).

In a deployment it reads its run config (``fedpd-config``: the run's TOML; ``out``: the run
directory on the server machine; ``resume``, ``overwrite``) and runs the fedpd loop with the
remote engine over its ``Grid``: metrics.jsonl, checkpoints and status.json (:mod:`fedpd.status`)
are written there, as by ``fedpd run``. The clients' half is :mod:`fedpd.flower.clientapp`.

A resume continues the run in ``out`` with what the app's config changes among the options a
resume may change (``run.rounds``, ``run.node_timeout``, ...: :data:`fedpd.config.RESUMABLE`):
write the app again with ``fedpd flower app ... --overwrite --set run.node_timeout=60``, then run
it with ``--run-config "resume=true"``. Any other difference is refused.

A refusal (bad input, a run directory that holds another run, a resume with nothing to resume)
is one line naming the run config's flags, recorded in ``status.json``, and the ServerApp exits
as failed (Flower's exit code 201) without a traceback.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedpd import advice
from fedpd.config import RESUMABLE, first_difference, load_config
from fedpd.errors import ConfigError, FedpdError
from fedpd.flower.transport import FlowerTransport
from fedpd.runner import CONFIG, load_run_config, run
from fedpd.status import record_refusal

server_app = ServerApp()


def resume_overrides(app_toml: str, out: Path) -> list[str]:
    """What the app's config changes, as ``--set`` overrides of a resume of the run in ``out``: the
    options a resume may change; any other difference is a one-line refusal."""
    if not (out / CONFIG).is_file():
        return []  # the runner says what is missing
    app, kept = load_config(tomllib.loads(app_toml)), load_run_config(out)
    theirs, ours = kept.fingerprint(), app.fingerprint()
    if "auto" in (theirs["run"].get("store"), ours["run"].get("store")):  # resolved by an in-process run only
        ours["run"]["store"] = theirs["run"].get("store")
    differs = first_difference(theirs, ours)
    if differs:
        raise ConfigError(f"resume=true: the app's config differs from the run's in {out} ({differs}); a resume may "
                          f"change only {', '.join('run.' + k for k in RESUMABLE)} (write the app again from "
                          f"{out / CONFIG} with fedpd flower app ... --overwrite)")
    ours, theirs = app.resolved()["run"], kept.resolved()["run"]
    return [f"run.{k}={_toml(ours[k])}" for k in RESUMABLE if k in ours and ours[k] != theirs.get(k)]


def _toml(value) -> str:
    import tomli_w

    return tomli_w.dumps({"v": value}).partition("=")[2].strip()


@server_app.main()
def _main(grid: Grid, context: Context) -> None:
    rc = dict(context.run_config)
    out = Path(str(rc.get("out") or "runs/flower"))
    try:
        with advice.flower_app():
            if "fedpd-config" not in rc:
                raise ConfigError("run config: fedpd-config missing (write the app with: fedpd flower app CONFIG "
                                  "--out DIR)")
            if bool(rc.get("resume", False)) and bool(rc.get("overwrite", False)):
                raise ConfigError('run config: resume=true and overwrite=true together (give one: "resume=true" '
                                  'continues the run, "overwrite=true" starts it over)')
            transport = FlowerTransport(grid, deployed=True)
            if bool(rc.get("resume", False)):
                result = run(resume=out, overrides=resume_overrides(str(rc["fedpd-config"]), out), progress=True,
                             transport=transport)
            else:
                cfg = load_config(tomllib.loads(str(rc["fedpd-config"])))
                result = run(cfg, out, overwrite=bool(rc.get("overwrite", False)), progress=True, transport=transport)
    except FedpdError as err:  # one line with the run config's flags, not a traceback
        print(f"fedpd: error: {err}", file=sys.stderr, flush=True)
        record_refusal(out, str(err), resume=f"flwr run APP CONNECTION {advice.RESUME_FLOWER}")
        _fail(f"fedpd: the line above says why the run stopped (fedpd status {out} says it too)")
    last = result.history[-1] if result.history else {}
    print(f"fedpd: finished round {last.get('round')}; run directory: {out}", flush=True)


def _fail(message: str) -> None:
    """End the ServerApp as failed (``flwr list`` shows it; the stream says Exit Code 201), without
    the traceback Flower prints for an exception."""
    from flwr.supercore.exit import ExitCode, flwr_exit

    flwr_exit(ExitCode.SERVERAPP_EXCEPTION, message)
