"""README.md walked top to bottom (issue 16, item 7): every `fedpd` command parses, every file it
names exists, and every run directory a command reads was written by an earlier command (a fresh
clone has no runs/). The Python snippet writes only where it may."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fedpd.cli import make_parser

ROOT = Path(__file__).resolve().parents[1]
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
        elif args.command in ("compare", "plot"):
            for d in args.dirs:
                assert d in written, f"fedpd {args.command}: {d} is not written by an earlier command"
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
