"""A client that breaks JSON-RPC must get an error reply per malformed request, and the server
must go on answering (issue 9). Each test speaks raw bytes to a real `kls serve` over stdio.

What pygls 2.1 does alone, and these tests catch if kls's guard (kls.lsp.protocol_guard) is
removed: no reply for params that do not structure, a wedged or dead server on a bad
`Content-Length`, silence after `shutdown`, and exit code 0 for `exit` without `shutdown`.
"""

from __future__ import annotations

import asyncio
import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from kls.lsp.protocol_guard import FrameReader, FramingError

ROOT = Path(__file__).resolve().parent.parent
KLS = ROOT / ".venv" / "bin" / "kls"
COMMAND = [str(KLS), "serve"] if KLS.exists() else [sys.executable, "-m", "kls.cli", "serve"]
REPLY_TIMEOUT_S = 5.0
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TEMPLATE = "// kernel\n{{ kernel.ptr(X) }}\n"


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


class RawServer:
    """`kls serve` on pipes: write any bytes, read its replies by id."""

    def __init__(self, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            COMMAND,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[bytes]) -> None:
        while True:
            length = 0
            while (line := out.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if not line:
                return
            self.messages.put(json.loads(out.read(length)))

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.write(frame(encode(message)))

    def request(self, msg_id: int, method: str, params: Any) -> dict[str, Any]:
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return self.reply(msg_id)

    def reply(self, msg_id: int | None, timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """The server's answer to `msg_id` (None: an error it could not tie to a request)."""
        while True:
            try:
                message = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no reply to id {msg_id} in {timeout} s") from None
            is_answer = "method" not in message and ("result" in message or "error" in message)
            if is_answer and message.get("id") == msg_id:
                return message

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def hover_params(uri: str, line: Any, character: Any) -> dict[str, Any]:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def start(tmp_path: Path) -> tuple[RawServer, str]:
    """A server that finished `initialize` and has one template open."""
    server = RawServer(tmp_path)
    started = server.request(0, "initialize", {"processId": None, "capabilities": {}})
    assert "result" in started, started
    server.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    path = tmp_path / "t.cu.jinja"
    path.write_text(TEMPLATE)
    uri = path.as_uri()
    document = {"uri": uri, "languageId": "cuda-jinja", "version": 1, "text": TEMPLATE}
    server.send(
        {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": document}}
    )
    return server, uri


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RawServer, str]]:
    server, uri = start(tmp_path_factory.mktemp("abuse"))
    yield server, uri
    server.close()


_next_id = iter(range(1000, 100000))


def assert_still_answers(server: RawServer, uri: str) -> None:
    """A valid hover on the good document gets its result."""
    msg_id = next(_next_id)
    answer = server.request(msg_id, "textDocument/hover", hover_params(uri, 1, 10))
    assert "result" in answer, answer
    assert answer["result"] is not None and "kernel.ptr" in json.dumps(answer["result"])


def assert_error(answer: dict[str, Any], code: int, msg_id: int | None) -> None:
    assert answer.get("id") == msg_id, answer
    assert answer["error"]["code"] == code, answer
    assert answer["error"]["message"], answer


BAD_HOVER_PARAMS: dict[str, Any] = {
    "params-a-string": lambda uri: "a string",
    "fields-of-wrong-type": lambda uri: {"textDocument": "x", "position": 3},
    "negative-line": lambda uri: hover_params(uri, -1, 0),
    "negative-character": lambda uri: hover_params(uri, 0, -5),
    "line-a-string": lambda uri: hover_params(uri, "abc", 0),
    "line-a-numeric-string": lambda uri: hover_params(uri, "2", 0),
    "line-a-float": lambda uri: hover_params(uri, 1.5, 0),
    "line-a-bool": lambda uri: hover_params(uri, True, 0),
    "line-beyond-uinteger": lambda uri: hover_params(uri, 2**40, 0),
    "uri-a-number": lambda uri: {"textDocument": {"uri": 7}, "position": {"line": 0}},
}


@pytest.mark.parametrize("case", sorted(BAD_HOVER_PARAMS))
def test_hover_with_bad_params_gets_invalid_params(
    shared: tuple[RawServer, str], case: str
) -> None:
    server, uri = shared
    msg_id = next(_next_id)
    answer = server.request(msg_id, "textDocument/hover", BAD_HOVER_PARAMS[case](uri))
    assert_error(answer, INVALID_PARAMS, msg_id)
    assert "textDocument/hover" in answer["error"]["message"]
    assert_still_answers(server, uri)


@pytest.mark.parametrize("length", [b"abc", b"1000000000000", b"-5", b"12abc", b""])
def test_bad_content_length_is_answered_with_the_request_id(
    shared: tuple[RawServer, str], length: bytes
) -> None:
    server, uri = shared
    msg_id = next(_next_id)
    body = encode(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "textDocument/hover",
            "params": hover_params(uri, 1, 10),
        }
    )
    server.write(b"Content-Length: " + length + b"\r\n\r\n" + body)
    answer = server.reply(msg_id)
    assert_error(answer, INVALID_REQUEST, msg_id)
    assert "Content-Length" in answer["error"]["message"]
    assert_still_answers(server, uri)


def test_bad_header_followed_by_a_message_in_the_same_write(shared: tuple[RawServer, str]) -> None:
    """Nothing after a broken frame is lost, even when it arrives in the same chunk."""
    server, uri = shared
    first, second = next(_next_id), next(_next_id)
    broken = {"jsonrpc": "2.0", "id": first, "method": "shutdown"}  # must not run
    good = {
        "jsonrpc": "2.0",
        "id": second,
        "method": "textDocument/hover",
        "params": hover_params(uri, 1, 10),
    }
    server.write(b"Content-Length: 99999999999999\r\n\r\n" + encode(broken) + frame(encode(good)))
    assert_error(server.reply(first), INVALID_REQUEST, first)
    assert "result" in server.reply(second)
    assert_still_answers(server, uri)


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (frame(b"{not json"), PARSE_ERROR),
        (frame(b"[" * 100000 + b"]" * 100000), PARSE_ERROR),
        (frame(b"[" * 100000), PARSE_ERROR),
        (frame(b'"just a string"'), INVALID_REQUEST),
        (frame(b'[{"jsonrpc": "2.0", "id": 1, "method": "shutdown"}]'), INVALID_REQUEST),
        (b"hello there\r\n\r\n", INVALID_REQUEST),
        (b"Content-Type: application/json\r\n\r\n{}", INVALID_REQUEST),
        (b"X-Long: " + b"a" * 100000 + b"\r\n\r\n", INVALID_REQUEST),
    ],
    ids=[
        "not-json",
        "deep-array",
        "unclosed-array",
        "string",
        "batch",
        "no-colon",
        "no-length",
        "long-header",
    ],
)
def test_unframeable_bytes_get_an_error_with_null_id(
    shared: tuple[RawServer, str], raw: bytes, code: int
) -> None:
    server, uri = shared
    server.write(raw)
    assert_error(server.reply(None), code, None)
    assert_still_answers(server, uri)


@pytest.mark.parametrize(
    "message",
    [
        {"id": "A", "method": "textDocument/hover"},  # no "jsonrpc"
        {"jsonrpc": "1.0", "id": "A", "method": "textDocument/hover"},
        {"jsonrpc": "2.0", "id": "A", "method": 42},
        {"jsonrpc": "2.0", "id": "A"},
    ],
    ids=["no-version", "old-version", "method-not-string", "no-method"],
)
def test_bad_envelope_gets_invalid_request_with_its_id(
    shared: tuple[RawServer, str], message: dict[str, Any]
) -> None:
    server, uri = shared
    server.send(message)
    assert_error(server.reply("A"), INVALID_REQUEST, "A")  # type: ignore[arg-type]
    assert_still_answers(server, uri)


def test_unknown_method_gets_method_not_found(shared: tuple[RawServer, str]) -> None:
    server, uri = shared
    msg_id = next(_next_id)
    assert_error(server.request(msg_id, "kls/noSuchThing", {}), METHOD_NOT_FOUND, msg_id)
    assert_still_answers(server, uri)


def test_requests_after_shutdown_get_invalid_request_then_exit_0(tmp_path: Path) -> None:
    server, uri = start(tmp_path)
    try:
        assert server.request(1, "shutdown", None) == {"jsonrpc": "2.0", "id": 1, "result": None}
        assert_error(
            server.request(2, "textDocument/hover", hover_params(uri, 1, 10)), INVALID_REQUEST, 2
        )
        assert_error(server.request(3, "shutdown", None), INVALID_REQUEST, 3)
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.proc.wait(REPLY_TIMEOUT_S) == 0
    finally:
        server.close()


def test_exit_without_shutdown_exits_1(tmp_path: Path) -> None:
    server, uri = start(tmp_path)
    try:
        assert_still_answers(server, uri)
        server.send({"jsonrpc": "2.0", "method": "exit"})
        assert server.proc.wait(REPLY_TIMEOUT_S) == 1
    finally:
        server.close()


def test_frame_reader_survives_any_chunking() -> None:
    """The same stream, delivered one byte at a time and all at once, frames the same way."""
    good = encode({"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"s": '}\\"{[ \\'}})
    stream = (
        b"Content-Length: abc\r\n\r\n"
        + good
        + frame(good)
        + b"garbage line\r\n"
        + b"Content-Length: 99999999999\r\n\r\n{never closed"
        + frame(good)
        + frame(good)
    )
    expected = ["error+body", "body", "error", "error", "body", "body"]

    async def frames(chunk_size: int) -> list[str]:
        chunks = iter([stream[i : i + chunk_size] for i in range(0, len(stream), chunk_size)])

        async def read_chunk() -> bytes:
            return next(chunks, b"")

        reader, out = FrameReader(read_chunk), []
        while (item := await reader.next()) is not None:
            if isinstance(item, FramingError):
                out.append("error+body" if item.body == good else "error")
            else:
                assert item == good
                out.append("body")
        return out

    for size in (1, 2, 7, len(stream)):
        assert asyncio.run(frames(size)) == expected, size
