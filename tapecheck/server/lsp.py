"""The language server: pygls speaks LSP over stdio, tapecheck lints each buffer in memory.

- Diagnostics for `.py` documents and notebook documents (one diagnostic list per
  cell) on open, change and save; code actions for a finding's safe fix and for
  adding `# noqa: CODE` to its line. The client applies the edits: this server
  never writes a file.
- One lint per buffer at a time, off the protocol's thread. Edits that arrive while
  a buffer is being linted mark it dirty: the running lint's result is dropped
  (stale) and the newest text is linted next, so a burst of keystrokes costs one
  lint after the one in progress, and the last version's diagnostics win.
- Other files of the project: the program model reads the modules a buffer imports
  from disk (as saved; a module is read again when its size or time changes). When
  a `.py` file is saved (or changes on disk, when the client watches files), the
  open buffers that import it are linted again. A keystroke re-lints one buffer only.
- `[tool.tapecheck]` of the file's project decides the rules and per-file ignores,
  re-read when a `pyproject.toml` is saved or changes on disk.

Never imports TensorFlow (the linter does not), and nothing here runs at
`tapecheck --help`: the command imports this module only when it starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
import sys
import queue
import threading
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.uris import to_fs_path

from tapecheck._version import __version__
from tapecheck.rules import rule_name
from tapecheck.server.linting import Cell, Located, Result, Snapshot, code_units, forget, lint_snapshot, rule_url, split_lines, word_end

logger = logging.getLogger("tapecheck.server")

PYTHON_SUFFIXES = (".py", ".pyi")
_ANSWERED = object()  # a request already answered with an error while it was being read


class _LintThread:
    """The one thread lints run on. A daemon: `exit` ends the process at once, even in the
    middle of a long lint (a ThreadPoolExecutor's worker would be joined first)."""

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._work, name="tapecheck-lint", daemon=True).start()

    def submit(self, function, *args) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((loop, future, function, args))
        return future

    def _work(self) -> None:
        while True:
            loop, future, function, args = self._queue.get()
            if future.cancelled():
                continue
            try:
                outcome = (function(*args), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
                outcome = (None, exc)
            try:
                loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop is closed: the server is exiting
                return


def _settle(future: asyncio.Future, value, error) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class _Protocol(LanguageServerProtocol):
    """pygls's protocol, answering a request whose params do not fit its method with
    InvalidParams (pygls drops it, and the client would wait forever)."""

    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "id" in data and "method" in data and not self._shutdown:
                self._send_response(data["id"], None, exc.to_response_error())
                return _ANSWERED
            raise

    def handle_message(self, message):
        if message is _ANSWERED:
            return
        if not hasattr(message, "jsonrpc"):  # valid JSON that is no JSON-RPC message (a list, a number)
            logger.warning("ignoring a message that is not JSON-RPC: %.200r", message)
            return
        super().handle_message(message)


class TapecheckServer(LanguageServer):
    def __init__(self):
        super().__init__(
            "tapecheck",
            __version__,
            protocol_cls=_Protocol,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                # any notebook type ("*"), its Python cells; `notebook` left out does not round-trip through lsprotocol
                notebook_selector=[types.NotebookDocumentFilterWithNotebook(notebook="*", cells=[types.NotebookCellLanguage(language="python")])],
                save=True,
            ),
        )
        self._lint_thread: _LintThread | None = None
        self._tasks: dict[str, asyncio.Task] = {}
        self._dirty: set[str] = set()
        self._results: dict[str, Result] = {}
        self._published: dict[str, set[str]] = {}  # document key -> URIs it published diagnostics for
        self._settings = None
        self._config_problems: dict[str, tuple] = {}  # pyproject.toml path -> (line, message) published
        self._config_stamps: dict[str, tuple | None] = {}  # pyproject.toml path -> (mtime, size), None: absent
        self.shut_down = False
        self.lints = 0  # lints run (for the log)

    # -- errors ---------------------------------------------------------------------------
    def report_server_error(self, error, source):
        """Errors outside a request's answer go to the client's log, never a pop-up: a
        malformed message must not interrupt the user. Invalid JSON is answered with
        JSON-RPC's Parse error (id null)."""
        if isinstance(error, json.JSONDecodeError):
            self.protocol._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": f"Parse error: {error}"}})
            return
        try:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Error, message=f"tapecheck server: {error}"))
        except Exception:  # noqa: BLE001 - reporting must never raise
            logger.exception("could not report an error")

    # -- configuration and the files a buffer imports -----------------------------------------
    @property
    def settings(self):
        if self._settings is None:
            from tapecheck.lint.config import Settings

            self._settings = Settings()
        return self._settings

    def roots(self) -> list[str]:
        folders = [to_fs_path(folder.uri) for folder in self.workspace.folders.values()]
        folders = [f for f in folders if f and os.path.isdir(f)]
        if not folders and self.workspace.root_path and os.path.isdir(self.workspace.root_path):
            folders = [self.workspace.root_path]
        return folders

    def dependents(self, path: str) -> list[str]:
        """The open buffers (keys) whose code imports the project file `path`: a save of it may
        change what the model knows of them."""
        if not path.endswith(".py"):
            return []
        from tapecheck.model.project import dependencies

        target = os.path.abspath(path)
        found = []
        for key, document in list(self.workspace.text_documents.items()):
            if self.workspace.get_notebook_document(cell_uri=key) is not None or not self.is_python(document):
                continue
            own = to_fs_path(document.uri)
            if own and os.path.abspath(own) != target and target in (
                    os.path.abspath(d) for d in dependencies(own, document.source.encode("utf-8", "replace"))):
                found.append(key)
        return found

    def config_changed(self) -> None:
        self._settings = None
        self.relint_all()

    # -- buffers ----------------------------------------------------------------------------
    def path_of(self, uri: str, suffix: str) -> str:
        path = to_fs_path(uri)
        if path:
            return path
        base = self.roots()[0] if self.roots() else os.getcwd()  # an unsaved buffer: the workspace's settings
        return os.path.join(base, "untitled" + suffix)

    def key_of(self, uri: str) -> str:
        """The buffer a document belongs to: its notebook's URI for a cell, else its own."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return unquote(notebook.uri) if notebook is not None else unquote(uri)

    def snapshot(self, key: str) -> Snapshot | None:
        notebook = self.workspace.notebook_documents.get(key)
        if notebook is not None:
            cells = []
            for cell in notebook.cells:
                document = self.workspace.text_documents.get(unquote(cell.document))
                text = document.source if document is not None else ""
                code = cell.kind == types.NotebookCellKind.Code and (document is None or document.language_id in (None, "python"))
                cells.append(Cell(cell.document, text, code, document.version if document else None))
            return Snapshot(key, self.path_of(notebook.uri, ".ipynb"), notebook.version, tuple(cells), notebook=True)
        document = self.workspace.text_documents.get(key)
        if document is None or not self.is_python(document):
            return None
        return Snapshot(key, self.path_of(document.uri, ".py"), document.version, (Cell(document.uri, document.source, True, document.version),))

    def is_python(self, document) -> bool:
        return document.language_id == "python" or unquote(document.uri).endswith(PYTHON_SUFFIXES)

    def version_of(self, key: str):
        notebook = self.workspace.notebook_documents.get(key)
        if notebook is not None:
            return notebook.version
        document = self.workspace.text_documents.get(key)
        return document.version if document is not None else None

    # -- linting ------------------------------------------------------------------------------
    def lint(self, snapshot: Snapshot) -> Result:
        """Runs on the lint thread."""
        if self._config_moved(snapshot.path):
            self._settings = None  # an edited pyproject.toml, seen without file watching (Neovim 0.7-0.10)
        result = lint_snapshot(snapshot, self.settings)
        self.lints += 1
        return result

    def _config_moved(self, path: str) -> bool:
        """Whether a `pyproject.toml` in the buffer's folder or one above it changed (time, size,
        made or removed) since the last lint looked: a few `stat`s per lint, no reading."""
        stamps = self._config_stamps
        moved = False
        folder = os.path.dirname(os.path.abspath(path))
        while True:
            candidate = os.path.join(folder, "pyproject.toml")
            try:
                info = os.stat(candidate)
                stamp = (info.st_mtime_ns, info.st_size)
            except OSError:
                stamp = None
            if candidate in stamps and stamps[candidate] != stamp:
                moved = True
            stamps[candidate] = stamp
            parent = os.path.dirname(folder)
            if parent == folder:
                return moved
            folder = parent

    def schedule(self, key: str) -> None:
        """Lint this buffer soon; a lint of it in progress becomes stale."""
        key = unquote(key)
        self._dirty.add(key)
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.get_running_loop().create_task(self._run(key))

    def relint_all(self) -> None:
        for key in list(self.workspace.notebook_documents) + list(self.workspace.text_documents):
            if self.workspace.get_notebook_document(cell_uri=key) is None:
                self.schedule(key)

    @property
    def lint_thread(self) -> _LintThread:
        if self._lint_thread is None:
            self._lint_thread = _LintThread()
        return self._lint_thread

    async def _run(self, key: str) -> None:
        try:
            while key in self._dirty and not self.shut_down:
                self._dirty.discard(key)
                snapshot = self.snapshot(key)
                if snapshot is None:
                    return
                try:
                    result = await self.lint_thread.submit(self.lint, snapshot)
                except Exception:  # noqa: BLE001 - a bug must cost this buffer's diagnostics, not the server
                    logger.exception("linting %s failed", key)
                    self.report_server_error(RuntimeError(f"internal error linting {key}; see the server's log"), None)
                    return
                if key in self._dirty or self.version_of(key) != snapshot.version:
                    continue  # stale: newer text arrived while this lint ran
                self._results[key] = result
                self.publish(result)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    async def current(self, key: str) -> Result | None:
        """The result for the buffer's current text (linted now if the last one is stale)."""
        result = self._results.get(key)
        if result is not None and result.snapshot.version == self.version_of(key):
            return result
        snapshot = self.snapshot(key)
        if snapshot is None:
            return None
        return await self.lint_thread.submit(self.lint, snapshot)

    # -- to LSP -------------------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        return str(getattr(self.workspace.position_encoding, "value", self.workspace.position_encoding) or "utf-16")

    def position(self, lines: list[str], line: int, col: int) -> types.Position:
        """An LSP position from a 1-based (line, col) in characters."""
        if line > len(lines):
            return types.Position(line=len(lines), character=0)
        text = lines[line - 1]
        return types.Position(line=line - 1, character=code_units(text[: col - 1], self.encoding))

    def diagnostic(self, item: Located, lines: list[str]) -> types.Diagnostic:
        finding = item.finding
        text = lines[item.line - 1] if item.line <= len(lines) else ""
        start = self.position(lines, item.line, item.col)
        end = self.position(lines, item.line, word_end(text, item.col))
        message = finding.message + (f"\n{finding.hint}" if finding.hint else "")
        href = rule_url(finding.code)
        return types.Diagnostic(
            range=types.Range(start=start, end=end),
            message=message,
            severity=types.DiagnosticSeverity.Warning,
            code=finding.code,
            code_description=types.CodeDescription(href=href) if href else None,
            source="tapecheck",
            data={"name": rule_name(finding.code), "hint": finding.hint, "cell": finding.cell,
                  "fix": finding.fix.title if item.fix else None},
        )

    def publish_config(self, result: Result) -> None:
        """A configuration error also as a diagnostic on its pyproject.toml (at the key's line);
        cleared once a buffer under that file lints without one."""
        folder = os.path.dirname(os.path.abspath(result.snapshot.path))
        for path in list(self._config_problems):
            if (result.config is None or result.config.path != path) and \
                    (folder + os.sep).startswith(os.path.dirname(path) + os.sep):
                del self._config_problems[path]
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=Path(path).as_uri(), diagnostics=[]))
        problem = result.config
        if problem is None or self._config_problems.get(problem.path) == (problem.line, problem.message):
            return
        self._config_problems[problem.path] = (problem.line, problem.message)
        at = types.Position(line=problem.line - 1, character=0)
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=Path(problem.path).as_uri(), diagnostics=[
            types.Diagnostic(range=types.Range(start=at, end=types.Position(line=problem.line, character=0)),
                             message=f"tapecheck: {problem.message}", severity=types.DiagnosticSeverity.Error,
                             source="tapecheck")]))

    def publish(self, result: Result) -> None:
        self.publish_config(result)
        snapshot = result.snapshot
        texts = {cell.uri: cell for cell in snapshot.cells}
        by_uri = result.by_uri()
        if result.problem is not None:
            by_uri.setdefault(result.problem.uri, [])
        uris = set(by_uri)
        for gone in self._published.get(snapshot.key, set()) - uris:  # cells deleted since
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=gone, diagnostics=[]))
        self._published[snapshot.key] = uris
        for uri, items in by_uri.items():
            cell = texts.get(uri)
            lines = split_lines(cell.text) if cell else []
            diagnostics = [self.diagnostic(item, lines) for item in items]
            problem = result.problem
            if problem is not None and problem.uri == uri:
                at = self.position(lines, problem.line, problem.col)
                diagnostics.append(types.Diagnostic(
                    range=types.Range(start=at, end=at), message=problem.message,
                    severity=types.DiagnosticSeverity.Information, source="tapecheck"))
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=cell.version if cell else None)
            )

    def clear(self, key: str) -> None:
        key = unquote(key)
        forget(key)  # its parsed runs
        self._dirty.discard(key)
        self._results.pop(key, None)
        for uri in self._published.pop(key, set()):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def workspace_edit(self, result: Result, edits) -> types.WorkspaceEdit:
        cells = {cell.uri: cell for cell in result.snapshot.cells}
        by_uri: dict[str, list[types.TextEdit]] = {}
        for uri, edit in edits:
            lines = split_lines(cells[uri].text)
            by_uri.setdefault(uri, []).append(types.TextEdit(
                range=types.Range(start=self.position(lines, edit.line, edit.col), end=self.position(lines, edit.end_line, edit.end_col)),
                new_text=edit.text,
            ))
        capabilities = self.client_capabilities.workspace
        versioned = bool(capabilities and capabilities.workspace_edit and capabilities.workspace_edit.document_changes)
        if versioned:  # the client refuses the edit if the buffer changed since
            return types.WorkspaceEdit(document_changes=[
                types.TextDocumentEdit(
                    text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=cells[uri].version),
                    edits=text_edits,
                )
                for uri, text_edits in by_uri.items()
            ])
        return types.WorkspaceEdit(changes=by_uri)

    async def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        uri = unquote(params.text_document.uri)
        key = self.key_of(params.text_document.uri)
        wanted = params.context.only
        if wanted and not any(str(kind).startswith(types.CodeActionKind.QuickFix.value) for kind in wanted):
            return []
        result = await self.current(key)
        if result is None:
            return []
        cell = next((c for c in result.snapshot.cells if unquote(c.uri) == uri), None)
        if cell is None:
            return []
        lines = split_lines(cell.text)
        first, last = params.range.start.line + 1, params.range.end.line + 1
        wanted_items = [item for item in result.located if unquote(item.uri) == uri and first <= item.line <= last]
        if wanted_items:
            # Placing a `# noqa` may tokenize the whole buffer (~80 ms at 5,000 lines): off the protocol's thread.
            await asyncio.get_running_loop().run_in_executor(None, lambda: [item.suppress for item in wanted_items])
        actions: list[types.CodeAction] = []
        for item in wanted_items:
            diagnostic = self.diagnostic(item, lines)
            code = item.finding.code
            if item.fix:
                actions.append(types.CodeAction(
                    title=f"{code}: {item.finding.fix.title}",
                    kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic], is_preferred=True,
                    edit=self.workspace_edit(result, item.fix),
                ))
            if item.suppress:
                actions.append(types.CodeAction(
                    title=f"{code}: suppress on this line (`# noqa: {code}`)",
                    kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic],
                    edit=self.workspace_edit(result, [item.suppress]),
                ))
        return actions


def create_server() -> TapecheckServer:
    server = TapecheckServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: TapecheckServer, params: types.DidOpenTextDocumentParams):
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: TapecheckServer, params: types.DidChangeTextDocumentParams):
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE, types.SaveOptions(include_text=False))
    def did_save(ls: TapecheckServer, params: types.DidSaveTextDocumentParams):
        uri = unquote(params.text_document.uri)
        path = to_fs_path(uri) or ""
        if os.path.basename(path) == "pyproject.toml":
            ls.config_changed()
            return
        ls.schedule(uri)
        for key in ls.dependents(path):  # buffers that import it see what was saved
            ls.schedule(key)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: TapecheckServer, params: types.DidCloseTextDocumentParams):
        ls.clear(params.text_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_open(ls: TapecheckServer, params: types.DidOpenNotebookDocumentParams):
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_change(ls: TapecheckServer, params: types.DidChangeNotebookDocumentParams):
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_save(ls: TapecheckServer, params: types.DidSaveNotebookDocumentParams):
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_close(ls: TapecheckServer, params: types.DidCloseNotebookDocumentParams):
        ls.clear(params.notebook_document.uri)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched_files(ls: TapecheckServer, params: types.DidChangeWatchedFilesParams):
        config, changed = False, set()
        for change in params.changes:
            path = to_fs_path(change.uri) or ""
            if os.path.basename(path) == "pyproject.toml":
                config = True
            elif path.endswith(".py") and unquote(change.uri) not in ls.workspace.text_documents:
                changed.update(ls.dependents(path))
        if config:
            ls.config_changed()
        else:
            for key in changed:
                ls.schedule(key)

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def folders_changed(ls: TapecheckServer, params: types.DidChangeWorkspaceFoldersParams):
        ls.relint_all()

    @server.feature(types.INITIALIZED)
    def initialized(ls: TapecheckServer, params: types.InitializedParams):
        watch = ls.client_capabilities.workspace
        if watch and watch.did_change_watched_files and watch.did_change_watched_files.dynamic_registration:
            ls.client_register_capability(types.RegistrationParams(registrations=[types.Registration(
                id="tapecheck-watch", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers=[
                    types.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                    types.FileSystemWatcher(glob_pattern="**/*.py"),
                ]),
            )]))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: TapecheckServer, params):
        ls.shut_down = True
        ls._dirty.clear()

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]))
    async def code_action(ls: TapecheckServer, params: types.CodeActionParams):
        return await ls.code_actions(params)

    return server


def _leaves(error: BaseException) -> list[BaseException]:
    """The innermost errors of an exception group (cattrs reports each bad field as one)."""
    inner = getattr(error, "exceptions", None)
    if not inner:
        return [error]
    return [leaf for child in inner for leaf in _leaves(child)]


def _one_line(record: logging.LogRecord) -> bool:
    """A log record with an exception becomes one line: a malformed message from the client
    (pygls answers it with an error response) must not print screens of cattrs' traceback.
    What was wrong is kept: each bad field's error, on that line."""
    error = record.exc_info[1] if record.exc_info else None
    text = record.getMessage()
    if error is None and "Traceback (most recent call last)" in text:
        # pygls logs a bad message's traceback as text, from inside its `except`
        error = sys.exc_info()[1]
        record.msg, record.args = text.split("\n", 1)[0], ()
        if error is None:
            record.msg += ": " + text.rstrip().rsplit("\n", 1)[-1].strip(" |")
            return True
    if error is not None:
        notes = []
        for leaf in _leaves(error)[:5]:
            where = " ".join(getattr(leaf, "__notes__", None) or [])
            notes.append(f"{type(leaf).__name__}: {leaf}" + (f" ({where})" if where else ""))
        record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}; " + "; ".join(notes)
        record.args = ()
        record.exc_info = None
        record.exc_text = None
    return True


def serve() -> int:
    """Run over stdio until `exit` (or the client closes the pipe). The exit status is 0
    after a `shutdown` request, else 1, as LSP asks."""
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident may corrupt the protocol's stream
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="tapecheck server: %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_one_line)
    server = create_server()
    server.start_io(sys.stdin.buffer, stdout)
    return 0 if server.shut_down else 1
