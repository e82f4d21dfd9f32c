"""Long jobs (compile, later benchmark): bounded concurrency, work-done progress, cancellation.

A job runs in a worker thread. It stops when (a) the client cancels its progress token,
(b) the client cancels the request that started it, or (c) a newer job with the same key
supersedes it. Each sets the job's `threading.Event`, which the job polls and answers by
killing its child process group.

For (b), pygls 2 answers `$/cancelRequest` on `workspace/executeCommand` by cancelling the
request's future only: the command's own task runs on. So a job also watches the future of the
request it runs under.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from lsprotocol import types as lsp
from pygls.lsp.server import LanguageServer

from kls.compile.parallel import default_limit

T = TypeVar("T")
Report = Callable[[str], None]


class Jobs:
    def __init__(self, ls: LanguageServer, limit: int | None = None) -> None:
        self.ls = ls
        self.limit = limit or default_limit()
        self._semaphore: asyncio.Semaphore | None = None
        self.running: dict[str, threading.Event] = {}

    @property
    def semaphore(self) -> asyncio.Semaphore:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        return self._semaphore

    def cancel(self, key: str) -> bool:
        event = self.running.get(key)
        if event is not None:
            event.set()
        return event is not None

    async def run(self, key: str, title: str, work: Callable[[threading.Event, Report], T]) -> T:
        """Run `work(cancel, report)` in a thread; raise CancelledError if it was cancelled."""
        self.cancel(key)  # a newer job supersedes an older one with the same key
        cancel = threading.Event()
        self.running[key] = cancel
        _cancel_with_request(self.ls, cancel)
        token = await self._begin(title, cancel)
        loop = asyncio.get_running_loop()

        def report(message: str) -> None:
            if token is not None:
                loop.call_soon_threadsafe(
                    self.ls.work_done_progress.report,
                    token,
                    lsp.WorkDoneProgressReport(message=message, cancellable=True),
                )

        outcome = "done"
        try:
            async with self.semaphore:
                if cancel.is_set():
                    raise asyncio.CancelledError()
                return await asyncio.to_thread(work, cancel, report)
        except asyncio.CancelledError:
            cancel.set()
            outcome = "cancelled"
            raise
        except BaseException:
            outcome = "cancelled" if cancel.is_set() else "failed"  # e.g. CompileCancelled
            raise
        finally:
            if self.running.get(key) is cancel:
                del self.running[key]
            if token is not None and not _exiting(self.ls):
                self.ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=outcome))

    async def _begin(self, title: str, cancel: threading.Event) -> str | None:
        window = self.ls.client_capabilities.window
        if window is None or not window.work_done_progress:
            return None
        token = f"kls-{uuid.uuid4()}"
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception:  # a client that refuses progress still gets the job done
            return None
        self.ls.work_done_progress.begin(
            token, lsp.WorkDoneProgressBegin(title=title, cancellable=True)
        )
        future: Any = self.ls.work_done_progress.tokens.get(token)
        if future is not None:
            future.add_done_callback(lambda f: cancel.set() if f.cancelled() else None)
        return token


def _exiting(ls: LanguageServer) -> bool:
    """The client sent `exit`: its pipe is closing, and each message sent into it would fail
    and be reported by pygls through the same pipe (a chain of errors that delays the exit)."""
    return getattr(ls.protocol, "exit_code", None) is not None


def _cancel_with_request(ls: LanguageServer, cancel: threading.Event) -> None:
    """Set `cancel` when the client cancels the request this job runs under ($/cancelRequest).

    pygls keeps the current request's id in a context variable and its future in
    `_request_futures` (2.1: no public accessor); a command's task inherits the id. Outside a
    request (a notification) the id may name an older request, so only a pending one counts."""
    protocol = ls.protocol
    msg_id = protocol.msg_id
    futures: dict[Any, Any] = getattr(protocol, "_request_futures", {})
    future = futures.get(msg_id) if msg_id is not None else None
    if future is not None and not future.done():
        future.add_done_callback(lambda f: cancel.set() if f.cancelled() else None)
