"""`kls init`: a small project that checks, compiles and (with a GPU) verifies and benchmarks out
of the box: an elementwise add with its NumPy reference, or (`--gemm`) a CUTLASS 3.x GEMM in
today's Inductor style: a kls.toml whose instance reads torch 2.11's own templates in place
from the located torch source (kls.upstream), so `--gemm` needs one; or (`--triton`) a Triton
template of kls's own in Inductor's style (an elementwise scale), rendered by Inductor when
torch is importable and checked statically either way."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from kls.upstream import locate

KINDS = ("default", "gemm", "triton")


@dataclass(frozen=True)
class Scaffold:
    files: tuple[str, ...]
    first_template: str
    first_instance: str
    needs_torch: bool = False  # its instances read templates from the torch source


SCAFFOLDS = {
    "default": Scaffold(("kls.toml", "add.cu.jinja", "refs.py"), "add.cu.jinja", "add_bf16"),
    # Its templates are Inductor's own, in the torch source: commands name the config.
    "gemm": Scaffold(("kls.toml",), "kls.toml", "gemm_bf16_4096", needs_torch=True),
    "triton": Scaffold(("kls.toml", "scale.py.jinja"), "scale.py.jinja", "scale_bf16"),
}


class InitError(Exception):
    pass


def file_text(kind: str, name: str) -> str:
    return resources.files(__package__).joinpath(kind, name).read_text(encoding="utf-8")


def init(folder: Path, kind: str = "default") -> list[Path]:
    """Write the scaffold into `folder` (created if missing); never overwrites a file."""
    scaffold = SCAFFOLDS[kind]
    if folder.exists() and not folder.is_dir():
        raise InitError(f"{folder} is not a folder")
    existing = [name for name in scaffold.files if (folder / name).exists()]
    if existing:
        raise InitError(
            f"{folder} already has {', '.join(existing)}; kls init never overwrites a file: "
            "run it in an empty folder (kls init NEW_FOLDER)"
        )
    if scaffold.needs_torch:
        located = locate()
        if located.source is None:
            raise InitError(
                "kls init --gemm writes instances of torch 2.11's own GEMM templates, read in "
                f"place from a torch source, and {located.not_found_message()}"
            )
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in scaffold.files:
        path = folder / name
        path.write_text(file_text(kind, name), encoding="utf-8")
        written.append(path)
    return written


def next_steps(folder: Path, kind: str = "default") -> str:
    s = SCAFFOLDS[kind]
    where = "" if folder.resolve() == Path.cwd().resolve() else f"cd {folder} && "
    if kind == "triton":
        return (
            f"kls: wrote {', '.join(s.files)} in {folder}. Next:\n"
            f"  {where}kls check .            # static checks; with torch 2.11, Inductor's render\n"
            f"  kls render {s.first_template} -i {s.first_instance}\n"
            f"  kls compile {s.first_template} -i {s.first_instance}   # Triton's compile, no GPU"
        )
    return (
        f"kls: wrote {', '.join(s.files)} in {folder}. Next:\n"
        f"  {where}kls check .\n"
        f"  kls render {s.first_template} -i {s.first_instance}\n"
        f"  kls compile {s.first_template} -i {s.first_instance}\n"
        f"  kls bench {s.first_template} -i {s.first_instance}     # needs an NVIDIA GPU"
    )
