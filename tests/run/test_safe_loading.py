"""Nothing read back from disk runs code or is trusted blindly: a checkpoint is loaded with
``weights_only`` and checked to belong to the run; a foreign, damaged or other-config checkpoint,
and a metrics file that is missing, not UTF-8 or shorter than the checkpoint, are refused with
one line naming the file (exit 2) and nothing in the run directory changes."""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch
import torch.serialization as serialization

from fedpd.cli import main
from helpers import one_line_error, quick_run, run_cli

CONFIG = """
[problem]
name = "least_squares"
clients = 4
dim = 3
[algorithm]
name = "afedpd"
[solver]
name = "sgd"
lr = 0.05
local_steps = 2
batch_size = 3
[sampler]
name = "uniform"
clients_per_round = 2
[run]
rounds = 6
eval_every = 2
checkpoint_every = 2
"""


def make_run(tmp_path: Path, rounds: int = 6) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace("rounds = 6", f"rounds = {rounds}"))
    out = tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 0
    return out


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def refused(out: Path, capsys, *needles: str, extra=()) -> None:
    """``fedpd run --resume out`` fails with one line containing every needle, changing nothing."""
    before = snapshot(out)
    capsys.readouterr()
    assert main(["run", "--resume", str(out), "--quiet", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    assert snapshot(out) == before


class Payload:
    """Unpickling this runs code: it creates the marker file."""

    marker: Path

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_pickled_payload_in_the_checkpoint_does_not_run(tmp_path, capsys):
    out = make_run(tmp_path, rounds=4)
    Payload.marker = tmp_path / "pwned"
    torch.save({"format": "fedpd-checkpoint", "evil": Payload()}, out / "checkpoint.pt")
    with open(tmp_path / "plain.pkl", "wb") as f:  # the payload works when unpickled naively
        pickle.dump(Payload(), f)
    with open(tmp_path / "plain.pkl", "rb") as f:
        pickle.load(f)
    assert Payload.marker.exists()
    Payload.marker.unlink()
    refused(out, capsys, "checkpoint.pt", "not a fedpd checkpoint")
    assert not Payload.marker.exists()


@pytest.mark.parametrize("damage, needle", [
    ("truncate", "damaged"),
    ("garbage", "damaged"),
    ("foreign", "not a fedpd checkpoint"),
    ("version", "format version"),
])
def test_foreign_or_damaged_checkpoints_are_refused(tmp_path, capsys, damage, needle):
    out = make_run(tmp_path, rounds=4)
    ckpt = out / "checkpoint.pt"
    if damage == "truncate":
        ckpt.write_bytes(ckpt.read_bytes()[:200])
    elif damage == "garbage":
        ckpt.write_bytes(b"\x00not a zip at all" * 20)
    elif damage == "foreign":
        torch.save({"model": torch.zeros(3)}, ckpt)
    else:
        sd = torch.load(ckpt, weights_only=True)
        torch.save({**sd, "version": 1}, ckpt)
    refused(out, capsys, str(ckpt), needle)


def test_a_checkpoint_of_another_config_is_refused(tmp_path, capsys):
    out = make_run(tmp_path, rounds=4)
    other = tmp_path / "other"
    (tmp_path / "d.toml").write_text(CONFIG.replace("dim = 3", "dim = 4").replace("rounds = 6", "rounds = 4"))
    assert main(["run", str(tmp_path / "d.toml"), "--out", str(other), "--quiet"]) == 0
    (out / "checkpoint.pt").write_bytes((other / "checkpoint.pt").read_bytes())
    refused(out, capsys, "checkpoint.pt", "another config", "problem.dim")


@pytest.mark.parametrize("damage, needle", [
    ("missing", "missing"),
    ("binary", "not UTF-8"),
    ("short", "no record of round 2"),
])
def test_a_metrics_file_that_cannot_continue_the_checkpoint_is_refused(tmp_path, capsys, damage, needle):
    out = make_run(tmp_path, rounds=6)
    sd = torch.load(out / "checkpoint.pt", weights_only=True)
    torch.save({**sd, "round": 4}, out / "checkpoint.pt")  # as if killed after round 4's checkpoint
    metrics = out / "metrics.jsonl"
    if damage == "missing":
        metrics.unlink()
    elif damage == "binary":
        metrics.write_bytes(b"\xff\xfe\x00garbage")
    else:  # rounds 2 and 4 lost: the checkpoint says 4 rounds ran
        metrics.write_text(metrics.read_text().splitlines()[0] + "\n")
    refused(out, capsys, "metrics.jsonl", needle, extra=["--set", "run.rounds=6"])


def test_compare_and_plot_on_a_broken_metrics_file_say_one_line(tmp_path, capsys):
    out = make_run(tmp_path, rounds=2)
    (out / "metrics.jsonl").write_bytes(b"\xff\xfe\x00garbage")
    for argv in (["compare", str(out)], ["plot", str(out), "--metric", "train_loss", "-o", str(tmp_path / "f.png")]):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "not UTF-8" in err, err


def test_a_leftover_temporary_checkpoint_is_removed_on_resume(tmp_path):
    out = make_run(tmp_path, rounds=4)
    leftover = out / ".checkpoint.pt.0123456789ab.tmp"
    leftover.write_bytes(b"half a checkpoint")
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=6"]) == 0
    assert not leftover.exists()
    assert [json.loads(line)["round"] for line in (out / "metrics.jsonl").read_text().splitlines()] == [0, 2, 4, 6]


def test_a_checkpoint_written_on_another_device_resumes_on_the_cpu(tmp_path):
    """Tensors saved on a GPU carry its location ("cuda:0"); the checkpoint is mapped to the run's
    device on load. Written here by tagging every tensor as cuda:0, as a GPU run would."""
    straight = make_run(tmp_path / "a", rounds=6)
    out = make_run(tmp_path / "b", rounds=4)
    sd = torch.load(out / "checkpoint.pt", weights_only=True)

    def cuda_tag(storage):
        return "cuda:0"

    serialization.register_package(1, cuda_tag, lambda obj, location: None)
    try:
        buf = io.BytesIO()
        torch.save(sd, buf)
    finally:
        serialization._package_registry[:] = [p for p in serialization._package_registry if p[1] is not cuda_tag]
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        assert any(b"cuda:0" in z.read(n) for n in z.namelist() if n.endswith("data.pkl"))
    (out / "checkpoint.pt").write_bytes(buf.getvalue())
    assert main(["run", "--resume", str(out), "--quiet", "--set", "run.rounds=6"]) == 0

    def strip(path):
        return [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                for line in (path / "metrics.jsonl").read_text().splitlines()]

    assert strip(out) == strip(straight)


def test_an_empty_checkpoint_is_one_line_not_a_traceback(tmp_path, capsys):
    quick_run(tmp_path / "r", capsys)
    (tmp_path / "r" / "checkpoint.pt").write_bytes(b"")  # e.g. a disk that filled up
    before = (tmp_path / "r" / "metrics.jsonl").read_bytes()
    line = one_line_error(*run_cli(["run", "--resume", tmp_path / "r", "--quiet"], capsys)[::2])
    assert "checkpoint.pt: damaged, cannot be read" in line
    assert (tmp_path / "r" / "metrics.jsonl").read_bytes() == before
