"""What every profile's runtime shares: buffers, the call record, the base `kernel`, kls's
own C++ text. The profiles' own helpers live in kls.profiles.<name>."""

from kls.runtime.buffers import Buffer
from kls.runtime.kernel import CParam, Kernel
from kls.runtime.record import CallRecord, Recorder, RenderAbort

__all__ = [
    "Buffer",
    "CParam",
    "CallRecord",
    "Kernel",
    "Recorder",
    "RenderAbort",
]
