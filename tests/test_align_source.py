"""`tapecheck align` reads the protocol from the file's source before importing (and so
training) anything, and `align`/`reference` keep TensorFlow's start-up lines off the
terminal unless `-v` (issue 14). Through the real command, in fresh processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GOOD = ROOT / "fixtures" / "align" / "good_loop.py"
NOISE_MARKERS = ("absl::InitializeLog", "oneDNN custom operations")


def tapecheck(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "tapecheck", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def test_a_file_off_the_protocol_is_refused_before_anything_runs(tmp_path):
    marker = tmp_path / "ran"
    loop = tmp_path / "loop.py"
    loop.write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "import tensorflow as tf\n"
        "def build_model():\n    return None\n"
        "def train_model_for_an_hour():\n    pass\n"
    )
    started = time.perf_counter()
    result = tapecheck("align", loop)
    elapsed = time.perf_counter() - started
    assert result.returncode == 2
    assert result.stderr == (
        f"{loop}: error: missing make_optimizer, loss_fn, data, train or train_step (the align protocol "
        "needs build_model, make_optimizer, loss_fn, data, and train or train_step; see `tapecheck align "
        "--help`; read from the source, nothing was run)\n"
    )
    assert not marker.exists()  # the file was never imported
    code = "import sys\nfrom tapecheck.align import check_protocol_source, AlignError\n" \
           f"try:\n    check_protocol_source({str(loop)!r})\nexcept AlignError:\n    pass\n" \
           "print('TF', 'tensorflow' in sys.modules)\n"
    assert "TF False" in subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    assert elapsed < 60, elapsed


@pytest.mark.parametrize("source", [
    # names bound in blocks, by imports and by assignment count as defined
    "try:\n    from helpers import build_model\nexcept ImportError:\n    def build_model(): pass\n"
    "if True:\n    make_optimizer = lambda: None\n"
    "from losses import mse as loss_fn\n"
    "data, train_step = (lambda: None), (lambda *a: None)\n",
    # names the source does not show: left to the import (which then runs and checks)
    "globals().update(build_model=1, make_optimizer=2, loss_fn=3, data=4, train=5)\n",
    "from somewhere import *\n",
])
def test_names_the_source_defines_or_may_define_are_not_refused(tmp_path, source):
    from tapecheck.align import check_protocol_source

    loop = tmp_path / "loop.py"
    loop.write_text(source)
    check_protocol_source(str(loop))  # raises AlignError when it refuses


def _raw_import_noise() -> str:
    return subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True,
                          timeout=300).stderr


def test_align_and_reference_print_no_tensorflow_start_up_lines_unless_verbose(tmp_path):
    raw = _raw_import_noise()
    quiet = tapecheck("align", GOOD)
    assert quiet.returncode == 0 and "aligned: 8 steps" in quiet.stdout
    assert not any(marker in quiet.stderr for marker in NOISE_MARKERS), quiet.stderr
    reference = tapecheck("reference", "--epochs", "1", cwd=tmp_path)
    assert reference.returncode == 0 and "final (1 epochs)" in reference.stdout
    assert not any(marker in reference.stderr for marker in NOISE_MARKERS), reference.stderr
    shown = [marker for marker in NOISE_MARKERS if marker in raw]
    if not shown:
        pytest.skip("this TensorFlow prints no start-up lines to hide")
    loud = tapecheck("align", "-v", GOOD)
    loud_reference = tapecheck("reference", "-v", "--epochs", "1", cwd=tmp_path)
    for marker in shown:
        assert marker in loud.stderr and marker in loud_reference.stderr


def test_other_output_during_the_import_is_kept(tmp_path):
    from tapecheck import _quiet

    script = tmp_path / "s.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from tapecheck._quiet import start_up_quietly\n"
        "with start_up_quietly():\n"
        "    os.write(2, b'WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\\n')\n"
        "    os.write(2, b'E0000 00:00:1796127645.497469   14698 real.cc:1] a real error\\n')\n"
        "    print('a python warning', file=sys.stderr)\n"
        "print('done')\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert out.stdout == "done\n"
    assert out.stderr == "E0000 00:00:1796127645.497469   14698 real.cc:1] a real error\na python warning\n"
    assert _quiet.NOISE.match(b"I0000 00:00:1796127645.565661   14698 cpu_feature_guard.cc:227] This TensorFlow\n")
