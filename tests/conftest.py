"""The suite runs on one worker process per core (pytest-xdist: pyproject.toml's addopts give
``-n auto --dist loadgroup``). A test is safe beside any other one — its own tmp_path, ports the
system hands out, processes it stops by PID — except in the modules below, each run on one
worker (one ``xdist_group``), one after another within a group:

- ``ray``: the modules that start Ray. A ``ray start`` cluster writes /tmp/ray/ray_current_cluster,
  which other Ray programs on the machine read, and a Ray session starts a dozen processes: one
  Ray at a time keeps the cluster tests isolated and the machine's memory in bounds;
- the tests that share a costly module- or session-scoped fixture (three long runs, a
  dataset): built once, not once per worker.

The groups are queued first (xdist hands out its largest units first) and the slowest tests go
before the quick ones, so that no long test starts last while the other worker sits idle."""

from __future__ import annotations

import pytest

#: modules run whole on one worker, one after another (path under tests/ -> group)
MODULE_GROUPS = {
    "test_flower.py": "ray", "test_flower_ray.py": "ray", "test_ray_cluster.py": "ray",
    "test_extending_doc.py": "ray",  # its page runs a Flower simulation
}
#: a costly module- or session-scoped fixture -> the group of the tests that use it
FIXTURE_GROUPS = {
    "story": "convergence",  # tests/test_convergence.py: three runs of 200 rounds
    "cifar_jpeg": "data_real", "cifar_py_dir": "data_real",  # CIFAR-10 decoded once per session
}


def group(item: pytest.Item) -> str | None:
    module = item.nodeid.split("::", 1)[0].removeprefix("tests/")
    fixtures = [FIXTURE_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_GROUPS]
    return MODULE_GROUPS.get(module) or (fixtures[0] if fixtures else None)


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            name = group(item)
            if name:
                item.add_marker(pytest.mark.xdist_group(name))
    # slow tests first (a stable sort keeps each module's order, so its module fixtures are built once)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: the cores this process may use (affinity and a container's CPU quota, as fedpd
    counts them for its threads), not xdist's count of physical cores; at most 8 (every worker
    imports torch)."""
    from fedpd.threads import available_cores

    return min(available_cores(), 8)
