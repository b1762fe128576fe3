"""The program model of one file, assembled from its parts, and the models of the project files
it imports.

`ProgramModel` is built once per file (`model_of(facts)`) and shared by every rule. Its
questions live with their concern: `bindings.py`, `calls.py`, `keras.py`, `summaries.py`,
`tapes.py` (mixins of this class), the flow tracer in `flow.py`. Here: the model's own
indexes of the facts (sums, comprehensions, comparisons), names imported from other files of
the project, and `load_module`, which builds (and caches per process) the model of such a file
from its facts (`tapecheck.lint.source.facts_of`).
"""

from __future__ import annotations

import os
import weakref
from bisect import bisect_left, bisect_right

from tapecheck.lint.facts import LAMBDA, Block, FileFacts
from tapecheck.model.objects import Function, ModuleRef, Summary
from tapecheck.model.bindings import Bindings
from tapecheck.model.calls import Calls
from tapecheck.model.keras import KerasKinds
from tapecheck.model.ops import MAX_ALIAS_DEPTH
from tapecheck.model.project import MAX_MODULES, MAX_MODULE_BYTES, _modules, module_file
from tapecheck.model.queries import Spans
from tapecheck.model.summaries import Summaries
from tapecheck.model.tapes import Tapes


class ProgramModel(Bindings, Calls, KerasKinds, Summaries, Tapes):
    """The semantic model of one file. Build it with `model_of(facts)`."""

    def close(self) -> None:
        """Drop what the model built. Its functions and classes refer back to it: cycles that
        only the garbage collector would free, and a lint runs with it paused. The engine closes
        the model of a file it has linted; models of other files (`load_module`) stay open."""
        self.__dict__.clear()

    def __init__(self, facts: FileFacts):
        self.facts = facts
        self.spans = Spans(facts)
        self.functions: dict[int, Function] = {}
        self.classes: dict[int, Block] = {}
        self._defs: dict[tuple[str, int, int], Block] = {}  # (name, line, scope) -> function/class block
        self._lambda_lines: dict[tuple[int, int], int] = {}  # (line, scope) -> lambdas written there
        self._summaries: dict[int, Summary | None] = {}
        self._compares: list = []
        self._compare_orders: list[int] | None = None
        self._sums: list = []
        self._sum_starts: list[int] | None = None
        self._attributes: dict[tuple[int, str], object] = {}
        self._assigns_by_scope: dict[int, list] = {}
        self._assigns_by_scope_name: dict[tuple[int, str], list] = {}  # assigns_named_in
        self._uses_by_head: dict[str, list] | None = None
        self._callers: dict[int, list] | None = None
        self._calls_by_name: dict[str, list] = {}
        self._calls_by_scope: dict[int, list] | None = None  # calls_in_scope
        self._methods: dict[int, list] | None = None
        self._attribute_assigns: dict[tuple[int, str], list] = {}
        self._assigns_by_name: dict[str, list] | None = None  # assigns_named
        self._call_graph: dict[int, dict[int, int]] | None = None  # call_graph
        self.memo: dict = {}  # what a rule derives once per file (keyed by the rule's own names)
        self._bindings: dict[tuple[str, int, int], object] = {}  # binding(name, site) asked from outside
        self._binding_busy = False  # a binding is being worked out: nested questions are not remembered
        self._uses_by_attribute: dict[str, list] | None = None
        self._alias_head_names: set[str] | None = None  # _alias_heads
        self._assigned_leaves: frozenset[str] | None = None  # loss_constructions: last parts of plain assignments' targets
        # the files this file's imports read (`_load`): set by `model_of` for the file being linted,
        # whose model lives for its lint only; None for another file's model (`load_module`), kept
        # across lints, which asks `load_module` each time (its stamp check sees a changed file, and
        # `_imports_unchanged` a change in a file it imports)
        self._loaded: dict | None = None
        # a kept model's imports (`load_module` sets it to {}): (module, relative) -> a weak reference
        # to the model `load_module` gave for it (None: not found); `_imports_unchanged` checks them
        self._deps: dict | None = None
        self._recording: dict[int, list] = {}  # block id -> the tapes recording there (`recording`)
        self._loops_around: dict[int, list] = {}  # block id -> the loops holding it in its scope (`loops_around`)
        self.differences = frozenset(facts.differences)  # the order spans of the sums that subtract a term
        params: dict[int, list[str]] = {}
        scopes = [block.scope for block in facts.blocks]  # `facts.scope_of`, by block id
        by_scope, by_scope_name = self._assigns_by_scope, self._assigns_by_scope_name
        bound = set()
        for assign in facts.assigns:
            scope = scopes[assign.site.block]
            by_scope.setdefault(scope, []).append(assign)
            by_scope_name.setdefault((scope, assign.target), []).append(assign)
            bound.add(assign.target)
            if assign.kind == "param":
                params.setdefault(assign.site.block, []).append(assign.target)
        self._bound_names = frozenset(bound)  # every name some binding of the file binds, in any scope
        for block in facts.blocks:
            if block.kind not in ("function", "class"):
                continue
            parent_scope = facts.blocks[block.parent].scope if block.parent is not None else 0
            self._defs[(block.name, block.line, parent_scope)] = block
            if block.name == LAMBDA:
                self._lambda_lines[(block.line, parent_scope)] = self._lambda_lines.get((block.line, parent_scope), 0) + 1
            if block.kind == "class":
                self.classes[block.id] = block
                continue
            owner = facts.blocks[block.parent] if block.parent is not None else None
            owner = owner if owner is not None and owner.kind == "class" else None
            static = any(d.rsplit(".", 1)[-1] == "staticmethod" for d in block.decorators)
            self.functions[block.id] = Function(
                block, tuple(params.get(block.id, ())), owner, owner is not None and not static, self
            )
        # method block id -> (its `self` name, its class), for `self_class`
        self._selves: dict[int, tuple[str, Block]] = {
            block_id: (fn.self_name, fn.owner) for block_id, fn in self.functions.items() if fn.bound}

    def loops_around(self, site) -> list[int]:
        """`facts.loops_between(None, site)`: the loop blocks holding `site` in its scope, worked out
        once per block (rules ask it of every call). The list is shared: read it, do not change it."""
        found = self._loops_around.get(site.block)
        if found is None:
            found = self._loops_around[site.block] = self.facts.loops_between(None, site)
        return found

    def owner_of(self, block: Block) -> "ProgramModel | None":
        """The model of the file `block` is of: this one, or that of a project file this process
        loaded (`load_module`); None when no model held now has it. A block's id means something
        only within its own file, so a question about a class (its methods, bases, attributes)
        is asked of the model of its file, whichever model it was handed to."""
        blocks = self.facts.blocks
        if block.id < len(blocks) and blocks[block.id] is block:
            return self
        for _, other in list(_modules.values()):
            if other is not None and other is not self:
                blocks = other.facts.blocks
                if block.id < len(blocks) and blocks[block.id] is block:
                    return other
        return None

    def sums_in(self, span: tuple[int, int]) -> list:
        """The sums (their terms' order spans) whose first term starts within an order span."""
        if self._sum_starts is None:
            self._sums = sorted(self.facts.sums, key=lambda terms: terms[0][0])
            self._sum_starts = [terms[0][0] for terms in self._sums]
        start, end = span
        low, high = bisect_left(self._sum_starts, start), bisect_right(self._sum_starts, end)
        return [terms for terms in self._sums[low:high] if terms[-1][1] <= end]

    def comprehensions_in(self, span: tuple[int, int]) -> list:
        """The comprehensions that lie within an order span."""
        start, end = span
        return [c for c in self.facts.comprehensions if start <= c.span[0] and c.span[1] <= end] \
            if self.facts.comprehensions else []

    def repeats_in_comprehension(self, site) -> bool:
        """Whether an event inside a comprehension (or a lambda) may run more than once per run of
        the code around it. The outermost `for`'s iterable is evaluated once, in the enclosing
        scope (`[clip(g) for g in tape.gradient(loss, variables)]` asks once); the element, the
        conditions and the inner `for`s run once per item; a lambda's body, once per call."""
        if not site.in_comprehension:
            return False
        order = site.order
        around = [c for c in self.facts.comprehensions if c.span[0] < order <= c.span[1]]
        if not around:
            return True  # in a lambda
        return not all(c.fors and c.fors[0][1][0] < order <= c.fors[0][1][1] for c in around)

    def expects_error(self, line: int) -> bool:
        """Whether `line` (a finding's) lies inside `with self.assertRaises(...)`,
        `assertRaisesRegex`, or `pytest.raises(...)` (its suite or its header): a test that makes
        the code there fail on purpose."""
        facts = self.facts
        return any(facts.blocks[b].line <= line <= facts.blocks[b].end_line for b in self._error_expecting_withs())

    def _error_expecting_withs(self) -> frozenset:
        """The `with` blocks whose statement calls `assertRaises`/`assertRaisesRegex(p)`/`raises`
        (worked out once per file)."""
        found = self.memo.get("error-expecting withs")
        if found is None:
            facts = self.facts
            headers = {
                (call.site.block, call.site.line) for call in self.spans.calls
                if call.func.text.rpartition(".")[2] in ("assertRaises", "assertRaisesRegex", "assertRaisesRegexp", "raises")
            }
            found = self.memo["error-expecting withs"] = frozenset(
                b.id for b in facts.blocks if b.kind == "with" and (b.parent, b.line) in headers)
        return found

    def compares_in(self, span: tuple[int, int]) -> list:
        """The comparisons whose events lie in an order span."""
        if self._compare_orders is None:
            self._compares = sorted(self.facts.compares, key=lambda c: c.site.order)
            self._compare_orders = [c.site.order for c in self._compares]
        start, end = span
        return self._compares[bisect_right(self._compare_orders, start): bisect_right(self._compare_orders, end)]

    def imported_assign(self, name: str):
        """The module-level binding, in the project file it comes from, of an imported name
        (`from training import train_acc`): an Assign of that file, or None."""
        facts = self.facts
        relative = name in facts.relative_imports
        origin = facts.relative_imports.get(name) or facts.imports.get(name)
        if not origin:
            return None
        module, _, attribute = origin.rpartition(".")
        other = self._load(module, relative) if module else None
        if other is None:
            return None
        found = other.assigns_named_in(0, attribute)
        return found[0] if len(found) == 1 and found[0].kind == "assign" else None

    def module_binding(self, name: str, depth: int = 0):
        """What the module-level name `name` of this file is (for a file that imports it)."""
        if depth > MAX_ALIAS_DEPTH:
            return None
        found = self.assigns_named_in(0, name)
        if found:
            return self._one(found, depth) if all(a.kind in ("assign", "def") for a in found) else None
        return self._imported(name, depth)

    def _imported(self, name: str, depth: int):
        """A name imported from another file of the project: what it is there, or None."""
        facts = self.facts
        relative = name in facts.relative_imports
        origin = facts.relative_imports.get(name) or facts.imports.get(name)
        if not origin or depth > MAX_ALIAS_DEPTH:
            return None
        module, _, attribute = origin.rpartition(".")
        if module:
            other = self._load(module, relative)
            if other is not None:
                return other.module_binding(attribute, depth + 1)
        other = self._load(origin, relative)  # `import models`, `from . import losses`
        return ModuleRef(other) if other is not None else None

    def _load(self, module: str, relative: bool) -> "ProgramModel | None":
        """`load_module` for an import of this file: asked once per module during one file's lint
        (each asking stats the file; the names of a file ask hundreds of times)."""
        loaded = self._loaded
        if loaded is None:
            found = load_module(self.facts.path, module, relative)
            if self._deps is not None:  # what this kept model's answers (its memos) now rest on
                self._deps[(module, relative)] = weakref.ref(found) if found is not None else None
            return found
        key = (module, relative)
        if key not in loaded:
            loaded[key] = load_module(self.facts.path, module, relative)
        return loaded[key]

    def _one(self, assigns, depth: int):
        values = [self._value_of(a, depth) for a in assigns]
        first = values[0]
        return first if first is not None and all(v is first or v == first for v in values) else None


def spans_of(facts: FileFacts) -> Spans:
    """The uses and calls of `facts` by order span: those of its model (`model_of`), built once per file."""
    return model_of(facts).spans


def model_of(facts: FileFacts) -> ProgramModel:
    """The model of `facts`, built once per file however many rules ask."""
    global _generation
    model = facts.model
    if model is None:
        model = facts.model = ProgramModel(facts)
        model._loaded = {}  # closed with the file's lint (`close`): the imported files are asked once
        _generation += 1  # a new lint: kept models' imports are checked again (`_imports_unchanged`)
    return model


_generation = 0  # counts the files linted in this process (`model_of`)
_checked: dict[str, int] = {}  # a kept model's path -> the generation its imports were last found unchanged
_checking: set[str] = set()  # the paths being checked now (an import cycle: taken as unchanged)


def _imports_unchanged(path: str, model: "ProgramModel | None") -> bool:
    """Whether every module a kept model has asked for is still the model it was given then. Its
    own file unchanged (the stamp) is not enough: its memos hold answers worked out from the
    files it imports (a summary of `forward` through `layers.quant`), which may have changed since.
    Checked once per lint per model; `load_module` of each import checks that one's in turn."""
    if model is None or not model._deps or _checked.get(path) == _generation or path in _checking:
        return True
    _checking.add(path)
    try:
        for (module, relative), ref in list(model._deps.items()):
            found = load_module(path, module, relative)
            if (ref() if ref is not None else None) is not found:
                return False
    finally:
        _checking.discard(path)
    _checked[path] = _generation
    return True


def load_module(importer: str, module: str, relative: bool) -> "ProgramModel | None":
    """The model of a project file another file imports; None when it is not found or not readable."""
    path = module_file(importer, module, relative)
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _modules.get(path)
    if cached is not None and cached[0] == stamp and _imports_unchanged(path, cached[1]):
        return cached[1]
    other = None
    if stat.st_size <= MAX_MODULE_BYTES:
        _modules[path] = (stamp, None)  # while it loads: an import cycle sees nothing
        try:
            from tapecheck.lint.source import facts_of

            with open(path, "rb") as handle:
                facts = facts_of(handle.read(), path)
            other = ProgramModel(facts)
            other._deps = {}
        except Exception:  # noqa: BLE001 - a file that cannot be read or parsed informs nothing
            other = None
    if len(_modules) >= MAX_MODULES:
        _modules.pop(next(iter(_modules)))
    _modules[path] = (stamp, other)
    return other
