"""One walk over a libcst tree that records the facts every rule reads.

The walk is hand-steered for compound statements (so each suite becomes a
Block) and generic for expressions. Names are resolved from the file's own
imports only: libcst's scope and qualified-name providers cost about ten
times the parse on real trees, and the rules need a handful of TensorFlow and
Keras names, which imports alone resolve.
"""

from __future__ import annotations

from contextlib import contextmanager

import libcst as cst

from tapecheck.lint.facts import LAMBDA, Assign, Block, Call, Compare, Comprehension, Exit, Expr, FileFacts, Site, Tape, Use
from tapecheck.lint.fastcst import FastVisitor, Positions

TAPE_CLASSES = frozenset(
    {
        "tensorflow.GradientTape",
        "tensorflow.autodiff.GradientTape",
        "tensorflow.compat.v2.GradientTape",
        "tensorflow.compat.v1.GradientTape",
        "tensorflow.python.eager.backprop.GradientTape",
        "backprop.GradientTape",  # TensorFlow's own sources, after `from ...eager import backprop`
    }
)
# Calls whose arguments are consumed by a computation (for "used in a computation").
COMPUTE_PREFIXES = ("tensorflow.", "numpy.", "math.", "keras.ops.")


def dotted_name(node: cst.BaseExpression) -> str:
    """`a.b.c` for a chain of names, "" for anything else."""
    # `node.__class__ is`, here and in `literal`, `summarize` and `_bind`, not isinstance: libcst's
    # node classes are ABCs, whose failed isinstance runs a Python frame (ABCMeta.__instancecheck__);
    # the concrete types asked about have no subclasses (tests/test_extract.py checks).
    parts = []
    while node.__class__ is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
    if node.__class__ is not cst.Name:
        return ""
    parts.append(node.value)
    return ".".join(reversed(parts))


def literal(node: cst.BaseExpression):
    """The value of a literal True/False/None/number/string, else a sentinel. An integer written
    other than in decimal digits (`0x10`, `1_000`) is kept as its text; a float (`0.9`, `1e-3`,
    `1_0.5`) as its value."""
    if node.__class__ is cst.Name and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if node.__class__ is cst.Integer:
        return int(node.value.replace("_", ""), 0) if node.value.isdigit() else node.value
    if node.__class__ is cst.Float:
        return float(node.value.replace("_", ""))
    if node.__class__ is cst.SimpleString:
        prefix, raw = node.prefix.lower(), node.raw_value
        if prefix in ("", "u", "r") and "\r" not in raw and ("\\" not in raw or prefix == "r"):
            return raw  # no escapes: the text is the value (evaluated_value runs ast.literal_eval)
        return node.evaluated_value
    return NOT_LITERAL


NOT_LITERAL = object()


def _fstring(node) -> Expr:
    """An f-string: `value` is the text after its last `{...}` (all of it when it has none, then
    `method` is "literal"; that `{...}` itself when the f-string ends with it and it formats a
    number, `{epoch:04d}`); `receiver`, the dotted name in that last `{...}` ("" if not a name)."""
    parts = node.parts
    end = len(parts)
    while end and isinstance(parts[end - 1], cst.FormattedStringText):
        end -= 1
    tail = "".join(part.value for part in parts[end:])
    if not end:
        return Expr("fstring", "", value=tail, method="literal")
    last = parts[end - 1]
    name = dotted_name(last.expression)
    spec = last.format_spec
    if not tail and spec and all(isinstance(part, cst.FormattedStringText) for part in spec):
        spec_text = "".join(part.value for part in spec)
        if spec_text[-1:] in NUMBER_FORMATS:  # `{epoch:04d}`: the text ends with what a number formats to
            tail = f"{{{name or '...'}:{spec_text}}}"
    return Expr("fstring", "", value=tail, receiver=name)


NUMBER_FORMATS = frozenset("bdoxXeEfFgG%")


class FactsBuilder(FastVisitor):
    # `_walk(node)` is `node.visit(self)` without libcst's copying; `positions` are
    # libcst's PositionProvider ranges, computed cheaply (see fastcst.py).
    positions: Positions

    def __init__(self, path: str):
        super().__init__()
        self.facts = FileFacts(path=path)
        self._order = 0
        self._block_stack: list[int] = []
        self._context: list[str] = ["other"]
        self._comprehension = 0
        self._comprehensions: list[tuple[int, list]] = []  # open comprehensions: start order, fors
        self._line_offset = 0  # lines of the file before the tree being walked (see walk_parts)
        self.kept = None  # (module, positions) of a file walked whole, when the caller keeps them
        self._keep = False
        # while walking a run whose facts are recorded (`walk_parts(runs=)`): its first block id (a
        # scope below it is an earlier run's), whether it read nothing of earlier runs' facts; and
        # how many lambda summaries the walk made (their value is a line) and how many order spans
        # of events at the file's start, (0, 0) as a default span is (see runfacts.py)
        self._run_block: int | None = None
        self._alone = True
        self._lambdas = self._zero_spans = 0

    # -- helpers ------------------------------------------------------------
    def _pos(self, node: cst.CSTNode):
        return self.positions[node]

    def _start(self, node: cst.CSTNode):
        return self.positions.start(node)  # `_pos(node).start` without working out the end

    def _site(self, node: cst.CSTNode) -> Site:
        self._order += 1
        start = self._start(node)
        return Site(
            start.line + self._line_offset, start.column + 1, self._order, self._block_stack[-1], self._comprehension > 0
        )

    @contextmanager
    def _block(self, kind: str, node: cst.CSTNode, header: cst.CSTNode | None = None, **extra):
        """A block spanning `node`; its line is that of `header` (the `for`, `with`...) when given."""
        facts = self.facts
        parent = self._block_stack[-1] if self._block_stack else None
        position = self._pos(node)
        line = self._start(header).line if header is not None else position.start.line
        line += self._line_offset
        block_id = len(facts.blocks)
        if kind in ("module", "function", "class"):
            scope = block_id
        else:
            scope = facts.blocks[parent].scope
        facts.blocks.append(
            Block(block_id, kind, parent, scope, line, position.end.line + self._line_offset, **extra)
        )
        self._block_stack.append(block_id)
        try:
            yield facts.blocks[block_id]
        finally:
            self._block_stack.pop()

    def _visit(self, node: cst.CSTNode | None, context: str | None = None):
        if node is None:
            return
        if context is None:
            self._walk(node)
            return
        # push/pop by hand: a @contextmanager here cost ~5% of a run (a million calls on the corpus)
        self._context.append(context)
        try:
            self._walk(node)
        finally:
            self._context.pop()

    def _visit_body(self, kind: str, suite: cst.CSTNode, owner: cst.CSTNode | None = None, **extra):
        with self._block(kind, owner or suite, **extra) as block:
            self._walk(suite)
        return block

    def summarize(self, node: cst.BaseExpression, depth: int = 0) -> Expr:
        facts = self.facts
        text = dotted_name(node)
        if text:
            kind = "name" if node.__class__ is cst.Name else "attribute"
            value = literal(node)
            return Expr(kind, text, value=None if value is NOT_LITERAL else value)
        if node.__class__ is cst.Call:
            func_text = dotted_name(node.func)
            keywords = {}
            for arg in node.args:
                if arg.keyword is not None and depth < 2:
                    keywords[arg.keyword.value] = self.summarize(arg.value, depth + 1)
            method = node.func.attr.value if node.func.__class__ is cst.Attribute else ""
            receiver = func_text.rsplit(".", 1)[0] if method and func_text else ""
            return Expr(
                "call", "", callee=facts.resolve(func_text) if func_text else "",
                method=method, receiver=receiver, keywords=keywords, func_text=func_text,
            )
        if (node.__class__ is cst.List or node.__class__ is cst.Tuple) and depth < 2:
            elements = tuple(
                self.summarize(el.value, depth + 1) for el in node.elements if el.__class__ is cst.Element
            )
            return Expr("list" if node.__class__ is cst.List else "tuple", "", elements=elements)
        if node.__class__ is cst.Subscript:
            elements = node.slice
            tensor_slice = any(
                el.slice.__class__ is cst.Index and el.slice.value.__class__ is cst.Ellipsis
                for el in elements
            ) or (len(elements) > 1 and any(el.slice.__class__ is cst.Slice for el in elements))
            return Expr("subscript", dotted_name(node.value), tensor_slice=tensor_slice)
        if node.__class__ is cst.BinaryOperation:  # `Divide`, `Add`, `Minus`...
            operands = (self.summarize(node.left, depth + 1), self.summarize(node.right, depth + 1)) if depth < 2 else ()
            return Expr("binop", "", method=node.operator.__class__.__name__, operands=operands)
        if node.__class__ is cst.UnaryOperation:
            return Expr("binop", "", method=node.operator.__class__.__name__)
        if node.__class__ is cst.Attribute and node.value.__class__ is cst.Call and dotted_name(node.value.func) == "super":
            return Expr("super", "", method=node.attr.value)  # `super().call`: the method of a base class
        if node.__class__ is cst.Attribute:  # `model.get_layer("conv").output`, `model.layers[-1].output`
            return Expr("other", "", method=node.attr.value)  # the attribute read
        if node.__class__ is cst.Lambda:
            self._lambdas += 1
            return Expr("lambda", "", value=self._start(node).line + self._line_offset)  # its block's line
        if node.__class__ is cst.FormattedString:
            return _fstring(node)
        value = literal(node)
        if value is not NOT_LITERAL:
            return Expr("constant", "", value=value)
        return Expr("other", "")

    def _bind(self, target: cst.BaseExpression, value: Expr | None, kind: str, site_node: cst.CSTNode):
        """Record the names a target binds (tuple unpacking included)."""
        if (target.__class__ is cst.Tuple or target.__class__ is cst.List):
            elements = [el.value for el in target.elements]
            values = value.elements if value is not None and len(value.elements) == len(elements) else None
            for index, element in enumerate(elements):
                if element.__class__ is cst.StarredElement:
                    element = element.value
                self._bind(element, values[index] if values else None, kind, site_node)
            return None
        name = dotted_name(target)
        if name:
            site = self._site(site_node)
            self.facts.assigns.append(Assign(name, site, value, kind))
            return site
        # a subscript or an attribute of a call: a store into something, read it as a use
        if target.__class__ is cst.Attribute:
            self._visit(target.value, "other")
            self._item_attribute(target, True)
            return None
        self._visit(target, "other")
        if target.__class__ is cst.Subscript and value is not None:
            container = dotted_name(target.value)
            if container:
                self.facts.stores.append(Assign(container, self._site(site_node), value, "store"))
        return None

    def _tape_from_call(self, call: cst.Call) -> tuple[bool | None, bool | None] | None:
        """(persistent, watch_accessed_variables) when `call` makes a GradientTape."""
        name = dotted_name(call.func)
        if not name or self.facts.resolve(name) not in TAPE_CLASSES:
            return None
        flags = {"persistent": False, "watch_accessed_variables": True}
        for index, arg in enumerate(call.args):
            key = arg.keyword.value if arg.keyword else ("persistent", "watch_accessed_variables")[min(index, 1)]
            if arg.star or key not in flags:
                continue
            value = literal(arg.value)
            flags[key] = value if isinstance(value, bool) else None
        return flags["persistent"], flags["watch_accessed_variables"]

    # -- module, functions, classes ------------------------------------------
    def walk_parts(self, parts, runs=None) -> FileFacts:
        """Walk a file given as trees of consecutive runs of its statements (`parts.Part`):
        one module block, statements in file order. A run that goes on with a class body
        re-enters that class's block. Each tree is dropped once walked.

        `runs`: the language server's store of the buffer (`parts.Runs`), whose `facts` hold what
        each run of its last lint added (`runfacts.RunFacts`, by the run's text, `Part.key`): a
        run whose text and entry state are those of a kept run is not walked, its facts are
        that run's, renumbered (`runfacts`). On return `runs.facts` holds this lint's runs."""
        from tapecheck.lint import runfacts

        facts = self.facts
        # libcst's range of a module always starts at line 1; its end is set as runs are walked
        module_block = Block(len(facts.blocks), "module", None, len(facts.blocks), 1, 1)
        facts.blocks.append(module_block)
        self._block_stack.append(module_block.id)
        kept: dict = {}
        if runs is not None:
            kept, runs.facts, runs.walked = runs.facts, {}, 0
        for part in parts:
            self._line_offset, module, continues_class = part[0], part[1], part[2]
            key = part[4] if runs is not None and len(part) > 4 else None  # `Part.key`
            block = None
            if continues_class:
                block = next(b for b in reversed(facts.blocks) if b.kind == "class" and b.parent == module_block.id)
            if key is not None:
                found = kept.get(key)
                klass = block.id if block is not None else None
                if found is not None and found.fits(facts, self._order, klass):
                    found = runs.facts[key] = runfacts.splice(found, facts, self._order, self._line_offset, klass)
                    self._order += found.orders
                    if block is not None:
                        block.end_line = found.class_end + self._line_offset
                    module_block.end_line = found.module_end + self._line_offset
                    module = None
                    continue
                runs.walked += 1
                entered = runfacts.entry(facts)
                order, self._run_block, self._alone = self._order, len(facts.blocks), True
                lambdas, zero_spans = self._lambdas, self._zero_spans
            known = part[3] if len(part) > 3 else None  # `Part.positions`, worked out by the caller
            self.positions = known if known is not None else Positions(module)
            statements, klass, statement, class_end = module.body, None, None, None
            if continues_class:
                klass = statements[0]
                self._block_stack.append(block.id)
                self._walk(klass.body)
                self._block_stack.pop()
                class_end = self._pos(klass).end.line
                block.end_line = class_end + self._line_offset
                statements = statements[1:]
            for statement in statements:
                self._walk(statement)
            module_end = self._pos(module).end.line
            module_block.end_line = module_end + self._line_offset
            if key is not None:
                self._run_block = None
                if self._alone:
                    runs.facts[key] = runfacts.record(
                        facts, entered, self._line_offset, order, self._order, block.id if block is not None else None,
                        module_end, class_end, self._lambdas > lambdas, self._zero_spans > zero_spans)
            if self._keep:
                self.kept = (module, self.positions)
            # Let this tree go before the next is parsed: two alive at once would double the peak.
            module = klass = statements = statement = self.positions = None
        self._line_offset = 0
        self._block_stack.pop()
        return facts

    def visit_Module(self, node: cst.Module):  # libcst's own traversal enters here (tests compare with it)
        self.walk_parts(((0, node, False),))
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef):
        for decorator in node.decorators:
            self._visit(decorator)
        self._visit(node.params)  # default values are read here; names are bound below
        self._bind(node.name, None, "def", node)
        decorators = tuple(
            self.facts.resolve(dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator))
            for d in node.decorators
        )
        positional = len(node.params.posonly_params) + len(node.params.params)
        star_kwarg = node.params.star_kwarg
        kwargs = star_kwarg.name.value if isinstance(star_kwarg, cst.Param) else ""
        with self._block("function", node, name=node.name.value, decorators=decorators, positional=positional,
                         kwargs=kwargs):
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self._bind(param.name, None, "param", param)
                if param.annotation is not None:
                    self.facts.assigns[-1].annotation = dotted_name(param.annotation.annotation)
                if param.default is not None:
                    self.facts.assigns[-1].default = self.summarize(param.default)
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self._bind(star.name, None, "param", star)
            self._walk(node.body)
        return False

    def visit_Param(self, node: cst.Param):
        self._visit(node.default)
        self._visit(node.annotation)
        return False

    def visit_Lambda(self, node: cst.Lambda):
        self._visit(node.params)  # default values are read here
        self._comprehension += 1  # a lambda body runs later, maybe many times
        with self._block("function", node, name=LAMBDA):
            params = node.params
            for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                self._bind(param.name, None, "param", param)
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self._bind(star.name, None, "param", star)
            start = self._order
            self._visit(node.body)
            self.facts.exits.append(Exit(self._site(node.body), "return", (start, self._order)))
        self._comprehension -= 1
        return False

    def visit_ClassDef(self, node: cst.ClassDef):
        for decorator in node.decorators:
            self._visit(decorator)
        for arg in node.bases:
            self._visit(arg.value)
        self._bind(node.name, None, "def", node)
        bases = tuple(self.facts.resolve(dotted_name(arg.value)) for arg in node.bases if dotted_name(arg.value))
        with self._block("class", node, name=node.name.value, bases=bases):
            self._walk(node.body)
        return False

    # -- compound statements ---------------------------------------------------
    def visit_If(self, node: cst.If):
        start = self._order
        self._visit(node.test, "other")
        test_span = (start, self._order)  # the events of the test, for rules that ask what it reads
        if not self._order:
            self._zero_spans += 1
        self._visit_body("if", node.body, test_span=test_span)
        if node.orelse is not None:
            orelse = node.orelse
            body = orelse if isinstance(orelse, cst.If) else orelse.body
            self._visit_body("else", body, owner=orelse, test_span=test_span)
        return False

    def visit_For(self, node: cst.For):
        self._visit(node.iter, "other")
        with self._block("for", node.body, header=node):
            self._bind(node.target, self.summarize(node.iter), "for", node.target)
            self._walk(node.body)
        if node.orelse is not None:
            self._visit_body("else", node.orelse.body, owner=node.orelse)
        return False

    def visit_While(self, node: cst.While):
        with self._block("while", node.body, header=node):
            self._visit(node.test, "other")
            self._walk(node.body)
        if node.orelse is not None:
            self._visit_body("else", node.orelse.body, owner=node.orelse)
        return False

    def visit_Try(self, node: cst.Try | cst.TryStar):
        self._visit_body("try", node.body)
        for handler in node.handlers:
            self._visit(handler.type, "other")
            with self._block("except", handler.body):
                if handler.name is not None:
                    self._bind(handler.name.name, None, "except", handler.name)
                self._walk(handler.body)
        if node.orelse is not None:
            self._visit_body("else", node.orelse.body, owner=node.orelse)
        if node.finalbody is not None:
            self._visit_body("finally", node.finalbody.body, owner=node.finalbody)
        return False

    visit_TryStar = visit_Try

    def _tape_for(self, name: str, site: Site) -> Tape | None:
        """`facts.tape_for`: at module level, or in a class body an earlier run opened, it reads
        earlier runs' facts, and the run being recorded cannot be reused (see runfacts.py)."""
        facts = self.facts
        if self._run_block is not None and facts.blocks[site.block].scope < self._run_block:
            self._alone = False
        return facts.tape_for(name, site)

    def visit_With(self, node: cst.With):
        facts = self.facts
        recording: list[int] = []
        paused: list[int] = []
        for item in node.items:
            expr = item.item
            self._visit(expr, "other")
            flags = self._tape_from_call(expr) if isinstance(expr, cst.Call) else None
            tape = None
            if flags is not None:
                target = dotted_name(item.asname.name) if item.asname else ""
                site = self._site(item)
                tape = Tape(len(facts.tapes), target, site, flags[0], flags[1])
                facts.tapes.append(tape)
                if target:
                    facts.assigns.append(Assign(target, site, None, "with"))
            else:
                name = dotted_name(expr)
                if name:
                    tape = self._tape_for(name, self._site(expr))
                elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
                    if expr.func.attr.value == "stop_recording":
                        paused_tape = self._tape_for(dotted_name(expr.func.value), self._site(expr))
                        if paused_tape is not None:
                            paused.append(paused_tape.id)
                if item.asname is not None:
                    self._bind(item.asname.name, None, "with", item.asname)
            if tape is not None:
                recording.append(tape.id)
        with self._block("with", node.body, header=node, tapes=tuple(recording), paused=tuple(paused)) as block:
            for tape_id in recording:
                facts.tapes[tape_id].with_blocks.append(block.id)
            self._walk(node.body)
        return False

    def visit_Match(self, node):
        self._visit(node.subject, "other")
        for case in node.cases:
            self._visit_body("match", case.body, owner=case)
        return False

    # -- simple statements -----------------------------------------------------
    def _set_spans(self, first_assign: int, start: int, end: int):
        """Give the assigns made from index `first_assign` on the order span of their value."""
        if not end:
            self._zero_spans += 1
        for assign in self.facts.assigns[first_assign:]:
            assign.span = (start, end)

    def visit_Assign(self, node: cst.Assign):
        start, first = self._order, len(self.facts.assigns)
        self._visit(node.value, "other")
        end = self._order
        value = self.summarize(node.value)
        for target in node.targets:
            site = self._bind(target.target, value, "assign", node)
            self._maybe_tape(target.target, node.value, site)
        self._set_spans(first, start, end)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign):
        self._visit(node.annotation)
        if node.value is None:
            return False
        start, first = self._order, len(self.facts.assigns)
        self._visit(node.value, "other")
        end = self._order
        site = self._bind(node.target, self.summarize(node.value), "assign", node)
        self._maybe_tape(node.target, node.value, site)
        self._set_spans(first, start, end)
        return False

    def visit_AugAssign(self, node: cst.AugAssign):
        start, first = self._order, len(self.facts.assigns)
        self._visit(node.target, "compute")
        middle = self._order
        self._visit(node.value, "compute")
        end = self._order
        if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            self.facts.sums.append(((start, middle), (middle, end)))
        self._bind(node.target, Expr("binop", ""), "augassign", node)
        self._set_spans(first, start, end)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr):
        start, first = self._order, len(self.facts.assigns)
        self._visit(node.value)
        end = self._order
        self._bind(node.target, self.summarize(node.value), "assign", node)
        self._set_spans(first, start, end)
        return False

    def _maybe_tape(self, target, value, site: Site | None):
        if site is None or not isinstance(value, cst.Call):
            return
        flags = self._tape_from_call(value)
        if flags is not None:
            facts = self.facts
            facts.tapes.append(Tape(len(facts.tapes), dotted_name(target), site, flags[0], flags[1]))

    def visit_Del(self, node: cst.Del):
        targets = node.target.elements if isinstance(node.target, (cst.Tuple, cst.List)) else [node.target]
        for target in targets:
            target = target.value if isinstance(target, cst.Element) else target
            name = dotted_name(target)
            if name:
                self.facts.deletes.append(Assign(name, self._site(target), None, "del"))
            else:
                self._visit(target)
        return False

    def visit_Return(self, node: cst.Return):
        start = self._order
        items = self._string_items(node.value) if node.value.__class__ is cst.Dict else ()
        self._visit(node.value, "other")
        self.facts.exits.append(Exit(self._site(node), "return", (start, self._order), items))
        return False

    def _string_items(self, node: cst.Dict) -> tuple:
        """(key, value summary) of each item of a dict literal whose keys are all plain strings; ()
        when one is not (a `**` spread, a computed key)."""
        items = []
        for element in node.elements:
            if element.__class__ is not cst.DictElement or element.key.__class__ is not cst.SimpleString:
                return ()
            key = literal(element.key)
            if not isinstance(key, str):
                return ()
            items.append((key, self.summarize(element.value, 1)))
        return tuple(items)

    def visit_Raise(self, node: cst.Raise):
        self._visit(node.exc, "other")
        self.facts.exits.append(Exit(self._site(node), "raise"))
        return False

    def visit_Break(self, node: cst.Break):
        self.facts.exits.append(Exit(self._site(node), "break"))

    def visit_Continue(self, node: cst.Continue):
        self.facts.exits.append(Exit(self._site(node), "continue"))

    def visit_Import(self, node: cst.Import):
        for alias in node.names:
            full = dotted_name(alias.name)
            if alias.asname is not None:
                local = dotted_name(alias.asname.name)
                self.facts.imports[local] = full
            else:
                head = full.split(".")[0]
                self.facts.imports[head] = head
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom):
        if node.relative and not isinstance(node.names, cst.ImportStar):
            # kept apart from `imports`: only cross-file rules look at them
            module = dotted_name(node.module) if node.module is not None else ""
            for alias in node.names:
                name = dotted_name(alias.name)
                local = dotted_name(alias.asname.name) if alias.asname else name
                self.facts.relative_imports[local] = f"{module}.{name}" if module else name
                if name == local == "tf":
                    self.facts.imports["tf"] = "tensorflow"  # `from .common import tf`: see below
            return False
        if isinstance(node.names, cst.ImportStar):
            # `from project.common import *` is how many projects hand out `tf`: a `tf` that nothing
            # else binds is TensorFlow then (the universal convention), so its tapes are seen
            self.facts.imports.setdefault("tf", "tensorflow")
            return False
        if node.relative or node.module is None:
            return False
        module = dotted_name(node.module)
        for alias in node.names:
            name = dotted_name(alias.name)
            local = dotted_name(alias.asname.name) if alias.asname else name
            # `from project.backend import tf`: a project handing out its TensorFlow under the
            # universal name; `tf` is TensorFlow then, so its tapes and ops are seen
            self.facts.imports[local] = "tensorflow" if name == local == "tf" else f"{module}.{name}"
        return False

    def visit_Global(self, node):
        return False

    def visit_Nonlocal(self, node):
        return False

    # -- expressions -------------------------------------------------------------
    def visit_Call(self, node: cst.Call):
        func = self.summarize(node.func)
        if func.kind == "other" and isinstance(node.func, cst.Attribute):
            func.method = node.func.attr.value  # `model(x).numpy()`: a method of a computed value
        args = []
        keywords = {}
        site = self._site(node)
        callee = self.facts.resolve(func.text) if func.text else ""
        arg_context = "compute" if callee.startswith(COMPUTE_PREFIXES) else "argument"
        self._visit(node.func, "receiver" if func.kind == "attribute" else "callee")
        arg_spans = []
        for arg in node.args:
            start = self._order
            self._visit(arg.value, arg_context)
            if arg.keyword is not None:
                keywords[arg.keyword.value] = self.summarize(arg.value)
                arg_spans.append((arg.keyword.value, start, self._order))
            elif not arg.star:
                arg_spans.append((len(args), start, self._order))
                args.append(self.summarize(arg.value))
            else:
                arg_spans.append((-1, start, self._order))
        end = self._pos(node).end.line + self._line_offset
        spread = any(arg.star == "*" for arg in node.args)
        self.facts.calls.append(
            Call(site, func, tuple(args), keywords, end, end_order=self._order, arg_spans=tuple(arg_spans),
                 spread=spread)
        )
        return False

    def visit_Attribute(self, node: cst.Attribute):
        name = dotted_name(node)
        if name:
            self.facts.uses.append(Use(name, self._site(node), self._context[-1]))
        else:
            self._visit(node.value)
            self._item_attribute(node, False)
        return False

    def _item_attribute(self, node: cst.Attribute, stored: bool) -> None:
        """Record `x[i].attr` (read, or assigned to when `stored`) for the rules, by its container."""
        if node.value.__class__ is cst.Subscript:
            container = dotted_name(node.value.value)
            if container:  # the order of the item's last event: no order of its own, the other facts stay as they were
                start = self._start(node)
                site = Site(start.line + self._line_offset, start.column + 1, self._order, self._block_stack[-1],
                            self._comprehension > 0)
                self.facts.item_attributes.append((container, node.attr.value, site, stored))

    def visit_Name(self, node: cst.Name):
        self.facts.uses.append(Use(node.value, self._site(node), self._context[-1]))
        return False

    def visit_BinaryOperation(self, node):
        self._context.append("compute")
        if isinstance(node.operator, (cst.Add, cst.Subtract)):
            # a sum: each term's events, for the model to tell a term that no gradient reaches
            terms = []
            for term in _terms(node):
                start = self._order
                self._visit(term)
                terms.append((start, self._order))
            self.facts.sums.append(tuple(terms))
            if _subtracts(node):
                self.facts.differences.append((terms[0][0], terms[-1][1]))
            return False  # leave_BinaryOperation still runs (as in libcst): it pops the context
        return None

    def leave_BinaryOperation(self, node):
        self._context.pop()

    def visit_UnaryOperation(self, node):
        self._context.append("compute")

    def leave_UnaryOperation(self, node):
        self._context.pop()

    _COMPARE_TEXT = {
        "LessThan": "<", "GreaterThan": ">", "LessThanEqual": "<=", "GreaterThanEqual": ">=", "Equal": "==",
        "NotEqual": "!=", "In": "in", "NotIn": "not in", "Is": "is", "IsNot": "is not",
    }

    def visit_Comparison(self, node: cst.Comparison):
        operator = self._COMPARE_TEXT.get(type(node.comparisons[0].operator).__name__, "?") if node.comparisons else "?"
        first = node.comparisons[0].comparator if node.comparisons else None
        compare = Compare(self._site(node), operator, left=self.summarize(node.left),
                          right=self.summarize(first) if first is not None else None)
        self._visit(node.left)
        for target in node.comparisons:
            self._visit(target.comparator)
        compare.end_order = self._order
        self.facts.compares.append(compare)
        return False

    def visit_Subscript(self, node: cst.Subscript):
        # slicing a tensor is an op on it; the index itself is not computed with
        self._visit(node.value, "compute")
        for element in node.slice:
            self._visit(element, "other")
        return False

    def _comprehension_enter(self, node):
        self._comprehension += 1
        self._comprehensions.append((self._order, []))

    def _comprehension_leave(self, node):
        self._comprehension -= 1
        start, fors = self._comprehensions.pop()
        self.facts.comprehensions.append(Comprehension((start, self._order), tuple(fors)))

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension_enter
    leave_ListComp = leave_SetComp = leave_DictComp = leave_GeneratorExp = _comprehension_leave

    def visit_CompFor(self, node: cst.CompFor):
        start = self._order
        self._visit(node.iter)
        if self._comprehensions:
            targets = [node.target] if not isinstance(node.target, (cst.Tuple, cst.List)) else [
                el.value for el in node.target.elements]
            names = tuple(name for name in map(dotted_name, targets) if name and "." not in name)
            self._comprehensions[-1][1].append((names, (start, self._order)))
        for condition in node.ifs:
            self._visit(condition)
        self._visit(node.inner_for_in)
        return False


def _subtracts(node) -> bool:
    """Whether a chain of `+` and `-` subtracts a term (`target - q`, `r + g * v2 - v`)."""
    while isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        if isinstance(node.operator, cst.Subtract) or _subtracts(node.right):
            return True
        node = node.left
    return False


def _terms(node):
    """The terms of a chain of `+` and `-` (`a + b - c`: a, b, c), in source order."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return [*_terms(node.left), *_terms(node.right)]
    return [node]


def extract(parts, path: str, keep: list | None = None, runs=None) -> FileFacts:
    """The facts of one file: from its module, or from the trees of consecutive runs of its
    statements, in order (`tapecheck.lint.parts`). `keep`: a list that gets the module and its
    `Positions` appended, when the file is one module (the fixers reuse them). `runs`: the
    language server's store of the buffer's runs (`parts.Runs`): the facts of the runs of its
    last lint are reused where they can be (`FactsBuilder.walk_parts`)."""
    if isinstance(parts, cst.Module):
        parts = ((0, parts, False),)
    builder = FactsBuilder(path)
    builder._keep = keep is not None
    facts = builder.walk_parts(parts, runs)
    if keep is not None and builder.kept is not None:
        keep.append(builder.kept)
    return facts
