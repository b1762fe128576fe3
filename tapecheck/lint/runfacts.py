"""The facts one run of a buffer added to its file's facts, kept to be reused at the next lint.

The language server keeps each run's libcst tree (`parts.Runs`) so that an edit re-parses only
the changed run; the walk (`extract.FactsBuilder.walk_parts`) keeps, per run, what walking it
added (`RunFacts`), so that an edit walks only the changed run(s) too: the facts of a run whose
text and entry state are those of a run of the last lint are that run's, renumbered.

A run's facts are a function of its text and of the state the walk enters it in:

- the numbering: the order of the last event before it, how many blocks and tapes precede it
  (block and tape ids), and `lines_before` (its place in the file). These shift when an earlier
  run changes; every field holding one is renumbered (`splice`): sites (line, order, block),
  block ids, parents and scopes, lines and end lines, the tapes a `with` block records and
  pauses, tape ids and their `with` blocks, every order span (`Assign.span`, `Exit.span`,
  `Block.test_span`, `Call.end_order` and `arg_spans`, `Compare.end_order`, comprehensions'
  spans, sums, differences) and the line a lambda's summary holds (`Expr("lambda").value`).
  Ids a run refers to that are not its own are the module block (always 0) and the class it
  goes on with (a run cut inside a class body), which maps to that class's id in this lint.
  A span of (0, 0) is a field's default (`Assign.span`, `Block.test_span`, `Exit.span`), or the
  span of no events at the file's start (`x = 1` before any event): a run that made such a span
  is reused only at the same order (`RunFacts.zero_spans`), and only there is (0, 0) not shifted;
- the imports seen before it (`FileFacts.imports`): names resolve through them while walking
  (callees, decorators, bases, tape classes). A run is reused only when they are equal;
  `relative_imports` is only written by the walk, never read. What the run itself changes in
  both is replayed (the keys it set, in the order it set them);
- the class it goes on with: the class's block id (above), and the end line it gives that
  block (`Block.end_line`, set as each run of the class is walked); the module block's end
  line is set the same way by every run;
- what it looked up in earlier runs' facts: `visit_With` asks `FileFacts.tape_for` for
  `with tape:` and `with tape.stop_recording():`, which reads the bindings of the scope the
  `with` is in and may extend an earlier run's tape (`Tape.with_blocks`). In a function or a
  class opened in the run it reads the run's own facts only; at module level, or in the body
  of a class an earlier run opened, it reads earlier runs': such a run is walked at every lint
  (`FactsBuilder._alone` is False; rare in real code, where `with tape:` sits in a function).

Nothing else crosses runs: each run starts at module level (or in the class it goes on with)
with no comprehension, lambda or context open, and its text (with the class header it
repeats) is its key (a text that occurs twice has one record, renumbered for each place). The
facts' own caches (`FileFacts._chains`, `_by_name`...), which the walk fills as it asks
`tape_for`, are not part of their equality.

Objects: the walk mutates a fact object after its run only in two places, a tape's
`with_blocks` (a later `with tape:`, above) and a top-level class block's `end_line` (a later
run of the class). A record keeps its own copies of those (taken when the run was walked) and
each lint gets fresh copies of them; every other object (sites, assignments, calls, uses,
summaries...) is shared between the record and the facts of the lints that reuse it unchanged,
which is safe because nothing mutates them after the walk (the program model and the rules
only read the facts; their caches live in the facts object or the model, both made anew per
lint) and the next lint's facts are equal to a fresh walk's (tests/test_parts.py checks both
after every edit, with the rules run on each lint's facts in between).

Cost, on the 5,000-line buffer of benchmarks/lsp_latency.py (116 runs of 2 KB; CPU ms, 2 shared
cores at load ~9, benchmarks/lsp_profile.py): the walk of every run ~110; after a character typed
in a line, the changed run's walk and the others spliced as they are, ~3; after a line added near
the top, every run below renumbered (~17,000 facts and their ~16,000 sites built anew, ~0.7 us
each) ~23, and the last lint's records freed ~7. The records take about 45 bytes per character of
the buffer (9 MB for its 205 KB, tracemalloc; its trees take 20 MB), most of it shared with the
facts of the last lint.
"""

from __future__ import annotations

from tapecheck.lint.facts import Assign, Block, Call, Compare, Comprehension, Exit, Expr, FileFacts, Site, Tape, Use

# the lists of `FileFacts` a walk appends to, in the order a record keeps their slices
LISTS = ("blocks", "tapes", "assigns", "calls", "uses", "deletes", "exits", "compares", "comprehensions", "sums",
         "differences", "stores", "item_attributes")

MODULE = 0  # the module block's id: the walk opens it first


class RunFacts:
    """What walking one run added to the facts, and the state the walk entered it in."""

    __slots__ = ("imports", "lines_before", "order", "orders", "block", "tape", "klass", "lists", "imports_set",
                 "relative_set", "module_end", "class_end", "lambdas", "zero_spans")

    def __init__(self, imports, lines_before, order, orders, block, tape, klass, lists, imports_set, relative_set,
                 module_end, class_end, lambdas, zero_spans):
        self.imports: dict = imports  # `FileFacts.imports` when the run was entered
        self.lines_before: int = lines_before
        self.order: int = order  # the order of the last event before the run
        self.orders: int = orders  # how many orders the run's events take
        self.block: int = block  # the id of the run's first block (how many blocks precede it)
        self.tape: int = tape  # the id of the run's first tape
        self.klass: int | None = klass  # the id of the class block the run goes on with
        self.lists: tuple = lists  # per name of LISTS, what the run appended (tapes, top-level classes: copies)
        self.imports_set: tuple = imports_set  # (name, origin) the run set in `imports`, in order
        self.relative_set: tuple = relative_set  # the same for `relative_imports`
        self.module_end: int = module_end  # the last line of the run's tree (the module block's end, less lines_before)
        self.class_end: int | None = class_end  # the same for the class it goes on with
        self.lambdas: bool = lambdas  # some summary of the run is a lambda's (its value is a line)
        self.zero_spans: bool = zero_spans  # some span of the run is of events at order 0: (0, 0), as a default

    def fits(self, facts: FileFacts, order: int, klass: int | None) -> bool:
        """Whether the run, entered with these facts, adds what it added when recorded (renumbered)."""
        if (klass is None) != (self.klass is None):
            return False  # not reached: whether a run goes on with a class is in its key (the header)
        if self.zero_spans and order != self.order:
            return False  # its (0, 0) spans: defaults or spans of events at the file's start, not told apart
        return self.imports == facts.imports


def entry(facts: FileFacts) -> tuple:
    """The state a record needs from before the run: the lists' lengths and the imports."""
    return tuple(len(getattr(facts, name)) for name in LISTS), dict(facts.imports), dict(facts.relative_imports)


def record(facts: FileFacts, entered: tuple, lines_before: int, order: int, end_order: int, klass: int | None,
           module_end: int, class_end: int | None, lambdas: bool, zero_spans: bool) -> RunFacts:
    """The record of a run just walked: `entered`, `entry(facts)` before it; `order` and `end_order`,
    the builder's order before and after it."""
    lengths, imports, relative = entered
    lists = [getattr(facts, name)[length:] for name, length in zip(LISTS, lengths)]
    lists[0] = [_own(block) if block.parent == MODULE and block.kind == "class" else block for block in lists[0]]
    lists[1] = [_own_tape(tape) for tape in lists[1]]
    return RunFacts(imports, lines_before, order, end_order - order, lengths[0], lengths[1], klass, tuple(lists),
                    _changes(imports, facts.imports), _changes(relative, facts.relative_imports),
                    module_end, class_end, lambdas, zero_spans)


def _changes(before: dict, after: dict) -> tuple:
    """The (key, value) pairs whose setting, in order, turns `before` into `after` (keys are only set)."""
    if len(before) == len(after) and before == after:
        return ()
    missing = object()
    return tuple((key, value) for key, value in after.items() if before.get(key, missing) != value)


def _own(block: Block) -> Block:
    return Block(block.id, block.kind, block.parent, block.scope, block.line, block.end_line, block.name,
                 block.decorators, block.bases, block.tapes, block.paused, block.test_span, block.positional,
                 block.kwargs)


def _own_tape(tape: Tape) -> Tape:
    return Tape(tape.id, tape.name, tape.site, tape.persistent, tape.watch_accessed_variables, list(tape.with_blocks))


def splice(rec: RunFacts, facts: FileFacts, order: int, lines_before: int, klass: int | None) -> RunFacts:
    """Append the run's facts to `facts`, renumbered for a run entered after event `order`, at
    `lines_before`, going on with class block `klass`; the record of the run for this lint."""
    do = order - rec.order
    dl = lines_before - rec.lines_before
    db = len(facts.blocks) - rec.block
    dt = len(facts.tapes) - rec.tape
    if not (do or dl or db or dt) and klass == rec.klass:
        lists, new = rec.lists, rec
    else:
        lists = _renumbered(rec, do, dl, db, dt, klass)
        new = RunFacts(rec.imports, lines_before, order, rec.orders, rec.block + db, rec.tape + dt, klass, lists,
                       rec.imports_set, rec.relative_set, rec.module_end, rec.class_end, rec.lambdas,
                       rec.zero_spans or not order)  # moved to the start: a span may have become (0, 0)
    # the objects later runs may change are the facts' own, never the record's
    facts.blocks.extend(_own(block) if block.parent == MODULE and block.kind == "class" else block for block in lists[0])
    facts.tapes.extend(_own_tape(tape) for tape in lists[1])
    for name, items in zip(LISTS[2:], lists[2:]):
        if items:
            getattr(facts, name).extend(items)
    for key, value in rec.imports_set:
        facts.imports[key] = value
    for key, value in rec.relative_set:
        facts.relative_imports[key] = value
    return new


# Site and Use are frozen dataclasses, whose generated __init__ sets each field by name through
# object.__setattr__: built here by their slots' own setters, in about 60% of the time (an edit that
# adds a line renumbers every run below it: ~30,000 objects on the 5,000-line buffer of lsp_latency.py)
_NEW = object.__new__
_SITE = tuple(getattr(Site, name).__set__ for name in ("line", "col", "order", "block", "in_comprehension"))
_USE = tuple(getattr(Use, name).__set__ for name in ("name", "site", "context"))
_ASSIGN = Assign.__init__
_CALL = tuple(getattr(Call, name).__set__ for name in (
    "site", "func", "args", "keywords", "end_line", "end_order", "arg_spans", "spread", "method", "receiver"))


def _renumbered(rec: RunFacts, do: int, dl: int, db: int, dt: int, klass: int | None) -> tuple:
    """The record's lists with orders shifted by `do`, lines by `dl`, the run's block ids by `db`,
    tape ids by `dt`, and the class it goes on with given id `klass`."""
    first = rec.block
    others = {rec.klass: klass} if rec.klass is not None and rec.klass != klass else {}
    new = _NEW
    set_line, set_col, set_order, set_block, set_inside = _SITE

    def block_id(b: int) -> int:
        return b + db if b >= first else others.get(b, b)

    def site(s: Site) -> Site:
        n = new(Site)
        set_line(n, s.line + dl)
        set_col(n, s.col)
        set_order(n, s.order + do)
        b = s.block
        set_block(n, b + db if b >= first else others.get(b, b))
        set_inside(n, s.in_comprehension)
        return n

    def span(pair: tuple) -> tuple:
        return (pair[0] + do, pair[1] + do) if pair != (0, 0) else pair  # (0, 0): a default (see RunFacts.fits)

    copies = rec.lambdas and dl  # summaries hold no line but a lambda's
    if copies:
        memo: dict = {}  # summaries shared by several facts stay shared (`a = b = f()`)

        def expr(e: Expr | None) -> Expr | None:
            if e is None:
                return None
            found = memo.get(id(e))
            if found is None:
                found = memo[id(e)] = Expr(
                    e.kind, e.text, e.callee, e.method, e.receiver, tuple(map(expr, e.elements)), e.tensor_slice,
                    {key: expr(value) for key, value in e.keywords.items()},
                    e.value + dl if e.kind == "lambda" else e.value, e.func_text, tuple(map(expr, e.operands)))
            return found
    else:
        def expr(e: Expr | None) -> Expr | None:
            return e

    (blocks, tapes, assigns, calls, uses, deletes, exits, compares, comprehensions, sums, differences, stores,
     item_attributes) = rec.lists

    def assign(a: Assign) -> Assign:
        n = new(Assign)
        pair = a.span
        _ASSIGN(n, a.target, site(a.site), expr(a.value) if copies else a.value, a.kind,
                (pair[0] + do, pair[1] + do) if pair != (0, 0) else pair, a.annotation,
                expr(a.default) if copies else a.default)
        return n

    new_uses = []
    add = new_uses.append
    use_name, use_site, use_context = _USE
    for u in uses:  # the most of a run's facts: `site` inlined
        s = u.site
        m = new(Site)
        set_line(m, s.line + dl)
        set_col(m, s.col)
        set_order(m, s.order + do)
        b = s.block
        set_block(m, b + db if b >= first else others.get(b, b))
        set_inside(m, s.in_comprehension)
        n = new(Use)
        use_name(n, u.name)
        use_site(n, m)
        use_context(n, u.context)
        add(n)
    new_calls = []
    add = new_calls.append
    call_site, call_func, call_args, call_keywords, call_end, call_end_order, call_spans, call_spread, call_method, \
        call_receiver = _CALL
    for c in calls:
        n = new(Call)
        call_site(n, site(c.site))
        if copies:
            call_func(n, expr(c.func))
            call_args(n, tuple(map(expr, c.args)))
            call_keywords(n, {key: expr(value) for key, value in c.keywords.items()})
        else:
            call_func(n, c.func)
            call_args(n, c.args)
            call_keywords(n, c.keywords)
        call_end(n, c.end_line + dl)
        call_end_order(n, c.end_order + do)
        call_spans(n, tuple([(key, start + do, end + do) for key, start, end in c.arg_spans]) if do else c.arg_spans)
        call_spread(n, c.spread)
        call_method(n, c.method)
        call_receiver(n, c.receiver)
        add(n)
    shifted_tapes = (lambda ids: tuple(t + dt for t in ids)) if dt else (lambda ids: ids)
    return (
        [Block(b.id + db, b.kind, block_id(b.parent), block_id(b.scope), b.line + dl, b.end_line + dl, b.name,
               b.decorators, b.bases, shifted_tapes(b.tapes), shifted_tapes(b.paused), span(b.test_span),
               b.positional, b.kwargs) for b in blocks],
        [Tape(t.id + dt, t.name, site(t.site), t.persistent, t.watch_accessed_variables,
              [block_id(b) for b in t.with_blocks]) for t in tapes],
        [assign(a) for a in assigns],
        new_calls,
        new_uses,
        [assign(d) for d in deletes],
        [Exit(site(e.site), e.kind, span(e.span), tuple((key, expr(value)) for key, value in e.items)) for e in exits],
        [Compare(site(c.site), c.operator, c.end_order + do, expr(c.left), expr(c.right)) for c in compares],
        [Comprehension((c.span[0] + do, c.span[1] + do),
                       tuple((names, (start + do, end + do)) for names, (start, end) in c.fors)) for c in comprehensions]
        if do else comprehensions,
        [tuple((start + do, end + do) for start, end in terms) for terms in sums] if do else sums,
        [(start + do, end + do) for start, end in differences] if do else differences,
        [assign(s) for s in stores],
        [(container, attribute, site(s), stored) for container, attribute, s, stored in item_attributes],
    )
