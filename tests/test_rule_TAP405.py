"""TAP405 (apply-gradients-arguments) across files: an optimizer class imported from another
module of the project is judged as the same class written in the linted file.

`apply_gradients(*zip(...))` is reported unless the optimizer is an instance of a class of the
project whose own `apply_gradients` may take the pairs unpacked. The imported class and a local
class are both block 1 of their files: the answer must be the imported class's own. This guards
TAP405's lookup of an imported class's method in that class's own model (88cd864: it asked this
file's `method_of_block` by block id, and answered the local class's method); the model's own
answer for a block of another file (`owner_of`) is tested in tests/test_model.py.
"""

from __future__ import annotations

import pytest

from tapecheck.lint import lint_paths

TAKES_MANY = "    def apply_gradients(self, *pairs):\n        return [p for p in pairs]\n"
NONE = "    def minimize(self, loss):\n        return loss\n"


def _class(name: str, body: str) -> str:
    return f"class {name}:\n{body}"


def _step(head: str) -> str:
    return head + (
        "opt = Opt()\n"
        "def step(model, x):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(model(x, training=True))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    opt.apply_gradients(*zip(grads, model.trainable_variables))\n"
    )


def _findings(path):
    found = lint_paths([str(path)], jobs=1, cache=False).findings
    text = path.read_text().splitlines()
    return [(f.code, text[f.line - 1].strip(), f.message) for f in found]


@pytest.mark.parametrize("opt_body,other_body", [(TAKES_MANY, NONE), (NONE, TAKES_MANY)],
                         ids=["imported-takes-many", "local-takes-many"])
def test_an_imported_optimizer_class_reports_as_the_same_class_in_one_file(tmp_path, opt_body, other_body):
    one = tmp_path / "one"
    two = tmp_path / "two"
    one.mkdir()
    two.mkdir()
    local = _class("Other", other_body)
    (one / "train.py").write_text(_step("import tensorflow as tf\n" + local + _class("Opt", opt_body)))
    (two / "opt.py").write_text(_class("Opt", opt_body))
    (two / "train.py").write_text(_step("import tensorflow as tf\nfrom opt import Opt\n" + local))
    alone = _findings(one / "train.py")
    assert _findings(two / "train.py") == alone
    reported = [("TAP405", "opt.apply_gradients(*zip(grads, model.trainable_variables))")]
    assert [finding[:2] for finding in alone] == ([] if opt_body == TAKES_MANY else reported)
