"""Find the user's own line in the current stack.

A site is the innermost frame that is neither TensorFlow, Keras, the standard
library nor the probe. Frames of autograph-generated files (inside
`@tf.function` and `fit`) are mapped back to the user's source through
TensorFlow's `tf_stack`, which knows the source map.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import NamedTuple


class Site(NamedTuple):
    path: str
    line: int
    col: int

    def short(self) -> str:
        return f"{display_path(self.path)}:{self.line}"


_PROBE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    {os.path.join(os.path.realpath(p), "") for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])}
    | {os.path.join(os.path.abspath(p), "") for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])}
)
_THIRD_PARTY = ("site-packages", "dist-packages")
_AUTOGRAPH = "__autograph_generated_file"
_AUTOGRAPH_IMPL = os.path.join("tensorflow", "python", "autograph", "")
_cache: dict[str, bool] = {}


def is_user_file(filename: str) -> bool:
    known = _cache.get(filename)
    if known is None:
        known = _cache[filename] = _classify(filename)
    return known


def _classify(filename: str) -> bool:
    if filename.startswith("<frozen") or _AUTOGRAPH in filename:
        return False
    if filename.startswith(_PROBE_DIR) or filename.startswith(_LIBRARY_DIRS):
        return False
    parts = filename.replace("\\", "/").split("/")
    return not any(p in _THIRD_PARTY for p in parts)


def user_site(depth: int = 2) -> Site | None:
    """The innermost user frame above the caller (`depth` frames up)."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _AUTOGRAPH in filename:
            return _mapped_site()
        if is_user_file(filename):
            return frame_site(frame)
        frame = frame.f_back
    return None


def user_frame(depth: int = 2):
    """(the innermost user frame above the caller, its site); in autograph code, the generated frame (its
    locals bear the user's names) and the user's line it maps to."""
    frame = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _AUTOGRAPH in filename:
            return frame, _mapped_site()
        if is_user_file(filename):
            return frame, frame_site(frame)
        frame = frame.f_back
    return None, None


def user_lines(depth: int = 2, limit: int = 8) -> tuple:
    """(path, line) of the user frames on the stack, innermost first (at most `limit`)."""
    frame, found = sys._getframe(depth), []
    while frame is not None and len(found) < limit:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            found.append((os.path.abspath(filename), frame.f_lineno))
        frame = frame.f_back
    return tuple(found)


def outermost_call(kind: type, depth: int = 2) -> tuple[object, Site | None, dict]:
    """The outermost `kind` (a Keras layer) being called, the user's line that called it, its keywords.

    Found above that object's outermost `__call__` frame: from inside a nested
    layer the innermost user frame would be the model's own `call` method, not
    the line in the training step that called the model.
    """
    obj, site, given, _ = outermost_call_frame(kind, depth + 1)
    return obj, site, given


def outermost_call_frame(kind: type, depth: int = 2) -> tuple[object, Site | None, dict, object]:
    """`outermost_call`, and the user's frame running that line (None in autograph code)."""
    frame, outermost, obj = sys._getframe(depth), None, None
    while frame is not None:
        if frame.f_code.co_name == "__call__" and isinstance(frame.f_locals.get("self"), kind):
            outermost, obj = frame, frame.f_locals["self"]
        frame = frame.f_back
    if outermost is None:
        return None, None, {}, None
    given = outermost.f_locals.get("kwargs") or {}
    frame = outermost.f_back
    while frame is not None:
        filename = frame.f_code.co_filename
        if _AUTOGRAPH in filename:
            return obj, _mapped_frame(frame), given, None
        if is_user_file(filename):
            return obj, frame_site(frame), given, frame
        frame = frame.f_back
    return obj, None, given, None


def _mapped_frame(frame) -> Site | None:
    """An autograph-generated frame's line in the user's source (tf_stack's own source map)."""
    from tensorflow.python.util import tf_stack

    mapper = tf_stack._source_mapper_stacks[tf_stack._get_thread_key()][-1]
    hit = mapper.get_effective_source_map().get((frame.f_code.co_filename, frame.f_lineno))
    if hit is None or not is_user_file(hit[0]):
        return None
    return Site(os.path.abspath(hit[0]), hit[1], 1)


def frame_site(frame) -> Site:
    """The line a frame is at, as a site."""
    filename = frame.f_code.co_filename
    return Site(_absolute(filename), frame.f_lineno, _column(frame))


_absolute_paths: dict[str, str] = {}


def _absolute(filename: str) -> str:
    """`os.path.abspath`, remembered for names that do not depend on the working folder."""
    if filename.startswith("<"):
        return filename
    known = _absolute_paths.get(filename)
    if known is None:
        known = os.path.abspath(filename)
        if os.path.isabs(filename):  # a relative name's meaning moves with os.chdir
            _absolute_paths[filename] = known
    return known


def calls_from_user_code(depth: int = 2) -> bool:
    """Whether the function `depth` frames up was called directly by user code.

    Autograph's own frames (`converted_call`) are looked through: inside
    `@tf.function` the user's call goes through them.
    """
    frame = sys._getframe(depth)
    while frame is not None and _AUTOGRAPH_IMPL in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return False
    filename = frame.f_code.co_filename
    return _AUTOGRAPH in filename or is_user_file(filename)


_columns: dict[tuple, int] = {}


def _column(frame) -> int:
    """The 1-based column of the instruction a frame is at (remembered per code object and
    instruction: a training step asks for the same few sites at every step)."""
    key = (frame.f_code, frame.f_lasti)
    known = _columns.get(key)
    if known is None:
        try:
            col = list(frame.f_code.co_positions())[frame.f_lasti // 2][2]
            known = col + 1 if col is not None else 1
        except (AttributeError, IndexError, TypeError):
            known = 1
        if len(_columns) < 65536:  # bounded: a program has only so many call sites
            _columns[key] = known
    return known


def _mapped_site() -> Site | None:
    from tensorflow.python.util import tf_stack

    for frame in reversed(tf_stack.extract_stack()):
        if is_user_file(frame.filename):
            return Site(os.path.abspath(frame.filename), frame.lineno, 1)
    return None


def display_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def graph_frames(op) -> list[tuple]:
    """(path, line, function) of each user frame of a graph op's creation stack, outermost first."""
    try:
        frames = list(op.traceback or ())
    except AttributeError:
        return []
    found = []
    for frame in frames:
        if is_user_file(frame.filename):
            name = getattr(frame, "name", "") or ""
            found.append((os.path.abspath(frame.filename), frame.lineno, name.removeprefix("tf__")))
    return found
