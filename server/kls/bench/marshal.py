"""Arguments of the Inductor entry point, in the order Inductor passes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EntryCall:
    """pointers (C-parameter order), then the size/offset/runtime args (torch-2.11), then
    workspace_size*, workspace*, stream."""

    pointers: list[int | None]
    workspace_size_ptr: int | None
    workspace: int | None
    stream: int
    extra: tuple[int, ...] = ()

    def args(self) -> list[int | None]:
        return [*self.pointers, *self.extra, self.workspace_size_ptr, self.workspace, self.stream]


# The C types torch 2.11's signatures use after the pointers, as ctypes types' names.
EXTRA_CTYPES = {"const int": "c_int", "const uint8_t": "c_uint8", "const float": "c_float"}


def ordered_pointers(params: list[str], pointers: dict[str, int]) -> list[int | None]:
    """Device pointers in C-parameter order; a missing buffer is a bug in the job."""
    missing = [p for p in params if p not in pointers]
    if missing:
        raise KeyError(f"no device buffer for parameter(s) {missing}")
    return [pointers[p] for p in params]


def workspace_query(
    params: list[str], size_ptr: int, stream: int, extra: tuple[int, ...] = ()
) -> EntryCall:
    """Inductor's newer protocol: query the workspace size with null data pointers."""
    return EntryCall([None] * len(params), size_ptr, None, stream, extra)


def launch(
    params: list[str],
    pointers: dict[str, int],
    workspace: int | None,
    stream: int,
    extra: tuple[int, ...] = (),
) -> EntryCall:
    return EntryCall(ordered_pointers(params, pointers), None, workspace, stream, extra)
