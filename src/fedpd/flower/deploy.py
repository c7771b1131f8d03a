"""What a deployment needs that fedpd can write for you: the Flower app of a run, and the TLS
certificates and SuperNode keys (``fedpd flower app``, ``fedpd flower certs``; docs/deployment.md
walks through a deployment with them).

The app is a directory ``flwr run`` packs: a ``pyproject.toml`` whose components are fedpd's own
ServerApp and ClientApp (:mod:`fedpd.flower.serverapp`, :mod:`fedpd.flower.clientapp`; so fedpd
must be installed on the SuperLink's machine and on every SuperNode) and whose run config holds
the resolved fedpd config and the run directory on the server machine.

The app declares no dependencies. A SuperLink installs an app's declared dependencies into a
fresh environment for every run (``uv sync``, Flower's default; SuperNodes never do by default),
and ``fedpd[flower]`` cannot be installed there when fedpd came from a clone rather than an index
(the run fails with exit code 608 while ``flwr run`` still returns 0). Even when it could, the
ServerApp would run an index's fedpd while the SuperNodes run the one installed on them: the
messages and the metrics are only exact when every machine runs the same fedpd, installed
beforehand. With nothing declared the SuperLink's install step has nothing to do.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import tomli_w

from fedpd.errors import ConfigError, reason
from fedpd.io import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:  # `fedpd flower connection` and `certs` start without torch
    from fedpd.config import Config

APP_FILE = "pyproject.toml"


def write_app(cfg: Config, appdir: Path, run_dir: Path, overwrite: bool = False) -> Path:
    """The Flower app that runs ``cfg`` with its run directory at ``run_dir`` (on the server)."""
    appdir = Path(appdir)
    check_config(cfg)
    if (appdir / APP_FILE).exists() and not overwrite:
        raise ConfigError(f"--out {str(appdir)!r}: already holds a Flower app ({APP_FILE}); pass --overwrite to "
                          f"replace it")
    if appdir.exists() and not appdir.is_dir():
        raise ConfigError(f"--out {str(appdir)!r}: exists and is not a directory")
    # Flower wants an app name of letters, digits and hyphens, at most 32 characters (a plug-in's
    # import path, package.module:Attribute, gives its attribute)
    words = (cfg.names[key].rpartition(":")[2] for key in ("algorithm", "problem"))
    name = re.sub(r"[^a-z0-9]+", "-", "fedpd-" + "-".join(words).lower())[:32].strip("-")
    pyproject = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": name, "version": "1.0.0", "license": "Apache-2.0",
                    "description": f"fedpd: {cfg.names['algorithm']} on {cfg.names['problem']}",
                    "dependencies": []},  # fedpd is preinstalled everywhere (see above)
        "tool": {"flwr": {"app": {
            "publisher": "fedpd",
            "components": {"serverapp": "fedpd.flower.serverapp:server_app",
                           "clientapp": "fedpd.flower.clientapp:client_app"},
            "config": {"fedpd-config": cfg.to_toml(), "out": str(Path(run_dir).absolute()), "resume": False,
                       "overwrite": False},
        }}},
    }
    appdir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(appdir / APP_FILE, tomli_w.dumps(pyproject, multiline_strings=True))
    return appdir


def check_config(cfg: Config) -> None:
    """Refuse now what the ServerApp would refuse when the run starts, after ``flwr run`` has
    packed and started it: the problem is built (on the CPU) with the algorithm, solver and sampler
    and their cross-checks against it (e.g. ``sampler.clients_per_round`` above the problem's
    clients). A dataset problem whose data are not on this machine is checked by the server only
    (one line says so)."""
    import sys

    from fedpd.build import build, build_privacy, build_problem, expected_participants
    from fedpd.checks import check_against_problem
    from fedpd.errors import DataError

    try:
        problem = build_problem(cfg, "cpu")
    except DataError as err:
        print(f"fedpd: the app is not checked against its problem here ({reason(err, 200)}); the server checks it "
              f"when the run starts", file=sys.stderr, flush=True)
        return
    algorithm, solver, sampler = build(cfg, problem)
    build_privacy(cfg, algorithm, solver, sampler, problem)
    check_against_problem(cfg, problem, algorithm, participants=expected_participants(sampler, problem.num_clients))


def certificate_files(nodes: int) -> list[str]:
    """The names :func:`make_certificates` writes for ``nodes`` SuperNodes."""
    keys = [f"node{k}{suffix}" for k in range(nodes) for suffix in ("", ".pub")]
    return ["ca.crt", "ca.key", "server.crt", "server.key", *keys]


def make_certificates(folder: Path, nodes: int = 2, hosts: tuple[str, ...] = (), days: int = 365,
                      overwrite: bool = False) -> dict[str, Path]:
    """A CA, a SuperLink certificate signed by it (for localhost, 127.0.0.1, ::1 and ``hosts``) and
    ``nodes`` SuperNode key pairs (EC P-384, OpenSSH format, as Flower's node authentication wants).
    Files already in ``folder`` are replaced only with ``overwrite``: a new CA or node key no longer
    matches what a running SuperLink trusts or has registered."""
    folder = Path(folder)
    if nodes < 1:
        raise ConfigError(f"--nodes {nodes}: a deployment needs at least one SuperNode key pair (allowed: 1 or more)")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{str(folder)!r}: exists and is not a directory")
    present = [name for name in certificate_files(nodes) if (folder / name).exists()]
    if present and not overwrite:
        held = ", ".join(present[:3]) + (", …" if len(present) > 3 else "")
        raise ConfigError(f"{str(folder)!r}: already holds {held} (new ones would no longer match what the SuperLink "
                          f"and SuperNodes use); pass --overwrite to replace them")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def pem_key(key) -> bytes:
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedpd federation CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    server_key = ec.generate_private_key(ec.SECP384R1())
    names: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                     x509.IPAddress(ipaddress.ip_address("::1"))]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "localhost")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=days))
              .add_extension(x509.SubjectAlternativeName(names), critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    files = {"ca.crt": ca.public_bytes(serialization.Encoding.PEM), "ca.key": pem_key(ca_key),
             "server.crt": server.public_bytes(serialization.Encoding.PEM), "server.key": pem_key(server_key)}
    for k in range(nodes):
        key = ec.generate_private_key(ec.SECP384R1())
        files[f"node{k}"] = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                              serialization.NoEncryption())
        files[f"node{k}.pub"] = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                              serialization.PublicFormat.OpenSSH) + b"\n"
    paths = {}
    for name, data in files.items():
        atomic_write_bytes(folder / name, data)
        if name.endswith(".key") or name.startswith("node") and not name.endswith(".pub"):
            os.chmod(folder / name, 0o600)  # private keys: the owner only
        paths[name] = folder / name
    return paths


def flower_home() -> Path:
    """Where the ``flwr`` command keeps its config: $FLWR_HOME, else ~/.flwr."""
    return Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr")


def write_connection(name: str, address: str, root_certificates: Path | None = None, insecure: bool = False,
                     default: bool = False) -> Path:
    """Add (or replace) the SuperLink connection ``name`` in the flwr config, for
    ``flwr run APPDIR name`` and ``flwr supernode register KEY name``."""
    import tomllib

    if root_certificates is None and not insecure:
        raise ConfigError("fedpd flower connection: give --root-certificates CA_FILE (TLS) or --insecure")
    if root_certificates is not None:
        root_certificates = Path(root_certificates).absolute()
        if not root_certificates.is_file():
            raise ConfigError(f"--root-certificates {str(root_certificates)!r}: no such file (the CA certificate "
                              f"the SuperLink's certificate is signed with, e.g. ca.crt of fedpd flower certs)")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--address {address!r}: expected HOST:PORT of the SuperLink, e.g. 127.0.0.1:9092")
    path = flower_home() / "config.toml"
    try:
        current = tomllib.loads(path.read_text()) if path.exists() else {}
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err}); fix or move it first") from None
    superlink = current.setdefault("superlink", {})
    entry = {"address": address}
    if root_certificates is not None:
        entry["root-certificates"] = str(root_certificates)
    else:
        entry["insecure"] = True
    superlink[name] = entry
    if default or "default" not in superlink:
        superlink["default"] = name
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, tomli_w.dumps(current))
    return path


def wait_for_superlink(address: str, seconds: float, root_certificates: Path | None = None) -> float:
    """Wait until the SuperLink at ``address`` (HOST:PORT) accepts connections — with
    ``root_certificates``, until it completes a TLS handshake whose certificate that CA signed, for
    HOST, as ``flwr`` checks it; the seconds waited. A script that starts ``flower-superlink ... &``
    and then runs ``flwr supernode register`` would otherwise race the SuperLink's start (flwr does
    not retry), and a wrong CA would only show in ``flwr run``, as a network error."""
    import socket
    import ssl
    import time

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    context = None
    if root_certificates is not None:
        ca = str(root_certificates)
        try:
            context = ssl.create_default_context(cafile=ca)
        except (ssl.SSLError, OSError, ValueError) as err:
            raise ConfigError(f"--root-certificates {ca!r}: not a PEM CA certificate ({reason(err)})") from None
    start = time.monotonic()
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                if context is not None:
                    context.wrap_socket(sock, server_hostname=host).close()
            return time.monotonic() - start
        except ssl.SSLCertVerificationError as err:
            raise ConfigError(_certificate_refused(address, host, ca, err)) from None
        except ssl.SSLError as err:
            if not isinstance(err, ssl.SSLEOFError):  # (closed during the handshake: it may be starting)
                raise ConfigError(f"the SuperLink at {address} does not speak TLS ({reason(err)}): start it with "
                                  f"--ssl-certfile and --ssl-keyfile, or give --insecure here for a SuperLink "
                                  f"started with --insecure") from None
        except OSError:
            pass
        if time.monotonic() - start >= seconds:
            raise ConfigError(f"the SuperLink at {address} did not answer within {seconds:g} s (is it started, "
                              f"and --address its --host and --port?)") from None
        time.sleep(0.2)


def _certificate_refused(address: str, host: str, ca: str, err) -> str:
    """One line: why the SuperLink's certificate was not accepted with the CA certificate ``ca``."""
    why = getattr(err, "verify_message", "") or reason(err)
    if getattr(err, "verify_code", None) == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
        return (f"the SuperLink at {address}: its certificate is not for {host} ({why}); make it with fedpd "
                f"flower certs ... --host {host} and restart the SuperLink with it")
    return (f"--root-certificates {ca!r}: the SuperLink at {address} has a certificate this CA did not sign "
            f"({why}); give the CA certificate the SuperLink's was made with (ca.crt of the same fedpd flower "
            f"certs)")
