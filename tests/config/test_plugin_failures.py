"""A plug-in algorithm that fails — a hook that returns a state of the wrong shape, or None, or
raises — is one line naming the plug-in and the hook, exit status 2, on every engine: the
loopback nodes (and Flower's, which run the same node code) refuse it as the in-process engine
does rather than rejecting every upload. A new run stopped so before its first checkpoint leaves
no directory; one stopped after it can be resumed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import tomli_w

import fedpd
from fedpd.config import load_config
from fedpd.hooks import HookError
from fedpd.io import read_jsonl
from fedpd.remote.filestore import run_key
from fedpd.remote.messages import Envelope
from fedpd.remote.node import NodeRuntime
from helpers import run_cli
from user_plugins import write_module

BASE = {"problem": {"name": "least_squares", "clients": 5, "samples_per_client": 8, "dim": 3},
        "solver": {"name": "gd", "lr": 0.1, "local_steps": 2}, "run": {"rounds": 1}}

PLUGINS = '''
import os

import torch
from fedpd.algorithms import FedAvg


class BadClient(FedAvg):
    def init_client(self, x0):
        return {"c": torch.zeros(2, 2, dtype=x0.dtype)}

    def local(self, message, clients, ctx):
        up, _ = super().local(message, clients, ctx)
        return up, {"c": torch.zeros(ctx.ids.numel(), 5, dtype=clients["c"].dtype)}


class NoServer(FedAvg):
    def init_server(self, x0):
        return None


class SetupRaises(FedAvg):
    def setup(self, info, solver):
        raise RuntimeError("a bug in my setup")


class LocalRaises(FedAvg):
    def local(self, message, clients, ctx):
        if ctx.round >= int(os.environ.get("CRASH_FROM_ROUND", "0")):
            raise RuntimeError("a bug in my local")
        return super().local(message, clients, ctx)


class ShortUpload(FedAvg):
    def local(self, message, clients, ctx):
        up, new = super().local(message, clients, ctx)
        return {**up, "x": up["x"][:, :-1]}, new
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch) -> str:
    monkeypatch.chdir(tmp_path)
    return write_module(tmp_path, PLUGINS, "failing_plugins")


def config(tmp_path: Path, algorithm: str, **run) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps({**BASE, "algorithm": {"name": algorithm}, "run": {**BASE["run"], **run}}))
    return path


def refused(tmp_path: Path, capsys, path: Path) -> str:
    """``fedpd run PATH``: its one line, after checking exit 2 and that nothing was written."""
    out = tmp_path / "run"
    code, stdout, err = run_cli(["run", path, "--out", out, "--quiet"], capsys)
    # a deployed engine may first say it waits for its nodes, as fast or slow as they connect: not the refusal
    lines = [line for line in err.strip().splitlines() if not line.startswith("fedpd: waiting up to ")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("fedpd: error: "), (code, err)
    assert stdout == "" and not out.exists()
    return lines[0].removeprefix("fedpd: error: ")


# --- every engine checks hooks alike ---------------------------------------------------------
@pytest.mark.parametrize("engine", ["inprocess", "loopback"])
def test_a_bad_client_state_is_refused_on_every_engine(engine, plugins, tmp_path, capsys):
    """On loopback it was every upload rejected, round after round, exit 0 with the model unmoved."""
    line = refused(tmp_path, capsys, config(tmp_path, f"{plugins}:BadClient", engine=engine, rounds=3))
    assert line.startswith("algorithm.name: BadClient.local returned client state 'c' of shape (") and \
        "init_client's (2, 2) for each" in line, line


def test_a_node_answers_a_failed_hook_check_as_a_refusal(plugins, tmp_path):
    """What a Flower SuperNode answers too (its ClientApp hands the message to this runtime)."""
    cfg = load_config(config(tmp_path, f"{plugins}:BadClient"))
    node = NodeRuntime([0, 1, 2, 3, 4], tmp_path / "node", durable=False)
    request = {"round": 0, "ids": [0, 1], "config": cfg.to_toml(), "run-key": run_key("0" * 16, "1" * 16)}
    reply = node.handle(Envelope("train", request, {"m/x0": np.zeros(3)}))
    assert reply.config["refused"].startswith("algorithm.name: BadClient.local returned client state 'c' of shape "
                                              "(2, 5) for 2 clients")


@pytest.mark.parametrize("engine", ["inprocess", "loopback"])
def test_an_upload_of_the_wrong_shape_is_blamed_on_the_hook_that_made_it(engine, plugins, tmp_path, capsys):
    """It was blamed on aggregate_means, whose x0 then had the upload's shape."""
    line = refused(tmp_path, capsys, config(tmp_path, f"{plugins}:ShortUpload", engine=engine))
    assert line == "algorithm.name: ShortUpload.local returned upload 'x' of shape (2,) per client (allowed: (3,), " \
                   "the broadcast model x0's: 'x' is one of its model or update uploads)", line


# --- what a plug-in's hook returns or raises ----------------------------------------------------
def test_init_server_returning_none_is_one_line(plugins, tmp_path, capsys):
    line = refused(tmp_path, capsys, config(tmp_path, f"{plugins}:NoServer"))
    assert line == "algorithm.name: NoServer.init_server returned a NoneType as its server state (allowed: a dict " \
                   "of tensors)", line


@pytest.mark.parametrize("name, hook", [("SetupRaises", "setup"), ("LocalRaises", "local")])
@pytest.mark.parametrize("engine", ["inprocess", "loopback"])
def test_a_plugin_hook_that_raises_is_one_line_naming_it(name, hook, engine, plugins, tmp_path, capsys):
    """From local() it left config.toml, metrics.jsonl and plugins.json with no checkpoint."""
    line = refused(tmp_path, capsys, config(tmp_path, f"{plugins}:{name}", engine=engine))
    at = next(n for n, text in enumerate(textwrap.dedent(PLUGINS).splitlines(), 1) if f"a bug in my {hook}" in text)
    assert line == f"algorithm.name: the plug-in {plugins}:{name} failed in its {hook} hook (at {plugins}.py:{at}): " \
                   f"RuntimeError: a bug in my {hook}", line


def test_a_run_a_plugin_stopped_after_its_first_checkpoint_resumes(plugins, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CRASH_FROM_ROUND", "2")
    path = config(tmp_path, f"{plugins}:LocalRaises", rounds=4, eval_every=1)
    code, _, err = run_cli(["run", path, "--out", tmp_path / "run", "--quiet"], capsys)
    assert code == 2 and "failed in its local hook" in err and len(err.strip().splitlines()) == 1, err
    assert (tmp_path / "run" / "checkpoint.pt").is_file()  # of round 2: the crash was in round 3
    monkeypatch.setenv("CRASH_FROM_ROUND", "99")  # the bug fixed
    code, _, err = run_cli(["run", "--resume", tmp_path / "run", "--quiet"], capsys)
    assert code == 0, err
    assert [r["round"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1, 2, 3, 4]


def test_in_python_the_plugins_error_is_the_cause(plugins, tmp_path):
    with pytest.raises(HookError) as err:
        fedpd.run(config(tmp_path, f"{plugins}:LocalRaises"))
    assert isinstance(err.value.__cause__, RuntimeError)


@pytest.mark.slow  # starts Flower's simulation runtime (Ray)
def test_flower_nodes_refuse_a_bad_client_state_alike(plugins, tmp_path, capsys):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")
    line = refused(tmp_path, capsys, config(tmp_path, f"{plugins}:BadClient", engine="flower", nodes=2))
    assert line.startswith("algorithm.name: BadClient.local returned client state 'c' of shape ("), line
