"""The signatures the plug-in docs give — fedpd.Algorithm's docstring, fedpd.algorithms.robust's
(RobustAveraging: ``self.average(server, uploads, ctx, key="x")``) and docs/extending.md — are the
methods' own, read with inspect; a plug-in written as the docstring shows runs and aggregates the
key it names; and NNM or ARC with f = 0 (the mean, or nothing) is refused in one line."""

from __future__ import annotations

import ast
import inspect
import re

import pytest
import tomli_w
import torch

import fedpd
from fedpd.aggregators import trimmed_mean
from fedpd.algorithms import FedAvg, robust
from fedpd.algorithms.base import Algorithm
from fedpd.algorithms.robust import RobustAveraging
from fedpd.defence import build_defence
from fedpd.context import ServerContext
from helpers import ROOT, run_cli
from user_plugins import write_module

EXTENDING = (ROOT / "docs" / "extending.md").read_text()
#: a call as the docs show one: ``name(a, b, k=v)`` (rst) or `name(a, b, k=v)` (markdown), maybe on self
CALL = re.compile(r"`{1,2}((?:self\.)?([a-z_]+)\(([^`()]*)\))`{1,2}")

HOOKS = ("setup", "init_server", "init_client", "participants", "communicates", "broadcast", "local", "aggregate",
         "receive", "min_uploads", "mean_terms", "aggregate_means", "evaluation_model", "personal_models",
         "diagnostics")
MIXIN = ("use_defence", "client_state", "with_momentum", "upload", "average")


def documented(text: str, owner: type) -> dict[str, list[str]]:
    """name -> every call of ``owner``'s methods that ``text`` shows (flattened to one line)."""
    found: dict[str, list[str]] = {}
    for call, name, _ in CALL.findall(" ".join(text.split())):
        if callable(getattr(owner, name, None)):
            found.setdefault(name, []).append(call.removeprefix("self."))
    return found


def mismatch(call: str, method) -> str | None:
    """Why ``call`` (as documented) is not how ``method`` is called; None: it is."""
    parsed = ast.parse(call, mode="eval").body
    params = list(inspect.signature(method).parameters.values())[1:]  # without self
    positional = [a.id for a in parsed.args]
    keywords = {k.arg: ast.literal_eval(k.value) for k in parsed.keywords}
    for i, name in enumerate(positional):
        if i >= len(params) or params[i].name != name or params[i].kind is not params[i].POSITIONAL_OR_KEYWORD:
            got = params[i].name if i < len(params) else "nothing"
            return f"{call}: argument {i + 1} is {name!r} in the docs, {got!r} in {inspect.signature(method)}"
    by_name = {p.name: p for p in params}
    for name, value in keywords.items():
        p = by_name.get(name)
        if p is None or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.default != value:
            return f"{call}: {name}={value!r} in the docs; the method has {inspect.signature(method)}"
    given = {*positional, *keywords}
    missing = [p.name for p in params if p.name not in given and p.default is p.empty
               and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if missing:
        return f"{call}: the docs leave out {missing}, which {inspect.signature(method)} requires"
    return None


@pytest.mark.parametrize(("where", "text", "owner", "names"), [
    ("fedpd.Algorithm's docstring", Algorithm.__doc__, Algorithm, HOOKS),
    ("docs/extending.md", EXTENDING, Algorithm, tuple(h for h in HOOKS if h not in ("participants", "min_uploads"))),
    ("docs/extending.md", EXTENDING, RobustAveraging, ("average",)),
    ("fedpd.algorithms.robust's docstrings", robust.__doc__ + RobustAveraging.__doc__, RobustAveraging, MIXIN),
])
def test_every_documented_hook_signature_is_the_methods(where, text, owner, names):
    calls = documented(text, owner)
    assert set(names) <= set(calls), f"{where} shows no signature for {sorted(set(names) - set(calls))}"
    wrong = [why for name, shown in calls.items() for call in shown if (why := mismatch(call, getattr(owner, name)))]
    assert not wrong, f"{where}:\n" + "\n".join(wrong)


def test_the_check_catches_the_old_average_signature():
    """The docstring once said average(server, uploads, key): ctx is the third argument."""
    assert "argument 3 is 'key'" in mismatch("average(server, uploads, key)", RobustAveraging.average)
    assert mismatch('average(server, uploads, ctx, key="y")', RobustAveraging.average) is not None  # default "x"
    assert mismatch("local(message, clients)", Algorithm.local) is not None  # ctx left out


# --- a plug-in written as the docstring shows ---------------------------------------------------------
def docstring_call(key: str) -> str:
    """RobustAveraging's documented ``average`` call, aimed at the upload ``key``."""
    [call] = {c for c in documented(RobustAveraging.__doc__, RobustAveraging)["average"]}
    parsed = ast.parse(call, mode="eval").body
    for k in parsed.keywords:
        if k.arg == "key":
            k.value = ast.Constant(key)
    return "self." + ast.unparse(parsed)


PLUGIN = '''
import torch
from fedpd.algorithms import FedAvg


class TwoModels(FedAvg):
    """FedAvg whose clients also send y = 2 x_i − x0; the server aggregates each by the configured rule."""

    def local(self, message, clients, ctx):
        uploads, clients = super().local(message, clients, ctx)
        return {**uploads, "y": 2 * uploads["x"] - message["x0"]}, clients

    def aggregate(self, server, uploads, ctx):
        y0, counts = CALL
        x0, _ = self.average(server, uploads, ctx)
        return {**server, "x0": x0, "gap": torch.linalg.vector_norm(y0 - x0), **counts}, {}

    def init_server(self, x0):
        return {**super().init_server(x0), "gap": torch.zeros((), dtype=x0.dtype)}

    def diagnostics(self, server):
        return {**super().diagnostics(server), "gap": float(server["gap"])}
'''


@pytest.mark.parametrize("aggregator", [{"aggregator": "trimmed_mean", "aggregator_options": {"trim_ratio": 0.2}}, {}])
def test_the_documented_average_call_aggregates_the_key_it_names(aggregator):
    alg = FedAvg(build_defence(**aggregator))
    g = torch.Generator().manual_seed(0)
    x0 = torch.zeros(3, dtype=torch.float64)
    uploads = {"x": torch.randn(6, 3, generator=g, dtype=torch.float64),
               "y": torch.randn(6, 3, generator=g, dtype=torch.float64) + 5}
    ctx = ServerContext(torch.arange(6), 0, 10)
    server = alg.init_server(x0)
    agg, _ = eval(docstring_call("y"), {"self": alg, "server": server, "uploads": uploads, "ctx": ctx})
    expected = trimmed_mean(uploads["y"], 0.2)[0] if aggregator else uploads["y"].mean(0)
    torch.testing.assert_close(agg, expected, rtol=0, atol=0)
    with pytest.raises(TypeError, match=r"ctx is a str, expected the ServerContext .*key='y'"):
        alg.average(server, uploads, "y")  # the old docstring's call: refused, never the mean of x


def test_a_plugin_written_from_the_docstring_runs(tmp_path, monkeypatch):
    module = write_module(tmp_path, PLUGIN.replace("CALL", docstring_call("y")), "two_models")
    monkeypatch.chdir(tmp_path)
    history = fedpd.run({"problem": {"name": "least_squares", "clients": 8},
                         "algorithm": {"name": f"{module}:TwoModels", "aggregator": "trimmed_mean",
                                       "aggregator_options": {"trim_ratio": 0.2}},
                         "solver": {"name": "gd"}, "sampler": {"name": "uniform", "clients_per_round": 6},
                         "run": {"rounds": 2, "eval_every": 1}}).history
    assert [row["round"] for row in history] == [0, 1, 2]
    assert all(row["gap"] > 0 for row in history[1:])  # y's aggregate, not x's


# --- NNM / ARC with f = 0 ---------------------------------------------------------------------------
@pytest.mark.parametrize(("pre", "does"), [("nnm", "the defence becomes the plain mean"), (["arc"], "clips no row")])
def test_nnm_or_arc_with_no_byzantine_row_is_refused_in_one_line(pre, does, tmp_path, capsys):
    cfg = {"problem": {"name": "least_squares", "clients": 8},
           "algorithm": {"name": "fedavg", "aggregator": "trimmed_mean",
                         "aggregator_options": {"trim_ratio": 0.2, "pre": pre, "n_byzantine": 0}},
           "sampler": {"name": "uniform", "clients_per_round": 6}, "run": {"rounds": 1}}
    path = tmp_path / "cfg.toml"
    path.write_text(tomli_w.dumps(cfg))
    code, _, err = run_cli(["run", path, "--out", tmp_path / "run"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    step = pre if isinstance(pre, str) else pre[0]
    assert lines[0].startswith(f"fedpd: error: algorithm.aggregator_options.n_byzantine: 0 with pre-aggregation "
                               f"'{step}'"), lines[0]
    assert does in lines[0] and ": n_byzantine >= 1 and < K/2, or no" in lines[0]
    cfg["algorithm"]["aggregator_options"]["n_byzantine"] = 1
    assert fedpd.run(cfg).history  # f = 1 runs
