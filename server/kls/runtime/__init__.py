"""Our implementation of the Inductor CUTLASS template API, driven by instance tensors."""

from kls.runtime.buffers import Buffer
from kls.runtime.kernel import CParam, Kernel
from kls.runtime.record import CallRecord, Recorder, RenderAbort
from kls.runtime.template_api import GemmTemplateAPI, TemplateAPI

__all__ = [
    "Buffer",
    "CParam",
    "CallRecord",
    "GemmTemplateAPI",
    "Kernel",
    "Recorder",
    "RenderAbort",
    "TemplateAPI",
]
