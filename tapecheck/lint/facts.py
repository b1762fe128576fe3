"""What the rules know about a file: plain data pulled out of its syntax tree.

`tapecheck.lint.extract` walks the libcst tree once and records blocks, tapes,
assignments, calls and name uses here; every rule is a function of these facts.
Nothing here imports libcst, so rules stay small and cheap to test.

Positions are 1-based lines and columns. `order` is the position of an event in
source order, used to ask "before" and "after" without comparing line pairs.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

LOOP_KINDS = frozenset({"for", "while"})
GRADIENT_METHODS = frozenset({"gradient", "jacobian", "batch_jacobian"})
LAMBDA = "<lambda>"  # the name of a lambda's function block
SCOPE_KINDS = frozenset({"module", "function", "class"})


@dataclass(slots=True)
class Block:
    """A suite of statements: a module, a function body, a loop body, a branch..."""

    id: int
    kind: str  # module, function, class, for, while, with, if, else, try, except, finally, match
    parent: int | None
    scope: int  # id of the module/function/class block that owns it
    line: int  # the first line of the statement that opens it (`for`, `with`, `def`...)
    end_line: int
    name: str = ""  # function or class name
    decorators: tuple[str, ...] = ()  # resolved dotted names
    bases: tuple[str, ...] = ()  # class bases, resolved
    tapes: tuple[int, ...] = ()  # `with` blocks: the tapes recording inside
    paused: tuple[int, ...] = ()  # `with tape.stop_recording():` blocks
    test_span: tuple[int, int] = (0, 0)  # if/else: orders (after start, up to end) of the `if` test
    positional: int = 0  # functions: how many parameters may be passed by position (not `*args`)
    kwargs: str = ""  # functions: the name of the `**` parameter, "" when there is none


@dataclass(slots=True, frozen=True)
class Site:
    line: int
    col: int
    order: int
    block: int  # innermost block holding the event
    in_comprehension: bool = False


@dataclass(slots=True)
class Expr:
    """A summary of an expression, enough for the rules to judge it."""

    kind: str  # name, attribute, call, subscript, binop, unaryop, list, tuple, constant, fstring, lambda, super, other
    text: str  # dotted text for names and attributes, "" otherwise
    callee: str = ""  # calls: resolved dotted name of the called thing
    method: str = ""  # calls of an attribute: the attribute name; binop: the operator's libcst class (`Divide`)
    receiver: str = ""  # calls of an attribute: dotted receiver, when it is a dotted name
    elements: tuple["Expr", ...] = ()  # list/tuple elements
    tensor_slice: bool = False  # subscript with `:` in a tuple index, or `...`
    keywords: dict[str, "Expr"] = field(default_factory=dict)
    value: object = None  # constants: True/False/None/number/str
    func_text: str = ""  # calls: the called dotted name as written (`Net`, `losses.focal`)
    operands: tuple["Expr", ...] = ()  # binop (two levels deep at most): its left and right operands


@dataclass(slots=True)
class Tape:
    id: int
    name: str  # the binding ("tape", "self.tape"); "" when anonymous
    site: Site  # where it is created
    persistent: bool | None  # None: not a literal
    watch_accessed_variables: bool | None
    with_blocks: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Assign:
    target: str  # dotted name bound
    site: Site
    value: Expr | None  # None for loop targets, `with ... as`, imports, deletes
    kind: str = "assign"  # assign, augassign, for, with, import, param, def
    span: tuple[int, int] = (0, 0)  # orders (after start, up to end) of the value's events
    annotation: str = ""  # parameters: the annotation's dotted name (`int`, `tf.Tensor`), when it is one
    default: Expr | None = None  # parameters: the default value's summary, when there is one


@dataclass(slots=True)
class Call:
    site: Site
    func: Expr  # the called expression
    args: tuple[Expr, ...]
    keywords: dict[str, Expr]
    end_line: int = 0
    end_order: int = 0  # the events of the arguments have orders in (site.order, end_order]
    # (position or keyword, start, end) per argument: its events have orders in (start, end];
    # position -1 is a `*args`/`**kwargs` argument. Events before the first start are the callee's.
    arg_spans: tuple[tuple[int | str, int, int], ...] = ()
    spread: bool = False  # a `*args` argument is passed: what positions the others take is unknown
    # worked out once from `func` (the rules ask for them hundreds of thousands of times a run):
    method: str = field(init=False, default="", compare=False)  # `numpy` for `x.numpy()`; "" unless an attribute is called
    receiver: str = field(init=False, default="", compare=False)  # `x` for `x.numpy()`, when the callee is dotted

    def __post_init__(self) -> None:
        if self.func.kind == "attribute":
            receiver, dot, method = self.func.text.rpartition(".")
            self.method, self.receiver = method, receiver if dot else ""

    def arg(self, index: int, keyword: str) -> Expr | None:
        if keyword in self.keywords:
            return self.keywords[keyword]
        return self.args[index] if index < len(self.args) else None

    def passed(self, key: int | str) -> Expr | None:
        """The argument an `arg_spans` key names (a position or a keyword); None for `*args`."""
        if isinstance(key, str):
            return self.keywords.get(key)
        return self.args[key] if 0 <= key < len(self.args) else None

    def arg_span(self, index: int, keyword: str) -> tuple[int, int] | None:
        """The order span of the argument passed at `index` or as `keyword`, or None."""
        return next(((start, end) for key, start, end in self.arg_spans if key in (index, keyword)), None)

    def span_of(self, argument: Expr) -> tuple[int, int] | None:
        """The order span of `argument` (one of this call's own argument expressions), or None."""
        return next(((start, end) for key, start, end in self.arg_spans if self.passed(key) is argument), None)

    @property
    def first_arg(self) -> int:
        """The order where the arguments begin: the events up to it are the callee's (`f`, `x.m`)."""
        return min((start for _, start, _ in self.arg_spans), default=self.end_order)


@dataclass(slots=True, frozen=True)
class Use:
    """A dotted name read (`b`, `self.w`), and what reads it."""

    name: str
    site: Site
    context: str  # compute (operand of an operator or a tf/np call), receiver, argument, other


@dataclass(slots=True, frozen=True)
class Comprehension:
    """A list, set, dict or generator comprehension: the orders of its events, and for each of
    its `for`s the names it binds and the orders of its iterable's events."""

    span: tuple[int, int]
    fors: tuple[tuple[tuple[str, ...], tuple[int, int]], ...]


@dataclass(slots=True, frozen=True)
class Exit:
    site: Site
    kind: str  # return, break, continue, raise
    span: tuple[int, int] = (0, 0)  # return: orders (after start, up to end) of the value's events
    # return of a dict literal whose keys are all strings (`return {"loss": loss}`): (key, value) each
    items: tuple[tuple[str, Expr], ...] = ()


@dataclass(slots=True)
class Compare:
    """A comparison (`a > b`, `x == y`): its operands' events have orders in (site.order, end_order]."""

    site: Site
    operator: str  # the first operator, as written: ">", "==", "is not"...
    end_order: int = 0
    left: Expr | None = None  # the left operand
    right: Expr | None = None  # the first comparator (`b` in `a > b > c`)


@dataclass(slots=True)
class FileFacts:
    path: str
    blocks: list[Block] = field(default_factory=list)
    tapes: list[Tape] = field(default_factory=list)
    assigns: list[Assign] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    uses: list[Use] = field(default_factory=list)
    deletes: list[Assign] = field(default_factory=list)
    exits: list[Exit] = field(default_factory=list)
    compares: list[Compare] = field(default_factory=list)
    comprehensions: list[Comprehension] = field(default_factory=list)
    sums: list[tuple[tuple[int, int], ...]] = field(default_factory=list)  # per `a + b - c` (and `+=`): each term's orders
    differences: list[tuple[int, int]] = field(default_factory=list)  # the order spans of the sums that subtract a term
    stores: list[Assign] = field(default_factory=list)  # `d[k] = v`: target is the container (`d`), kind "store"
    # `x[i].attr` (an attribute of an item, which no dotted name holds): (container `x`, `attr`, site,
    # whether it is assigned to)
    item_attributes: list[tuple[str, str, Site, bool]] = field(default_factory=list)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted origin
    relative_imports: dict[str, str] = field(default_factory=dict)  # `from .models import Net`: Net -> models.Net
    model: object = field(default=None, repr=False)  # the program model (tapecheck.model), built on demand
    # caches, not facts: not compared (a walk that reused the facts of runs asked fewer questions)
    _chains: dict[int, list[int]] = field(default_factory=dict, repr=False, compare=False)
    # (target, scope) -> assigns in order, for reaching_assigns; rebuilt when assigns grow (the walk asks too)
    _by_name: dict | None = field(default=None, repr=False, compare=False)
    _indexed: int = field(default=0, repr=False, compare=False)
    _tapes_at: dict | None = field(default=None, repr=False, compare=False)
    _tapes_indexed: int = field(default=0, repr=False, compare=False)
    # indexes built once per file for the rules (after the walk): see _fresh()
    _index_key: tuple = field(default=(), repr=False, compare=False)
    _recording: dict = field(default_factory=dict, repr=False, compare=False)  # block id -> tapes recording there
    _exits_by_block: dict = field(default_factory=dict, repr=False, compare=False)
    _functions_by_parent: dict = field(default_factory=dict, repr=False, compare=False)
    _escaping_uses: dict = field(default_factory=dict, repr=False, compare=False)  # (name, scope) -> argument/other uses
    _tape_calls_at: dict = field(default_factory=dict, repr=False, compare=False)  # (receiver, scope) -> attribute calls
    _calls_by_scope: dict = field(default_factory=dict, repr=False, compare=False)
    _tapes_by_with: dict | None = field(default=None, repr=False, compare=False)  # with block -> tape indexes
    _assigns_by_scope: dict = field(default_factory=dict, repr=False, compare=False)
    _resolved: dict = field(default_factory=dict, repr=False, compare=False)  # resolved_name: dotted -> resolved

    def _fresh(self) -> None:
        """Drop the per-file indexes when the facts grew since they were built (the walk adds as it goes)."""
        # a tape's next `with` is a new block, so the counts see it too
        key = (len(self.blocks), len(self.tapes), len(self.calls), len(self.uses), len(self.exits), len(self.assigns))
        if key != self._index_key:
            self._index_key = key
            self._recording, self._exits_by_block, self._functions_by_parent = {}, {}, {}
            self._tapes_by_with = None
            self._escaping_uses, self._tape_calls_at, self._calls_by_scope, self._assigns_by_scope = {}, {}, {}, {}
            for assign in self.assigns:
                self._assigns_by_scope.setdefault(self.scope_of(assign.site), []).append(assign)
            for exit in self.exits:
                self._exits_by_block.setdefault(exit.site.block, []).append(exit)
            for block in self.blocks:
                if block.kind == "function":
                    self._functions_by_parent.setdefault(block.parent, []).append(block)
            for use in self.uses:
                if use.context in ("argument", "other"):
                    self._escaping_uses.setdefault((use.name, self.scope_of(use.site)), True)
            for call in self.calls:
                self._calls_by_scope.setdefault(self.scope_of(call.site), []).append(call)
                if call.func.kind == "attribute":
                    self._tape_calls_at.setdefault((call.receiver, self.scope_of(call.site)), []).append(call)

    # -- blocks -------------------------------------------------------------
    def chain(self, block_id: int) -> list[int]:
        """Block ids from the outermost block down to `block_id`."""
        cached = self._chains.get(block_id)
        if cached is not None:
            return cached
        out = []
        current: int | None = block_id
        while current is not None:
            out.append(current)
            current = self.blocks[current].parent
        out.reverse()
        self._chains[block_id] = out
        return out

    def calls_in_scope(self, scope: int) -> list[Call]:
        """The calls made directly in one scope, in the order of `self.calls` (indexed once per file)."""
        self._fresh()
        return self._calls_by_scope.get(scope, [])

    def assigns_in_scope(self, scope: int) -> list[Assign]:
        """The bindings made directly in one scope, in the order of `self.assigns` (indexed once per file)."""
        self._fresh()
        return self._assigns_by_scope.get(scope, [])

    def scope_of(self, site: Site) -> int:
        return self.blocks[site.block].scope

    def inside(self, site: Site, block_id: int) -> bool:
        return block_id in self.chain(site.block)

    def exits_after(self, site: Site) -> bool:
        """A `return`/`break`/`raise` later in the suite of `site`: a loop around it ends that pass there."""
        self._fresh()
        return any(e.site.order > site.order and e.kind != "continue" for e in self._exits_by_block.get(site.block, ()))

    def loops_between(self, outer: Site | None, inner: Site) -> list[int]:
        """Loop blocks that hold `inner` but not `outer`, within inner's scope."""
        outer_chain = set(self.chain(outer.block)) if outer else set()
        scope = self.scope_of(inner)
        loops = []
        for bid in self.chain(inner.block):
            block = self.blocks[bid]
            if block.kind in LOOP_KINDS and bid not in outer_chain and block.scope == scope:
                loops.append(bid)
        return loops

    def dominates(self, first: Site, second: Site) -> bool:
        """`first` runs whenever `second` runs, earlier: same or enclosing suite, before."""
        if first.order >= second.order or first.in_comprehension:
            return False
        first_chain = self._always_run_chain(first.block)
        return self._always_run_chain(second.block)[: len(first_chain)] == first_chain

    def _always_run_chain(self, block_id: int) -> list[int]:
        # a `with` body always runs when its statement does: it decides nothing
        return [bid for bid in self.chain(block_id) if self.blocks[bid].kind != "with"]

    def enclosing_class(self, site: Site) -> Block | None:
        for bid in reversed(self.chain(site.block)):
            if self.blocks[bid].kind == "class":
                return self.blocks[bid]
        return None

    def methods_of(self, class_block: Block) -> set[str]:
        self._fresh()
        return {b.name for b in self._functions_by_parent.get(class_block.id, ())}

    # -- names --------------------------------------------------------------
    def resolve(self, dotted: str) -> str:
        """Map a dotted name through this file's imports: `tf.X` -> `tensorflow.X`."""
        head, _, rest = dotted.partition(".")
        origin = self.imports.get(head)
        if origin is None:
            return dotted
        return f"{origin}.{rest}" if rest else origin

    def resolved_name(self, dotted: str) -> str:
        """`resolve(dotted)`, remembered per name: for the model and the rules, which ask after the
        walk (the walk itself asks `resolve`, as the imports seen so far stand)."""
        found = self._resolved.get(dotted)
        if found is None:
            found = self._resolved[dotted] = self.resolve(dotted)
        return found

    def assigns_to(self, name: str, scope: int) -> list[Assign]:
        return [a for a in self.assigns if a.target == name and self.scope_of(a.site) == scope]

    def reaching_assigns(self, name: str, site: Site) -> list[Assign]:
        """The bindings of `name` in site's scope that may hold at `site`.

        The last binding that dominates the site, plus any later conditional
        ones before the site. Empty when the name is not bound in this scope
        before the site (a parameter, a global, an attribute set elsewhere).
        """
        scope = self.scope_of(site)
        index = self._by_name
        if index is None or self._indexed != len(self.assigns):
            index = self._by_name = {}
            for assign in sorted(self.assigns, key=lambda a: a.site.order):
                index.setdefault((assign.target, self.scope_of(assign.site)), []).append(assign)
            self._indexed = len(self.assigns)
        found = index.get((name, scope), ())
        before = found[: bisect_left([a.site.order for a in found], site.order)] if found else []
        for index in range(len(before) - 1, -1, -1):
            if self.dominates(before[index].site, site):
                return before[index:]
        return []

    # -- tapes --------------------------------------------------------------
    def tape_for(self, name: str, site: Site) -> Tape | None:
        """The tape bound to `name` at `site`, if the binding is a tape."""
        reaching = self.reaching_assigns(name, site)
        if len(reaching) != 1:
            return None
        binding = reaching[0]
        if self._tapes_at is None or self._tapes_indexed != len(self.tapes):
            self._tapes_at = {(t.name, t.site.order): t for t in self.tapes}  # the walk adds tapes as it goes
            self._tapes_indexed = len(self.tapes)
        tape = self._tapes_at.get((name, binding.site.order))
        return tape if tape is not None and tape.site == binding.site else None

    def records(self, tape: Tape, site: Site) -> bool:
        """Whether `tape` is recording at `site` (inside its `with`, not paused)."""
        chain = self.chain(site.block)
        if any(tape.id in self.blocks[bid].paused for bid in chain):
            return False
        return any(bid in chain for bid in tape.with_blocks)

    def recording(self, site: Site) -> list[Tape]:
        """The tapes recording at `site` (`records` of each tape), in the order of `self.tapes`;
        worked out once per block."""
        self._fresh()
        found = self._recording.get(site.block)
        if found is None:
            if self._tapes_by_with is None:
                self._tapes_by_with = {}
                for index, tape in enumerate(self.tapes):
                    for bid in tape.with_blocks:
                        self._tapes_by_with.setdefault(bid, []).append(index)
            # only a tape with a `with` block on the chain can record here
            candidates = sorted({i for bid in self.chain(site.block) for i in self._tapes_by_with.get(bid, ())})
            found = self._recording[site.block] = [self.tapes[i] for i in candidates if self.records(self.tapes[i], site)]
        return found

    def gradient_calls(self) -> list[tuple[Call, Tape]]:
        """Every `tape.gradient/jacobian/batch_jacobian(...)` whose tape is known."""
        found = []
        for call in self.calls:
            if call.method in GRADIENT_METHODS and call.receiver:
                tape = self.tape_for(call.receiver, call.site)
                if tape is not None:
                    found.append((call, tape))
        return found

    def tape_calls(self, tape: Tape, methods: frozenset[str] | set[str]) -> list[Call]:
        """Calls `tape.<method>(...)` made while this tape binding holds."""
        if not tape.name:
            return []
        self._fresh()
        return [
            call for call in self._tape_calls_at.get((tape.name, self.scope_of(tape.site)), ())
            if call.method in methods and self.tape_for(tape.name, call.site) is tape
        ]

    def tape_escapes(self, tape: Tape) -> bool:
        """The tape is handed to other code (a helper, a return, a container)."""
        self._fresh()
        return (tape.name, self.scope_of(tape.site)) in self._escaping_uses
