'''# TAP404 optimizer-shared-across-variable-sets

## What it does
Flags an `optimizer.apply_gradients(zip(grads, variables))` (or `optimizer.apply(grads,
variables)`) when the same optimizer object was already given another set of variables:
a GAN whose generator and discriminator share one `Adam`, whether the optimizer is a
local name, a module global used by two step functions, or `self.optimizer` used in two
methods of a trainer class (or in a `train_step` override under `fit`). The finding is
on the second update and names the first, with both sets of variables.

The rule is silent unless it can tell the two sets apart: each set must be the
variables of models (`gen.trainable_variables`, `self.d.trainable_variables`, sums of
them) that are built at two different places of the file, from no shared layer or
tensor. The same optimizer over the same model in two places (a warm-up step and the
training step) is fine, and so is an optimizer built once for both sets with
`optimizer.build(...)`.

## Why is this bad?
A Keras 3 optimizer binds itself to the variables of its first update (it makes its
moment slots for them then). Any later update with a variable it was not built with
raises `ValueError: Unknown variable: ... This optimizer can only be called for the
variables it was originally built with`, on the first step of the second net, far from
the line that shared the optimizer. Keras 2 optimizers accepted this, so code ported
from Keras 2 (and many GAN tutorials) breaks here.

## Example
```python
import tensorflow as tf

generator = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
discriminator = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.Adam(1e-3)

def train_step(noise, real, d_loss_fn, g_loss_fn):
    with tf.GradientTape() as tape:
        d_loss = d_loss_fn(discriminator(real), discriminator(generator(noise)))
    d_grads = tape.gradient(d_loss, discriminator.trainable_variables)
    optimizer.apply_gradients(zip(d_grads, discriminator.trainable_variables))
    with tf.GradientTape() as tape:
        g_loss = g_loss_fn(discriminator(generator(noise)))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    optimizer.apply_gradients(zip(g_grads, generator.trainable_variables))
```

## Use instead
```python
import tensorflow as tf

generator = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
discriminator = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1)])
d_optimizer = tf.keras.optimizers.Adam(1e-3)
g_optimizer = tf.keras.optimizers.Adam(1e-3)

def train_step(noise, real, d_loss_fn, g_loss_fn):
    with tf.GradientTape() as tape:
        d_loss = d_loss_fn(discriminator(real), discriminator(generator(noise)))
    d_grads = tape.gradient(d_loss, discriminator.trainable_variables)
    d_optimizer.apply_gradients(zip(d_grads, discriminator.trainable_variables))
    with tf.GradientTape() as tape:
        g_loss = g_loss_fn(discriminator(generator(noise)))
    g_grads = tape.gradient(g_loss, generator.trainable_variables)
    g_optimizer.apply_gradients(zip(g_grads, generator.trainable_variables))
```
'''

from __future__ import annotations

import re
from bisect import bisect_right


from tapecheck.model import SAME_LIST, Function, Klass, distributes, method_of, model_of, variable_owner
from tapecheck.rules._common import is_keras_class, report, token_gap

CODE = "TAP404"
NAME = "optimizer-shared-across-variable-sets"
SUMMARY = "one optimizer is given two different sets of variables (a GAN's two nets): Keras 3 raises `Unknown variable`"
PROBE = True
APPLY = re.compile(rb"\." + token_gap() + rb"apply" + token_gap(rb")") + rb"\(")


def screen(source: bytes) -> bool:
    """`apply_gradients`, or an `.apply(` call in a file that mentions an optimizer."""
    return b"apply_gradients" in source or (b"ptimizer" in source and APPLY.search(source) is not None)

SETUP_METHODS = frozenset({"__init__", "build", "compile"})
MAX_DEPTH = 4
HINT = ("Make one optimizer per set of variables (e.g. `generator_optimizer` and `discriminator_optimizer`), "
        "or build it once for both: `optimizer.build(a.trainable_variables + b.trainable_variables)`.")

VALID = [
    # a GAN with two optimizers
    """
import tensorflow as tf
class GAN:
    def __init__(self):
        self.generator = tf.keras.Sequential([tf.keras.layers.Dense(3)])
        self.discriminator = tf.keras.Sequential([tf.keras.layers.Dense(1)])
        self.g_opt = tf.keras.optimizers.Adam(1e-3)
        self.d_opt = tf.keras.optimizers.Adam(1e-3)
    def step(self, noise, real, d_loss_fn, g_loss_fn):
        with tf.GradientTape() as tape:
            d_loss = d_loss_fn(self.discriminator(real), self.discriminator(self.generator(noise)))
        grads = tape.gradient(d_loss, self.discriminator.trainable_variables)
        self.d_opt.apply_gradients(zip(grads, self.discriminator.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = g_loss_fn(self.discriminator(self.generator(noise)))
        grads = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_opt.apply_gradients(zip(grads, self.generator.trainable_variables))
""",
    # the same optimizer over the same model in a warm-up step and the training step
    """
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.SGD(0.1)
def warm_up(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_weights))
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
""",
    # built once for both sets: the second update knows its variables
    """
import tensorflow as tf
generator = tf.keras.Sequential([tf.keras.layers.Dense(3)])
critic = tf.keras.Sequential([tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.Adam()
opt.build(generator.trainable_variables + critic.trainable_variables)
def step(g_grads, c_grads):
    opt.apply_gradients(zip(c_grads, critic.trainable_variables))
    opt.apply_gradients(zip(g_grads, generator.trainable_variables))
""",
    # first the whole model, then a part of it: every variable is known (a subset)
    """
import tensorflow as tf
encoder = tf.keras.Sequential([tf.keras.layers.Dense(4)])
model = tf.keras.Sequential([encoder, tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.Adam()
def step(all_grads, enc_grads):
    opt.apply_gradients(zip(all_grads, model.trainable_variables))
    opt.apply_gradients(zip(enc_grads, encoder.trainable_variables))
""",
    # two nets handed in as parameters: the model cannot tell them apart (silent)
    """
import tensorflow as tf
def step(net_a, net_b, opt, grads_a, grads_b):
    opt.apply_gradients(zip(grads_a, net_a.trainable_variables))
    opt.apply_gradients(zip(grads_b, net_b.trainable_variables))
""",
    # a fresh optimizer each call, one branch per call
    """
import tensorflow as tf
gen = tf.keras.Sequential([tf.keras.layers.Dense(3)])
disc = tf.keras.Sequential([tf.keras.layers.Dense(1)])
def update(which, grads):
    opt = tf.keras.optimizers.SGD(0.1)
    if which == "gen":
        opt.apply_gradients(zip(grads, gen.trainable_variables))
    else:
        opt.apply_gradients(zip(grads, disc.trainable_variables))
""",
]

INVALID = [
    # two nets made by one helper from the same settings (a float rate among them), one optimizer
    """
import tensorflow as tf
rate = 0.3
width = 64
def make(units, drop):
    return tf.keras.Sequential([tf.keras.layers.Dense(units), tf.keras.layers.Dropout(drop), tf.keras.layers.Dense(1)])
gen = make(width, rate)
disc = make(width, rate)
opt = tf.keras.optimizers.Adam(1e-4)
def train(batches, loss_fn):
    for x in batches:
        with tf.GradientTape() as tape:
            d_loss = loss_fn(disc(gen(x, training=True), training=True))
        opt.apply_gradients(zip(tape.gradient(d_loss, disc.trainable_variables), disc.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = -loss_fn(disc(gen(x, training=True), training=True))
        opt.apply_gradients(zip(tape.gradient(g_loss, gen.trainable_variables), gen.trainable_variables))  # expect: TAP404
""",
    # `self.optimizer` in two methods of a trainer, the discriminator's called first
    """
import tensorflow as tf
class GANTrainer:
    def __init__(self, make_gen, make_disc):
        self.gen = make_gen()
        self.disc = make_disc()
        self.optimizer = tf.keras.optimizers.Adam(2e-4)
    def disc_step(self, grads):
        self.optimizer.apply_gradients(zip(grads, self.disc.trainable_variables))
    def gen_step(self, grads):
        gen_vars = self.gen.trainable_variables
        self.optimizer.apply_gradients(zip(grads, gen_vars))  # expect: TAP404
    def train(self, batches):
        for d_grads, g_grads in batches:
            self.disc_step(d_grads)
            self.gen_step(g_grads)
""",
    # a module-level optimizer, one step alternating the nets in a loop
    """
import tensorflow as tf
encoder = tf.keras.Sequential([tf.keras.layers.Dense(4)])
head = tf.keras.Sequential([tf.keras.layers.Dense(1)])
critic = tf.keras.Sequential([tf.keras.layers.Dense(1)])
opt = tf.keras.optimizers.Adam()
def fit(batches):
    for step, (main_grads, critic_grads) in enumerate(batches):
        if step % 2:
            opt.apply_gradients(zip(critic_grads, critic.trainable_variables))
        else:
            opt.apply_gradients(zip(main_grads, encoder.trainable_variables + head.trainable_variables))  # expect: TAP404
""",
]


# -- what an expression stands for -------------------------------------------------------
class Owner:
    """A model whose variables are in a set: a key that names the object, and where it is built."""

    __slots__ = ("key", "text", "built", "scope", "model")

    def __init__(self, key, text, built, scope, model=None):
        # model: the program model of the file `built` is in (another module's, for a class defined there)
        self.key, self.text, self.built, self.scope, self.model = key, text, built, scope, model


def _one_binding(model, name, site):
    """(the one binding of `name` that holds at `site`, whether it is a global or a closure's), or
    None: several may hold, or an outer one is not made once (then which object a call sees depends
    on when it runs)."""
    assigns = model.assigns_reaching(name, site)
    if len(assigns) != 1:
        return None
    assign = assigns[0]
    if model.facts.scope_of(assign.site) == model.facts.scope_of(site):
        return assign, False
    return (assign, True) if model.made_once(assign) else None


def _object(model, text, site):
    """What `text` (a name or `self.x`) names: an Owner, or None when the model cannot say."""
    head, _, rest = text.partition(".")
    if rest and model.self_class(head, site) is None and "." not in rest:
        return _instance_attribute(model, head, rest, text, site)
    if rest:
        klass = model.self_class(head, site)
        if klass is None or "." in rest:
            return None
        assigns = model.attribute_assigns(klass, rest)
        built = assigns[0][0] if len(assigns) == 1 and _is_construction(model, assigns[0][0]) else None
        scope = assigns[0][1].block.id if built is not None else None
        return Owner(("attr", klass.id, rest), f"self.{rest}", built, scope)
    found = _one_binding(model, text, site)
    if found is None:
        return None
    assign = found[0]
    built = assign if _is_construction(model, assign) else None
    return Owner(("bound", assign.site.order), text, built, model.facts.scope_of(assign.site))


def _instance_attribute(model, head, rest, text, site):
    """`cycle_gan.DA`: an attribute set once, to a new model, in the methods of the class (of this
    file or of a project module) that `head` is the one instance of."""
    found = _one_binding(model, head, site)
    instance = model.binding(head, site) if found is not None else None
    klass = getattr(instance, "klass", None)
    if klass is None or found[0].kind != "assign":
        return None
    owner = klass.model
    assigns = owner.attribute_assigns(klass.block, rest)
    if len(assigns) != 1 or not _is_construction(owner, assigns[0][0]):
        return None
    return Owner(("instance", found[0].site.order, rest), text, assigns[0][0], assigns[0][1].block.id, owner)


def _is_construction(model, assign) -> bool:
    """`x = Sequential(...)`, `x = make_generator()`, `x = Net()`: a new object, not one read from another."""
    value = assign.value
    if assign.kind != "assign" or value is None or value.kind != "call" or not value.func_text:
        return False
    head = value.func_text.partition(".")[0]
    if "." in value.func_text and head not in model.facts.imports:
        return False  # `other.get_layer(...)`, `self.build_net(...)`: derived from an object
    return True


def _reads(model, assign) -> set[str]:
    """The objects a construction reads (layers, tensors, other models), not modules, classes or constants."""
    facts = model.facts
    callees = {c.func.text for c in model.spans.calls_in(assign.span) if c.func.text}
    names = set()
    for use in model.spans.uses_in(assign.span):
        name = use.name
        if name in callees:
            if "." not in name:
                continue
            name = name.rsplit(".", 1)[0]
        head = name.partition(".")[0]
        if head in facts.imports or head in facts.relative_imports or head.isupper():
            continue
        bound = model.binding(head, use.site) if "." not in name else None
        if isinstance(bound, (Function, Klass)):
            continue
        reaching = model.assigns_here(head, use.site)
        if reaching and all((a.value is not None and a.value.kind == "constant")
                            or (a.kind == "param" and a.default is not None and a.default.kind == "constant")
                            for a in reaching):
            continue  # a constant, or a parameter whose default is one (`inner_filters=64`): a setting
        names.add(name)
    return names


def _related(a: set[str], b: set[str]) -> bool:
    return any(x == y or x.startswith(y + ".") or y.startswith(x + ".") for x in a for y in b)


def _distinct(model, one: Owner, other: Owner) -> bool:
    """Two models built apart, from nothing in common: their variables are disjoint."""
    if one.key == other.key or one.built is None or other.built is None or one.built is other.built:
        return False
    if (one.model or model) is not (other.model or model):
        return False  # built in two files: their reads are not comparable
    model = one.model or model
    reads_one, reads_other = _reads(model, one.built), _reads(model, other.built)
    if _related(reads_one, reads_other):
        return False  # a shared layer, input tensor or sub-model
    if _related(reads_one, {other.text, other.built.target}) or _related(reads_other, {one.text, one.built.target}):
        return False  # one is built from the other (`combined = Sequential([gen, disc])`)
    return True


def _owners(model, span, site, depth=0):
    """The models whose variables an expression's value is, or None."""
    if depth > MAX_DEPTH or model.spans.calls_in(span):
        return None
    uses = [u for u in model.spans.uses_in(span) if not u.site.in_comprehension]
    if not uses or len(uses) != len(model.spans.uses_in(span)):
        return None
    if len(uses) == 1 and not variable_owner(uses[0].name):
        assign = model.assign_here(uses[0].name, uses[0].site)
        if assign is None or assign.kind != "assign" or assign.span == (0, 0):
            return None
        return _owners(model, assign.span, assign.site, depth + 1)
    found = []
    for use in uses:
        text = model.unaliased(use.name, use.site, MAX_DEPTH)
        owner, _, attribute = text.rpartition(".")
        if not variable_owner(text) or SAME_LIST.get(attribute, attribute) != "trainable_variables":
            return None
        made = _object(model, owner, use.site)
        if made is None:
            return None
        found.append(made)
    return found


def _zip_variables(model, call):
    """The span of `variables` in `apply_gradients(zip(grads, variables))` (also through a name)."""
    facts = model.facts
    pairs = call.arg(0, "grads_and_vars")
    if pairs is None:
        return None
    if pairs.kind == "call":
        span = call.arg_span(0, "grads_and_vars")
        site = call.site
    elif pairs.kind == "name":
        assign = model.assign_here(pairs.text, call.site)
        if assign is None or assign.value is None or assign.value.kind != "call":
            return None
        span, site = assign.span, assign.site
    else:
        return None
    calls = model.spans.calls_in(span) if span else []
    if not calls or calls[0].func.text != "zip" or "zip" in facts.imports or calls[0].end_order != span[1]:
        return None
    zipped = calls[0]
    if len(zipped.args) != 2 or zipped.keywords:
        return None
    variables = [(s, e) for k, s, e in zipped.arg_spans if k == 1]
    return (variables[0], site) if variables else None


def _variables(model, call):
    if method_of(call) == "apply_gradients":
        found = _zip_variables(model, call)
    else:
        spans = [(s, e) for k, s, e in call.arg_spans if k in (1, "trainable_variables")]
        found = (spans[0], call.site) if spans and len(call.args) + len(call.keywords) == 2 else None
    if found is None:
        return None
    return _owners(model, found[0], found[1])


# -- which optimizer -----------------------------------------------------------------------
def _optimizer(model, receiver, site):
    """(key, persistent, binding site or None) for the optimizer object `receiver` names, or None."""
    head, _, rest = receiver.partition(".")
    if rest:
        klass = model.self_class(head, site)
        if klass is None or "." in rest:
            return None
        assigns = model.attribute_assigns(klass, rest)
        if not assigns:
            if rest != "optimizer" or not model.is_keras(klass, "layers"):
                return None  # set from outside the class: unknown
            if distributes(model.facts):
                return None  # under a strategy, `fit` builds the compiled optimizer for all the model's variables
        elif len(assigns) != 1 or assigns[0][1].name not in SETUP_METHODS:
            return None  # replaced in a method: which object a call sees depends on the order
        return ("attr", klass.id, rest), True, None
    found = _one_binding(model, receiver, site)
    if found is None:
        return None
    assign, outer = found
    return ("bound", assign.site.order), outer, None if outer else assign.site


def _is_optimizer_construction(model, receiver, site) -> bool:
    assigns = model.assigns_here(receiver, site) or model.assigns_named(receiver)
    return any(a.value is not None and a.value.kind == "call" and is_keras_class(a.value.callee, "optimizers")
               for a in assigns)


# -- when the two calls meet the same object ------------------------------------------------
def _same_object(facts, first, second, bound_at):
    """Both calls see one optimizer object, `first` before `second` at least once."""
    if facts.dominates(first.site, second.site):
        return True
    shared = set(facts.loops_between(None, first.site)) & set(facts.loops_between(None, second.site))
    if bound_at is not None:
        shared -= set(facts.chain(bound_at.block))  # a loop that makes a new optimizer each pass
    return bool(shared)


def _run_order(model, first, second):
    """Which of two calls in different functions runs first: by a function calling both (the one
    that calls either first), else by position."""
    facts = model.facts
    one, other = facts.scope_of(first.site), facts.scope_of(second.site)
    both = [orders for orders in model.call_graph().values() if one in orders and other in orders]
    if both:
        orders = min(both, key=lambda o: min(o[one], o[other]))
        return (first, second) if orders[one] < orders[other] else (second, first)
    return first, second


def _unknown_to(model, first_set, second_set):
    """A model of the second set whose variables the first set cannot hold."""
    for owner in second_set:
        if all(_distinct(model, owner, known) for known in first_set):
            return owner
    return None


def _differing(sets):
    """For an index i, the entries after `sets[i]` whose models are not the same keys as its own,
    in order: two sets of the same models never give a finding (`_distinct` is False for one key),
    so they are not paired, and N updates of one model cost N, not N^2 (grouped once per list)."""
    keys = [frozenset(owner.key for owner in entry[2]) for entry in sets]
    groups: dict = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)

    def after(i):
        later = sorted(j for key, indexes in groups.items() if key != keys[i]
                       for j in indexes[bisect_right(indexes, i):])
        return [sets[j] for j in later]
    return after


def _text(owners) -> str:
    return " + ".join(f"{o.text}.trainable_variables" for o in owners)


def check(facts):
    model = model_of(facts)
    updates = {}
    for call in model.spans.calls:
        method = method_of(call)
        if method not in ("apply_gradients", "apply") or not call.receiver or call.site.in_comprehension:
            continue
        found = _optimizer(model, call.receiver, call.site)
        if found is None:
            continue
        updates.setdefault(found[0], []).append((call, found))
    built = {found[0] for call in model.spans.calls if method_of(call) == "build" and call.receiver
             for found in [_optimizer(model, call.receiver, call.site)] if found is not None}
    reported = set()
    for key, calls in updates.items():
        if key in built or len(calls) < 2:
            continue
        if not any(method_of(c) == "apply_gradients" for c, _ in calls) \
                and not _is_optimizer_construction(model, calls[0][0].receiver, calls[0][0].site):
            continue  # `.apply(...)` on something that may not be an optimizer
        sets = [(call, found, _variables(model, call)) for call, found in calls]
        sets = [entry for entry in sets if entry[2]]
        differing = _differing(sets)
        for i, (one, found, one_set) in enumerate(sets):
            for other, _, other_set in differing(i):
                _, persistent, bound_at = found
                same_scope = facts.scope_of(one.site) == facts.scope_of(other.site)
                if same_scope:
                    if not _same_object(facts, one, other, bound_at):
                        continue
                    order = [(one, one_set, other, other_set)]
                    if not facts.dominates(one.site, other.site):
                        order.append((other, other_set, one, one_set))  # alternating in a loop: either first
                elif persistent:
                    first, second = _run_order(model, one, other)
                    first_set, second_set = (one_set, other_set) if first is one else (other_set, one_set)
                    order = [(first, first_set, second, second_set)]
                else:
                    continue
                for first, first_set, second, second_set in order:
                    stranger = _unknown_to(model, first_set, second_set)
                    if stranger is None or second.site in reported:
                        continue
                    reported.add(second.site)
                    finding = report(
                        facts, second.site, CODE,
                        f"`{second.receiver}` was first given `{_text(first_set)}` (line {first.site.line}), "
                        f"here `{_text(second_set)}`: a Keras 3 optimizer is built for the variables of its first "
                        f"update, so `{stranger.text}`'s variables raise ValueError (Unknown variable ... "
                        "originally built with)",
                        HINT, details={"keras2": None},  # Keras 2: not measured here, silent
                    )
                    yield finding
                    break
