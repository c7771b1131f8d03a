"""download(): served by a local http.server on 127.0.0.1 only; success, checksum mismatch, 404 and an
interrupted transfer, each leaving no partial file behind."""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fedpd.data import download, load_dataset
from fedpd.data.checksums import Expected
from fedpd.errors import ConfigError, DataError


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        if self.path.startswith("/short/"):  # promises 1000 bytes, sends 100, hangs up
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b"x" * 100)
            return
        super().do_GET()


@pytest.fixture
def server(tmp_path, monkeypatch):
    """(folder served, base URL) of an HTTP server on 127.0.0.1 with an OS-chosen port."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    root = tmp_path / "srv"
    root.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


def _serve_mnist(writers, root) -> dict[str, tuple[int, str]]:
    writers.make_idx_dataset(root, gz=True)
    return {p.name: (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) for p in root.iterdir()}


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_success_then_load(tmp_path, server, writers, capsys):
    srv, url = server
    expected = _serve_mnist(writers, srv)
    data = tmp_path / "data"
    folder = download("mnist", data, base_url=url, progress=True, expected=expected)
    assert folder == data / "mnist"
    assert _leftovers(folder) == sorted(expected)
    assert "downloading train-images-idx3-ubyte.gz" in capsys.readouterr().err  # plain lines off a terminal
    assert load_dataset("mnist", data, verify=False).x_train.shape == (30, 1, 28, 28)
    # already present and verified: nothing fetched (the server copy is gone)
    for p in srv.iterdir():
        p.unlink()
    download("mnist", data, base_url=url, progress=False, expected=expected)
    assert capsys.readouterr().err == ""


def test_downloaded_files_get_the_umask_mode(tmp_path, server, writers):
    """mkstemp makes 0600 files; the renamed file must have the mode a plain open() gives (0666 & ~umask)."""
    srv, url = server
    expected = _serve_mnist(writers, srv)
    for umask in (0o022, 0o077):
        old = os.umask(umask)
        try:
            folder = download("mnist", tmp_path / oct(umask), base_url=url, progress=False, expected=expected)
        finally:
            os.umask(old)
        assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o666 & ~umask}


def test_checksum_mismatch_leaves_nothing(tmp_path, server, writers):
    srv, url = server
    expected = _serve_mnist(writers, srv)
    size, _ = expected["t10k-images-idx3-ubyte.gz"]
    expected["t10k-images-idx3-ubyte.gz"] = Expected(size, "f" * 64)
    with pytest.raises(DataError) as e:
        download("mnist", tmp_path, base_url=url, progress=False, expected=expected)
    msg = str(e.value)
    assert "\n" not in msg and "sha256 mismatch" in msg and "t10k-images-idx3-ubyte.gz" in msg
    left = _leftovers(tmp_path / "mnist")
    assert "t10k-images-idx3-ubyte.gz" not in left and not any(n.endswith(".part") for n in left)


def test_size_mismatch_leaves_nothing(tmp_path, server, writers):
    srv, url = server
    expected = _serve_mnist(writers, srv)
    expected["train-images-idx3-ubyte.gz"] = (123, expected["train-images-idx3-ubyte.gz"][1])
    with pytest.raises(DataError, match="expected 123"):
        download("mnist", tmp_path, base_url=url, progress=False, expected=expected)
    assert _leftovers(tmp_path / "mnist") == []


def test_404_leaves_nothing(tmp_path, server, writers):
    srv, url = server
    expected = _serve_mnist(writers, srv)
    (srv / "train-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError) as e:
        download("mnist", tmp_path, base_url=url, progress=False, expected=expected)
    assert "404" in str(e.value) and "\n" not in str(e.value)
    assert _leftovers(tmp_path / "mnist") == ["train-images-idx3-ubyte.gz"]  # complete files only


def test_interrupted_transfer_leaves_nothing(tmp_path, server, writers):
    srv, url = server
    with pytest.raises(DataError) as e:
        download("cifar10", tmp_path, base_url=url + "short/", progress=True,
                 expected={"cifar-10-python.tar.gz": (1000, "0" * 64)})
    assert "cifar-10-python.tar.gz" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "cifar10").exists()  # the folder this download made is removed again


def test_failed_download_removes_only_the_folders_it_made(tmp_path, server):
    _, url = server
    bad = {"cifar-10-python.tar.gz": (1000, "0" * 64)}
    with pytest.raises(DataError):  # D and D/cifar10 made by the download, both removed
        download("cifar10", tmp_path / "new" / "data", base_url=url, progress=False, expected=bad)
    assert _leftovers(tmp_path) == ["srv"]
    (tmp_path / "data" / "cifar10").mkdir(parents=True)  # there before: kept, even though empty
    with pytest.raises(DataError):
        download("cifar10", tmp_path / "data", base_url=url, progress=False, expected=bad)
    assert (tmp_path / "data" / "cifar10").is_dir()


def test_unreachable_and_unknown(tmp_path, server):
    _, url = server
    with pytest.raises(ConfigError):
        download("femnist", tmp_path)
    with pytest.raises(ConfigError):
        download("imagenet", tmp_path)
    with pytest.raises(DataError, match="cannot connect"):  # closed port on loopback
        download("cifar100", tmp_path, base_url="http://127.0.0.1:9/", progress=False, timeout=5)
    assert not (tmp_path / "cifar100").exists()
