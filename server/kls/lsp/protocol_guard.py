"""JSON-RPC that survives a broken or hostile client: every malformed request gets an error
reply, and the server goes on.

pygls 2.1's reader (`pygls.io_.run_async`) and dispatcher fail in ways a client can trigger:

- a body that does not structure into the method's params (`"params": "x"`, a negative or
  non-integer position) raises inside `json.loads(object_hook=...)`; the loop logs it and the
  request never gets a reply;
- `Content-Length: abc` is ignored, so the body is read as a header and the next message is
  lost; `Content-Length: 1000000000000` makes it wait for (and allocate) a terabyte;
- after `shutdown`, `handle_message` drops every request without a reply;
- `exit` without `shutdown` ends `start_io` through a swallowed SystemExit, so the process
  exits 0 where the spec says 1;
- its stdin reader runs in the handler thread pool, whose shutdown then waits for stdin.

`GuardedProtocol` and `run_stdio`/`run_tcp` replace those parts: `FrameReader` splits the byte
stream itself (bounded header and body sizes, recovery of the next message after a bad
header), `dispatch` validates the envelope and structures params before pygls sees them,
answering JSON-RPC errors with the request's id: ParseError (-32700) for bytes that are not
JSON, InvalidRequest (-32600) for a bad frame or envelope and for requests after shutdown,
InvalidParams (-32602) for params of the wrong shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, BinaryIO

from cattrs.errors import ClassValidationError
from lsprotocol import types as lsp
from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from kls.input_limits import MAX_HEADER_LINE_BYTES, MAX_HEADER_LINES, MAX_MESSAGE_BYTES

log = logging.getLogger(__name__)

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32602, -32603
CHUNK_BYTES = 64 * 1024
# How far past a bad header kls looks for the end of the JSON body, to answer it with its id.
MAX_RECOVERED_BODY_BYTES = 1024 * 1024
# The start of a well-formed header. It cannot occur inside a JSON body: outside strings it is
# not JSON, and a JSON string cannot hold the raw line break that ends it.
NEXT_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]+[ \t]*\r?\n", re.IGNORECASE)
MsgId = int | str | None


@dataclass(frozen=True)
class FramingError:
    """Bytes that are not a well-framed message; `body` is the JSON that followed a bad header,
    when it could be recovered (so the reply can carry the request's id)."""

    message: str
    body: bytes | None = None


class FrameReader:
    """Splits a byte stream into message bodies (`Content-Length` framing), never buffering
    more than MAX_MESSAGE_BYTES and never losing the next well-framed message."""

    def __init__(self, read_chunk: Callable[[], Awaitable[bytes]]) -> None:
        self._read_chunk = read_chunk
        self._buffer = bytearray()
        self._eof = False
        self._lost_sync = False  # skip to the next header before reading on

    async def next(self) -> bytes | FramingError | None:
        """The next body, a FramingError for bytes that are not one, or None at the end."""
        while True:
            if self._lost_sync and not await self._resync():
                return None
            headers = await self._header_block()
            if headers is None:
                return None
            if isinstance(headers, FramingError):
                self._lost_sync = True
                return headers
            if not headers:
                continue  # stray blank lines between messages
            length = _content_length(headers)
            if isinstance(length, str):
                return FramingError(length, await self._recover_body())
            if not await self._fill(length):
                return None
            body = bytes(self._buffer[:length])
            del self._buffer[:length]
            return body

    async def _more(self) -> bool:
        if self._eof:
            return False
        chunk = await self._read_chunk()
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    async def _fill(self, size: int) -> bool:
        while len(self._buffer) < size:
            if not await self._more():
                return False
        return True

    async def _line(self) -> bytes | FramingError | None:
        too_long = FramingError(f"a header line is longer than {MAX_HEADER_LINE_BYTES} bytes")
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_HEADER_LINE_BYTES:
                self._buffer.clear()  # so that resyncing cannot find this line's start again
                return too_long
            if not await self._more():
                return None
        if end > MAX_HEADER_LINE_BYTES:
            del self._buffer[: end + 1]
            return too_long
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    async def _header_block(self) -> list[bytes] | FramingError | None:
        headers: list[bytes] = []
        while True:
            line = await self._line()
            if line is None or isinstance(line, FramingError):
                return line
            if not line.strip():
                return headers
            if b":" not in line:
                shown = line[:60].decode("utf-8", "replace").strip()
                return FramingError(f"expected a header like 'Content-Length: 52', got {shown!r}")
            headers.append(line)
            if len(headers) > MAX_HEADER_LINES:
                return FramingError(f"more than {MAX_HEADER_LINES} header lines")

    async def _resync(self) -> bool:
        """Drop bytes up to the next well-formed `Content-Length` header; False at the end."""
        while True:
            found = NEXT_HEADER.search(self._buffer)
            if found is not None:
                del self._buffer[: found.start()]
                self._lost_sync = False
                return True
            keep = MAX_HEADER_LINE_BYTES  # a header split across two reads
            del self._buffer[: max(0, len(self._buffer) - keep)]
            if not await self._more():
                return False

    async def _recover_body(self) -> bytes | None:
        """After a bad header, the JSON value that follows (to answer with its id), found by
        matching brackets; or None (then the reader skips to the next header)."""
        while True:
            end = _json_value_end(self._buffer)
            header = NEXT_HEADER.search(self._buffer)
            if isinstance(end, int) and (header is None or end <= header.start()):
                body = bytes(self._buffer[:end])
                del self._buffer[:end]
                return body
            if (
                header is not None
                or end == "invalid"
                or len(self._buffer) > MAX_RECOVERED_BODY_BYTES
            ):
                self._lost_sync = True
                return None
            if not await self._more():
                return None


def _content_length(headers: list[bytes]) -> int | str:
    """The body size the headers announce, or why it cannot be used."""
    values = [
        h.split(b":", 1)[1].strip()
        for h in headers
        if h.split(b":", 1)[0].strip().lower() == b"content-length"
    ]
    if not values:
        return "the message has no Content-Length header"
    raw = values[0].decode("utf-8", "replace")
    if not raw.isascii() or not raw.isdigit():
        return f"Content-Length {raw[:40]!r} is not a byte count"
    length = int(raw)
    if length > MAX_MESSAGE_BYTES:
        return (
            f"Content-Length {length} is larger than the {MAX_MESSAGE_BYTES // (1024 * 1024)} "
            "MiB kls accepts in one message"
        )
    return length


_STRUCTURAL = re.compile(rb'[{}\[\]"\\]')


def _json_value_end(data: bytearray) -> int | str:
    """Where the JSON object or array at the start of `data` ends (after leading whitespace),
    "incomplete" if `data` stops inside it, or "invalid" if no object or array starts there."""
    start = len(data) - len(data.lstrip())
    if start == len(data):
        return "incomplete"
    if data[start] not in b"{[":
        return "invalid"
    depth, in_string, escaped_at = 0, False, -1
    for match in _STRUCTURAL.finditer(data, start):
        char = match.group()
        if in_string:
            if match.start() == escaped_at:
                pass  # the character after a backslash: \" or \\ inside a string
            elif char == b"\\":
                escaped_at = match.end()
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
        elif char in (b"{", b"["):
            depth += 1
        elif char in (b"}", b"]"):
            depth -= 1
            if depth == 0:
                return match.end()
    return "incomplete"


# -- dispatch ------------------------------------------------------------------------------------


def error_reply(msg_id: MsgId, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def dispatch(protocol: GuardedProtocol, body: bytes | FramingError) -> None:
    """Hand one message to pygls, or answer it with the JSON-RPC error it deserves."""
    if isinstance(body, FramingError):
        msg_id = _recovered_id(body.body)
        protocol.send_raw(error_reply(msg_id, INVALID_REQUEST, f"kls: {body.message}"))
        return
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        protocol.send_raw(error_reply(None, PARSE_ERROR, f"kls: the message is not JSON: {exc}"))
        return
    problem = _envelope_problem(data)
    if problem is not None:
        msg_id = data.get("id") if isinstance(data, dict) and _valid_id(data.get("id")) else None
        protocol.send_raw(error_reply(msg_id, INVALID_REQUEST, f"kls: {problem}"))
        return
    _dispatch_valid_envelope(protocol, data)


def _dispatch_valid_envelope(protocol: GuardedProtocol, data: dict[str, Any]) -> None:
    msg_id = data.get("id")
    is_request = "id" in data and "method" in data
    try:
        message = protocol.structure_message(data)
    except (JsonRpcException, ClassValidationError, ValueError, TypeError) as exc:
        reason = _structure_problem(exc)
        log.warning("malformed %s message: %s", data.get("method", "response"), reason)
        if is_request:
            text = f"kls: invalid params for {data['method']}: {reason}"
            protocol.send_raw(error_reply(msg_id, INVALID_PARAMS, text))
        return
    try:
        protocol.handle_message(message)
    except Exception as exc:  # pygls answers most errors itself; this is the last resort
        log.exception("handling %s failed", data.get("method"))
        if is_request:
            text = f"kls: {data['method']} failed: {type(exc).__name__}: {exc}"
            protocol.send_raw(error_reply(msg_id, INTERNAL_ERROR, text))


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or type(value) is int


def _envelope_problem(data: Any) -> str | None:
    """Why `data` is not a JSON-RPC 2.0 request, notification or response, or None."""
    if isinstance(data, list):
        return "batches are not part of the Language Server Protocol: send one message at a time"
    if not isinstance(data, dict):
        return f"a message must be a JSON object, not {type(data).__name__}"
    if data.get("jsonrpc") != "2.0":
        return 'a message needs "jsonrpc": "2.0"'
    if "id" in data and not _valid_id(data["id"]):
        return "the id must be an integer, a string or null"
    if "method" in data:
        return None if isinstance(data["method"], str) else "the method must be a string"
    if "id" not in data or not ("result" in data or "error" in data):
        return "a message needs a method (request, notification) or an id and a result"
    return None


def _recovered_id(body: bytes | None) -> MsgId:
    if body is None:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    msg_id = data.get("id") if isinstance(data, dict) else None
    return msg_id if _valid_id(msg_id) else None


def _structure_problem(exc: BaseException) -> str:
    """The leaf causes of a cattrs structuring failure, as one line."""
    leaves: list[str] = []

    def walk(error: BaseException) -> None:
        inner = getattr(error, "exceptions", None)  # an ExceptionGroup (cattrs backports it)
        if isinstance(inner, list | tuple):
            for each in inner:
                walk(each)
        elif isinstance(error, JsonRpcException) and error.__cause__ is not None:
            walk(error.__cause__)
        else:
            leaves.append(
                f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
            )

    walk(exc)
    text = "; ".join(dict.fromkeys(leaves)) or "the params do not match the method"
    return text if len(text) <= 500 else text[:500] + "..."


# -- strict scalars ------------------------------------------------------------------------------


def _strict_int(value: Any, cls: type) -> Any:
    if cls is not int:  # an IntEnum reaches this hook through its MRO: cattrs's enum rule
        return cls(value)
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__} {value!r:.40}")
    return value


def _strict_str(value: Any, cls: type) -> Any:
    if cls is not str:  # a (str, Enum) reaches this hook through its MRO: cattrs's enum rule
        return cls(value)
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__} {value!r:.40}")
    return value


def _strict_bool(value: Any, _: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {type(value).__name__} {value!r:.40}")
    return value


class _AnsweredStructureErrors(logging.Filter):
    """pygls logs a full traceback for every message that does not structure; kls answers
    those itself (InvalidParams) and logs one line, so the traceback is noise in the client's
    output channel."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Unable to deserialize message")


_STRUCTURE_LOG_FILTER = _AnsweredStructureErrors()


class GuardedProtocol(LanguageServerProtocol):
    """pygls's LSP protocol with strict scalars (1.5, "2" or true is not a line number),
    replies to requests after shutdown, and the exit code the spec asks for."""

    def __init__(self, server: Any, converter: Any) -> None:
        logging.getLogger("pygls.protocol.json_rpc").addFilter(_STRUCTURE_LOG_FILTER)
        converter.register_structure_hook(int, _strict_int)
        converter.register_structure_hook(str, _strict_str)
        converter.register_structure_hook(bool, _strict_bool)
        super().__init__(server, converter)
        self.exit_code: int | None = None  # set by `exit`: 0 after shutdown, else 1

    def send_raw(self, message: dict[str, Any]) -> None:
        self._send_data(message)

    def handle_message(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if self._shutdown and method not in (None, lsp.EXIT) and hasattr(message, "id"):
            self.send_raw(
                error_reply(
                    message.id,
                    INVALID_REQUEST,
                    f"kls: {method} after shutdown: the server only accepts 'exit' now",
                )
            )
            return
        super().handle_message(message)

    @lsp_method(lsp.EXIT)
    def lsp_exit(self, *args: Any) -> Generator[Any, Any, None]:
        self.exit_code = 0 if self._shutdown else 1
        stop_children()  # threads waiting on nvcc or a render worker return at once
        yield from super().lsp_exit(*args)


# -- transports ----------------------------------------------------------------------------------


async def serve_stream(
    protocol: GuardedProtocol,
    read_chunk: Callable[[], Awaitable[bytes]],
    stop: threading.Event,
) -> None:
    """Read and dispatch messages until the stream ends or `stop` is set."""
    frames = FrameReader(read_chunk)
    while not stop.is_set():
        frame = await frames.next()
        if frame is None:
            return
        dispatch(protocol, frame)


class ThreadedReader:
    """Chunks of a blocking stream, read by a daemon thread (so a blocked read never keeps the
    process alive after `exit`), at most a few chunks ahead of the consumer."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=16)
        self._loop = asyncio.get_running_loop()
        threading.Thread(target=self._pump, name="kls-stdin", daemon=True).start()

    def _pump(self) -> None:
        read = self._raw_reader()
        while True:
            try:
                chunk = read(CHUNK_BYTES)
            except (OSError, ValueError):
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(self._queue.put(chunk), self._loop).result()
            except RuntimeError:  # the loop is gone
                return
            if not chunk:
                return

    def _raw_reader(self) -> Callable[[int], bytes]:
        """`os.read` on the file descriptor: a thread blocked in it holds no lock, whereas one
        blocked in a BufferedReader makes the interpreter abort at exit."""
        try:
            fd = self._stream.fileno()
        except (OSError, ValueError, AttributeError):
            return getattr(self._stream, "read1", self._stream.read)
        return lambda size: os.read(fd, size)

    async def read(self) -> bytes:
        return await self._queue.get()


def _stop_event(ls: LanguageServer) -> threading.Event:
    stop = threading.Event()
    ls._stop_event = stop  # what LanguageServer.shutdown() sets
    return stop


def run_stdio(
    ls: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None
) -> int:
    """pygls's `start_io` with kls's reader; returns the process exit code."""
    protocol = _guarded(ls)
    stop = _stop_event(ls)
    protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main() -> None:
        reader = ThreadedReader(stdin or sys.stdin.buffer)
        await serve_stream(protocol, reader.read, stop)

    code = 0
    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("the client closed the connection; stopping")
    except KeyboardInterrupt:
        code = 130
    except SystemExit as exc:  # `exit` (0 or 1), or a signal handler's 128 + signal
        code = _exit_code(exc, protocol)
    finally:
        ls.shutdown()  # type: ignore[no-untyped-call]
    return code


def run_tcp(ls: LanguageServer, host: str, port: int) -> int:
    """pygls's `start_tcp` with kls's reader: serves one connection at a time."""
    protocol = _guarded(ls)
    stop = _stop_event(ls)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        protocol.set_writer(writer)  # type: ignore[arg-type]  # what pygls's start_tcp does

        async def read_chunk() -> bytes:
            return await reader.read(CHUNK_BYTES)

        await serve_stream(protocol, read_chunk, stop)
        ls.shutdown()  # type: ignore[no-untyped-call]

    async def main() -> None:
        server = await asyncio.start_server(connection, host, port)
        ls._server = server
        async with server:
            await server.serve_forever()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # `exit` (0 or 1), or a signal handler's 128 + signal
        return _exit_code(exc, protocol)
    return protocol.exit_code or 0


def _exit_code(exc: SystemExit, protocol: GuardedProtocol) -> int:
    if isinstance(exc.code, int):
        return exc.code
    return protocol.exit_code or 0


def _guarded(ls: LanguageServer) -> GuardedProtocol:
    if not isinstance(ls.protocol, GuardedProtocol):
        raise TypeError("kls: the server's protocol class must derive from GuardedProtocol")
    return ls.protocol


def stop_children() -> None:
    """Kill running nvcc process groups and render workers: nothing outlives the server."""
    from kls.compile.run import kill_children
    from kls.sandbox.workers import close_shared_workers

    close_shared_workers()
    kill_children()
