"""The suite runs on one worker process per core (pytest-xdist: pyproject.toml's addopts give
``-n auto --dist loadfile``): each test module runs whole on one worker, so a module-scoped fixture
(a Flower session, a Ray cluster, three long runs) is built once. A test is safe beside any other
one — its own tmp_path, ports the system hands out, processes it stops by PID — except those that
start Ray: a ``ray start`` cluster writes /tmp/ray/ray_current_cluster, which other Ray programs
on the machine read, and a Ray session starts a dozen processes. The modules in
:data:`RAY_MODULES` therefore take one lock for their whole run: one of them at a time, the Ray
cluster tests isolated from any other Ray.

(Not ``--dist loadgroup``: with pytest 9.2, xdist 3.8's groups are silently ignored — it renames
``item._nodeid``, which pytest no longer reads.)

Modules with a slow test are handed out first, so that no long module starts last while the other
worker sits idle, and no two Ray modules one after the other (the second would wait for the lock)."""

from __future__ import annotations

import fcntl
import os

import pytest

#: the modules that start Ray (a local Ray session or a two-node ``ray start`` cluster)
RAY_MODULES = {"test_flower.py", "test_flower_ray.py", "test_ray_cluster.py",
               "test_extending_doc.py"}  # (its page runs a Flower simulation)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0].removeprefix("tests/")


@pytest.fixture(scope="module", autouse=True)
def _one_ray_at_a_time(request, tmp_path_factory):
    """An exclusive lock, shared by this session's workers, held while a module of RAY_MODULES runs."""
    if request.node.nodeid.removeprefix("tests/") not in RAY_MODULES:
        yield
        return
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' common folder
    with open(root / "ray.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # modules with a slow test first, a Ray module between two others (the next one waits for its
    # lock); a stable sort keeps each module whole and in its order
    slow = list(dict.fromkeys(_module(item) for item in items if item.get_closest_marker("slow")))
    ray, other = [m for m in slow if m in RAY_MODULES], [m for m in slow if m not in RAY_MODULES]
    rank = {m: 2 * i for i, m in enumerate(ray)} | {m: 2 * i + 1 for i, m in enumerate(other)}
    items.sort(key=lambda item: rank.get(_module(item), len(rank) * 2))


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: the cores this process may use (affinity and a container's CPU quota, as fedpd
    counts them for its threads), not xdist's count of physical cores; at most 8 (every worker
    imports torch)."""
    from fedpd.threads import available_cores

    return min(available_cores(), 8)
