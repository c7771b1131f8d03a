"""docs/deployment.md's TLS deployment, run as written: the bash blocks of the section,
in order, as one script on 127.0.0.1 — certificates, a SuperLink with TLS, node authentication
and a database, two registered SuperNodes, the app, ``flwr run``, ``fedpd status``, ``fedpd
compare``, a SuperNode killed with ``kill -9`` and restarted after the doc's wait, the SuperLink
killed with ``kill -9`` and restarted on its database (the nodes reconnect by
themselves, nothing is registered again, and the resume finds them), and the doc's stop by PID. The one
change is the rounds, fewer through the doc's own ``--set run.rounds=…``; between the restart and
the stop the test waits until the SuperLink lists the restarted node online. The environment is
clean: a fresh HOME; on PATH this Python's scripts and the system's; PYTHONPATH only this
checkout's ``src`` (so that ``fedpd`` is the code under test); none of Flower's switches (notably
not FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION): what the doc does not set, the test does not
either. Every process the script starts, and those they start (Flower's SuperExec helpers put
themselves in sessions of their own), is followed through /proc; after the doc's stop none may be
left, and the test kills by PID whatever is, failing — and a watchdog does, however the test ends
(Ctrl-C, a killed worker). The doc's ports are the test's for its whole life: the tests of one
machine that use them take turns (a lock file), and one that another program takes midway stops
the script and skips the test, naming the port and its holder (tests/flower_deploy.py)."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest

from doc_blocks import bash_blocks
from flower_deploy import deployment_env, holding_ports, run_doc_script
from helpers import ROOT

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "deployment.md"
SECTION = "3. A deployment with TLS"
DOC_ROUNDS, ROUNDS = "--set run.rounds=5", "--set run.rounds=1"
PORTS = (9092, 9094, 9095)  # the doc's own


WAIT_ONLINE = """
for i in $(seq 60); do  # (the test's) until the SuperLink lists both SuperNodes online again
  [ "$(flwr supernode list local-tls --format json | grep -c '"status": "online"')" = 2 ] && break
  sleep 2
done
"""


def test_the_section_starts_processes_it_stops_and_has_the_rounds_to_change():
    blocks = bash_blocks(DOC, SECTION)
    text = "\n".join(blocks)
    assert text.count(DOC_ROUNDS) == 1
    started = re.findall(r"^(\w+)=\$!$", text, re.M)
    assert set(started) == {"NODE0", "NODE1", "SUPERLINK"}, started
    assert text.count(" &\n") == len(started)  # every background process has its PID kept
    assert blocks[-1].strip() == "kill -TERM $NODE0 $NODE1 $SUPERLINK"
    restart = [b for b in blocks if "kill -9 $NODE1" in b]
    assert len(restart) == 1 and "sleep 70" in restart[0] and restart[0].rstrip().endswith("NODE1=$!")
    superlinks = re.findall(r"^flower-superlink .*?&$", text, re.M | re.S)
    assert len(superlinks) == 2 and all("--database deploy/superlink.db" in c for c in superlinks)
    relink = [b for b in blocks if "kill -9 $SUPERLINK" in b]
    assert len(relink) == 1 and '--run-config "resume=true"' in relink[0] and "register" not in relink[0]
    assert "--set run.checkpoint_every=1" in text and text.count("fedpd status deploy/run") == 2
    assert "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION" not in text


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="follows the processes it starts through /proc")
def test_the_tls_deployment_runs_as_written(tmp_path):
    work = tmp_path / "work"
    shutil.copytree(ROOT / "examples", work / "examples")  # the doc runs from a checkout's root
    script = "\n".join(block.replace(DOC_ROUNDS, ROUNDS) + (WAIT_ONLINE if "kill -9 $NODE1" in block else "")
                       for block in bash_blocks(DOC, SECTION))  # the doc's order; the last one stops
    log = tmp_path / "out.log"
    with holding_ports(PORTS) as ports:  # the doc's own, for the test's whole life
        returncode, left = run_doc_script(script, work, deployment_env(tmp_path / "home"), log, ports, timeout=1200)
    said = log.read_text(errors="replace")
    assert returncode == 0, said[-6000:]
    assert not left, f"still running after the doc's stop: {left}\n{said[-3000:]}"
    assert "Exit Code" not in said, said[-6000:]  # a Flower failure (608: runtime install; 305: node refused)
    records = [json.loads(line) for line in (work / "deploy" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1]
    # fedpd compare deploy/run: the run's row, its final train loss as the table rounds it
    row = re.search(r"^\s*run\s+feddyn\s+1\s+(\S+)", said, re.M)
    assert row and float(row.group(1)) == pytest.approx(records[-1]["train_loss"], abs=1e-3), said[-3000:]
    # the SuperNode restarted after kill -9 and the wait was admitted again (not "Failed to activate")
    assert "Failed to activate SuperNode" not in said and said.count("Activated node_id=") == 3, said[-6000:]
    # fedpd status said the run finished, before the SuperLink's restart and after the resume on it,
    # which found both nodes (no key registered again), with a checkpoint of every round
    assert said.count("deploy/run: finished round 1 of 1") == 2, said[-6000:]
    assert said.count("fedpd: finished round 1; run directory:") == 2, said[-6000:]
    status = json.loads((work / "deploy" / "run" / "status.json").read_text())
    assert status["state"] == "finished" and status["notices"] == [], status
