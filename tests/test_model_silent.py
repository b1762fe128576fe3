"""Silent mistakes the program model sees away from the loop, checked under real TensorFlow.

Each `fixtures/model/silent/bad/X.py` gives exactly its `# expect:` findings and its
corrected twin `good/X.py` none. Nothing fails at run time, so each test runs both
twins and shows the misbehaviour in numbers: the bad one's reported values are wrong
where the good one's are right.
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from expectations import expected, found
from tapecheck.lint import lint_file

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "model" / "silent"
NAMES = sorted(p.name for p in (ROOT / "bad").glob("*.py"))


def test_every_silent_fixture_has_a_twin():
    assert NAMES and NAMES == sorted(p.name for p in (ROOT / "good").glob("*.py"))


@pytest.mark.parametrize("name", NAMES)
def test_lint_gives_exactly_the_annotated_findings(name):
    for kind in ("bad", "good"):
        path = ROOT / kind / name
        report = lint_file(str(path))
        assert report.errors == []
        assert found(report.findings) == expected(path.read_text(encoding="utf-8"))
    if not name.startswith("_"):  # `_x.py`: a module the fixtures import, clean itself
        assert expected((ROOT / "bad" / name).read_text(encoding="utf-8"))


def run(kind: str, name: str, *args):
    pytest.importorskip("tensorflow")
    return runpy.run_path(str(ROOT / kind / name))["run"](*args)


def test_a_module_level_metric_in_train_step_accumulates_across_epochs_under_fit():
    _, bad = run("bad", "untracked_metric_fit.py", 2)
    _, good = run("good", "untracked_metric_fit.py", 2)
    assert bad[0] == pytest.approx(good[0])  # the first epoch is the same: nothing to reset yet
    # fit logs the mean so far: undo it into each batch's own loss (the training itself is identical)
    batch_losses = []
    for epoch in good:
        batch_losses += [epoch[0], 2 * epoch[1] - epoch[0]]
    assert good[1][-1] == pytest.approx(sum(batch_losses[2:]) / 2, rel=1e-4)  # epoch 2 alone
    assert bad[1][-1] == pytest.approx(sum(batch_losses) / 4, rel=1e-4)  # epochs 1 and 2 together
    assert abs(bad[1][-1] - good[1][-1]) > 0.1


def test_a_validation_metric_reset_once_averages_every_epoch_so_far():
    bad_reported, truth = run("bad", "validation_reset_once.py", 3)
    good_reported, good_truth = run("good", "validation_reset_once.py", 3)
    assert truth == pytest.approx(good_truth, rel=1e-5)  # the same training
    assert good_reported == pytest.approx(truth, rel=1e-5)
    assert bad_reported[0] == pytest.approx(truth[0], rel=1e-5)
    assert bad_reported[2] == pytest.approx(sum(truth) / 3, rel=1e-4)  # the mean of all epochs so far
    assert bad_reported[2] - truth[2] > 0.05


def test_a_persistent_tape_kept_on_the_trainer_stays_alive_with_its_recording():
    bad = run("bad", "tape_kept_on_trainer.py", 3)
    good = run("good", "tape_kept_on_trainer.py", 3)
    assert bad == (1, [True])  # the last step's tape, still recording-capable, held by the trainer
    assert good == (0, [])


def test_a_sign_activation_leaves_the_weights_where_they_were():
    assert run("bad", "binary_activation.py", 5) == 0.0  # zero gradients: applied, and nothing moves
    assert run("good", "binary_activation.py", 5) > 0.01


def test_numpy_randomness_in_a_helper_of_a_traced_step_is_drawn_once():
    bad = run("bad", "traced_augment_helper.py", 4)
    good = run("good", "traced_augment_helper.py", 4)
    assert len(set(bad)) == 1  # frozen into the graph at trace time
    assert len(set(good)) == 4


def test_a_model_trained_without_its_own_training_flag_never_drops_out():
    assert run("bad", "own_training_flag.py") is False  # two "training" passes are identical
    assert run("good", "own_training_flag.py") is True


def test_the_training_flag_finding_names_the_models_own_flag():
    (finding,) = lint_file(str(ROOT / "bad" / "own_training_flag.py")).findings
    assert "`is_training=True`" in finding.message and "is_training=True" in finding.hint


def test_a_trainer_bias_added_after_the_tape_never_moves():
    assert run("bad", "trainer_bias_after_tape.py", 5) == 0.0  # a None gradient: Keras skips it
    assert run("good", "trainer_bias_after_tape.py", 5) > 0.1


def test_a_head_whose_loss_term_goes_through_numpy_never_trains():
    assert run("bad", "multihead_numpy_term.py", 5) == 0.0  # None for that head: skipped with a warning
    assert run("good", "multihead_numpy_term.py", 5) > 0.01


def test_layers_before_a_rounding_lambda_layer_never_train():
    assert run("bad", "lambda_layer_quantizer.py", 5) == 0.0  # None for them: skipped with a warning
    assert run("good", "lambda_layer_quantizer.py", 5) > 1e-3


def test_a_binarised_kernel_never_moves_while_the_head_trains():
    kernel, head = run("bad", "binarized_kernel_layer.py", 5)
    assert kernel == 0.0 and head > 0.01  # zero gradients for the kernel, applied: nothing moves
    kernel, head = run("good", "binarized_kernel_layer.py", 5)
    assert kernel > 0.01 and head > 0.01


def test_numpy_noise_in_a_loader_method_mapped_over_a_rebound_dataset_is_drawn_once():
    bad = run("bad", "pipeline_class_numpy_noise.py", 2)
    good = run("good", "pipeline_class_numpy_noise.py", 2)
    assert len(bad) == len(good) == 16
    assert len(set(bad)) == 1  # one draw, frozen into the traced `_augment`, for both epochs
    assert len(set(good[:8])) == 8  # a draw per element (a global seed, if a test set one, replays it per epoch)


def test_a_python_random_flip_mapped_by_a_helper_is_decided_once():
    bad = run("bad", "dataset_helper_random_flip.py", 4)
    good = run("good", "dataset_helper_random_flip.py", 4)
    assert len(bad) == len(good) == 32
    assert len(set(bad)) == 1  # every image flipped, or none
    assert set(good) == {0.0, 1.0}  # flipped for some elements, not for others


def test_a_keras_2_decay_argument_leaves_the_learning_rate_constant():
    assert run("bad", "trainer_time_decay.py", 4) == [0.5] * 4  # `decay=` ignored (a warning)
    # the schedule it stood for: lr / (1 + decay * step)
    assert run("good", "trainer_time_decay.py", 4) == pytest.approx([0.5 / (1 + 0.9 * s) for s in range(4)], rel=1e-5)


def test_tf_variables_on_a_keras_3_layer_are_never_trained():
    bad_variables, bad = run("bad", "guide_linear_layer.py")
    good_variables, good = run("good", "guide_linear_layer.py")
    assert (bad_variables, good_variables) == (0, 2)
    assert bad[-1] == pytest.approx(bad[0])  # nothing moves: every epoch is the untrained model's loss
    assert good[-1] < good[0] / 10  # the same layer with Keras's own weights learns the line


def test_an_early_stop_asking_a_tensor_is_true_never_stops():
    assert run("bad", "trainer_early_stop_identity.py", 200) == 200  # the test is always False
    assert run("good", "trainer_early_stop_identity.py", 200) == 7


def test_a_gradient_penalty_computed_before_the_critic_tape_adds_nothing_to_its_gradients():
    assert run("bad", "critic_penalty_before_tape.py") == 0.0  # the penalty is a constant there
    assert run("good", "critic_penalty_before_tape.py") > 0.5


def test_an_optimizer_v2_hook_on_a_keras_3_sgd_subclass_is_never_called():
    assert run("bad", "langevin_optimizer_hooks.py") == 0.0  # plain SGD: no noise in any run
    assert run("good", "langevin_optimizer_hooks.py") > 0.1


def test_a_metric_made_in_the_per_epoch_function_is_fresh_every_epoch():
    bad_reported, truth = run("bad", "epoch_metric_in_helper.py", 3)
    good_reported, good_truth = run("good", "epoch_metric_in_helper.py", 3)
    assert truth == pytest.approx(good_truth, rel=1e-5)  # the same training
    assert good_reported == pytest.approx(truth, rel=1e-5)  # made per call: each epoch's own mean
    assert bad_reported[2] == pytest.approx(sum(truth) / 3, rel=1e-4)  # never reset: all epochs so far
    assert bad_reported[2] - truth[2] > 0.5


def test_a_notebook_tape_bound_again_by_the_next_cell_is_dropped_and_only_the_last_is_kept():
    assert run("bad", "notebook_tape_cells.py") == ["tape"]  # the second cell's tape, never deleted
    assert run("good", "notebook_tape_cells.py") == []


def test_layer_state_in_a_plain_tf_variable_is_left_out_of_save_weights():
    assert run("bad", "layer_state_counter_saved.py") == 0.0  # restored from its initial value
    assert run("good", "layer_state_counter_saved.py") == 6.0


def test_a_critic_whose_loss_arguments_are_misordered_fits_the_wrong_targets():
    import sys

    errors = {}
    for kind in ("bad", "good"):
        folder = str(ROOT / kind)
        sys.path.insert(0, folder)
        try:
            errors[kind] = run(kind, "critic_loss_args_misordered.py", 300)
        finally:
            sys.path.remove(folder)
            sys.modules.pop("_critic_losses", None)  # each folder has its own
    assert errors["good"] < 0.05
    assert errors["bad"] > 0.5


def run_with_modules(kind: str, name: str, *args):
    """`run`, with the fixture's folder importable (a fixture that imports its `_` sibling module)."""
    import sys

    folder = str(ROOT / kind)
    sys.path.insert(0, folder)
    try:
        return run(kind, name, *args)
    finally:
        sys.path.remove(folder)
        for module in [n for n, m in sys.modules.items() if folder in str(getattr(m, "__file__", "") or "")]:
            del sys.modules[module]  # each folder has its own `_segmentation_models`


def test_a_regularizer_set_on_the_layers_of_a_built_model_adds_no_loss():
    losses, penalty, norm = run_with_modules("bad", "segmentation_weight_decay.py", 3)
    good_losses, good_penalty, good_norm = run_with_modules("good", "segmentation_weight_decay.py", 3)
    assert (losses, penalty) == (0, 0.0)  # model.losses is empty: fit trains unregularised
    assert good_losses == 8  # one L2 penalty per Conv2D kernel once the model is rebuilt from its config
    assert good_penalty == pytest.approx(1e-2 * good_norm, rel=1e-3)
    assert norm > 1.5 * good_norm  # the decay shrank the twin's kernels (76.5 against 38.9, measured)


def test_modules_attached_through_dunder_dict_are_never_trained():
    count, wet, loss = run("bad", "dag_processor_group.py", 200)
    good_count, good_wet, good_loss = run("good", "dag_processor_group.py", 200)
    assert (count, wet) == (1, 0.0)  # only the decoder's gain is tracked: the reverb never moves
    assert good_count == 2 and good_wet == pytest.approx(0.5, abs=1e-2)  # the target's wet level
    assert loss > 0.1 > 1e-6 > good_loss


def test_a_trainer_differentiating_the_prediction_instead_of_the_loss_diverges():
    first, last = run("bad", "trainer_gradient_of_prediction.py", 60)
    good_first, good_last = run("good", "trainer_gradient_of_prediction.py", 60)
    assert first == pytest.approx(good_first)  # the same model, data and first step
    assert last > 100 * first  # the gradient of sum(pred) ignores the labels: the loss grows
    assert good_last < first / 100


def test_logits_given_to_a_probability_cross_entropy_get_no_gradient_outside_zero_one():
    dead, accuracy, ce = run("bad", "segmentation_logits_bce.py", 50)
    good_dead, good_accuracy, good_ce = run("good", "segmentation_logits_bce.py", 50)
    assert dead > 0.5 and good_dead == 0.0  # clipped to [1e-7, 1 - 1e-7]: a flat loss for most logits
    assert ce > 2 * good_ce and accuracy < good_accuracy  # the dice term alone trains it, slower


def test_a_linear_head_scored_as_probabilities_stops_learning():
    accuracy, ce = run("bad", "classifier_linear_head_loss.py", 100)
    good_accuracy, good_ce = run("good", "classifier_linear_head_loss.py", 100)
    assert accuracy < 0.7 and ce > 1.0  # stuck: clipped rows give no gradient
    assert good_accuracy > 0.95 and good_ce < 0.2


def test_a_subclassed_linear_head_handed_to_a_trainer_with_a_probability_loss_trains_badly():
    accuracy, ce = run_with_modules("bad", "search_trainer_linear_head.py", 150)
    good_accuracy, good_ce = run_with_modules("good", "search_trainer_linear_head.py", 150)
    assert accuracy < 0.8 and ce > 0.6  # most logits clipped: no gradient (0.648 and 0.947, measured)
    assert good_accuracy > 0.95 and good_ce < 0.3  # 0.977 and 0.197, measured


def test_a_wrapper_looking_for_training_in_kwargs_never_drops_out_under_keras_3():
    bad_differ, bad_loss = run("bad", "annotate_wrapper_drops_training.py")
    good_differ, good_loss = run("good", "annotate_wrapper_drops_training.py")
    assert bad_differ is False and good_differ is True  # the wrapped Dropout never runs in the bad one
    assert good_loss > 2 * bad_loss  # the twin trains with dropout on (0.113 against 0.031, measured)


def test_a_block_reading_training_from_kwargs_never_drops_out_under_keras_3():
    bad_differ, bad_loss = run("bad", "block_training_from_kwargs.py")
    good_differ, good_loss = run("good", "block_training_from_kwargs.py")
    assert bad_differ is False and good_differ is True  # the Dropout never runs in the bad one
    assert abs(bad_loss - good_loss) > 0.05


def test_an_actors_variables_kept_before_its_first_call_leave_its_heads_untrained():
    kept, total, moved, loss = run("bad", "gaussian_actor_params_partial.py")
    good_kept, good_total, good_moved, good_loss = run("good", "gaussian_actor_params_partial.py")
    assert (kept, total, moved) == (2, 6, False)  # only the body built by its Input is in the list
    assert (good_kept, good_total, good_moved) == (6, 6, True)
    assert loss > 10 * good_loss


def test_a_keras_loss_called_prediction_first_reads_the_labels_as_logits():
    accuracy, truth, logged = run("bad", "churn_trainer_loss_reversed.py", 200)
    good_accuracy, good_truth, good_logged = run("good", "churn_trainer_loss_reversed.py", 200)
    assert good_accuracy == 1.0 and good_truth < 0.05
    assert good_logged == pytest.approx(good_truth, rel=0.05)  # the loss logged is the true one
    assert accuracy < 0.6 and truth > 10  # the negatives never learnt
    assert logged < 0  # a "cross-entropy" below zero: no minimum to reach
def test_a_train_step_training_a_module_level_generator_leaves_the_fitted_model_untrained():
    loss, val_loss, moved = run("bad", "generator_trainer_global.py", 6)
    good_loss, good_val_loss, good_moved = run("good", "generator_trainer_global.py", 6)
    assert loss[-1] < loss[0] / 3 and good_loss[-1] < good_loss[0] / 3  # both training logs fall
    assert moved == 0.0 and good_moved > 0.01  # the fitted model's own weights, before and after fit
    assert max(val_loss) - min(val_loss) < 0.05 and val_loss[-1] > 0.5  # scored on `self`: flat
    assert good_val_loss[-1] < good_val_loss[0] / 3


def test_a_keras_3_step_returning_its_loss_with_no_tracker_logs_zero():
    loss, val_loss, truth = run("bad", "siamese_step_returns_loss.py", 3)
    good_loss, good_val_loss, good_truth = run("good", "siamese_step_returns_loss.py", 3)
    assert truth == pytest.approx(good_truth, rel=1e-5)  # the same training
    assert loss == [0.0, 0.0, 0.0] and val_loss == [0.0, 0.0, 0.0]  # the loss tracker's result
    assert min(truth) > 0.01
    assert good_val_loss == pytest.approx(good_truth, rel=1e-4)  # the tracker logs the real loss
    assert all(value > 0.005 for value in good_loss)


def test_a_clipping_norm_passed_by_position_to_a_picked_builder_becomes_its_l2_strength():
    bad = run_with_modules("bad", "federated_client_builder_args.py", 20)
    good = run_with_modules("good", "federated_client_builder_args.py", 20)
    assert good < 1e-4  # plain federated averaging fits the linear targets
    assert bad > 1.0  # every client pulled toward zero with strength 5 (10.7, measured)


def test_the_argument_finding_names_every_builder_the_call_may_run():
    (finding,) = lint_file(str(ROOT / "bad" / "federated_client_builder_args.py")).findings
    assert "`build_sgd_client_update`" in finding.message and "`build_momentum_client_update`" in finding.message
    assert "`clip_norm` is its 4th parameter" in finding.message
