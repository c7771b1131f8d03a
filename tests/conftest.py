"""The test modules sit in a folder per package area (tests/defences/, tests/engines/, ...) and import
the shared modules of this folder (helpers, doc_blocks, engine_conformance, ...) by name: pytest's
default import mode puts this folder on sys.path when it loads this file, and a test module's own
folder when it imports the module by its file name, so no two test modules share a file name
(tests/architecture/test_suite_layout.py checks it, and that the modules named below exist).

The suite runs on pytest-xdist workers (pyproject.toml's addopts give ``-n auto --dist
loadfile``): each test module runs whole on one worker, so a module-scoped fixture (a Flower
session, a Ray cluster, three long runs) is built once. ``-n auto`` starts two workers per usable
core: the slowest modules (Flower deployments, SuperNodes that sleep 3 s between polls of an idle
SuperLink) mostly wait, and another worker's CPU-bound tests fill that time. A test is safe beside
any other one — its own tmp_path, ports the system hands out, processes it stops by PID — except
those that start a two-node ``ray start`` cluster: its head takes fixed ports of Ray's own (the Ray
client server's 10001, among others) that a second cluster would also want. The modules in
:data:`RAY_MODULES` are therefore one unit of work, run one after another on one worker (the
scheduler below), and share one cluster (the ``ray_cluster`` fixture, started once), held under
a lock the workers share (in case another ``--dist`` spreads them over workers). A local Ray
session (fedpd's Flower simulation: ``address="local"``, its own ports and session folder) runs
beside anything, a cluster included: the clusters keep their address file in a temporary folder
of their own (tests/ray_cluster.py), so no ``ray.init`` finds them.

(Not ``--dist loadgroup``: with pytest 9.2, xdist 3.8's groups are silently ignored — it renames
``item._nodeid``, which pytest no longer reads.)

The tests of :data:`SPLIT_MODULES` (minutes each, no module fixture) are units of their own, so
that several workers share such a module.

The longest units are handed out first (:data:`LONGEST`, then the other modules with a slow test),
so that no long module starts last while the other workers sit idle."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable

import pytest

# Ray starts its worker processes at nice 15. The suite keeps both cores busy, so a Flower
# simulation's actors (the ones that train) got a few per cent of a core and its tests stalled: one
# took 220 s instead of 23 beside four busy loops, and 87-91 s instead of ~20 in two fresh-clone
# runs. Ray sessions the tests start (in process, and the clusters of tests/ray_cluster.py) read
# this; the docs' walk-throughs run in a clean environment, as a user's would.
os.environ.setdefault("RAY_worker_niceness", "0")

#: the fixtures every module may ask for by name (the user's algorithms in a folder of their own)
pytest_plugins = ["user_plugins"]

#: the modules that start a two-node ``ray start`` cluster
RAY_MODULES = {"flower/test_flower_ray.py", "flower/test_ray_cluster.py"}

#: modules of several tests of a minute or more that share no module-scoped fixture: each test is
#: a unit of work of its own (a deployment of its own, on ports the system hands out)
SPLIT_MODULES = {"flower/test_flower_deploy.py", "flower/test_flower_warm.py"}

#: the modules of a minute or more, after the Ray unit: most first, as measured in a fresh clone's
#: suite on the 2-core machine (the TLS doc mostly waits for Flower: it overlaps the rest); the
#: real-data tests decode CIFAR-10 into the session's cache before the A-FedPD settings doc and the
#: GPU script's smoke read it
LONGEST = ["flower/test_deployment_doc.py", "docs/test_extending_doc.py", "data/test_data_real.py",
           "flower/test_flower_deploy.py", "flower/test_flower_warm.py", "reproduce/test_afedpd_settings_doc.py",
           "docs/test_readme.py", "docs/test_gpu_script.py"]


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0].removeprefix("tests/")


#: the two-node cluster of :func:`ray_cluster` while the Ray unit runs: its lock, then the cluster
_cluster = contextlib.ExitStack()
_cluster_address: list[str] = []


@pytest.fixture
def ray_cluster(tmp_path_factory) -> str:
    """The address (HOST:PORT) of a two-node cluster (tests/ray_cluster.py), shared by the modules of
    RAY_MODULES: started when first asked for, under an exclusive lock that this session's workers
    share, and stopped when the worker's next test is not of RAY_MODULES
    (:func:`pytest_runtest_teardown`): an idle cluster still costs CPU."""
    if not _cluster_address:
        pytest.importorskip("ray", reason="Ray is not installed (pip install 'fedpd[flower]')")
        from ray_cluster import two_node_cluster

        lock = _cluster.enter_context(open(_shared_folder(tmp_path_factory) / "ray.lock", "w"))
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        _cluster_address.append(_cluster.enter_context(two_node_cluster()))
    return _cluster_address[0]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The Ray unit's last test: stop its cluster, release the lock (also after a failed start)."""
    if _module(item) in RAY_MODULES and (nextitem is None or _module(nextitem) not in RAY_MODULES):
        _cluster_address.clear()
        _cluster.close()


@pytest.fixture(scope="session")
def smoke_report(tmp_path_factory) -> Callable[[str, Path], Path]:
    """``smoke_report(name, out)``: a copy in ``out`` of ``fedpd reproduce NAME --budget smoke``'s
    report folder (records, runs, README.md, ...), made once per session and shared by its workers,
    for the tests that read or change a finished smoke report; the README's path. A test of what
    ``core.reproduce`` does to a folder it is given calls it itself."""
    import shutil

    from fedpd.reproduce import core

    def report(name: str, out: Path) -> Path:
        made = _shared_folder(tmp_path_factory) / "smoke-reports" / name
        made.parent.mkdir(exist_ok=True)
        with open(made.parent / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one worker makes it, the others wait for it
            if not (made / "README.md").is_file():
                shutil.rmtree(made, ignore_errors=True)
                core.reproduce(name, budget="smoke", out=made, jobs=1, progress=False,
                               command=f"fedpd reproduce {name} --budget smoke")
        shutil.copytree(made, out, dirs_exist_ok=True)
        return out / "README.md"

    return report


@pytest.fixture(scope="session", autouse=True)
def _decoded_cache(tmp_path_factory):
    """The session's own cache of decoded image archives (fedpd.data.loaders.decoded), shared by
    its workers: the suite neither reads nor fills the user's, and an archive is decoded once per
    session, not once per test that loads it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDPD_CACHE", str(_shared_folder(tmp_path_factory) / "decoded"))
        yield


def _shared_folder(tmp_path_factory) -> Path:
    """This session's temporary folder that all its xdist workers share."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the Ray modules, then LONGEST, then the other modules with a slow test; a stable sort keeps
    # each module whole and in its order
    slow = dict.fromkeys(_module(item) for item in items if item.get_closest_marker("slow"))
    order = [*sorted(RAY_MODULES), *LONGEST, *(m for m in slow if m not in RAY_MODULES and m not in LONGEST)]
    rank = {m: i for i, m in enumerate(order)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank)))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers per core this process may use (affinity and a container's CPU
    quota, as fedpd counts them for its threads), not xdist's count of physical cores; at most 8
    (every worker imports torch)."""
    from fedpd.threads import available_cores

    return min(2 * available_cores(), 8)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile`` with the modules of RAY_MODULES as one unit of work (one worker runs them
    one after another, so no worker waits for the Ray lock), and each test of SPLIT_MODULES a unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class WorkUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = super()._split_scope(nodeid)
            name = module.removeprefix("tests/")
            return "ray modules" if name in RAY_MODULES else nodeid if name in SPLIT_MODULES else module

    return WorkUnits(config, log)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-times", metavar="FILE", default=None,
                     help="append each test's CPU seconds to FILE, one 'seconds nodeid' line per test: its "
                          "process's and the child processes' it waited for (not run.workers' zygote, waited "
                          "for at exit), setup, call and teardown together (every worker appends; "
                          "sort -rn FILE lists the heaviest first)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    path = item.config.getoption("cpu_times")
    if not path:
        yield
        return
    import resource

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    start = cpu()
    yield
    with open(path, "a") as f:  # one short line per write: the workers' lines do not interleave
        f.write(f"{cpu() - start:.2f} {item.nodeid}\n")
