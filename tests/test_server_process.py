"""`tapecheck server` as a process: raw bytes on its stdin, its exit status, what it imports.

These talk to the server through a plain subprocess pipe, so they can send what no
LSP client library would: invalid JSON, a body that is no JSON-RPC message, `exit`
without `shutdown`, a closed pipe.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, "-m", "tapecheck", "server"]


def frame(body: bytes | dict) -> bytes:
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Pipe:
    """A server process and the messages it wrote, read as they come."""

    def __init__(self, command=SERVER, cwd=ROOT):
        self.process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def send(self, body) -> None:
        self.process.stdin.write(frame(body))
        self.process.stdin.flush()

    def read(self, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        length = None
        while True:
            assert time.monotonic() < deadline, "no message from the server"
            line = self.process.stdout.readline()
            assert line, f"the server closed its output: {self.process.stderr.read().decode(errors='replace')[-2000:]}"
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length is not None:
                return json.loads(self.process.stdout.read(length))

    def until(self, predicate, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            message = self.read(max(deadline - time.monotonic(), 0.1))
            if predicate(message):
                return message

    def response(self, request_id) -> dict:
        return self.until(lambda m: m.get("id") == request_id and "method" not in m)

    def initialize(self, root: Path, capabilities: dict | None = None) -> dict:
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"processId": None, "rootUri": root.as_uri(), "capabilities": capabilities or {}}})
        reply = self.response(1)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return reply

    def finish(self, timeout: float = 60) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                try:
                    stream.close()
                except OSError:
                    pass


LATE_TARGET = textwrap.dedent(
    """\
    import tensorflow as tf
    from models import Net

    model = Net()

    def train_step(x, y, optimizer):
        with tf.GradientTape() as tape:
            prediction = model(x)
        loss = tf.reduce_mean(tf.square(prediction - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        optimizer2 = tf.keras.optimizers.SGD(lr=0.1)
    """
)


def _open(pipe: Pipe, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    pipe.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": version, "text": text}}})
    return uri


def _diagnostics(pipe: Pipe, uri: str) -> list[dict]:
    return pipe.until(lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri)["params"]["diagnostics"]


def test_invalid_json_and_non_messages_get_parse_errors_and_the_server_goes_on(tmp_path):
    pipe = Pipe()
    pipe.send(b"{this is not json")
    error = pipe.until(lambda m: "error" in m)
    assert error["id"] is None and error["error"]["code"] == -32700
    pipe.send(b"[1, 2, 3]")  # JSON, but no JSON-RPC message
    pipe.send(b'"just a string"')
    reply = pipe.initialize(tmp_path, {"notebookDocument": {"synchronization": {}}})
    pipe.send({"jsonrpc": "2.0", "id": 7, "method": "textDocument/codeAction", "params": {"textDocument": 42}})
    assert pipe.response(7)["error"]["code"] == -32602  # InvalidParams, not silence
    pipe.send({"jsonrpc": "2.0", "id": 8, "method": "textDocument/codeAction"})
    assert pipe.response(8)["error"]["code"] == -32602
    pipe.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": 5}}})
    capabilities = reply["result"]["capabilities"]
    assert capabilities["codeActionProvider"] and capabilities["notebookDocumentSync"]["notebookSelector"]
    assert capabilities["textDocumentSync"]["save"] is not None  # diagnostics on save need the notification
    uri = _open(pipe, tmp_path / "train.py", LATE_TARGET)
    assert {d["code"] for d in _diagnostics(pipe, uri)} == {"TAP101", "TAP302", "TAP402"}
    pipe.send({"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
    assert pipe.response(2)["result"] is None
    pipe.send({"jsonrpc": "2.0", "method": "exit"})
    assert pipe.process.wait(60) == 0
    errors = pipe.process.stderr.read().decode(errors="replace").splitlines()
    assert pipe.finish() == 0
    # issue 27: each malformed message is one line on standard error, naming what was wrong,
    # not screens of cattrs' traceback
    assert errors and all(line.startswith("tapecheck server: ") for line in errors), errors
    assert not any("Traceback" in line for line in errors)
    assert any("KeyError: 'range'" in line and "CodeActionParams" in line for line in errors)


def test_exit_without_shutdown_is_status_1_and_a_closed_pipe_ends_the_server(tmp_path):
    pipe = Pipe()
    pipe.initialize(tmp_path)
    pipe.send({"jsonrpc": "2.0", "method": "exit"})
    assert pipe.finish() == 1

    pipe = Pipe()
    pipe.initialize(tmp_path)
    _open(pipe, tmp_path / "train.py", LATE_TARGET)
    pipe.process.stdin.close()  # the editor went away
    assert pipe.finish() == 1


def test_the_server_never_imports_tensorflow(tmp_path):
    """sys.modules of the real server process, written at its exit, after it linted, fixed and
    read another project file (a TAP403 model in models.py)."""
    (tmp_path / "models.py").write_text(
        "import keras\nclass Net(keras.Model):\n    def __init__(self):\n        super().__init__()\n"
        "        self.drop = keras.layers.Dropout(0.5)\n"
    )
    modules = tmp_path / "modules.txt"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(modules)!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        "sys.argv = ['tapecheck', 'server']\n"
        "from tapecheck.cli import main\n"
        "main()\n"
    )
    pipe = Pipe([sys.executable, "-c", code])
    pipe.initialize(tmp_path)
    uri = _open(pipe, tmp_path / "train.py", LATE_TARGET)
    assert {d["code"] for d in _diagnostics(pipe, uri)} == {"TAP101", "TAP302", "TAP402", "TAP403"}
    pipe.send({"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeAction", "params": {
        "textDocument": {"uri": uri}, "range": {"start": {"line": 11, "character": 0}, "end": {"line": 11, "character": 0}},
        "context": {"diagnostics": []}}})
    actions = pipe.response(3)["result"]
    assert any("learning_rate" in action["title"] for action in actions)
    assert "changes" in actions[0]["edit"]  # this client did not offer versioned edits
    pipe.send({"jsonrpc": "2.0", "id": 4, "method": "shutdown"})
    pipe.response(4)
    pipe.send({"jsonrpc": "2.0", "method": "exit"})
    assert pipe.finish() == 0
    loaded = set(modules.read_text().split())
    assert "pygls" in loaded and "tapecheck.lint.fixes" in loaded  # the file is the server's, after real work
    assert not {name for name in loaded if name.split(".")[0] in ("tensorflow", "keras", "tf_keras", "jax", "torch")}


def test_lint_and_help_do_not_import_the_server_stack(tmp_path):
    target = tmp_path / "train.py"
    target.write_text(LATE_TARGET)
    for argv in (["--help"], ["lint", str(target)]):
        out = subprocess.run([sys.executable, "-X", "importtime", "-m", "tapecheck", *argv], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
        assert "libcst" in imported or argv == ["--help"]  # the measurement sees imports at all
        assert not imported & {"pygls", "lsprotocol", "cattrs", "attrs"}, argv
    helped = subprocess.run([sys.executable, "-m", "tapecheck", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "server" in helped.stdout
