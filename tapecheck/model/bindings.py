"""Bindings and scopes: what a name or a `self.` attribute refers to at a site.

Reaching definitions are answered once, by `assigns_on_every_path` (the facts' dominating
binding, or the branches of an `if`/`else` that binds on every path); a name not bound in its
function is looked up in the enclosing functions and then the module (closures and
globals), and a `self.x` in every method of its class. Answers are a `Function`, a
`Klass`, an `Instance`, a `ModuleRef`, an assignment, or unknown (None): a parameter, an
import, anything else. `resolved`/`alias_of` map a dotted name through the file's imports
and its aliases (`K = tf.keras.backend`).
"""

from __future__ import annotations

from tapecheck.lint.facts import LAMBDA, Block, Site
from tapecheck.model.flow import _value_unread
from tapecheck.model.objects import Function, Instance, ModuleRef
from tapecheck.model.ops import MAX_ALIAS_DEPTH


class Bindings:
    """What a name, an alias or a `self.` attribute refers to at a site."""

    def lambda_at(self, line: int, scope: int) -> Function | None:
        """The lambda written on `line` in `scope`, when it is the only one there."""
        found = self._defs.get((LAMBDA, line, scope))
        if found is None or self._lambda_lines.get((line, scope), 0) != 1:
            return None
        return self.functions.get(found.id)

    def binding(self, name: str, site: Site, depth: int = 0):
        """What `name` refers to at `site`: a Function, a class Block, an Instance, or None (unknown).

        A question asked from outside (depth 0, no other binding being worked out on this model) is
        answered once per name and site: every cache the answer reads is filled, never changed, by
        the first answer, so a second one would be the same. A nested question is not remembered:
        it may see a `self.` attribute still being worked out (`attribute`), unknown for now."""
        if depth or self._binding_busy:
            return self._binding(name, site, depth)
        key = (name, site.order, site.block)
        memo = self._bindings
        if key in memo:
            return memo[key]
        self._binding_busy = True
        try:
            found = memo[key] = self._binding(name, site, 0)
        finally:
            self._binding_busy = False
        return found

    def _binding(self, name: str, site: Site, depth: int):
        if depth > MAX_ALIAS_DEPTH or not name:
            return None
        facts = self.facts
        if "." in name:
            head, _, attribute = name.partition(".")
            if "." in attribute:
                return None
            klass = self.self_class(head, site)
            if klass is not None:
                return self.method_of_block(klass, attribute) or self.attribute(klass, attribute, depth)
            owner = self.binding(head, site, depth + 1)
            if isinstance(owner, Instance):
                klass = owner.klass
                return self.method(klass, attribute) or klass.model.attribute(klass.block, attribute, depth)
            if isinstance(owner, ModuleRef):
                return owner.model.module_binding(attribute, depth + 1)
            return None
        if name not in self._bound_names:
            return self._imported(name, depth)  # bound in no scope of the file: what the steps below would find
        scope = facts.scope_of(site)
        reaching = self.assigns_on_every_path(name, site)
        if reaching:
            return self._one(reaching, depth)
        if (scope, name) in self._assigns_by_scope_name:
            return None  # local to this function, bound later or on a path not seen: unknown
        scope = self._enclosing(scope)
        while scope is not None:
            found = self.assigns_named_in(scope, name)
            if found:  # read when the inner function runs, later: every binding may hold
                return self._one(found, depth) if all(a.kind in ("assign", "def") for a in found) else None
            scope = self._enclosing(scope)
        return self._imported(name, depth)

    def candidates(self, name: str, site: Site) -> tuple | None:
        """Every value a plain name may hold at `site`, one per binding that may reach it
        (`assigns_reaching`: `if sgd: build = a.f` / `else: build = a.g` gives both, in its
        scope or in the function enclosing a closure), repeats left out. None when some path may
        not bind it there, or one binding's value is unknown (a parameter, a call's result):
        then nothing is known about what it holds."""
        if not name or "." in name:
            return None
        reaching = self.assigns_reaching(name, site)
        if not reaching or any(assign.kind not in ("assign", "def") for assign in reaching):
            return None
        values: list = []
        for assign in reaching:
            value = self._value_of(assign, 1)
            if value is None:
                return None
            if value not in values:
                values.append(value)
        return tuple(values)

    def assigns_named_in(self, scope: int, name: str) -> list:
        """The bindings of `name` made in one scope, in the order of the facts (indexed once per file)."""
        return list(self._assigns_by_scope_name.get((scope, name), ()))

    def assigns_in(self, scope: int) -> list:
        """The bindings made in one scope (its own statements, not nested functions')."""
        return self._assigns_by_scope.get(scope, [])

    def assigns_reaching(self, name: str, site: Site) -> list:
        """The bindings of `name` that may hold at `site`: reaching ones in its scope, else every
        binding in the nearest enclosing scope that has one (a closure or a global is read later)."""
        if name not in self._bound_names:
            return []  # bound in no scope of the file
        facts = self.facts
        reaching = self.assigns_on_every_path(name, site)
        if reaching:
            return reaching
        scope = facts.scope_of(site)
        if (scope, name) in self._assigns_by_scope_name:
            return []
        scope = self._enclosing(scope)
        while scope is not None:
            found = self.assigns_named_in(scope, name)
            if found:
                return found
            scope = self._enclosing(scope)
        return []

    def assigns_on_every_path(self, name: str, site: Site) -> list:
        """The bindings of `name` in the scope of `site` that reach it: the one reaching-definitions
        answer for the rules. Where a binding dominates the site, it and the later conditional ones
        before the site, less those in the other branch of an `if`/`else` the site is in (`if c:
        loss = a` never reaches the `else:` suite). Where none dominates, an `if`/`else` before the
        site that binds the name in each branch (`if mixed: grads = ... else: grads = ...`): the
        last binding of each branch, plus later ones inside it. Empty when some path to the site
        may not bind the name (a branch without a binding, a `try`, a loop) or none is seen.
        Worked out once per name and site."""
        key = (name, site.order, site.block)
        cache = self._reaching_memo()
        found = cache.get(key)
        if found is None:
            found = cache[key] = self._reaching(name, site)
        return list(found)

    def _reaching_memo(self) -> dict:
        memo = self.memo.get("reaching")
        if memo is None:
            memo = self.memo["reaching"] = {}
        return memo

    def _reaching(self, name: str, site: Site) -> list:
        facts = self.facts
        reaching = facts.reaching_assigns(name, site)
        if reaching:
            if len(reaching) == 1:
                return reaching
            return [reaching[0]] + [a for a in reaching[1:] if not self.exclusive(a.site, site)]
        scope = facts.scope_of(site)
        earlier = [a for a in self._assigns_by_scope_name.get((scope, name), ())
                   if a.site.order < site.order and not a.site.in_comprehension]
        if not earlier:
            return []
        site_chain = facts.chain(site.block)
        pair = self._covering_if_else(name, earlier, site_chain, site)
        if pair is None:
            return []
        found = []
        for branch in pair:
            found.extend(self._branch_bindings(branch, earlier))
        # conditional bindings after the `if`/`else`, before the site, may hold too
        found.extend(a for a in earlier if a.site.line > pair[1].end_line)
        return found

    def exclusive(self, one: Site, other: Site) -> bool:
        """Whether two sites sit in the two branches of one `if`/`else` (`elif` too): neither runs
        after the other in one run of the code around them."""
        facts = self.facts
        chain_one, chain_other = facts.chain(one.block), facts.chain(other.block)
        for first, second in ((chain_one, chain_other), (chain_other, chain_one)):
            for block_id in first:
                block = facts.blocks[block_id]
                if block.kind != "if" or block_id in second:
                    continue
                branch = self._else_of(block)
                if branch is not None and branch.id in second:
                    return True
        return False

    def _covering_if_else(self, name, earlier, site_chain, site):
        """The last `if`/`else` pair, in a suite the site always runs after, whose two branches
        each bind the name on every path through them; None when there is none."""
        facts = self.facts
        best = None
        for assign in earlier:
            chain = facts.chain(assign.site.block)
            for bid in chain:
                block = facts.blocks[bid]
                if block.kind != "if" or block.parent not in site_chain or bid in site_chain:
                    continue
                other = self._else_of(block)
                if other is None or other.id in site_chain or other.end_line >= site.line:
                    continue
                if best is not None and best[0].line >= block.line:
                    continue
                if self._binds_on_every_path(block, earlier) and self._binds_on_every_path(other, earlier):
                    best = (block, other)
                break
        return best

    def _if_else_index(self) -> tuple[dict, dict]:
        """Built once per file: each `if` block's `else` suite (same parent, same test), and the
        `if` blocks directly inside each block, in source order."""
        index = self.memo.get("if/else")
        if index is None:
            elses, ifs_in, pending = {}, {}, {}
            for block in self.facts.blocks:
                if block.kind == "if":
                    ifs_in.setdefault(block.parent, []).append(block)
                    if block.test_span != (0, 0):
                        pending.setdefault((block.parent, block.test_span), block.id)
                elif block.kind == "else" and block.test_span != (0, 0):
                    owner = pending.get((block.parent, block.test_span))
                    if owner is not None:
                        elses.setdefault(owner, block)
            index = self.memo["if/else"] = (elses, ifs_in)
        return index

    def _else_of(self, block: Block):
        """The `else` suite of an `if` block: same parent, same test (from the index)."""
        return self._if_else_index()[0].get(block.id)

    def _binds_on_every_path(self, branch: Block, earlier) -> bool:
        """Whether every run of `branch` binds the name: a binding in its own suite (or a `with`
        in it), or an inner `if`/`else` whose branches both do."""
        facts = self.facts
        for assign in earlier:
            chain = facts.chain(assign.site.block)
            if branch.id not in chain:
                continue
            inner = chain[chain.index(branch.id) + 1:]
            if all(facts.blocks[b].kind == "with" for b in inner):
                return True
        for block in self._if_else_index()[1].get(branch.id, ()):
            other = self._else_of(block)
            if other is not None and self._binds_on_every_path(block, earlier) and self._binds_on_every_path(other, earlier):
                return True
        return False

    def _branch_bindings(self, branch: Block, earlier) -> list:
        """The bindings of one branch that may hold when it ends: from its last binding on every
        path (its own suite) on, or else those of the inner `if`/`else` that binds on every path."""
        facts = self.facts
        inside = [a for a in earlier if branch.id in facts.chain(a.site.block)]
        for index in range(len(inside) - 1, -1, -1):
            chain = facts.chain(inside[index].site.block)
            if all(facts.blocks[b].kind == "with" for b in chain[chain.index(branch.id) + 1:]):
                return inside[index:]
        for block in reversed(self._if_else_index()[1].get(branch.id, ())):
            other = self._else_of(block)
            if other is not None and self._binds_on_every_path(block, earlier) and self._binds_on_every_path(other, earlier):
                later = [a for a in inside if a.site.line > other.end_line]
                return self._branch_bindings(block, earlier) + self._branch_bindings(other, earlier) + later
        return inside

    def _uses_named(self, head: str) -> list:
        """The uses whose dotted name starts with `head` (`b`, `b.assign`), in source order."""
        if self._uses_by_head is None:
            self._uses_by_head = {}
            for use in self.facts.uses:
                self._uses_by_head.setdefault(use.name.partition(".")[0], []).append(use)
        return self._uses_by_head.get(head, [])

    def _uses_of_attribute(self, attribute: str) -> list:
        """The uses that read `.<attribute>` of anything (`self.b`, `trainer.b.assign`)."""
        if self._uses_by_attribute is None:
            self._uses_by_attribute = {}
            for use in self.facts.uses:
                for part in set(use.name.split(".")[1:]):
                    self._uses_by_attribute.setdefault(part, []).append(use)
        return self._uses_by_attribute.get(attribute, [])

    def sees(self, scope: int, name: str, bound_in: int) -> bool:
        """Whether `name` read in `scope` is the binding made in scope `bound_in` (itself, or an
        enclosing function or the module whose name no nearer scope rebinds)."""
        while scope is not None:
            if scope == bound_in:
                return True
            if (scope, name) in self._assigns_by_scope_name:
                return False
            scope = self._enclosing(scope)
        return False

    def reads(self, name: str, site: Site) -> list | None:
        """The reads of what `name` (a name, or `self.x` in a method) holds at `site`, all in the scope
        of `site`; None when it is read anywhere else too (a closure, another method, a function
        that sees the global): the rule cannot tell when those run."""
        facts = self.facts
        scope = facts.scope_of(site)
        head, _, attribute = name.partition(".")
        if attribute:
            if "." in attribute or self.self_class(head, site) is None:
                return None
            uses = self._uses_of_attribute(attribute)
            if any(facts.scope_of(u.site) != scope and not _value_unread(u.name, attribute) for u in uses):
                return None
            return [u for u in uses if u.name == name or u.name.startswith(name + ".")]
        assigns = self.assigns_reaching(name, site)
        if not assigns:
            return None
        bound_in = facts.scope_of(assigns[0].site)
        found = []
        for use in self._uses_named(name):
            where = facts.scope_of(use.site)
            if where == scope:
                found.append(use)
            elif self.sees(where, name, bound_in):
                return None
        return found

    def value_assigns(self, name: str, site: Site, depth: int = 0) -> list:
        """The bindings whose value `name` may hold at `site`, through aliases (`t = self.temperature`)
        and `self.` attributes set in any method of the class. Empty: unknown."""
        if depth > MAX_ALIAS_DEPTH:
            return []
        head, _, attribute = name.partition(".")
        if attribute and "." not in attribute:
            klass = self.self_class(head, site)
            if klass is None:
                return []
            assigns = [assign for assign, _ in self.attribute_assigns(klass, attribute)]
        elif attribute:
            return []
        else:
            assigns = self.assigns_reaching(name, site)
        out = []
        for assign in assigns:
            value = assign.value
            if assign.kind == "assign" and value is not None and value.kind in ("name", "attribute") and value.text:
                inner = self.value_assigns(value.text, assign.site, depth + 1)
                if not inner:
                    return []
                out += inner
            else:
                out.append(assign)
        return out

    def loop_rebinding(self, name: str, site: Site):
        """An assignment to `name` later in a loop holding `site`, in its scope: on the next pass
        `name` holds that value (`w = w - lr * g` inside the training loop)."""
        facts = self.facts
        scope = facts.scope_of(site)
        loops = facts.loops_between(None, site)
        for assign in self._assigns_by_scope_name.get((scope, name), ()):
            if assign.site.order > site.order and assign.kind in ("assign", "augassign"):
                if any(facts.inside(assign.site, loop) for loop in loops):
                    return assign
        return None

    def resolved(self, dotted: str, site: Site) -> str:
        """`dotted` resolved through the file's imports and, when its head is a name the file
        binds by assignment (`metrics = tf.keras.metrics`, `K = tf.keras.backend`), through that
        alias (`alias_of`). The cheap answer first: most heads are imports or bound nowhere."""
        head = dotted.partition(".")[0]
        if head == dotted or head in self.facts.imports or head not in self._alias_heads():
            return self.facts.resolved_name(dotted)  # `resolve`, remembered per name (the imports are all seen)
        return self.alias_of(dotted, site)

    def _alias_heads(self) -> set[str]:
        """Names some assignment binds to a name or an attribute (`K = tf.keras.backend`)."""
        heads = self._alias_head_names
        if heads is None:
            heads = self._alias_head_names = {
                a.target for a in self.facts.assigns
                if a.kind == "assign" and a.value is not None and a.value.kind in ("name", "attribute")
            }
        return heads

    def alias_of(self, dotted: str, site: Site) -> str:
        """`tensorflow.keras.backend.set_learning_phase` for `K.set_learning_phase` after
        `K = tf.keras.backend`: a dotted name with its head replaced by what every binding of the head
        names, resolved through the file's imports. The name itself when its head is no alias."""
        head, dot, rest = dotted.partition(".")
        assigns = self.assigns_reaching(head, site)
        texts = {a.value.text for a in assigns
                 if a.kind == "assign" and a.value is not None and a.value.kind in ("name", "attribute")}
        if len(texts) != 1 or len(assigns) != sum(1 for a in assigns if a.kind == "assign"):
            return self.facts.resolved_name(dotted)
        return self.facts.resolved_name(texts.pop() + dot + rest)

    def _enclosing(self, scope: int) -> int | None:
        """The scope whose names a function's body sees next (class bodies do not enclose methods)."""
        blocks = self.facts.blocks
        while True:
            parent = blocks[scope].parent
            if parent is None:
                return None
            scope = blocks[parent].scope
            if blocks[scope].kind != "class":
                return scope

    def self_class(self, head: str, site: Site) -> Block | None:
        """The class whose instance `head` is at `site`: the class of the method holding `site`,
        when `head` is that method's `self`. None in a function, a staticmethod, or for another name."""
        found = self._selves.get(self.facts.blocks[site.block].scope)
        return found[1] if found is not None and found[0] == head else None

    def attribute_assigns(self, klass: Block, attribute: str) -> list:
        """Every `self.<attribute> = ...` in the methods of `klass` and its local bases, with the method."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.attribute_assigns(klass, attribute) if owner is not None else []
        key = (klass.id, attribute)
        found = self._attribute_assigns.get(key)
        if found is None:
            found = []
            for cls in self.bases(klass):
                for fn in self.methods(cls):
                    if fn.bound:
                        target = f"{fn.self_name}.{attribute}"
                        found.extend((a, fn) for a in self._assigns_by_scope.get(fn.block.id, ()) if a.target == target)
            self._attribute_assigns[key] = found
        return list(found)

    def attribute_on_each_path(self, klass: Block, attribute: str) -> list:
        """The bindings `self.<attribute>` may hold when the one method of `klass` (or of its local
        bases) that sets it has run to its end: one per path through the `if`/`else` that binds it
        in each branch (`if use_bias: self.b = tf.Variable(...)` / `else: self.b = []`), the way
        `assigns_on_every_path` answers for a name. Empty when another method sets it too (a
        `build` that makes it later), when a path may leave it unbound, or it is bound in a loop."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.attribute_on_each_path(klass, attribute) if owner is not None else []
        found = self.attribute_assigns(klass, attribute)
        if not found or len({fn.block.id for _, fn in found}) != 1:
            return []
        fn = found[0][1]
        facts = self.facts
        if any(self.loops_around(a.site) or a.site.in_comprehension for a, _ in found):
            return []
        last = max(a.site.order for a in self.assigns_in(fn.block.id))
        end = Site(fn.block.end_line + 1, 0, last + 1, fn.block.id)  # past every binding of the method
        return self.assigns_on_every_path(found[0][0].target, end)

    def attribute(self, klass: Block, attribute: str, depth: int = 0):
        """What `self.<attribute>` holds in every method of `klass`: one value, or None."""
        owner = self.owner_of(klass)
        if owner is not self:
            return owner.attribute(klass, attribute, depth) if owner is not None else None
        key = (klass.id, attribute)
        if key in self._attributes:
            return self._attributes[key]
        self._attributes[key] = None  # while computing: unknown
        values = {}
        for assign, _ in self.attribute_assigns(klass, attribute):
            value = self._value_of(assign, depth + 1)
            values[id(value)] = value
        result = next(iter(values.values())) if len(values) == 1 else None
        self._attributes[key] = result
        return result

    # -- queries the rules ask (one place for reaching definitions and `self.` attributes) -------
    def assigns_here(self, name: str, site: Site) -> list:
        """The bindings of `name` in the scope of `site` that may hold there (a parameter is one);
        [] when none reaches the site from its own scope. Closures and globals are not looked at
        (`assigns_reaching` does). The same answer as `assigns_on_every_path`."""
        return self.assigns_on_every_path(name, site)

    def assign_here(self, name: str, site: Site):
        """The one binding of `name` in the scope of `site` that holds there, or None (none, or
        several may hold)."""
        found = self.assigns_on_every_path(name, site)
        return found[0] if len(found) == 1 else None

    def assigns_named(self, name: str) -> list:
        """Every binding of `name` in the file, in any scope (parameters too), in the facts' order."""
        index = self._assigns_by_name
        if index is None:
            index = self._assigns_by_name = {}
            for assign in self.facts.assigns:
                index.setdefault(assign.target, []).append(assign)
        return index.get(name, [])

    def made_once(self, assign) -> bool:
        """Whether `assign` is the only binding of its name in the file (parameters aside), a plain
        assignment in no loop and under no `if`/`else`/`except`/`case` of its scope: one object,
        made once, whatever reads the name (a global, a closure) and whenever."""
        facts = self.facts
        return (assign.kind == "assign"
                and sum(1 for a in self.assigns_named(assign.target) if a.kind != "param") == 1
                and not self.loops_around(assign.site)
                and not self.guarded(assign.site, facts.scope_of(assign.site)))

    def assigns_of(self, name: str, site: Site, bases: bool = True) -> list:
        """The bindings that may give `name` its value at `site`, one step (aliases not followed): for
        a name, `assigns_reaching`; for `self.x` in a method, every `self.x = ...` in the methods of
        its class and, unless `bases` is False, of its local base classes. [] when unknown."""
        if not name:
            return []
        head, _, attribute = name.partition(".")
        if not attribute:
            return self.assigns_reaching(name, site)
        klass = self.self_class(head, site) if "." not in attribute else None
        if klass is None:
            return []
        return [assign for assign, fn in self.attribute_assigns(klass, attribute) if bases or fn.owner is klass]

    def unaliased(self, dotted: str, site: Site, limit: int = MAX_ALIAS_DEPTH) -> str:
        """`self.gen.trainable_variables` for `gen.trainable_variables` after `gen = self.gen`: the head
        replaced by the name it is bound to, while one binding of it in its own scope holds at the site
        and binds another name (at most `limit` times). Closures and globals are not followed."""
        for _ in range(limit):
            head, dot, rest = dotted.partition(".")
            assign = self.assign_here(head, site)
            if assign is None or assign.value is None or assign.value.kind not in ("name", "attribute"):
                break
            dotted = assign.value.text + dot + rest
            site = assign.site
        return dotted
