"""README.md walked top to bottom: every `fedpd` command parses, every file it
names exists, and every run directory a command reads was written by an earlier command (a fresh
clone has no runs/). The Python snippet writes only where it may. The commands that take seconds
run as written, in a fresh directory and a clean environment, and write only what git ignores
(tests/docs/test_doc_commands.py lists the others and why)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from doc_blocks import bash_blocks, clean_env, run_script
from helpers import ROOT
from fedpd.cli import make_parser

README = (ROOT / "README.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def parse(words: list[str]):
    """The parsed arguments of one command line (``--version`` prints and exits: None)."""
    if words == ["--version"]:
        return None
    return make_parser().parse_args(words)  # a bad flag raises (FedpdError) here


def commands() -> list[list[str]]:
    """The `fedpd` command lines of the bash blocks, in order (shell loops unrolled, comments and
    redirections dropped)."""
    out = []
    for block in blocks("bash"):
        text = block.replace("\\\n", " ")
        for line in text.splitlines():
            line = line.split("  #")[0].strip()
            loop = re.match(r"for (\w+) in ([^;]+); do (.*); done$", line)
            lines = [loop.group(3).replace(f"${loop.group(1)}", v) for v in loop.group(2).split()] if loop else [line]
            for cmd in lines:
                words = shlex.split(cmd, comments=True)
                if ">" in words:
                    words = words[:words.index(">")]
                if words[:1] == ["fedpd"]:
                    out.append(words[1:])
    return out


def test_readme_has_the_commands_the_issue_asks_for():
    text = " ".join(" ".join(c) for c in commands())
    for needle in ("--format csv", "--metric grad_norm_sq,train_loss", "--split", "list fedpd", "show solver sgd",
                   "--version", "--resume", "run.tensorboard=true"):
        assert needle in text, needle


def test_every_readme_command_parses_and_reads_only_what_earlier_commands_wrote():
    written: set[str] = set()
    for words in commands():
        args = parse(words)
        if args is None:
            continue
        if args.command == "run":
            if args.config:
                assert (ROOT / args.config).is_file(), args.config
                assert args.out and args.out not in written, f"{args.out}: written twice (needs --overwrite)"
                written.add(args.out)
            else:
                assert args.resume in written, f"--resume {args.resume}: no earlier command wrote it"
        elif args.command == "sweep":
            assert args.out and args.out not in written, f"{args.out}: written twice"
            written.add(args.out)
        elif args.command in ("compare", "plot"):
            for d in args.dirs:  # a run directory, or a folder of them (runs/seeds)
                assert d in written or any(w.startswith(d.rstrip("/") + "/") for w in written), \
                    f"fedpd {args.command}: {d} is not written by an earlier command"
        elif args.command == "demo":
            written.add(args.out or "runs/demo")
    assert {"runs/fedpd", "runs/fedavg"} <= written


def test_python_snippet_writes_nothing_it_would_refuse():
    [snippet] = [b for b in blocks("python") if "fedpd.run(" in b]
    cli_dirs = {args.out for args in map(parse, commands()) if getattr(args, "out", None)}
    for out in re.findall(r'out="([^"]+)"', snippet):
        assert out not in cli_dirs or "overwrite=True" in snippet, out
    for resumed in re.findall(r'resume="([^"]+)"', snippet):
        assert resumed in cli_dirs, resumed
    compile(snippet, "README.md", "exec")


@pytest.mark.parametrize("name", re.findall(r"`examples/([\w.]+\.toml)`", README))
def test_examples_named_in_the_readme_exist(name):
    assert (ROOT / "examples" / name).is_file()


# --- the README's commands, run as written in a clean directory and environment ---------------------
def fresh_clone(tmp_path: Path) -> Path:
    """A directory laid out as a fresh clone is for the commands: examples/, and no runs/."""
    work = tmp_path / "clone"
    shutil.copytree(ROOT / "examples", work / "examples")
    return work


def run_verbatim(script: str, work: Path) -> str:
    done = run_script(script, work, clean_env(work.parent / "home"))
    assert done.returncode == 0, f"{script}\n---\n{done.stdout[-3000:]}"
    return done.stdout


def ignored(work: Path) -> list[str]:
    """What the commands wrote beside examples/ that git would not ignore in the repository."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git, or the repository's .git, is not here")
    written = [p.name + "/" * p.is_dir() for p in work.iterdir() if p.name != "examples"]
    return [name for name in written if subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q",
                                                        name]).returncode != 0]


@pytest.mark.slow
def test_the_walk_through_runs_as_written_and_writes_only_what_git_ignores(tmp_path):
    pytest.importorskip("matplotlib")
    [walk] = [b for b in bash_blocks(ROOT / "README.md", "Running experiments") if "fedpd plot" in b]
    work = fresh_clone(tmp_path)
    out = run_verbatim(walk, work)
    assert "continuing from round 200" in out and "fedpd " in out.splitlines()[-1]  # the resume, then --version
    assert "one row per config over its n seeds" in out  # compare runs/seeds: the three seeds as one row
    for name in ("results.csv", "fig.png", "seeds.pdf", "split.png", "runs/seeds/fedpd-s2/metrics.jsonl"):
        assert (work / name).is_file() and (work / name).stat().st_size > 0, name
    assert (work / "results.csv").read_text().splitlines()[0].startswith("run,")
    assert not ignored(work), "add these to .gitignore, or let the README write them under runs/"


def test_the_tensorboard_command_runs_as_written(tmp_path):
    pytest.importorskip("tensorboardX")
    [block] = bash_blocks(ROOT / "README.md", "TensorBoard")
    work = fresh_clone(tmp_path)
    run_verbatim(block, work)
    assert any((work / "runs" / "feddyn").rglob("events.out.tfevents*"))
    assert not ignored(work)


def test_the_reproduction_commands_that_take_seconds_run_as_written(tmp_path):
    [block] = bash_blocks(ROOT / "README.md", "Reproducing the papers")
    quick = [line for line in block.splitlines() if "--budget reduced" not in line]
    assert len(quick) == 4 and len(block.splitlines()) == 5  # the second, a reduced reproduction, takes an hour
    work = fresh_clone(tmp_path)
    report = Path("docs") / "reproductions" / "feddyn_fedpd"
    shutil.copytree(ROOT / report, work / report, ignore=shutil.ignore_patterns("runs"))
    out = run_verbatim("\n".join(quick), work)
    assert "fedpd_fig2" in out and any((work / "afedpd_full" / "configs").rglob("*.toml"))
    for name in ("README.md", "results.csv"):  # rebuilt from the records: the same
        assert (work / report / name).read_text() == (ROOT / report / name).read_text()
    assert "2 of 2 records agree with a re-run of their first rounds" in out
    assert not [name for name in ignored(work) if name != "docs/"]
