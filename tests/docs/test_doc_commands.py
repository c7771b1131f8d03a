"""Docs that work as written: every ```bash block of README.md, CONTRIBUTING.md and docs/*.md (the reproduction
reports under docs/reproductions/ are written by `fedpd reproduce`, not by hand) is either run
verbatim by a test, in a clean environment, or listed below with the reason it is not. A new or
changed block fails here until it is classified, and a command hidden in an untagged block fails
too (tag it ```bash, or ```text / ```console for a synopsis or a transcript)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from doc_blocks import all_bash_blocks, untagged_blocks
from helpers import ROOT

DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

#: whole pages whose blocks another test accounts for: (page, the test, why)
PAGES = {
    "docs/extending.md": ("tests/docs/test_extending_doc.py", "runs every bash block of the page as written, in order, "
                          "outside the repository"),
    "docs/deployment.md": ("tests/flower/test_deployment_doc.py", "runs the TLS deployment's block as written on "
                           "loopback (tests/flower/test_flower_warm.py the warm SuperNodes' section); "
                           "the others install from a package index, run a Flower simulation on Ray (as the "
                           "README's, exempt below) or need a Ray cluster of several machines"),
}

#: (page, how the block's first line starts) -> ("run", the test that runs it verbatim) or ("exempt", why not)
BLOCKS = {
    ("README.md", "python3 -m venv .venv"): (
        "exempt", "creates a virtual environment and installs from a package index; .ci/run runs its second line, "
        "the test command, as written on a clean clone"),
    ("README.md", "fedpd run examples/fedpd.toml --out runs/fedpd"): ("run", "tests/docs/test_readme.py"),
    ("README.md", "fedpd sweep examples/fedavg.toml examples/scaffold.toml"): (
        "exempt", "12 runs of 200-600 rounds, minutes on two cores; tests/results/test_sweep.py runs fedpd sweep with "
        "fewer rounds"),
    ("README.md", "fedpd sweep examples/fedavg.toml examples/fedprox.toml --seeds 1-3 --vary"): (
        "run", "tests/results/test_sweep_grid.py"),
    ("CONTRIBUTING.md", ".venv/bin/python -m pytest -q -m \"not slow\""): (
        "exempt", "the test suite without its slow tests, about ten minutes; .ci/run runs the whole suite"),
    ("CONTRIBUTING.md", ".venv/bin/python -m pytest -q -n 0 tests/docs/test_docs_agree.py"): (
        "run", "tests/docs/test_first_impressions.py"),
    ("README.md", "fedpd sweep examples/fedavg.toml examples/fedpd.toml --seeds 1-4 --out runs/cluster --ray"): (
        "exempt", "needs a Ray cluster at the address shown; tests/flower/test_ray_cluster.py runs sweeps on a "
        "local one"),
    ("README.md", "fedpd run examples/feddyn.toml --out runs/feddyn --set run.tensorboard"): (
        "run", "tests/docs/test_readme.py"),
    ("README.md", "fedpd run benchmarks/configs/femnist_fedavg_cnn.toml"): (
        "exempt", "needs FEMNIST and minutes of a CNN; tests/engines/test_workers.py runs run.workers=2 on small "
        "problems"),
    ("README.md", "fedpd run examples/feddyn.toml --out runs/feddyn-flower"): (
        "exempt", "a Flower simulation on Ray (a minute, and Ray's processes to stop); tests/flower/test_flower.py "
        "runs FedDyn on the Flower engine against in-process and tests/docs/test_readme.py parses the command"),
    ("README.md", "fedpd reproduce --list"): (
        "exempt", "its second line runs a reduced reproduction, about an hour; tests/docs/test_readme.py runs the "
        "others as written, tests/reproduce/test_reproduce.py every experiment at the smoke budget"),
    ("docs/algorithms.md", "cd tests && OMP_NUM_THREADS=1 python -c"): ("run", "tests/docs/test_doc_commands.py"),
    ("docs/algorithms.md", "fedpd run examples/feddyn.toml --out runs/feddyn-ipm"): (
        "run", "tests/defences/test_robust_means.py"),
    ("docs/benchmarks.md", "fedpd run benchmarks/configs/mnist_fedavg_logistic.toml"): (
        "exempt", "a benchmark on MNIST, run by hand; tests/problems/test_dataset_problem.py runs the config to the "
        "accuracy the page shows"),
    ("docs/benchmarks.md", "OMP_NUM_THREADS=1 python benchmarks/run_cifar10_reduced.py"): (
        "exempt", "the record of a superseded benchmark (CPU-hours on CIFAR-10, RUN_DIRS stands for its runs)"),
    ("docs/data.md", "fedpd run benchmarks/configs/afedpd_cifar10/afedpd_dir0.1.toml"): (
        "exempt", "needs CIFAR-10 and MNIST; a full A-FedPD round takes minutes; tests/docs/test_benchmark_configs.py "
        "validates the configs"),
    ("docs/data.md", "/usr/bin/time fedpd run benchmarks/configs/femnist_fedpd_cnn.toml"): (
        "exempt", "a timing on FEMNIST, run by hand"),
    ("docs/data.md", "fedpd run churn.toml --out runs/churn"): ("run", "tests/data/test_tabular_loader.py"),
    ("docs/privacy.md", "fedpd run examples/fedavg.toml --out runs/fedavg-dp"): (
        "run", "tests/privacy/test_privacy.py"),
    ("docs/systems.md", "fedpd run examples/fedbuff.toml --out runs/fedbuff"): (
        "run", "tests/system/test_systems_doc.py"),
    ("docs/performance.md", "python benchmarks/overhead.py"): ("exempt", "a benchmark, run by hand (minutes)"),
    ("docs/performance.md", "python benchmarks/clock.py --repeats 5 --updates 30"): (
        "exempt", "a benchmark, run by hand (about a minute); tests/system/ pins what it times"),
    ("docs/performance.md", "python benchmarks/cpu_drift.py --records 3"): (
        "exempt", "a measurement, run by hand (tens of minutes: records of every report re-run on five code paths); "
        "tests/reproduce/test_verify_rules.py checks the rules it sets"),
    ("docs/performance.md", "python benchmarks/sweep_collection.py"): (
        "exempt", "a benchmark, run by hand (half a minute); tests/reproduce/test_reproduce.py tests the collection "
        "it times"),
    ("docs/performance.md", "FEDPD_DATA=/path/to/data python benchmarks/threads.py"): (
        "exempt", "a benchmark on MNIST, run by hand (minutes)"),
    ("docs/performance.md", "python benchmarks/flower_overhead.py"): ("exempt", "a benchmark, run by hand (minutes)"),
    ("docs/performance.md", "python benchmarks/deployment_rounds.py"): (
        "exempt", "a benchmark, run by hand (minutes: deployments on loopback); tests/flower/test_flower_warm.py "
        "checks warm SuperNodes' metrics against in-process"),
    ("docs/performance.md", "OMP_NUM_THREADS=1 python benchmarks/side_by_side.py"): (
        "exempt", "a benchmark on every model, run by hand (about an hour)"),
    ("docs/performance.md", "FEDPD_DATA=/path/to/data python benchmarks/parallel_clients.py"): (
        "exempt", "a benchmark on CIFAR-10, run by hand (minutes; its workers and Flower's Ray stop with it)"),
    ("docs/performance.md", "python benchmarks/scale_store.py"): (
        "exempt", "a benchmark of 10^6 clients, run by hand (minutes)"),
    ("docs/performance.md", "python benchmarks/big_state.py"): (
        "exempt", "a benchmark that writes 40 GB, run by hand"),
    ("docs/performance.md", "FEDPD_DATA=/path/to/data python benchmarks/gpu_afedpd.py"): (
        "exempt", "needs a CUDA GPU and CIFAR-10; tests/docs/test_gpu_script.py runs its --smoke mode on the CPU"),
    ("docs/performance.md", "python benchmarks/gpu_afedpd.py --results \"$OUT\""): (
        "exempt", "the command of the GPU figures (a lent CUDA machine, CIFAR-10 in FEDPD_DATA); "
        "tests/docs/test_gpu_script.py runs its --smoke mode on the CPU"),
}

#: how a command begins: a line of an untagged block that starts so is a command the inventory would miss
COMMAND = re.compile(r"(\$ |fedpd |python|OMP_|FEDPD_|/usr/bin/time |flwr |flower-|ray |pip |cd |export )")


def page(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def blocks() -> list[tuple[str, str, str, int]]:
    """(page, first line, heading, line) of every bash block the pages show, not counting PAGES."""
    return [(page(doc), text.lstrip().splitlines()[0] if text.strip() else "", heading, line)
            for doc in DOCS if page(doc) not in PAGES for text, heading, line in all_bash_blocks(doc)]


def entry(doc: str, first: str) -> list[tuple[str, str]]:
    return [key for key in BLOCKS if key[0] == doc and first.startswith(key[1])]


def test_every_block_is_run_by_a_test_or_exempt_with_a_reason():
    unclassified = [f"{doc}:{line} ({heading}): {first}" for doc, first, heading, line in blocks()
                    if len(entry(doc, first)) != 1]
    assert not unclassified, "blocks neither run by a test nor exempt (add them to BLOCKS):\n" + "\n".join(unclassified)


def test_every_entry_names_a_block_the_docs_show():
    shown = {(doc, first) for doc, first, _, _ in blocks()}
    stale = [key for key in BLOCKS if not any(doc == key[0] and first.startswith(key[1]) for doc, first in shown)]
    assert not stale, f"entries for blocks no page shows any more: {stale}"
    for doc in PAGES:
        assert (ROOT / doc).is_file() and all_bash_blocks(ROOT / doc), doc


@pytest.mark.parametrize("doc", sorted(PAGES))
def test_a_page_run_by_a_test_is_read_by_that_test(doc):
    test, _ = PAGES[doc]
    if not (ROOT / test).is_file():
        pytest.skip(f"{test} is not in this checkout")
    text = (ROOT / test).read_text()
    assert Path(doc).name in text and "bash" in text, f"{test} does not read {doc}'s blocks"


@pytest.mark.parametrize("key", sorted(BLOCKS), ids=lambda key: f"{key[0]}:{key[1][:40]}")
def test_a_block_run_by_a_test_is_read_from_its_page_by_that_test(key):
    how, what = BLOCKS[key]
    assert how in ("run", "exempt") and what.strip()
    if how == "run":  # the test reads the block from the page (never a copy of it)
        text = (ROOT / what).read_text()
        assert Path(key[0]).name in text and "bash_blocks(" in text, f"{what} does not read {key[0]}'s blocks"


@pytest.mark.parametrize("doc", [page(d) for d in DOCS])
def test_no_command_hides_in_an_untagged_block(doc):
    hidden = [f"{doc}:{line}: {text.splitlines()[0]}" for text, line in untagged_blocks(ROOT / doc)
              if any(COMMAND.match(row.strip()) for row in text.splitlines()[:1])]
    assert not hidden, "tag these ```bash (or ```text, ```console):\n" + "\n".join(hidden)


# --- blocks of docs/ run here, as written ----------------------------------------------------------
def test_the_dual_drift_script_runs_as_written_and_gives_the_tables_seed_0(tmp_path):
    from doc_blocks import bash_blocks, clean_env, run_script

    doc = ROOT / "docs" / "algorithms.md"
    [block] = bash_blocks(doc, "Dual drift: what we measured")
    done = run_script(block, ROOT, clean_env(tmp_path / "home"))  # from the checkout's root: it says cd tests
    assert done.returncode == 0, done.stdout[-3000:]
    printed = {name: [float(v) for v in rest] for name, *rest in (line.split() for line in done.stdout.splitlines())}
    row = re.search(r"^\| 0 \| (.*?) \| (.*?) \| (.*?) \|", doc.read_text(), re.M)
    for name, cell in zip(("fedadmm", "feddyn", "afedpd"), row.groups()):
        shown = [float(v) for v in cell.split(" / ")]  # spike / drift / loss, to 3 decimals
        assert printed[name] == pytest.approx(shown, abs=6e-4), (name, printed[name], shown)
