"""One way to replace a file: a temporary file beside it, then a rename.

Used for everything tapecheck writes: fixed source files (`--fix`, `--add-noqa`), the
`--output-file` report, cache entries and the stat index. A reader, or a crash, sees
the old file or the new one, never half of either, and the temporary file never stays
behind.
"""

from __future__ import annotations

import os
import tempfile

SUFFIX = ".tapecheck-tmp"


def replace_file(path: str, data: bytes, *, durable: bool = False, private: bool = False) -> None:
    """Write `data` as the new contents of `path`, all at once. Raises OSError.

    Through a symlink, not over it. An existing file keeps its mode, and its owner when this
    process may set it (root); a new file gets the mode the umask gives (0600 when `private`,
    for cache files). `durable`: flushed to the disk before the rename (a user's source file)."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target) or "."
    try:
        status = os.stat(target)
    except FileNotFoundError:
        status = None
    descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=SUFFIX)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if status is not None:
            os.chmod(temporary, status.st_mode & 0o7777)
            if hasattr(os, "chown") and (status.st_uid, status.st_gid) != (os.getuid(), os.getgid()):
                try:
                    os.chown(temporary, status.st_uid, status.st_gid)
                except OSError:
                    pass
        elif not private:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
