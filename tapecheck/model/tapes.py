"""Tapes: every use of a tape's recording (`tape.gradient` itself, or a call handing the tape to
a function that asks it), the names a gradient call differentiates, and the flow from a
tape's sources to its target, inside the `with` block and before it.
"""

from __future__ import annotations

from tapecheck.lint.facts import GRADIENT_METHODS, Call, Site
from tapecheck.model.flow import Tracer
from tapecheck.model.objects import Flow, TapeUse, told
from tapecheck.model.ops import GUARD_BLOCKS
from tapecheck.model.queries import call_span, variable_owner, variables_owner


class Tapes:
    """What a tape records and who asks it for gradients."""

    def tape_uses(self, tape) -> list[TapeUse]:
        """Each use of `tape`'s recording in its scope, in source order: its own `gradient`/`jacobian`
        calls, and the calls that hand it to a function asking it for gradients on every call."""
        facts = self.facts
        uses = [TapeUse(call) for call in facts.tape_calls(tape, GRADIENT_METHODS)]
        if tape.name and "." not in tape.name:
            scope = facts.scope_of(tape.site)
            for call in self.calls_in_scope(scope):
                if call.method in GRADIENT_METHODS:
                    continue
                if not any(a.kind == "name" and a.text == tape.name for a in (*call.args, *call.keywords.values())):
                    continue
                if facts.tape_for(tape.name, call.site) is not tape:
                    continue
                for _, path, file, repeated in self.handed_tapes(call, {tape.name}):
                    uses.append(TapeUse(call, path, file, told(repeated, facts.path), facts.path))
                    break
        return sorted(uses, key=lambda use: use.call.site.order)

    def gradient_calls(self) -> list:
        """`facts.gradient_calls()`: every `tape.gradient/jacobian/batch_jacobian(...)` whose tape is
        known, with its tape; worked out once per file (each asking scans every call of the file)."""
        found = self.memo.get("gradient calls")
        if found is None:
            found = self.memo["gradient calls"] = self.facts.gradient_calls()
        return list(found)

    def recording(self, site: Site) -> list:
        """`facts.recording(site)`: the tapes recording at `site`, one answer per block, remembered
        here without the facts' check that the walk is over (asked of every call of a file)."""
        found = self._recording.get(site.block)
        if found is None:
            found = self._recording[site.block] = self.facts.recording(site)
        return found

    def opens_tape(self, block_id: int) -> bool:
        """Whether a `with tf.GradientTape() as tape:` block sits in block `block_id` of this
        file, or in a function nested in it (a builder whose returned step trains a model)."""
        found = self.memo.get("blocks opening tapes")
        if found is None:  # indexed once per file: a scan of every tape per question was quadratic
            facts = self.facts
            found = self.memo["blocks opening tapes"] = frozenset(
                block for tape in facts.tapes for with_block in tape.with_blocks for block in facts.chain(with_block))
        return block_id in found

    def guarded(self, site: Site, outer: int, *, argument_tests_repeat: bool = False) -> bool:
        """Inside an `if`/`else`/`except`/`case` between block `outer` and the site, or after an early
        `return` under an `if` of the same function (`if self._built: return`): on some passes only.

        With `argument_tests_repeat`, an `if`/`else` whose test reads nothing but parameters of its
        own function that default to `None` (`if labels is not None:`, `if training:` in a Keras
        `call(self, x, labels=None, training=None)`) guards nothing: it asks what this call was given,
        not whether the state exists yet, so the branch runs again on every call given the same kind
        of arguments (every training pass)."""
        facts = self.facts
        chain = facts.chain(site.block)
        start = chain.index(outer) if outer in chain else 0
        if any(facts.blocks[b].kind in GUARD_BLOCKS
               and not (argument_tests_repeat and self._tests_only_optional_arguments(facts.blocks[b]))
               for b in chain[start:]):
            return True
        return any(exit.site.order < site.order and exit.site.block not in chain
                   and any(facts.blocks[b].kind in GUARD_BLOCKS for b in facts.chain(exit.site.block)[start:])
                   for exit in self._returns_in(facts.scope_of(site)))

    def _tests_only_optional_arguments(self, block) -> bool:
        """An `if`/`else` block whose test reads only parameters of the enclosing function that
        default to `None`, and calls nothing."""
        if block.kind not in ("if", "else") or block.test_span == (0, 0):
            return False
        if self.spans.calls_in(block.test_span):
            return False
        names = {use.name for use in self.spans.uses_in(block.test_span)} - {"None"}
        if not names:
            return False
        params = {a.target: a for a in self.facts.assigns_in_scope(block.scope) if a.kind == "param"}
        return all(name in params and params[name].default is not None and params[name].default.text == "None"
                   for name in names)

    def _returns_in(self, scope: int) -> list:
        """The `return`s written in one function scope (indexed once per file)."""
        index = self.memo.get("returns by scope")
        if index is None:
            index = self.memo["returns by scope"] = {}
            for exit in self.facts.exits:
                if exit.kind == "return":
                    index.setdefault(self.facts.scope_of(exit.site), []).append(exit)
        return index.get(scope, [])

    # -- tapes -----------------------------------------------------------------------------
    def gradient_roots(self, call: Call, tape) -> tuple[set[str], set[str]]:
        """(roots, owners) of `tape.gradient(target, sources)`: the names the sources are read
        through (`model` for `model.trainable_variables`, `w` for `[w, b]`), and among them
        those that own variables (models, layers). Worked out once per call (four rules ask); the
        sets are the caller's own."""
        key = ("gradient roots", id(call), tape.id)  # the facts, and with them the call, outlive the memo
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._gradient_roots(call, tape)
        return set(found[0]), set(found[1])

    def _gradient_roots(self, call: Call, tape) -> tuple[set[str], set[str]]:
        facts = self.facts
        target = call.arg(0, "target")
        roots: set[str] = set()
        owners: set[str] = set()
        for use in self.spans.uses_in(call_span(call)):
            if use.name == f"{tape.name}.{call.method}" or (target is not None and use.name == target.text):
                continue
            owner = variables_owner(use.name)  # also `policy.critic_trainable_variables(key)`
            roots.add(owner or use.name)
            if owner:
                owners.add(owner)
            for assign in facts.reaching_assigns(use.name, call.site):
                for inner in self.spans.uses_in(assign.span):  # variables = gen.trainable_variables + ...
                    if variable_owner(inner.name):
                        roots.add(variable_owner(inner.name))
                        owners.add(variable_owner(inner.name))
        return roots, owners

    def tape_flow(self, tape, call: Call, origin_of) -> dict[str, Flow]:
        """The Flow of each name the tape's assignments bind, up to the `gradient` call."""
        facts = self.facts
        tracer = Tracer(self, origin_of, boundary=tuple(tape.with_blocks))
        scope = facts.blocks[tape.with_blocks[0]].scope
        assigns = [
            a for a in self._assigns_by_scope.get(scope, ())
            if a.kind in ("assign", "augassign") and a.span != (0, 0) and a.site.order < call.site.order
            and facts.records(tape, a.site)
        ]
        for assign in sorted(assigns, key=lambda a: a.site.order):
            tracer.assign(assign, merge=assign.site.block not in tape.with_blocks)
        return tracer.state

    def flow_before(self, tape, origin_of) -> dict[str, Flow]:
        """The Flow of each name bound in the tape's scope before the tape is made."""
        facts = self.facts
        tracer = Tracer(self, origin_of)
        scope = facts.scope_of(tape.site)
        assigns = [
            a for a in self._assigns_by_scope.get(scope, ())
            if a.kind in ("assign", "augassign") and a.span != (0, 0) and a.site.order < tape.site.order
        ]
        for assign in sorted(assigns, key=lambda a: a.site.order):
            tracer.assign(assign, merge=assign.site.block != scope)
        return tracer.state
