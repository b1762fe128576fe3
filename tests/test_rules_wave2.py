"""Wave-2 rules beyond their examples: TAP403 across the files of one lint run."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tapecheck.lint import lint_file, lint_paths
from tapecheck.lint.project import ProjectIndex, mode_definitions, module_name

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


def test_a_lone_file_stays_silent_when_the_definition_is_not_seen(tmp_path):
    _write(tmp_path, {"models.py": MODELS, "train.py": TRAIN.format(import_line="from models import Net", maker="Net")})
    assert _tap403(lint_file(str(tmp_path / "train.py"))) == []


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


def test_the_index_counts_models_not_layer_helpers_or_comments():
    source = textwrap.dedent(
        """
        from keras import layers
        import keras

        def conv_block(x):
            x = layers.Conv2D(8, 3)(x)
            return layers.BatchNormalization()(x)  # a helper on tensors, not a model

        def build():
            inputs = keras.Input((8,))
            return keras.Model(inputs, layers.Dropout(0.1)(inputs))

        class Plain(keras.Model):
            # no Dropout( here, only in this comment
            pass

        class Dropout(layers.Layer):
            pass

        classifier = keras.Sequential([layers.Dense(4), layers.Dropout(0.2)])
        """
    )
    assert mode_definitions(source) == {"build", "classifier"}


def test_module_names_match_imports_by_dotted_suffix():
    index = ProjectIndex()
    index.add("src/project/models.py", MODELS)
    assert module_name("src/project/models.py") == "src.project.models"
    assert index.defines("project.models.Net")
    assert index.defines("models.Net")
    assert not index.defines("other.models_x.Net")
    assert not index.defines("project.models.Other")
