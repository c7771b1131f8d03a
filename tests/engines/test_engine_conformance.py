"""The in-process engine passes the engine conformance suite (tests/engine_conformance.py) with
every client grouping: one client at a time, chunks of 3, and all participants at once; with
the clients' states in the disk store; and with the participants trained on 2 worker
processes. So does the loopback remote engine; and the in-process and loopback engines
pass it on a user's algorithms defined outside the package."""

from __future__ import annotations

import pytest

from engine_conformance import EngineConformance
from user_plugins import cases


class TestInProcessEngine(EngineConformance):
    @pytest.fixture(params=[["run.client_chunk=0"], ["run.client_chunk=1"], ["run.client_chunk=3"],
                            ["run.client_chunk=3", "run.store=disk"]],
                    ids=["all", "one", "three", "three-disk"])
    def engine(self, request) -> list[str]:
        return ["run.engine=inprocess", *request.param]


class TestLoopbackRemoteEngine(EngineConformance):
    """The remote engine (messages, node runtimes with versioned file stores) with its nodes in
    this process: the same numbers as the in-process engine."""

    @pytest.fixture(params=[1, 3], ids=["one-node", "three-nodes"])
    def engine(self, request) -> list[str]:
        return ["run.engine=loopback", f"run.nodes={request.param}"]


class UserAlgorithms:
    """The suite on a user's algorithms (tests/user_plugins.py): modules in a directory outside
    the repository, named by import path in the configs and found there as the current directory
    (a resume finds them again through the run's plugins.json)."""

    @pytest.fixture(autouse=True)
    def _user_code(self, user_algorithms, monkeypatch):
        directory, module = user_algorithms
        monkeypatch.chdir(directory)
        self.CASES = cases(module)


class TestInProcessEngineOnUserAlgorithms(UserAlgorithms, TestInProcessEngine):
    pass


class TestLoopbackRemoteEngineOnUserAlgorithms(UserAlgorithms, TestLoopbackRemoteEngine):
    pass


@pytest.mark.slow  # every test starts two worker processes (torch's import, the problem's build)
class TestWorkerProcesses(EngineConformance):
    """The in-process engine with the round's participants trained on 2 worker processes
    (``run.workers``): states stay in this process, the numbers are the same."""

    ENGINE = ["run.engine=inprocess", "run.workers=2"]
