"""The reference loop: data without downloads, metrics as data, exact resume from
checkpoints, progress output, and clean under the linter and the probe.

Real TensorFlow and real files; TensorFlow is imported once for the module, and the
one subprocess is the cross-process resume through `python -m tapecheck.reference`."""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")
import numpy as np
from click.testing import CliRunner

from tapecheck import reference
from tapecheck.lint import lint_file

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def diabetes():
    return reference.load_data("diabetes")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, diabetes):
    """Four epochs in one go, checkpointed, its progress captured as a pipe would see it."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    output = io.StringIO()
    result = reference.train(epochs=4, data=diabetes, checkpoint_dir=str(directory), progress=reference.Progress(output))
    return result, directory, output.getvalue()


def checkpoint_values(path) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(str(path))
    # Variables only: the object graph is metadata, and save_counter counts saves, not training.
    names = [name for name in reader.get_variable_to_shape_map() if name.endswith("VARIABLE_VALUE") and "save_counter" not in name]
    return {name: reader.get_tensor(name) for name in names}


# --- data -----------------------------------------------------------------------------


def test_auto_uses_california_only_from_the_cache_else_diabetes_saying_so():
    data = reference.load_data("auto")
    if reference._california_from_cache() is not None:
        assert (data.name, data.n_features) == ("california", 8)
    else:
        assert (data.name, data.n_features) == ("diabetes", 10)
        assert "not in the local scikit-learn cache" in data.note and "nothing is downloaded" in data.note


def test_california_is_never_downloaded(tmp_path, monkeypatch):
    monkeypatch.setenv("SCIKIT_LEARN_DATA", str(tmp_path))  # an empty cache
    with pytest.raises(reference.ReferenceLoopError, match="never downloads"):
        reference.load_data("california")
    assert reference.load_data("auto").name == "diabetes"
    assert not any(tmp_path.rglob("*.gz")) and not any(tmp_path.rglob("*.pkz"))


def test_split_is_disjoint_and_standardized_on_training_rows(diabetes):
    assert len(diabetes.x_train) + len(diabetes.x_val) == 442 and len(diabetes.x_val) == 88
    assert np.allclose(diabetes.x_train.mean(0), 0, atol=1e-5) and np.allclose(diabetes.x_train.std(0), 1, atol=1e-4)
    assert abs(float(diabetes.y_train.mean())) < 1e-5 and diabetes.y_train.shape == (354, 1)
    assert diabetes.x_train.dtype == np.float32
    train_rows = {row.tobytes() for row in diabetes.x_train}
    assert not any(row.tobytes() in train_rows for row in diabetes.x_val)


def test_epoch_batches_depend_on_seed_and_epoch_only(diabetes):
    def first_targets(seed, epoch):
        _, y = next(iter(reference.epoch_batches(diabetes.x_train, diabetes.y_train, 64, seed, epoch)))
        return y.numpy().ravel()

    assert np.array_equal(first_targets(0, 3), first_targets(0, 3))
    assert not np.array_equal(first_targets(0, 3), first_targets(0, 4))
    assert not np.array_equal(first_targets(0, 3), first_targets(1, 3))
    rows = sum(len(x) for x, _ in reference.epoch_batches(diabetes.x_train, diabetes.y_train, 64, 0, 0))
    assert rows == 354


# --- training, metrics as data --------------------------------------------------------


def test_train_returns_final_metrics_as_data_and_learns(uninterrupted):
    result, _, _ = uninterrupted
    assert set(result.metrics) == {"loss", "mae", "val_loss", "val_mae"}
    assert result.metrics == result.history[-1] and len(result.history) == 4
    assert (result.epochs_completed, result.resumed_from_epoch, result.data) == (4, 0, "diabetes")
    assert result.history[-1]["loss"] < 0.8 * result.history[0]["loss"]
    assert json.loads(json.dumps(result.to_dict()))["metrics"] == result.metrics


def test_validation_metrics_describe_the_last_epoch_only(uninterrupted, diabetes):
    """Evaluate the saved final weights afresh: the same validation loss the loop reported."""
    result, directory, _ = uninterrupted
    model = reference.build_model(diabetes.n_features)
    tf.train.Checkpoint(model=model).restore(str(directory / "ckpt-4")).expect_partial()
    trainer = reference.Trainer(model, reference.make_optimizer(), reference.make_loss())
    for x, y in tf.data.Dataset.from_tensor_slices((diabetes.x_val, diabetes.y_val)).batch(64):
        trainer.val_step(x, y)
    assert trainer.results()["val_loss"] == pytest.approx(result.history[-1]["val_loss"], rel=1e-6)
    assert result.history[-1]["val_loss"] != pytest.approx(np.mean([h["val_loss"] for h in result.history]), rel=1e-3)


# --- checkpoints and resume -------------------------------------------------------------


def test_stopped_after_epoch_2_and_rerun_it_continues_at_epoch_3_exactly(tmp_path, uninterrupted, diabetes):
    full, full_directory, _ = uninterrupted
    first = reference.train(epochs=2, data=diabetes, checkpoint_dir=str(tmp_path))
    assert first.checkpoint.endswith("ckpt-2")
    # The state it resumes from is the state the uninterrupted run had after epoch 2 ...
    assert_same_values(checkpoint_values(tmp_path / "ckpt-2"), checkpoint_values(full_directory / "ckpt-2"))

    output = io.StringIO()
    resumed = reference.train(epochs=4, data=diabetes, checkpoint_dir=str(tmp_path), progress=reference.Progress(output))
    assert (resumed.resumed_from_epoch, resumed.epochs_completed, len(resumed.history)) == (2, 4, 2)
    assert "resuming from" in output.getvalue() and "epoch 3/4" in output.getvalue() and "epoch 1/4" not in output.getvalue()
    # ... and it ends where the uninterrupted run ended: same batches, same dropout masks,
    # same optimizer moments. Equal epoch metrics also prove the metrics were reset at each
    # boundary in the uninterrupted run (the resumed one started with fresh metrics).
    assert resumed.history == full.history[2:]
    assert_same_values(checkpoint_values(tmp_path / "ckpt-4"), checkpoint_values(full_directory / "ckpt-4"))
    # max_to_keep=3: the oldest of four is gone.
    assert sorted(p.name for p in tmp_path.glob("ckpt-*.index")) == ["ckpt-2.index", "ckpt-3.index", "ckpt-4.index"]

    again = reference.train(epochs=4, data=diabetes, checkpoint_dir=str(tmp_path))
    assert again.history == [] and set(again.metrics) == {"val_loss", "val_mae"}
    assert again.metrics["val_loss"] == pytest.approx(full.metrics["val_loss"], rel=1e-6)


def assert_same_values(saved, expected):
    assert saved.keys() == expected.keys()
    assert any("random_state" in name for name in saved), "Dropout's seed state must be checkpointed"
    assert any("optimizer" in name for name in saved)
    for name in saved:
        assert np.array_equal(saved[name], expected[name]), name


def test_a_checkpoint_of_another_model_is_a_clear_error(tmp_path):
    rng = np.random.default_rng(0)
    three_features = reference.RegressionData(
        "made-up", "made-up data", *(rng.normal(size=shape).astype(np.float32) for shape in [(40, 3), (40, 1), (8, 3), (8, 1)])
    )
    reference.train(epochs=1, data=three_features, checkpoint_dir=str(tmp_path), batch_size=16)
    with pytest.raises(reference.ReferenceLoopError, match=r"ckpt-1: cannot resume from this checkpoint") as error:
        reference.train(epochs=2, data="diabetes", checkpoint_dir=str(tmp_path))
    assert "\n" not in str(error.value)


def test_checkpoint_dir_that_is_a_file_is_a_clear_error(tmp_path):
    a_file = tmp_path / "ckpt"
    a_file.write_text("not a directory")
    with pytest.raises(reference.ReferenceLoopError, match="not a directory"):
        reference.train(epochs=1, data="diabetes", checkpoint_dir=str(a_file))


# --- progress ---------------------------------------------------------------------------


def test_progress_is_one_plain_line_per_epoch_when_piped(uninterrupted):
    _, _, output = uninterrupted
    lines = output.splitlines()
    assert lines[0].startswith("data: scikit-learn's bundled diabetes set")
    assert [line.split("  ")[0] for line in lines[1:]] == ["epoch 1/4", "epoch 2/4", "epoch 3/4", "epoch 4/4"]
    assert "\r" not in output and "#" not in output


def read_all(descriptor) -> str:
    """Everything written to the pseudo-terminal so far (it hands it over in pieces)."""
    chunks = []
    while select.select([descriptor], [], [], 0.5)[0]:
        chunks.append(os.read(descriptor, 65536))
    return b"".join(chunks).decode()


def test_progress_is_a_bar_on_a_terminal(diabetes):
    controller, terminal = os.openpty()  # a real pseudo-terminal: isatty() is True
    try:
        with os.fdopen(terminal, "w", closefd=False) as stream:
            reference.train(epochs=1, data=diabetes, progress=reference.Progress(stream))
        written = read_all(controller)
    finally:
        os.close(controller)
        os.close(terminal)
    assert "\repoch 1/1 [#####" in written and "6/6" in written  # 354 rows / 64: six steps
    assert "\r\x1b[Kepoch 1/1  loss" in written  # the bar cleared, the summary kept


# --- command line -------------------------------------------------------------------------


def test_killed_mid_run_then_rerun_ends_with_the_weights_of_an_uninterrupted_run(tmp_path, diabetes):
    """SIGKILL a `python -m tapecheck.reference` run once epoch 2 is reported, rerun the
    command on the same directory: it resumes from the last checkpoint written and ends
    where a run that was never killed ends. Small batches make epochs long enough that the
    kill lands a few epochs before the end."""
    command = [sys.executable, "-m", "tapecheck.reference", "--data", "diabetes", "--batch-size", "4", "--checkpoint-dir", str(tmp_path)]
    process = subprocess.Popen(command + ["--epochs", "50"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    try:
        for line in process.stdout:  # piped: one flushed line per epoch
            if line.startswith("epoch 2/50"):
                process.kill()
                break
    finally:
        process.kill()
        process.wait(timeout=60)
        process.stdout.close()
    assert process.returncode == -9, "the run ended before it could be killed"

    outcome = CliRunner().invoke(reference.cli, command[3:] + ["--epochs", "6", "--json"])
    assert outcome.exit_code == 0, outcome.output
    resumed = json.loads(outcome.output[outcome.output.index("{\n"):])
    assert 1 <= resumed["resumed_from_epoch"] <= 5, "the kill landed after epoch 5: the machine is very slow"
    assert f"epoch {resumed['resumed_from_epoch'] + 1}/6" in outcome.output

    full_directory = tmp_path / "never-killed"
    full = reference.train(epochs=6, batch_size=4, data=diabetes, checkpoint_dir=str(full_directory))
    assert resumed["history"] == full.history[resumed["resumed_from_epoch"]:]
    assert_same_values(checkpoint_values(tmp_path / "ckpt-6"), checkpoint_values(full_directory / "ckpt-6"))


def test_cli_missing_california_is_one_line_and_status_2(tmp_path, monkeypatch):
    monkeypatch.setenv("SCIKIT_LEARN_DATA", str(tmp_path))
    outcome = CliRunner().invoke(reference.cli, ["--data", "california", "--epochs", "1"])
    assert outcome.exit_code == 2
    assert outcome.output.startswith("error: California housing is not in the local scikit-learn cache")
    assert outcome.output.count("\n") == 1


# --- clean under the linter and the probe -------------------------------------------------


def test_reference_is_clean_under_lint():
    for path in (ROOT / "tapecheck" / "reference.py", ROOT / "fixtures" / "align" / "reference_loop.py"):
        report = lint_file(str(path))
        assert (report.findings, report.errors) == ([], []), path


def test_reference_is_clean_under_the_probe_which_catches_a_loop_that_is_not(diabetes):
    from tapecheck.probe import probe

    with probe() as watched:
        reference.train(epochs=2, data=diabetes)
    assert watched.findings == []

    # The same probe, the same data, the reference's Trainer with its metric reset left out.
    with probe() as watched:
        model = reference.build_model(diabetes.n_features)
        trainer = reference.Trainer(model, reference.make_optimizer(), reference.make_loss())
        for epoch in range(2):
            for x, y in reference.epoch_batches(diabetes.x_train, diabetes.y_train, 64, 0, epoch):
                trainer.train_step(x, y)
            trainer.results()  # no trainer.reset_metrics() before the next epoch
    assert "TAP301" in {finding.code for finding in watched.findings}
