"""``fedpd flower app / certs / connection``: what they write, and one line (exit 2) for bad input
— a missing certificate file, a malformed address, an app directory already in use."""

from __future__ import annotations

import os
import tomllib

import pytest

pytest.importorskip("flwr", reason="Flower is not installed (pip install 'fedpd[flower]')")

from fedpd.cli import main  # noqa: E402

CONFIG = '[problem]\nname = "least_squares"\nclients = 4\n[algorithm]\nname = "feddyn"\n[run]\nrounds = 3\n'


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_app_holds_fedpds_components_and_the_resolved_config(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main(["flower", "app", str(cfg), "--out", str(tmp_path / "app"), "--run-dir", str(tmp_path / "run"),
                 "--set", "run.rounds=7"]) == 0
    app = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "fedpd.flower.serverapp:server_app",
                                 "clientapp": "fedpd.flower.clientapp:client_app"}
    run_cfg = tomllib.loads(app["config"]["fedpd-config"])
    assert run_cfg["algorithm"]["name"] == "feddyn" and run_cfg["run"]["rounds"] == 7
    assert app["config"]["out"] == str((tmp_path / "run").absolute())


def test_app_declares_no_dependencies_so_a_superlink_installs_nothing(tmp_path):
    """A SuperLink installs an app's declared dependencies for every run (``uv sync``,
    Flower's default); ``fedpd[flower]`` could not be found for a fedpd installed from a clone (exit
    code 608). fedpd is preinstalled on every machine: the app declares nothing, and Flower's own
    installer, run on it as the SuperLink runs it, succeeds without an index."""
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main(["flower", "app", str(cfg), "--out", str(tmp_path / "app")]) == 0
    assert tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())["project"]["dependencies"] == []
    code = ("import sys; from flwr.supercore.superexec.dependency_installer import install_app_dependencies as f; "
            "f(sys.argv[1], run_id=1); import fedpd.flower.serverapp")
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "home"), "UV_OFFLINE": "1"}  # no index may be needed
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "app")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_app_refuses_an_existing_app_and_a_bad_config(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main(["flower", "app", str(cfg), "--out", str(tmp_path / "app")]) == 0
    capsys.readouterr()
    assert main(["flower", "app", str(cfg), "--out", str(tmp_path / "app")]) == 2
    assert "--overwrite" in one_line(capsys)
    assert main(["flower", "app", str(cfg), "--out", str(tmp_path / "b"), "--set", "run.rounds=0"]) == 2
    assert "run.rounds" in one_line(capsys)


def test_certs_make_a_ca_a_server_certificate_for_loopback_and_ec_node_keys(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    assert main(["flower", "certs", str(tmp_path), "--nodes", "2", "--host", "fl.example.org"]) == 0
    server = x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    assert server.issuer == ca.subject
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"localhost", "fl.example.org"} <= set(names.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "::1"} <= {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    for k in range(2):
        key = load_ssh_private_key((tmp_path / f"node{k}").read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)  # Flower's node authentication wants EC keys
        assert (tmp_path / f"node{k}.pub").read_text().startswith("ecdsa-sha2-nistp384 ")
        assert (tmp_path / f"node{k}").stat().st_mode & 0o077 == 0  # private: the owner only


def test_connection_writes_flwrs_config_and_checks_the_certificate(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    capsys.readouterr()
    assert main(["flower", "connection", "prod", "--address", "10.0.0.1:9092", "--root-certificates",
                 str(tmp_path / "missing.crt")]) == 2
    assert "no such file" in one_line(capsys)
    assert main(["flower", "connection", "prod", "--address", "nowhere", "--insecure"]) == 2
    assert "HOST:PORT" in one_line(capsys)
    (tmp_path / "ca.crt").write_text("certificate")
    assert main(["flower", "connection", "prod", "--address", "10.0.0.1:9092", "--root-certificates",
                 str(tmp_path / "ca.crt")]) == 0
    assert main(["flower", "connection", "test", "--address", "127.0.0.1:9092", "--insecure", "--default"]) == 0
    config = tomllib.loads((tmp_path / "home" / "config.toml").read_text())["superlink"]
    assert config["default"] == "test" and config["test"] == {"address": "127.0.0.1:9092", "insecure": True}
    assert config["prod"]["root-certificates"] == str(tmp_path / "ca.crt")


def test_connection_wait_returns_once_the_superlink_listens_and_fails_in_one_line_when_it_never_does(
        tmp_path, capsys, monkeypatch):
    """--wait: a script that has just started ``flower-superlink ... &`` registers node keys only once
    the SuperLink answers (flwr does not retry: docs/deployment.md's section 3 raced it)."""
    import socket
    import threading

    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "home"))
    with socket.socket() as free:  # a port nothing listens on, then a listener opened after a delay
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    capsys.readouterr()
    assert main(["flower", "connection", "x", "--address", f"127.0.0.1:{port}", "--insecure", "--wait", "0.5"]) == 2
    assert f"127.0.0.1:{port} did not answer within 0.5 s" in one_line(capsys)
    assert main(["flower", "connection", "x", "--address", f"127.0.0.1:{port}", "--insecure", "--wait", "-1"]) == 2
    assert "--wait -1 (allowed: 0 or more" in one_line(capsys)
    listener = socket.socket()
    threading.Timer(1.0, lambda: (listener.bind(("127.0.0.1", port)), listener.listen())).start()
    try:
        assert main(["flower", "connection", "x", "--address", f"127.0.0.1:{port}", "--insecure", "--wait", "30"]) == 0
    finally:
        listener.close()
    out = capsys.readouterr().out
    waited = float(out.split("answers (after ")[1].split(" s)")[0])
    assert 0.5 <= waited < 30, out  # it waited for the listener, and returned once it was there


def test_certs_refuse_to_replace_keys_without_overwrite(tmp_path, capsys):
    certs = tmp_path / "certs"
    assert main(["flower", "certs", str(certs), "--nodes", "1"]) == 0
    before = {p.name: p.read_bytes() for p in certs.iterdir()}
    capsys.readouterr()
    for nodes in ("1", "3"):  # a second run, even one asking for more nodes, would replace the CA
        assert main(["flower", "certs", str(certs), "--nodes", nodes]) == 2
        line = one_line(capsys)
        assert "already holds ca.crt" in line and "--overwrite" in line
        assert {p.name: p.read_bytes() for p in certs.iterdir()} == before  # nothing written
    assert main(["flower", "certs", str(certs), "--nodes", "1", "--overwrite"]) == 0
    after = {p.name: p.read_bytes() for p in certs.iterdir()}
    assert after.keys() == before.keys() and after["ca.crt"] != before["ca.crt"] and after["node0"] != before["node0"]


@pytest.mark.parametrize("nodes", ["0", "-1"])
def test_certs_refuse_no_nodes_and_write_nothing(tmp_path, capsys, nodes):
    assert main(["flower", "certs", str(tmp_path / "certs"), "--nodes", nodes]) == 2
    assert f"--nodes {nodes}" in one_line(capsys)
    assert not (tmp_path / "certs").exists()
