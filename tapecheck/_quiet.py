"""TensorFlow's start-up lines, kept off the terminal of `reference` and `align` unless asked for.

Importing TensorFlow (2.16+) writes, from C++ and before its logging is set up (so
`TF_CPP_MIN_LOG_LEVEL` cannot silence it), "WARNING: All log messages before
absl::InitializeLog() ..." and an INFO line about oneDNN, once per TensorFlow library
that loads: twice per process. The import runs with file descriptor 2 sent to a
temporary file; afterwards every line that is not such start-up noise is written to
standard error unchanged (errors and Python warnings are never lost), and the noise is
kept so that `-v` can show it. Nothing here imports TensorFlow unless asked to.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager

# absl/glog lines at INFO or WARNING level ("I0000 00:00:1796127450.720120   13145 port.cc:153] ..."),
# absl's pre-initialisation notice, and the CPU-feature note's second line.
NOISE = re.compile(
    rb"^(?:WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.\-/]+:\d+\] .*"
    rb"|To enable the following instructions: .*in other operations, rebuild TensorFlow with the appropriate compiler flags\.)\r?\n?$"
)
_held: list[bytes] = []  # the start-up noise captured so far in this process


@contextmanager
def start_up_quietly(verbose: bool = False):
    """Run the block (an import) with its start-up noise held back; with `verbose`, unchanged."""
    if verbose:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real standard error (embedded): nothing to hide
        yield
        return
    capture = tempfile.TemporaryFile()
    try:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            _flush_c_streams()  # TensorFlow's C++ logging sits in C stdio buffers until flushed
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = []
            for line in capture.read().splitlines(keepends=True):
                (_held if NOISE.match(line) else kept).append(line)
            if kept:
                os.write(2, b"".join(kept))
    finally:
        capture.close()


def _flush_c_streams() -> None:
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):  # no C library to call (not POSIX): nothing buffered there
        pass


def import_tensorflow(verbose: bool = False):
    """`import tensorflow` with its start-up noise held back (unless `verbose`)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    with start_up_quietly(verbose):
        import tensorflow
    return tensorflow


def show_held() -> None:
    """`-v` after the import already ran: write the start-up lines that were held back."""
    if _held:
        os.write(2, b"".join(_held))
        _held.clear()
