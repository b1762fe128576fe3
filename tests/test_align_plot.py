"""`tapecheck align --plot` draws the quantity that diverged first, and says which (issue 27).

`compare` is given what fit and a loop recorded (numbers, as the recorder holds them), so
no TensorFlow runs here; tests/test_align.py runs the real loops end to end.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from tapecheck.align import compare, plot, plot_figure  # noqa: E402


def recorded(losses, weights, logs, steps_per_epoch):
    return SimpleNamespace(losses=losses, weights=weights, epoch_logs=logs, steps_per_epoch=steps_per_epoch)


def lines_of(axes):
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in axes.get_lines()
            if not line.get_label().startswith("_")}


LOSSES = [1.0, 0.8, 0.6, 0.5]


def test_a_weight_divergence_draws_that_weight():
    fit_w = [[np.array([0.1 * s, 1.0]), np.array(0.5)] for s in range(1, 5)]
    your_w = [[w.copy(), b.copy()] for w, b in fit_w]
    your_w[2][0][0] += 0.5  # step 3: kernel[0] differs; the losses agree
    your_w[3][0][0] += 0.7
    recorder = recorded(LOSSES, fit_w, [{}, {}], [2, 2])
    result = compare(recorder, list(LOSSES), your_w, [{}, {}], ["dense/kernel", "dense/bias"], 1e-6, 1)
    assert result.divergence.kind == "variable" and result.divergence.step == 3
    figure = plot_figure(result)
    curves, differences = figure.axes
    assert curves.get_ylabel() == "dense/kernel[0]"
    assert "variable dense/kernel[0] diverged first" in curves.get_title()
    drawn = lines_of(curves)
    assert drawn["fit"] == ([1, 2, 3, 4], pytest.approx([0.1, 0.2, 0.3, 0.4]))
    assert drawn["your loop"][1] == pytest.approx([0.1, 0.2, 0.8, 1.1])  # not the losses
    assert differences.get_ylabel() == "relative difference of dense/kernel[0]"


def test_an_epoch_metric_divergence_draws_that_metric_per_epoch(tmp_path):
    weights = [[np.array([1.0])] for _ in range(4)]
    fit_logs = [{"loss": 0.9, "accuracy": 0.5}, {"loss": 0.55, "accuracy": 0.75}]
    yours = [{"loss": 0.9, "accuracy": 0.5}, {"loss": 0.55, "accuracy": 0.6}]
    result = compare(recorded(LOSSES, weights, fit_logs, [2, 2]), list(LOSSES), weights, yours, ["w"], 1e-6, 1)
    assert result.divergence.kind == "epoch metric" and result.divergence.name == "accuracy"
    figure = plot_figure(result)
    curves, differences = figure.axes
    assert curves.get_ylabel() == "accuracy" and "epoch metric 'accuracy' diverged first" in curves.get_title()
    assert lines_of(curves)["your loop"] == ([1, 2], pytest.approx([0.5, 0.6]))
    assert differences.get_xlabel() == "epoch"
    plot(result, str(tmp_path / "metric.png"))
    assert (tmp_path / "metric.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_loss_divergence_and_an_aligned_run_draw_the_losses():
    weights = [[np.array([1.0])] for _ in range(4)]
    aligned = compare(recorded(LOSSES, weights, [{}, {}], [2, 2]), list(LOSSES), weights, [{}, {}], ["w"], 1e-6, 1)
    curves, _ = plot_figure(aligned).axes
    assert curves.get_ylabel() == "batch loss" and "within tolerance" in curves.get_title()
    off = [1.0, 0.8, 0.7, 0.6]
    diverged = compare(recorded(LOSSES, weights, [{}, {}], [2, 2]), off, weights, [{}, {}], ["w"], 1e-6, 1)
    curves, _ = plot_figure(diverged).axes
    assert curves.get_ylabel() == "batch loss" and curves.get_title() == "the loss diverged first"
    assert lines_of(curves)["your loop"][1] == pytest.approx(off)
