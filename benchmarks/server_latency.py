"""How long after a keystroke does `tapecheck server` publish diagnostics? Prints figures.

    python benchmarks/server_latency.py                # 300-line training file, 60 edits
    python benchmarks/server_latency.py --edits 200 --lines 300

The real server (`python -m tapecheck server`) runs as a subprocess, driven over its
stdio pipe with plain LSP messages. A generated training file of `--lines` lines (custom
GradientTape loops with a few findings, one model class with Dropout in a second file
of the workspace, which the program model reads) is opened, once as generated (with
a fixable TAP302 finding, whose fix the engine works out at every lint) and once with
that finding corrected; then each edit is one
incremental `textDocument/didChange` (a character typed into, or deleted from, a line
of the loop) sent after the previous edit's diagnostics arrived, and the time is taken
from writing the change to reading the `publishDiagnostics` for that version.

Beside it, the same buffer linted in this process (`lint_snapshot`, what the server's
lint thread runs) gives the floor: the difference is the protocol (JSON, the pipe, the
event loop, the thread hand-off). The first open, which builds the index and imports
libcst and the rules, is shown on its own. Median and p95 over the edits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEADER = textwrap.dedent(
    """\
    import tensorflow as tf
    from tensorflow import keras

    from models import Net

    """
)
BLOCK = textwrap.dedent(
    """\
    class Trainer{n}:
        \"\"\"Custom loop number {n}: a train step, a validation step and an epoch loop.\"\"\"

        def __init__(self, learning_rate=1e-3):
            self.model = Net()
            self.optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
            self.loss_fn = keras.losses.MeanSquaredError()
            self.train_loss = keras.metrics.Mean(name="train_loss")
            self.val_loss = keras.metrics.Mean(name="val_loss")

        @tf.function
        def train_step(self, x, y):
            with tf.GradientTape() as tape:
                prediction = self.model(x, training=True)
                loss = self.loss_fn(y, prediction)
                loss += sum(self.model.losses)
            grads = tape.gradient(loss, self.model.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
            self.train_loss.update_state(loss)
            return loss

        def val_step(self, x, y):
            prediction = self.model(x, training=False)
            self.val_loss.update_state(self.loss_fn(y, prediction))

        def late_step(self, x, y):
            with tf.GradientTape() as tape:
                prediction = self.model(x, training=True)
            loss = self.loss_fn(y, prediction)  # TAP101: after the tape
            return tape.gradient(loss, self.model.trainable_variables)

        def fit(self, train_ds, val_ds, epochs=3):
            history = []
            for epoch in range(epochs):
                for x, y in train_ds:
                    self.train_step(x, y)
                for x, y in val_ds:
                    self.val_step(x, y)
                history.append((float(self.train_loss.result()), float(self.val_loss.result())))
                self.train_loss.reset_states()  # TAP302: reset_state() in Keras 3
                self.val_loss.reset_state()
            return history

    """
)
MODELS = textwrap.dedent(
    """\
    import keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(64, activation="relu")
            self.drop = keras.layers.Dropout(0.2)
            self.out = keras.layers.Dense(1)

        def call(self, x, training=None):
            return self.out(self.drop(self.hidden(x), training=training))
    """
)


def training_file(lines: int) -> str:
    text, n = HEADER, 0
    while len(text.splitlines()) < lines:
        text += BLOCK.format(n=n)
        n += 1
    return "\n".join(text.splitlines()[:lines]).rstrip() + "\n" if len(text.splitlines()) > lines else text


def truncate_to_statements(text: str, lines: int) -> str:
    """The first `lines` lines, cut back to the last whole class so the file still parses."""
    kept = text.splitlines()[:lines]
    while kept and not _parses("\n".join(kept)):
        kept.pop()
    return "\n".join(kept) + "\n"


def _parses(text: str) -> bool:
    import ast

    try:
        ast.parse(text)
        return True
    except SyntaxError:
        return False


class Server:
    def __init__(self, root: Path):
        self.process = subprocess.Popen([sys.executable, "-m", "tapecheck", "server"], cwd=ROOT,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": None, "rootUri": root.as_uri(),
            "capabilities": {"textDocument": {"publishDiagnostics": {"versionSupport": True}}}}})
        self.until(lambda m: m.get("id") == 1)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})

    def send(self, message: dict) -> None:
        body = json.dumps(message).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def read(self) -> dict:
        length = None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError("the server exited")
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
            elif line in (b"\r\n", b"\n") and length is not None:
                return json.loads(self.process.stdout.read(length))

    def until(self, predicate) -> dict:
        while True:
            message = self.read()
            if predicate(message):
                return message

    def diagnostics(self, uri: str, version: int) -> list:
        return self.until(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                          and m["params"]["uri"] == uri and m["params"].get("version") == version)["params"]["diagnostics"]

    def close(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 99, "method": "shutdown"})
        self.until(lambda m: m.get("id") == 99)
        self.send({"jsonrpc": "2.0", "method": "exit"})
        self.process.wait(30)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(text: str, edits: int) -> dict:
    lines = text.splitlines()
    # the edits type into the comment on the TAP101 line of the first loop, then delete it again
    target = next(i for i, line in enumerate(lines) if "# TAP101" in line)
    column = len(lines[target])

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "models.py").write_text(MODELS)
        path = root / "train.py"
        path.write_text(text)
        uri = path.as_uri()
        server = Server(root)
        start = time.perf_counter()
        server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}}})
        first = server.diagnostics(uri, 1)
        cold = time.perf_counter() - start
        codes = sorted({d["code"] for d in first})

        latencies, typed = [], 0
        for version in range(2, edits + 2):
            if version % 2 == 0:  # type a character
                change = {"range": {"start": {"line": target, "character": column + typed},
                                    "end": {"line": target, "character": column + typed}}, "text": "x"}
                typed += 1
            else:  # and delete it
                typed -= 1
                change = {"range": {"start": {"line": target, "character": column + typed},
                                    "end": {"line": target, "character": column + typed + 1}}, "text": ""}
            began = time.perf_counter()
            server.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}})
            found = server.diagnostics(uri, version)
            latencies.append(time.perf_counter() - began)
            assert sorted({d["code"] for d in found}) == codes, "an edit inside a comment changed the findings"
        server.close()

        # the floor: the same lint in this process, as the server runs it
        from tapecheck.lint.config import Settings
        from tapecheck.server.linting import Cell, Snapshot, lint_snapshot

        settings = Settings()
        snapshot = Snapshot(uri, str(path), 1, (Cell(uri, text, True, 1),))
        floor = []
        lint_snapshot(snapshot, settings)  # imports, first-use caches (and the modules it imports)
        for _ in range(edits):
            began = time.perf_counter()
            lint_snapshot(snapshot, settings)
            floor.append(time.perf_counter() - began)
    return {"lines": len(lines), "bytes": len(text), "codes": codes, "diagnostics": len(first), "cold": cold,
            "latencies": latencies, "floor": floor}


def report(title: str, m: dict) -> None:
    ms = 1000
    lat, floor = m["latencies"], m["floor"]
    med, p95 = statistics.median(lat) * ms, percentile(lat, 0.95) * ms
    fmed, fp95 = statistics.median(floor) * ms, percentile(floor, 0.95) * ms
    print(f"{title}: {m['lines']} lines, {m['bytes']} bytes; findings {', '.join(m['codes'])} ({m['diagnostics']} diagnostics)")
    print(f"  first open (index, imports, first lint): {m['cold'] * ms:.0f} ms")
    print(f"  edit -> diagnostics, {len(lat)} edits: median {med:.1f} ms, p95 {p95:.1f} ms, max {max(lat) * ms:.1f} ms")
    print(f"  the same lint in-process (lint_snapshot): median {fmed:.1f} ms, p95 {fp95:.1f} ms")
    print(f"  server / in-process: median {med / fmed:.2f}, p95 {p95 / fp95:.2f} (the protocol's share: {med - fmed:.1f} ms at the median)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--edits", type=int, default=60)
    args = parser.parse_args()

    text = truncate_to_statements(training_file(args.lines + 60), args.lines)
    # with a fixable finding (TAP302's `reset_states()`) the engine also works out its fix at every lint
    report("training file with fixable findings", measure(text, args.edits))
    report("the same file, no fixable finding", measure(text.replace(".reset_states()", ".reset_state()"), args.edits))


if __name__ == "__main__":
    main()
