"""The objects the model's answers are made of: a `Function` or `Klass` of a linted file, an
`Instance` of one, a `ModuleRef` to another project file; a `Cut` of a gradient path and the
`Flow` of origins a value depends on; the `Creation` of state, a `TapeUse`, and a
function's `Summary`. Plain data: nothing here asks the facts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from tapecheck.lint.facts import Block, Call, Site


# -- flows ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Cut:
    """Where a gradient path was cut: the op's site, how to name it, and how it is reached."""

    site: Site
    what: str  # "`.numpy()`", "`np.log()`"
    function: str = ""  # the function holding the cut; "" when it is in the scope traced
    calls: tuple[tuple[str, int, str], ...] = ()  # from the traced scope inward: (callee, line of its call, file)
    file: str = ""  # the file holding the cut
    entry: Site | None = None  # the outermost call, in the scope traced
    zero: bool = False  # the op's gradient is zero (`tf.sign`), not None
    deliberate: bool = False  # `tf.stop_gradient`: a cut on purpose, a mistake only as the one path left
    layer: str = ""  # a cut in the function of a `Lambda` layer: "`Lambda` layer (line 3) of `model`"

    def through(self, callee: str, call: Site, file: str) -> "Cut":
        return replace(self, function=self.function or callee, calls=((callee, call.line, file), *self.calls),
                       file=self.file or file, entry=call)

    def path(self, reporting: str = "") -> str:
        """"`loss_fn` (called at line 31), then `weighted` (called at line 12)"; lines of other files name them."""
        return ", then ".join(
            f"`{name}` (called at {line_at(file, line, reporting)})" for name, line, file in self.calls
        )

    def at(self, reporting: str = "") -> str:
        return line_at(self.file, self.site.line, reporting)


def line_at(file: str, line: int, reporting: str) -> str:
    """A line as every message names it: "line 9" for a line of the file reporting (`reporting`;
    `file` "" or `reporting` "" say it is that file), "line 9 of losses.py" for one of another."""
    if not file or os.path.abspath(file) == os.path.abspath(reporting or file):
        return f"line {line}"
    return f"line {line} of {os.path.basename(file)}"


def told(repeated: tuple[str, int, str] | None, reporting: str) -> str:
    """A `Summary.repeated` for a message of `reporting`: "in a comprehension", "in the loop at
    line 5 (of losses.py)"; "" for None."""
    if not repeated:
        return ""
    what, line, file = repeated
    return f"{what} {line_at(file, line, reporting)}" if line else what


class Flow:
    """The origins a value depends on: `live` through ops with gradients, `cuts` through a cut.
    `partial`: origins that reach the value live, and also through a term of a sum that depends
    on them only through a cut (that term adds a constant: what only it reaches never trains)."""

    __slots__ = ("live", "cuts", "partial")

    def __init__(self, live=(), cuts=None, partial=None):
        self.live: set[str] = set(live)
        self.cuts: dict[str, Cut] = dict(cuts or {})
        self.partial: dict[str, Cut] = dict(partial or {})

    def copy(self) -> "Flow":
        return Flow(self.live, self.cuts, self.partial)

    def empty(self) -> bool:
        return not self.live and not self.cuts

    def merge(self, other: "Flow") -> None:
        self.live |= other.live
        for origin, cut in other.cuts.items():
            self.cuts.setdefault(origin, cut)
        for origin, cut in other.partial.items():
            self.partial.setdefault(origin, cut)

    def cut_all(self, cut: Cut) -> None:
        for origin in self.live:
            self.cuts[origin] = cut
        self.live.clear()
        self.partial.clear()  # the whole value is cut now: that is what matters

    def only_cut(self, origin: str) -> Cut | None:
        """The cut, when `origin` reaches this value only through one."""
        return None if origin in self.live else self.cuts.get(origin)

    def cut_term(self, origin: str) -> Cut | None:
        """The cut of a term of a sum that `origin` reaches only through it, while the value as a
        whole depends on `origin` live."""
        return self.partial.get(origin) if origin in self.live else None


# -- the model's objects -------------------------------------------------------------------
@dataclass(slots=True)
class Function:
    block: Block
    params: tuple[str, ...]
    owner: Block | None  # the class, for a method
    bound: bool  # a method that takes `self` (not a staticmethod)
    model: object = None  # the ProgramModel of the file that defines it (program.py imports this module)
    label: str = ""  # a lambda: the name it is bound to (`self.loss_fn`), for messages

    @property
    def name(self) -> str:
        return self.block.name

    @property
    def qualname(self) -> str:
        if self.label:
            return self.label
        return f"{self.owner.name}.{self.block.name}" if self.owner is not None else self.block.name

    @property
    def self_name(self) -> str:
        return self.params[0] if self.bound and self.params else ""


@dataclass(frozen=True, slots=True)
class Klass:
    """A class defined in a linted file (this one, or one it imports)."""

    block: Block
    model: object  # the ProgramModel of the file that defines it


@dataclass(frozen=True, slots=True)
class Instance:
    klass: Klass


@dataclass(frozen=True, slots=True)
class ModuleRef:
    model: object  # the ProgramModel of that file


@dataclass(frozen=True, slots=True)
class Creation:
    """State made on every call of a function: where, what kind, and through which calls."""

    site: Site
    kind: str  # optimizer, metric, variable
    text: str  # the constructor as written
    function: str
    calls: tuple[tuple[str, int], ...] = ()
    file: str = ""  # set when made in another file than the one asking
    entry: Site | None = None  # then: the call, in the file asking, that leads there


@dataclass(frozen=True, slots=True)
class TapeUse:
    """A use of a tape's recording: `tape.gradient(...)` itself, or a call handing the tape to a
    function that asks it for gradients (`path`: the calls to that `gradient`, outermost first)."""

    call: Call
    path: tuple[tuple[str, int, str], ...] = ()  # (function, line of the call it makes next, its file)
    file: str = ""  # set when the function the tape is handed to is in another file
    repeated: str = ""  # how one such call asks the tape more than once ("in the loop at line 5 of losses.py")
    reporting: str = ""  # the file of `call`

    def where(self) -> str:
        """"in `apply_grads` (line 9)", with the functions between when there are (`gradient` asked in
        `_grads`, reached through `_clipped`) and the tape is handed to a function of this file; ""
        for a direct call. Lines of other files name them."""
        if not self.path:
            return ""
        function, line, file = self.path[-1]
        between = "" if self.file else ", ".join(
            f"`{name}` ({line_at(at_file, at, self.reporting)})" for name, at, at_file in self.path[:-1])
        return f"in `{function}` ({line_at(file, line, self.reporting)})" + (f", called from {between}" if between else "")


@dataclass(slots=True)
class Summary:
    returns: Flow = field(default_factory=Flow)  # origins: parameter names
    creates: list[Creation] = field(default_factory=list)
    # parameter -> the calls down to a `gradient` asked of it on every call (a tape handed in):
    # (function, line of the call it makes next, the file of that line)
    gradients: dict[str, tuple[tuple[str, int, str], ...]] = field(default_factory=dict)
    # parameter -> how one call asks it for gradients more than once: ("in the loop at", its line,
    # its file) or ("in a comprehension", 0, ""); `told` words it for a message
    repeated: dict[str, tuple[str, int, str]] = field(default_factory=dict)
