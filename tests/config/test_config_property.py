"""Configs nobody listed. Hypothesis generates configs from the options' own schemas —
every section's pydantic ``Options`` model (types, ranges, enums), the registry's names, unknown
keys, bad plug-in names, wrong types and values out of range — and ``fedpd run`` (in this
process) must either refuse in one line with exit status 2 and write nothing, or run: its rounds
done and checkpointed (exit 0), or stopped by a diverged metric after a round (exit 3, one line).
Any traceback, any other exit status, or files left by a refusal fails the test.

A config is drawn valid from the schemas and then given 0 to 2 mutations (half of them none). Valid numbers are
small (the lower bound and a few above it: clients, samples, rounds, steps — so every run is a
fraction of a second); the mutations draw values just outside the bounds, beyond int64, NaN and
infinity, values of the wrong type, unknown keys and sections, and names that are not what the
key takes (an unknown name, a standard-library callable, a module that does not exist, a
callable of another kind). Left out, because they start processes or belong to their own tests:
``run.engine = "flower"`` and ``run.workers`` above 1 (tests/test_flower*.py, test_workers.py);
valid values near the upper bounds (a round of 100 000 local steps is allowed and slow:
test_bad_configs.py checks the bounds themselves); callables that would exit, abort, hang or
fork this process if a check failed (test_bad_configs.py, through load_config alone); and, in
``[privacy]``, noise far from the defaults (fedpd.privacy's own tests).

Seeded (``derandomize``, no example database) and bounded, so the suite runs the same examples
every time, in a few seconds."""

from __future__ import annotations

import math
import tempfile
import types
import typing
from pathlib import Path

import annotated_types
import pytest
import tomli_w
import torch
from pydantic import BaseModel

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from fedpd import registry  # noqa: E402
from fedpd.cli import main  # noqa: E402
from fedpd.config import RunOptions  # noqa: E402
from fedpd.evaluation import METRICS  # noqa: E402
from fedpd.privacy import PrivacyOptions  # noqa: E402

EXAMPLES = 70

#: names a key that takes a name may be given, besides its built-ins: not what it takes
BAD_NAMES = ["nosuch", "", "time:time", "json:loads", "builtins:object", "this:s", "no_such_module_xyz:thing",
             "fedpd.algorithms:FedAvg", "fedpd.sampling:UniformK", "fedpd:run", "torch:nn.Linear", "numpy:mean"]
#: values of the wrong type for anything
WRONG_TYPES = ["text", 1.5, True, [1, 2], {"a": 1}, 7]
HUGE = [2**63, -(2**63) - 1, 2**64 + 3]
NOT_FINITE = [math.nan, math.inf, -math.inf]
#: what the run options that name places take (a store directory is made inside the example's folder)
DEVICES = ["cpu", "auto"]
BAD_DEVICES = ["cuda", "cuda:7", "mps", "tpu", "gpu0"]


def _bounds(field) -> tuple[float | None, bool, float | None, bool]:
    """(low, low is inclusive, high, high is inclusive) of a field's range."""
    low = high = None
    low_in = high_in = True
    for m in field.metadata:
        if isinstance(m, annotated_types.Ge):
            low = m.ge
        elif isinstance(m, annotated_types.Gt):
            low, low_in = m.gt, False
        elif isinstance(m, annotated_types.Le):
            high = m.le
        elif isinstance(m, annotated_types.Lt):
            high, high_in = m.lt, False
    return low, low_in, high, high_in


def _parts(annotation) -> list:
    """The alternatives of a union (one for anything else), Annotated unwrapped, None dropped."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _parts(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [p for a in typing.get_args(annotation) if a is not type(None) for p in _parts(a)]
    return [annotation]


def _int_valid(field) -> st.SearchStrategy:
    low, low_in, high, high_in = _bounds(field)
    start = 0 if low is None else int(low) + (0 if low_in else 1)
    stop = start + 4
    if high is not None:
        stop = min(stop, int(high) - (0 if high_in else 1))
    return st.integers(start, max(start, stop))


def _float_valid(field) -> st.SearchStrategy:
    low, low_in, high, high_in = _bounds(field)
    low = 0.0 if low is None else float(low)
    candidates = [low + d for d in (0.0, 0.01, 0.1, 0.5, 1.0, 3.0)]
    ok = [v for v in candidates if (v > low or low_in) and (high is None or v < high or (v == high and high_in))]
    return st.sampled_from(ok or [low])


def _out_of_range(field, kind) -> list:
    low, low_in, high, high_in = _bounds(field)
    step = 1 if kind is int else 0.5
    out = []
    if low is not None:
        out.append(low - step if low_in else low)
    if high is not None:
        out.append(high + step if high_in else high)
    return [kind(v) for v in out]


def _name_values(key: str) -> list[str]:
    """The built-in names a string field naming something takes (an aggregator, a dataset)."""
    if key in ("aggregator",):
        return list(registry.AGGREGATORS) + ["mean"]
    if key == "dataset":
        return ["mnist", "cifar10", "fashion-mnist"]
    if key == "device":
        return DEVICES
    return ["x"]


def valid_value(key: str, field, store_dir: str) -> st.SearchStrategy:
    """A value of ``field`` its model accepts on its own (cross-field rules aside), small."""
    parts = _parts(field.annotation)
    options = []
    for part in parts:
        origin = typing.get_origin(part)
        if origin is typing.Literal:
            options.append(st.sampled_from([v for v in typing.get_args(part) if v != "flower"]))
        elif part is bool:
            options.append(st.booleans())
        elif part is int:
            options.append(_int_valid(field) if key != "workers" else st.just(1))
        elif part is float:
            options.append(_float_valid(field))
        elif part is str:
            options.append(
                st.sampled_from([store_dir, ""]) if key == "store_dir" else st.sampled_from(_name_values(key))
            )
        elif origin is list:
            inner = _parts(typing.get_args(part)[0])[0] if typing.get_args(part) else int
            if inner is str:
                options.append(st.lists(st.sampled_from(METRICS), min_size=1, max_size=2, unique=True))
            elif inner is int:
                options.append(st.lists(st.integers(0, 3), max_size=3, unique=True))
            else:  # a list of tables (Fed+'s groups): none
                options.append(st.just([]))
        elif origin is dict or part is dict:
            options.append(st.just({}))
        elif isinstance(part, type) and issubclass(part, BaseModel):
            options.append(st.just({}))
    if type(None) in typing.get_args(field.annotation) or not options:
        options.append(st.none())
    return st.one_of(options)


def invalid_value(key: str, field) -> st.SearchStrategy:
    """A value ``field`` should refuse (or a name that is not what it takes)."""
    parts = _parts(field.annotation)
    bad = list(WRONG_TYPES)
    if int in parts:
        bad += HUGE + _out_of_range(field, int)
    if float in parts:
        bad += NOT_FINITE + _out_of_range(field, float)
    if str in parts:
        bad += BAD_NAMES + (BAD_DEVICES if key == "device" else [])
    if any(typing.get_origin(p) is list for p in parts):
        bad += [[2**63], [-1, 0], ["a"], [[1]], [1, 1]]
    literals = [v for p in parts if typing.get_origin(p) is typing.Literal for v in typing.get_args(p)]
    if literals:
        bad += ["nope", str(literals[0]).upper()]
    return st.sampled_from(bad)


#: sizes, always drawn (small): a generated problem's defaults make runs of seconds, and a sampler's
#: or a minibatch's default is larger than a small problem
SIZES = ("clients", "samples_per_client", "test_samples_per_client", "dim", "max_client_samples",
         "clients_per_round", "batch_size")


def section_of(model: type[BaseModel], store_dir: str, skip=()) -> st.SearchStrategy[dict]:
    """Some of ``model``'s fields (the required ones and the sizes always) with valid values."""
    fields = {k: f for k, f in model.model_fields.items() if k not in skip}

    @st.composite
    def build(draw):
        out = {}
        for key, field in fields.items():
            if field.is_required() or key in SIZES or draw(st.integers(0, 3)) == 0:
                value = draw(valid_value(key, field, store_dir))
                if value is not None:
                    out[key] = value
        return out

    return build()


#: the problems that read a dataset (refused here: the examples run without fedpd's datasets)
DATA_PROBLEMS = ("dataset", "fedplus_mnist")


@st.composite
def configs(draw, store_dir: str) -> dict:
    """A config drawn valid from the schemas, then mutated 0 to 2 times (none in half the configs)."""
    cfg: dict = {}
    entries = {}
    for section, table in registry.TABLES.items():
        if section in ("solver", "sampler", "attack") and draw(st.integers(0, 3)) == 0:
            continue  # the section left out: its default
        names = list(table)
        if section == "problem":  # mostly the generated ones: a dataset is refused (no data here) every time
            names = [n for n in names if n not in DATA_PROBLEMS] * 4 + list(DATA_PROBLEMS)
        name = draw(st.sampled_from(names))
        entries[section] = table[name]
        cfg[section] = {"name": name, **draw(section_of(table[name].options, store_dir))}
    cfg["run"] = {"rounds": draw(st.integers(1, 3)), "eval_every": draw(st.integers(1, 3)),
                  **draw(section_of(RunOptions, store_dir, skip=("rounds", "eval_every", "engine", "workers"))),
                  "engine": draw(st.sampled_from(["inprocess", "loopback"]))}
    if cfg["run"]["engine"] == "inprocess":
        cfg["run"].pop("nodes", None)
    if draw(st.integers(0, 4)) == 0:
        cfg["privacy"] = draw(section_of(PrivacyOptions, store_dir, ))
    models = st.sampled_from(["mlp", "logistic", "lenet", "nosuch", "json:loads"])
    if cfg["problem"]["name"] in DATA_PROBLEMS:
        cfg["model"] = {"name": draw(models)}
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        mutate = draw(st.sampled_from(["value", "value", "value", "name", "unknown key", "unknown section", "drop",
                                       "model"]))
        section = draw(st.sampled_from(sorted(cfg)))
        if mutate == "model":  # a [model] section, which only the dataset problems take
            cfg["model"] = {"name": draw(models)}
        elif mutate == "unknown section":
            cfg["sections"] = {"x": 1}
        elif mutate == "unknown key":
            cfg[section]["no_such_key"] = draw(st.sampled_from([1, "x", [1]]))
        elif mutate == "name":
            cfg[section]["name"] = draw(st.sampled_from(BAD_NAMES + [1, None]))
        elif mutate == "drop" and cfg[section]:
            cfg[section].pop(draw(st.sampled_from(sorted(cfg[section]))))
        elif mutate == "value":
            model = (RunOptions if section == "run" else PrivacyOptions if section == "privacy"
                     else entries[section].options if section in entries else None)
            if model is not None and model.model_fields:
                key = draw(st.sampled_from(sorted(model.model_fields)))
                cfg[section][key] = draw(invalid_value(key, model.model_fields[key]))
    return {s: {k: v for k, v in values.items() if v is not None} for s, values in cfg.items()}


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def no_datasets(tmp_path, monkeypatch):
    """fedpd's datasets absent (a dataset problem is then refused in one line, not read for seconds);
    torch's thread count put back after the examples (run.threads sets it for this process)."""
    monkeypatch.setenv("FEDPD_DATA", str(tmp_path / "no-data"))
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def _lines(err: str) -> tuple[list[str], list[str]]:
    """(error lines, other lines) of stderr; the others may only be fedpd's notes."""
    lines = err.strip().splitlines()
    errors = [line for line in lines if line.startswith("fedpd: error: ")]
    return errors, [line for line in lines if not line.startswith("fedpd: error: ")]


@pytest.mark.usefixtures("no_datasets")
@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_fedpd_run_refuses_in_one_line_or_runs(data, capsys):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        cfg = data.draw(configs(str(folder / "store")))
        path = folder / "c.toml"
        path.write_text(tomli_w.dumps(cfg))
        out = folder / "run"
        before = _files(folder)
        capsys.readouterr()
        code = main(["run", str(path), "--out", str(out), "--quiet"])
        errors, others = _lines(capsys.readouterr().err)
        # besides the error: fedpd's notes ("fedpd: note: ...") and a loopback node's log of a request it
        # refused ("fedpd node (clients ...): ..."; the server rejects those clients' uploads), one line each
        assert all(line.startswith(("fedpd: ", "fedpd node (")) for line in others), others
        if code == 2:
            assert len(errors) == 1, errors
            assert _files(folder) == before, f"a refused config left files: {sorted(_files(folder) - before)}"
        else:
            assert code in (0, 3), f"exit status {code}: {errors}"
            assert len(errors) == (code == 3), errors
            assert (out / "metrics.jsonl").is_file()
            if code == 0:
                assert (out / "checkpoint.pt").is_file()
