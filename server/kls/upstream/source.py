"""A torch source: where kls reads Inductor's own files, without importing torch.

Three shapes hold the same files:
- a PyTorch checkout: `<checkout>/torch/_inductor/...`, its version in `<checkout>/version.txt`;
- an installed package folder: `<site-packages>/torch/_inductor/...`, its version in
  `torch/version.py` (`__version__ = '2.11.0+cu130'`);
- a torch wheel: the same members inside a zip. kls unpacks only `torch/_inductor/**/*.py`,
  `**/*.jinja` and `torch/version.py` (each member bounded, names checked) once into its cache
  and makes the copies read-only, so findings, hover and nvcc errors land in real lines of real
  files that an editor opens as it opens any file.

`TorchSource.package` is the folder that holds `_inductor/`: every reference is relative to it
(`torch:_inductor/codegen/cutlass/gemm_template.py::GEMM_TEMPLATE_CUTLASS_3X`). Reads are
confined to `package/_inductor/` (and the version file).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import re
import shutil
import stat
import threading
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kls.cache_dir import cache_dir
from kls.input_limits import MIB

INDUCTOR = "_inductor"
# The largest _inductor source in torch 2.11 is under 1 MiB; a member above this is not a
# source kls needs (and a zip bomb is refused before it is inflated).
MAX_MEMBER_BYTES = 4 * MIB
MAX_UNPACKED_BYTES = 96 * MIB
_UNPACKED_SUFFIXES = (".py", ".jinja")
_VERSION = re.compile(r"^(\d+)\.(\d+)")


class TorchSourceError(Exception):
    """A named source that is not a torch source (missing, or without `_inductor/`)."""


@dataclass(frozen=True)
class TorchSource:
    kind: str  # "checkout", "package" or "wheel"
    origin: Path  # what was named: the checkout, the package folder or the wheel file
    package: Path  # the folder that holds _inductor/ (for a wheel: the unpacked copy)
    version: str  # as the source writes it, e.g. "2.11.0+cu130"

    @property
    def inductor(self) -> Path:
        return self.package / INDUCTOR

    @property
    def major_minor(self) -> tuple[int, int] | None:
        return major_minor(self.version)

    def path_of(self, relative: str) -> Path:
        """The file `relative` (to the package folder, e.g. `_inductor/kernel/mm.py`) names,
        or TorchSourceError when it would leave `_inductor/`."""
        parts = PurePosixPath(relative).parts
        if not parts or parts[0] != INDUCTOR or ".." in parts or relative.startswith("/"):
            raise TorchSourceError(
                f"'{relative}' is not a path under {INDUCTOR}/: kls reads only Inductor's own "
                f"files of the torch source (e.g. {INDUCTOR}/codegen/cutlass/gemm_template.py)"
            )
        return self.package.joinpath(*parts)

    def describe(self) -> str:
        return f"torch {self.version} ({self.kind}: {self.origin})"


def major_minor(version: str) -> tuple[int, int] | None:
    """(2, 11) of "2.11.0+cu130", "2.11.0a0+git..." or "2.11"; None when it is no version."""
    m = _VERSION.match(version.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def open_source(named: Path) -> TorchSource:
    """The torch source at `named`: a checkout, a `torch/` package folder (or the folder that
    holds one), or a wheel file. Raises TorchSourceError with what was wrong."""
    if named.is_file():
        if not zipfile.is_zipfile(named):
            raise TorchSourceError(f"{named} is a file but not a wheel (zip) of torch")
        return _open_wheel(named)
    if not named.is_dir():
        raise TorchSourceError(f"{named} does not exist")
    if (named / INDUCTOR).is_dir():
        return _open_folder(named, named)
    if (named / "torch" / INDUCTOR).is_dir():
        return _open_folder(named, named / "torch")
    raise TorchSourceError(
        f"{named} holds no torch/{INDUCTOR}/: name a PyTorch checkout, an installed torch "
        "package folder or a torch wheel"
    )


def _open_folder(named: Path, package: Path) -> TorchSource:
    checkout_version = package.parent / "version.txt"
    if (package / "version.py").is_file():
        version = _version_of_py(_read_bounded(package / "version.py"))
        kind = "checkout" if checkout_version.is_file() else "package"
    elif checkout_version.is_file():
        version, kind = _read_bounded(checkout_version).strip(), "checkout"
    else:
        version, kind = "unknown", "package"
    if kind == "checkout" and checkout_version.is_file():
        # A checkout's generated version.py may be stale; version.txt is what it builds.
        version = _read_bounded(checkout_version).strip() or version
    return TorchSource(kind, named.resolve(), package.resolve(), version)


def _version_of_py(text: str) -> str:
    """`__version__ = '...'` of torch/version.py, read with ast (never run)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "unknown"
    for node in tree.body:
        if (
            isinstance(node, (ast.Assign, ast.AnnAssign))
            and any(
                isinstance(t, ast.Name) and t.id == "__version__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return "unknown"


def _read_bounded(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(MAX_MEMBER_BYTES + 1)
    if len(data) > MAX_MEMBER_BYTES:
        raise TorchSourceError(f"{path} is larger than {MAX_MEMBER_BYTES // MIB} MiB")
    return data.decode("utf-8", "replace")


def _open_wheel(wheel: Path) -> TorchSource:
    st = wheel.stat()
    key = hashlib.sha256(f"{wheel.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()
    target = cache_dir("torch-source") / key[:24]
    package = target / "torch"
    with _UNPACKING:
        if not (target / ".complete").is_file():
            _unpack_once(wheel, target)
    version = "unknown"
    if (package / "version.py").is_file():
        version = _version_of_py(_read_bounded(package / "version.py"))
    return TorchSource("wheel", wheel.resolve(), package, version)


_UNPACKING = threading.Lock()  # one unpack at a time in a process; others wait for it


def _unpack_once(wheel: Path, target: Path) -> None:
    """Unpack into a folder of this process's own, then move it into place in one rename: a
    reader in another process (the language server beside its render workers, two editors)
    sees no folder or a whole one, never a file half rewritten by a second unpack (which
    showed a torch template with no string constants as KT004). A folder left without its
    `.complete` mark (an unpack that was killed) is moved aside first; if another process
    renamed its own into place meanwhile, that one is kept and this one removed."""
    private = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        _unpack(wheel, private)
        (private / ".complete").write_text(wheel.name, encoding="utf-8")
        if target.exists() and not (target / ".complete").is_file():
            with contextlib.suppress(OSError):
                target.rename(target.parent / f".stale.{uuid.uuid4().hex[:8]}")
        with contextlib.suppress(OSError):  # another process's is in place: keep it
            private.rename(target)
    finally:
        if private.exists():
            shutil.rmtree(private, ignore_errors=True)
    for stale in target.parent.glob(".stale.*"):
        shutil.rmtree(stale, ignore_errors=True)
    if not (target / ".complete").is_file():
        raise TorchSourceError(f"could not unpack {wheel} into {target}")


def _wanted(name: str) -> bool:
    if name == "torch/version.py":
        return True
    return name.startswith(f"torch/{INDUCTOR}/") and name.endswith(_UNPACKED_SUFFIXES)


def _unpack(wheel: Path, target: Path) -> None:
    """Unpack the members kls reads, each checked before it is inflated: a plain relative
    name, a bounded size, a bounded total."""
    total = 0
    try:
        with zipfile.ZipFile(wheel) as z:
            members = [i for i in z.infolist() if _wanted(i.filename) and not i.is_dir()]
            if not any(i.filename.startswith(f"torch/{INDUCTOR}/") for i in members):
                raise TorchSourceError(f"{wheel} holds no torch/{INDUCTOR}/: is it a torch wheel?")
            for info in members:
                parts = PurePosixPath(info.filename).parts
                if ".." in parts or info.filename.startswith("/") or "\\" in info.filename:
                    continue
                if info.file_size > MAX_MEMBER_BYTES:
                    continue
                total += info.file_size
                if total > MAX_UNPACKED_BYTES:
                    raise TorchSourceError(
                        f"{wheel}: its Inductor sources exceed {MAX_UNPACKED_BYTES // MIB} MiB"
                    )
                with z.open(info) as f:
                    data = f.read(MAX_MEMBER_BYTES + 1)
                if len(data) > MAX_MEMBER_BYTES:
                    continue
                out = target.joinpath(*parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                if out.exists():
                    os.chmod(out, stat.S_IRUSR | stat.S_IWUSR)
                out.write_bytes(data)
                os.chmod(out, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    except (zipfile.BadZipFile, OSError) as exc:
        raise TorchSourceError(f"cannot read the wheel {wheel}: {exc}") from exc
