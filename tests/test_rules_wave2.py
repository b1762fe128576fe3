"""Wave-2 rules beyond their examples: TAP403 across the files of a project.

The program model reads the project files a file imports (never libraries), so a file
linted alone (pre-commit names only staged files) still sees a model defined elsewhere."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tapecheck.lint import lint_file, lint_paths

MODELS = """
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

TRAIN = """
import tensorflow as tf
{import_line}

model = {maker}()
optimizer = tf.keras.optimizers.Adam()

def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def _tap403(report):
    return [(Path(f.path).name, f.line) for f in report.findings if f.code == "TAP403"]


def test_a_model_class_from_another_file_is_resolved_within_one_run(tmp_path):
    _write(tmp_path, {"models.py": MODELS, "train.py": TRAIN.format(import_line="from models import Net", maker="Net")})
    assert _tap403(lint_paths([str(tmp_path)])) == [("train.py", 10)]


def test_a_lone_file_still_reads_the_module_that_defines_its_model(tmp_path):
    _write(tmp_path, {"models.py": MODELS, "train.py": TRAIN.format(import_line="from models import Net", maker="Net")})
    assert _tap403(lint_file(str(tmp_path / "train.py"))) == [("train.py", 10)]
    (tmp_path / "models.py").unlink()  # the import cannot be followed: silent
    assert _tap403(lint_file(str(tmp_path / "train.py"))) == []


def test_a_model_instance_made_in_another_module_and_imported(tmp_path):
    nets = """
    import keras

    net = keras.Sequential([keras.layers.Dense(8), keras.layers.Dropout(0.3), keras.layers.Dense(1)])
    plain = keras.Sequential([keras.layers.Dense(8), keras.layers.Dense(1)])
    """
    train = TRAIN.replace("model = {maker}()\n", "").replace("model", "{name}")
    _write(tmp_path, {"nets.py": nets, "a.py": train.format(import_line="from nets import net", name="net"),
                      "b.py": train.format(import_line="from nets import plain", name="plain")})
    assert _tap403(lint_paths([str(tmp_path)])) == [("a.py", 9)]


def test_a_step_whose_model_parameter_every_caller_fills_with_a_dropout_model(tmp_path):
    step = """
    import tensorflow as tf
    from models import Net

    def train_step(model, optimizer, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    def main(data, plain):
        net, optimizer = Net(), tf.keras.optimizers.Adam()
        for x, y in data:
            train_step(net, optimizer, x, y)
    """
    _write(tmp_path, {"models.py": MODELS, "train.py": step})
    assert _tap403(lint_paths([str(tmp_path)])) == [("train.py", 7)]
    # one caller passes another model, with no Dropout: the parameter may be either, stay silent
    _write(tmp_path, {"train.py": step + "\n    train_step(plain, optimizer, x, y)\n"})
    assert _tap403(lint_paths([str(tmp_path)])) == []


def test_a_relative_import_of_a_model_builder_in_a_package(tmp_path):
    builder = """
    import keras

    def build_model():
        return keras.Sequential([keras.layers.Dense(8), keras.layers.BatchNormalization(), keras.layers.Dense(1)])
    """
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/nets.py": builder,
            "pkg/train.py": TRAIN.format(import_line="from .nets import build_model", maker="build_model"),
        },
    )
    assert _tap403(lint_paths([str(tmp_path)])) == [("train.py", 10)]


def test_a_same_named_model_without_dropout_elsewhere_is_not_confused(tmp_path):
    plain = MODELS.replace("keras.layers.Dropout(0.5)", "keras.layers.Dense(16)")
    _write(
        tmp_path,
        {
            "models.py": plain,
            "other/models_with_dropout.py": MODELS,
            "train.py": TRAIN.format(import_line="from models import Net", maker="Net"),
        },
    )
    assert _tap403(lint_paths([str(tmp_path)])) == []
