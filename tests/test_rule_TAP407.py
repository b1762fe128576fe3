"""TAP407 (iterator-consumed-twice): the silent twins in fixtures/silent, linted and run, and
the rule's edges.

Under real TensorFlow the bad fine-tuner's optimizer wrapper sorts the `zip` iterator it is
given into two groups with two comprehensions: the second group is always empty, so the
head never moves, and nothing raises. The twin makes the pairs a list first: every variable
moves and the loss ends far lower.
"""

from __future__ import annotations

import runpy
import warnings
from pathlib import Path

import pytest

from expectations import expected, findings_of, found
from tapecheck.lint import lint_source

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "silent"
NAME = "two_optimizer_finetune.py"


def test_the_bad_wrapper_gives_exactly_its_finding():
    path = ROOT / "bad" / NAME
    findings = findings_of(path)
    assert found(findings) == expected(path.read_text()) == [(28, "TAP407")]
    assert "comprehension at line 27" in findings[0].message
    assert "`grads_and_vars = list(grads_and_vars)`" in findings[0].hint


def test_the_corrected_twin_is_clean():
    path = ROOT / "good" / NAME
    assert expected(path.read_text()) == [] and findings_of(path) == []


def test_under_tensorflow_the_second_group_never_trains():
    pytest.importorskip("tensorflow")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad_losses, bad_moved, head = runpy.run_path(str(ROOT / "bad" / NAME), run_name="tap407_bad")["main"](20)
        good_losses, good_moved, _ = runpy.run_path(str(ROOT / "good" / NAME), run_name="tap407_good")["main"](20)
    for path, moved in bad_moved.items():
        assert (moved == 0.0) == (path in head), path
    assert all(moved > 0.0 for moved in good_moved.values())
    assert bad_losses[0] == pytest.approx(good_losses[0])
    assert good_losses[-1] < 0.6 * bad_losses[-1]


def _codes(source: str) -> list[int]:
    return [f.line for f in lint_source(source, "example.py") if f.code == "TAP407"]


SPLIT = """
def apply_gradients(self, grads_and_vars):
    pass
"""


@pytest.mark.parametrize("source,lines", [
    # a plain function named apply_gradients (not a method): its argument is not known to be a zip
    ("def apply_gradients(grads_and_vars, opt):\n    a = [g for g, _ in grads_and_vars]\n"
     "    b = [v for _, v in grads_and_vars]\n", []),
    # two passes in the two branches of an if/else
    ("def f(xs, ys, flag):\n    pairs = zip(xs, ys)\n    if flag:\n        return list(pairs)\n"
     "    else:\n        return sorted(pairs)\n", []),
    # the first pass, then a loop over the same iterator: reported at the loop
    ("def f(xs, ys):\n    pairs = zip(xs, ys)\n    n = len(list(pairs))\n    for x, y in pairs:\n"
     "        print(x, y, n)\n", [4]),
    # a `zip` of the file's own (shadowed): unknown
    ("def zip(*a):\n    return [list(t) for t in a]\ndef f(xs, ys):\n    pairs = zip(xs, ys)\n"
     "    a = list(pairs)\n    b = list(pairs)\n", []),
    # a loop whose only pass ends with a break
    ("def f(xs, ys, n):\n    pairs = zip(xs, ys)\n    for _ in range(n):\n        for x, y in pairs:\n"
     "            print(x, y)\n        break\n", []),
    # rebound inside the loop before the pass
    ("def f(xs, ys, n):\n    pairs = zip(xs, ys)\n    for _ in range(n):\n        pairs = zip(xs, ys)\n"
     "        print(list(pairs))\n", []),
    # `map` read by a comprehension and then by `tuple`
    ("def f(xs):\n    squares = map(abs, xs)\n    total = sum([s for s in squares])\n"
     "    return total, tuple(squares)\n", [4]),
    # an indexed or attribute read is not a pass over the name
    ("def f(xs, ys):\n    pairs = zip(xs, ys)\n    print(pairs.__class__)\n    return list(pairs)\n", []),
])
def test_edges(source, lines):
    assert _codes(source) == lines
