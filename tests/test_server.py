"""`tapecheck server`, driven over stdio by a real LSP client (pytest-lsp).

Each test starts the server as a subprocess (`python -m tapecheck server`) in a
fresh workspace folder, talks LSP to it and checks what it publishes and answers.
Files on disk are written by the tests only; the server must leave them alone.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.protocol import default_converter
from pytest_lsp import ClientServerConfig, LanguageClient
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from tapecheck.lint.engine import lint_source

ROOT = Path(__file__).resolve().parents[1]
PUBLISH = types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS
TIMEOUT = 60  # seconds for one lint to arrive on a machine shared with other work


def _client() -> LanguageClient:
    """pytest-lsp's client, also keeping every publishDiagnostics in order (with its version)."""
    client = LanguageClient(converter_factory=default_converter)
    client.published = []

    def publish(client: LanguageClient, params: types.PublishDiagnosticsParams):
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)

    register_lsp_features(client, {**DEFAULT_CLIENT_FEATURES, PUBLISH: publish})
    return client


CONFIG = ClientServerConfig(server_command=[sys.executable, "-m", "tapecheck", "server"], client_factory=_client)
CAPABILITIES = types.ClientCapabilities(
    workspace=types.WorkspaceClientCapabilities(workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True)),
    text_document=types.TextDocumentClientCapabilities(
        publish_diagnostics=types.PublishDiagnosticsClientCapabilities(version_support=True),
        code_action=types.CodeActionClientCapabilities(),
    ),
    notebook_document=types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities()
    ),
)


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    return root


@pytest_lsp.fixture(config=CONFIG)
async def client(lsp_client: LanguageClient, workspace):
    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=CAPABILITIES,
            root_uri=workspace.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="project")],
        )
    )
    yield
    await lsp_client.shutdown_session()


# -- sources ---------------------------------------------------------------------------------
REMOVED_API = textwrap.dedent(
    """\
    import tensorflow as tf

    optimizer = tf.keras.optimizers.SGD(lr=0.01)
    """
)
CLEAN = REMOVED_API.replace("lr=", "learning_rate=")
LATE_TARGET = textwrap.dedent(
    """\
    import tensorflow as tf

    def train_step(model, x, y, optimizer):
        with tf.GradientTape() as tape:
            prediction = model(x, training=True)
        loss = tf.reduce_mean(tf.square(prediction - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
)


async def until(predicate, timeout: float = TIMEOUT, what: str = "the server"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def published(client, uri: str, version=None, after: int = 0, timeout: float = TIMEOUT):
    """The first diagnostics published for `uri` (at `version`, if given) after the `after`-th publish."""

    def find():
        for params in client.published[after:]:
            if params.uri == uri and (version is None or params.version == version):
                return params
        return None

    return await until(find, timeout, f"diagnostics of {uri} version {version}")


def open_file(client, path: Path, text: str, version: int = 1) -> str:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)))
    return uri


def replace_all(client, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def apply(text: str, edits: list[types.TextEdit]) -> str:
    """Apply LSP text edits (UTF-16 positions) as an editor does."""
    lines = text.splitlines(keepends=True) + [""]

    def offset(position: types.Position) -> int:
        before = sum(len(line) for line in lines[: position.line])
        line = lines[position.line]
        units = 0
        for index, char in enumerate(line):
            if units >= position.character:
                return before + index
            units += len(char.encode("utf-16-le")) // 2
        return before + len(line)

    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end):]
    return text


def codes(params) -> list[tuple[str, int]]:
    return sorted((d.code, d.range.start.line + 1) for d in params.diagnostics)


# -- diagnostics -----------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_diagnostics_on_open_change_and_save_come_from_the_buffer_not_the_disk(client, workspace):
    path = workspace / "train.py"
    path.write_text(CLEAN)  # the disk copy is clean: findings can only come from the buffer
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    uri = open_file(client, path, REMOVED_API)

    opened = await published(client, uri, version=1)
    [diagnostic] = opened.diagnostics
    assert diagnostic.code == "TAP302" and diagnostic.source == "tapecheck"
    assert diagnostic.severity == types.DiagnosticSeverity.Warning
    assert "lr=" in diagnostic.message and "Pass `learning_rate=` instead." in diagnostic.message  # the hint
    assert diagnostic.data["hint"] == "Pass `learning_rate=` instead."
    line = REMOVED_API.splitlines()[2]
    assert diagnostic.range.start == types.Position(line=2, character=line.index("tf.keras"))
    assert diagnostic.code_description.href.endswith("/rules/TAP302.md")
    assert Path(diagnostic.code_description.href.removeprefix("file://")).read_text().startswith("# TAP302")

    replace_all(client, uri, CLEAN, 2)
    assert (await published(client, uri, version=2)).diagnostics == ()

    replace_all(client, uri, LATE_TARGET, 3)
    assert [code for code, _ in codes(await published(client, uri, version=3))] == ["TAP101"]

    count = len(client.published)
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    saved = await published(client, uri, version=3, after=count)
    assert codes(saved) == [("TAP101", 7)]
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before  # the server wrote nothing
    assert sorted(p.name for p in workspace.iterdir()) == ["train.py"]  # and left no cache behind

    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert (await published(client, uri, after=count + 1)).diagnostics == ()


@pytest.mark.asyncio
async def test_incremental_changes_and_utf16_columns(client, workspace):
    text = 'label = "\U0001F60B"; optimizer = tf.keras.optimizers.SGD(lr=0.01)\n'
    uri = open_file(client, workspace / "emoji.py", "import tensorflow as tf\n" + text)
    [diagnostic] = (await published(client, uri, version=1)).diagnostics
    # the emoji is one character but two UTF-16 code units
    assert diagnostic.range.start == types.Position(line=1, character=text.index("tf.keras") + 1)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=1, character=text.index("lr=") + 1),
                              end=types.Position(line=1, character=text.index("lr=") + 3)),
            text="learning_rate")]))
    assert (await published(client, uri, version=2)).diagnostics == ()


@pytest.mark.asyncio
async def test_a_syntax_error_while_typing_is_one_information_diagnostic(client, workspace):
    uri = open_file(client, workspace / "broken.py", "import tensorflow as tf\nwith tf.GradientTape() as tape:\n    x = (\n")
    [diagnostic] = (await published(client, uri, version=1)).diagnostics
    assert diagnostic.severity == types.DiagnosticSeverity.Information and diagnostic.code is None
    assert "could not lint" in diagnostic.message and "syntax error" in diagnostic.message


# -- notebooks -------------------------------------------------------------------------------
def _cells(notebook: str, texts: list[tuple[str, str]]):
    cells, documents = [], []
    for number, (kind, text) in enumerate(texts, start=1):
        uri = f"{notebook}#cell{number}"
        code = kind == "code"
        cells.append(types.NotebookCell(kind=types.NotebookCellKind.Code if code else types.NotebookCellKind.Markup, document=uri))
        documents.append(types.TextDocumentItem(uri=uri, language_id="python" if code else "markdown", version=1, text=text))
    return cells, documents


NOTEBOOK_CELLS = [
    ("code", "%matplotlib inline\nimport tensorflow as tf\nmodel = tf.keras.Sequential([tf.keras.layers.Dense(1)])"),
    ("markdown", "# Training\nThe loss must be inside the tape."),
    ("code", "def step(x, y):\n    with tf.GradientTape() as tape:\n        p = model(x)\n    loss = tf.reduce_mean((p - y) ** 2)\n"
             "    return tape.gradient(loss, model.trainable_variables)"),
    ("code", "opt = tf.keras.optimizers.Adam(lr=1e-3)"),
]


@pytest.mark.asyncio
async def test_notebook_findings_land_on_their_cells(client, workspace):
    notebook = (workspace / "train.ipynb").as_uri()
    cells, documents = _cells(notebook, NOTEBOOK_CELLS)
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook, notebook_type="jupyter-notebook", version=1, cells=cells),
        cell_text_documents=documents))
    third = await published(client, documents[2].uri)
    fourth = await published(client, documents[3].uri)
    first = await published(client, documents[0].uri)
    assert codes(third) == [("TAP101", 5)]  # line 5 of cell 3, not of the joined program
    assert codes(fourth) == [("TAP302", 1)] and first.diagnostics == ()
    assert not any(p.uri == documents[1].uri for p in client.published)  # markdown is not linted
    assert "line 4" in third.diagnostics[0].message  # lines in the message are the cell's too

    # a code action on a cell edits that cell
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=documents[3].uri),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
        context=types.CodeActionContext(diagnostics=list(fourth.diagnostics))))
    fix = next(a for a in actions if "learning_rate" in a.title)
    [change] = fix.edit.document_changes
    assert change.text_document.uri == documents[3].uri
    fixed = apply(NOTEBOOK_CELLS[3][1], list(change.edits))
    assert fixed == "opt = tf.keras.optimizers.Adam(learning_rate=1e-3)"

    count = len(client.published)
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=2),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=documents[3].uri, version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)]),
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=documents[2].uri, version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(
                    text=NOTEBOOK_CELLS[2][1].replace("    loss =", "        loss ="))]),
        ]))))
    assert (await published(client, documents[3].uri, after=count)).diagnostics == ()
    assert (await published(client, documents[2].uri, after=count)).diagnostics == ()

    # a new cell with a finding, then the cell deleted: its diagnostics go with it
    count = len(client.published)
    new_cells, new_documents = _cells(notebook + "-added", [("code", "opt2 = tf.keras.optimizers.SGD(lr=0.1)")])
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=3),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(
            structure=types.NotebookDocumentCellChangeStructure(
                array=types.NotebookCellArrayChange(start=4, delete_count=0, cells=new_cells),
                did_open=new_documents)))))
    assert codes(await published(client, new_documents[0].uri, after=count)) == [("TAP302", 1)]
    count = len(client.published)
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook, version=4),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(
            structure=types.NotebookDocumentCellChangeStructure(
                array=types.NotebookCellArrayChange(start=4, delete_count=1),
                did_close=[types.TextDocumentIdentifier(uri=new_documents[0].uri)])))))
    assert (await published(client, new_documents[0].uri, after=count)).diagnostics == ()

    count = len(client.published)
    client.notebook_document_did_close(types.DidCloseNotebookDocumentParams(
        notebook_document=types.NotebookDocumentIdentifier(uri=notebook),
        cell_text_documents=[types.TextDocumentIdentifier(uri=d.uri) for d in documents]))
    await until(lambda: {p.uri for p in client.published[count:]} == {documents[i].uri for i in (0, 2, 3)})
    assert all(p.diagnostics == () for p in client.published[count:])


# -- code actions ----------------------------------------------------------------------------
async def _actions(client, uri: str, line: int, diagnostics=()):
    return list(await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)),
        context=types.CodeActionContext(diagnostics=list(diagnostics)))) or [])


@pytest.mark.asyncio
async def test_code_actions_apply_the_safe_fix_and_add_a_suppression(client, workspace):
    path = workspace / "train.py"
    text = REMOVED_API.replace("lr=0.01)", "lr=0.01)  # noqa: E501") + "for m in metrics:\n    m.reset_states()\n"
    uri = open_file(client, path, text)
    diagnostics = (await published(client, uri, version=1)).diagnostics
    assert codes(types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics)) == [("TAP302", 3), ("TAP302", 5)]

    actions = await _actions(client, uri, 2, diagnostics[:1])
    assert [a.title for a in actions] == ["TAP302: Pass `learning_rate=`", "TAP302: suppress on this line (`# noqa: TAP302`)"]
    assert all(a.kind == types.CodeActionKind.QuickFix and a.diagnostics[0].code == "TAP302" for a in actions)
    [fix_change] = actions[0].edit.document_changes
    assert fix_change.text_document.version == 1  # the editor refuses it if the buffer moved on
    fixed = apply(text, list(fix_change.edits))
    assert "SGD(learning_rate=0.01)  # noqa: E501" in fixed
    assert [f.code for f in lint_source(fixed, "train.py")] == ["TAP302"]  # only the other one is left
    suppressed = apply(text, list(actions[1].edit.document_changes[0].edits))
    assert "lr=0.01)  # noqa: E501, TAP302\n" in suppressed  # joined to the noqa already there

    [_, suppress] = await _actions(client, uri, 4)
    added = apply(text, list(suppress.edit.document_changes[0].edits))
    assert added.endswith("    m.reset_states()  # noqa: TAP302\n")

    replace_all(client, uri, added, 2)
    assert codes(await published(client, uri, version=2)) == [("TAP302", 3)]  # the suppression is honoured
    assert await _actions(client, uri, 0) == []  # nothing to do on a clean line
    assert path.exists() is False  # edits are the client's to apply: nothing was written


@pytest.mark.asyncio
async def test_no_suppression_is_offered_where_a_comment_would_break_the_code(client, workspace):
    text = textwrap.dedent(
        '''\
        import tensorflow as tf
        opt = tf.keras.optimizers.SGD(lr=0.01, name="""a
        b""")
        '''
    )
    uri = open_file(client, workspace / "strings.py", text)
    await published(client, uri, version=1)
    titles = [a.title for a in await _actions(client, uri, 1)]
    assert titles == ["TAP302: Pass `learning_rate=`"]


# -- configuration and cross-file knowledge --------------------------------------------------
@pytest.mark.asyncio
async def test_the_projects_configuration_is_honoured_and_reread_when_saved(client, workspace):
    pyproject = workspace / "pyproject.toml"
    pyproject.write_text('[tool.tapecheck]\nignore = ["TAP302"]\n[tool.tapecheck.per-file-ignores]\n"legacy/*" = ["TAP1"]\n')
    (workspace / "legacy").mkdir()
    ignored = open_file(client, workspace / "legacy" / "old.py", LATE_TARGET + REMOVED_API.replace("import tensorflow as tf\n", ""))
    plain = open_file(client, workspace / "new.py", LATE_TARGET + REMOVED_API.replace("import tensorflow as tf\n", ""))
    assert (await published(client, ignored, version=1)).diagnostics == ()
    assert [c for c, _ in codes(await published(client, plain, version=1))] == ["TAP101"]

    count = len(client.published)
    pyproject.write_text('[tool.tapecheck]\nselect = ["TAP3"]\n')
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=pyproject.as_uri())))
    assert [c for c, _ in codes(await published(client, plain, after=count))] == ["TAP302"]
    assert [c for c, _ in codes(await published(client, ignored, after=count))] == ["TAP302"]

    count = len(client.published)
    pyproject.write_text('[tool.tapecheck]\nselect = ["TAP999"]\n')
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[
        types.FileEvent(uri=pyproject.as_uri(), type=types.FileChangeType.Changed)]))
    [problem] = (await published(client, plain, after=count)).diagnostics
    assert "configuration error" in problem.message and "TAP999" in problem.message



@pytest.mark.asyncio
async def test_a_configuration_edited_without_file_watching_applies_at_the_next_lint(client, workspace):
    # issue 27: Neovim 0.7-0.10 neither sends didSave for a pyproject.toml edited elsewhere nor
    # offers dynamic file watching: the server checks the file's stamp at each lint
    pyproject = workspace / "pyproject.toml"
    pyproject.write_text('[tool.tapecheck]\nignore = ["TAP302"]\n')
    text = LATE_TARGET + REMOVED_API.replace("import tensorflow as tf\n", "")
    uri = open_file(client, workspace / "edited.py", text)
    assert [c for c, _ in codes(await published(client, uri, version=1))] == ["TAP101"]
    pyproject.write_text('[tool.tapecheck]\nselect = ["TAP3"]\n')  # no notification of any kind
    replace_all(client, uri, text + "\n", 2)
    assert [c for c, _ in codes(await published(client, uri, version=2))] == ["TAP302"]
    pyproject.unlink()  # removed: the defaults again
    replace_all(client, uri, text, 3)
    assert sorted(c for c, _ in codes(await published(client, uri, version=3))) == ["TAP101", "TAP302"]


@pytest.mark.asyncio
async def test_an_unknown_configuration_key_is_a_diagnostic_on_the_configuration(client, workspace):
    pyproject = workspace / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.tapecheck]\nselect = ["TAP1"]\nignores = ["TAP101"]\n')
    uri = open_file(client, workspace / "keyed.py", LATE_TARGET)
    [problem] = (await published(client, uri, version=1)).diagnostics  # the buffer says why it is not linted
    assert "unknown key 'ignores'" in problem.message
    on_config = await published(client, pyproject.as_uri())
    [diagnostic] = on_config.diagnostics
    assert diagnostic.range.start.line == 5 and "unknown key 'ignores'" in diagnostic.message  # `ignores = ...`
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    count = len(client.published)
    pyproject.write_text('[project]\nname = "x"\n\n[tool.tapecheck]\nselect = ["TAP1"]\nignore = ["TAP101"]\n')
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=pyproject.as_uri())))
    assert (await published(client, pyproject.as_uri(), after=count)).diagnostics == ()  # fixed: cleared

MODELS = textwrap.dedent(
    """\
    import keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = keras.layers.Dense(16)
            self.drop = keras.layers.Dropout(0.5)
            self.out = keras.layers.Dense(1)

        def call(self, x, training=None):
            return self.out(self.drop(self.hidden(x), training=training))
    """
)
TRAIN = textwrap.dedent(
    """\
    import tensorflow as tf
    from models import Net

    model = Net()
    optimizer = tf.keras.optimizers.Adam()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    """
)


@pytest.mark.asyncio
async def test_models_defined_in_other_files_are_known_and_refreshed_on_save(client, workspace):
    models = workspace / "models.py"
    models.write_text(MODELS)
    train = open_file(client, workspace / "train.py", TRAIN)
    assert codes(await published(client, train, version=1)) == [("TAP403", 9)]

    # the model loses its Dropout in the editor: nothing changes until it is saved
    plain = MODELS.replace("keras.layers.Dropout(0.5)", "keras.layers.Dense(16)")
    models_uri = open_file(client, models, MODELS)
    await published(client, models_uri, version=1)
    replace_all(client, models_uri, plain, 2)
    await published(client, models_uri, version=2)
    replace_all(client, train, TRAIN + "\n", 2)
    assert codes(await published(client, train, version=2)) == [("TAP403", 9)]

    count = len(client.published)
    models.write_text(plain)
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=models_uri)))
    assert (await published(client, train, version=2, after=count)).diagnostics == ()


# -- robustness ------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_malformed_requests_are_answered_and_the_server_goes_on(client, workspace):
    from pygls.exceptions import JsonRpcException

    # (params of the wrong shape and invalid JSON: test_server_process.py, which can send them)
    with pytest.raises(JsonRpcException) as unknown:
        await client.protocol.send_request_async("tapecheck/noSuchMethod", {"x": 1})
    assert unknown.value.code == -32601  # MethodNotFound
    client.protocol.notify("tapecheck/noSuchNotification", {"x": 1})
    client.text_document_did_change(types.DidChangeTextDocumentParams(  # a document never opened
        text_document=types.VersionedTextDocumentIdentifier(uri=(workspace / "nowhere.py").as_uri(), version=3),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="x = 1\n")]))
    # requests about documents the server never saw
    assert await _actions(client, (workspace / "never_opened.py").as_uri(), 0) == []
    assert await _actions(client, "untitled:Untitled-1", 0) == []
    # an out-of-range position and a huge range
    uri = open_file(client, workspace / "ok.py", REMOVED_API)
    await published(client, uri, version=1)
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=10**6, character=10**6)),
        context=types.CodeActionContext(diagnostics=[])))
    assert len(actions) == 2
    # still linting
    replace_all(client, uri, LATE_TARGET, 2)
    assert [c for c, _ in codes(await published(client, uri, version=2))] == ["TAP101"]


@pytest.mark.asyncio
async def test_a_huge_buffer_is_linted_and_the_server_answers_meanwhile(client, workspace):
    from pygls.exceptions import JsonRpcException

    filler = "".join(
        f"def helper_{i}(values, scale={i}):\n    return [value * scale + {i} for value in values if value is not None]\n"
        for i in range(25_000)
    )
    last = LATE_TARGET.replace("train_step", "train_step_last").replace("import tensorflow as tf\n", "")
    huge = LATE_TARGET + filler + last  # 50k lines, 3 MB
    assert len(huge.splitlines()) > 50_000
    big = open_file(client, workspace / "huge.py", huge)
    # while it is being linted (seconds), requests are still answered
    with pytest.raises(JsonRpcException):
        await asyncio.wait_for(client.protocol.send_request_async("tapecheck/noSuchMethod", {}), 30)
    assert not any(p.uri == big for p in client.published)
    found = await published(client, big, version=1, timeout=300)
    assert codes(found) == [("TAP101", 7), ("TAP101", len(huge.splitlines()) - 1)]

    too_large = "x = 1  # GradientTape\n" * 500_000  # 11 MB: over the limit `tapecheck lint` has
    replace_all(client, big, too_large, 2)
    [problem] = (await published(client, big, version=2, timeout=120)).diagnostics
    assert "too large" in problem.message
    small = open_file(client, workspace / "small.py", REMOVED_API)
    assert [c for c, _ in codes(await published(client, small, version=1))] == ["TAP302"]


@pytest.mark.asyncio
async def test_rapid_edits_publish_the_last_versions_diagnostics(client, workspace):
    uri = open_file(client, workspace / "typing.py", CLEAN)
    await published(client, uri, version=1)
    count = len(client.published)
    edits = 40
    for version in range(2, edits + 2):  # without waiting, as keystrokes come
        replace_all(client, uri, REMOVED_API if version % 2 else CLEAN, version)
    final = edits + 1  # odd: the buffer with the finding
    last = await published(client, uri, version=final, after=count)
    assert [d.code for d in last.diagnostics] == ["TAP302"]
    await asyncio.sleep(0.5)
    mine = [p for p in client.published[count:] if p.uri == uri]
    assert mine[-1].version == final  # nothing older arrives after the newest
    assert [p.version for p in mine] == sorted(p.version for p in mine)
    assert len(mine) < edits  # stale lints were dropped, not all published
    for params in mine:  # and each one published is right for its own version
        assert [d.code for d in params.diagnostics] == (["TAP302"] if params.version % 2 else [])
