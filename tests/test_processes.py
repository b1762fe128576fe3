"""Worker processes are bounded by construction, whatever goes wrong (issue 25).

Real processes, real signals, no mocks: each test runs `tapecheck lint -j 2` in a subprocess,
injects a fault through the test-only hook `TAPECHECK_TEST_FAULT` (read by the workers only,
see tapecheck/lint/parallel.py), counts the run's descendants in /proc while it runs, and reads
the report. No TensorFlow is imported.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tapecheck.lint import parallel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts processes in /proc")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = 10
JOBS = 2
BOUND = JOBS + parallel.MAX_RESTARTS  # the most processes a run may start

BAD = '''import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
optimizer = tf.keras.optimizers.Adam()


def train_step_{i}(x, y):
    with tf.GradientTape() as tape:
        pred = model(x, training=True)
    loss = tf.reduce_mean(tf.square(pred - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss
'''


@pytest.fixture()
def project(tmp_path):
    """Ten training scripts, each with one TAP101 (the loss computed after the tape's block)."""
    folder = tmp_path / "proj"
    folder.mkdir()
    for i in range(FILES):
        (folder / f"train_{i}.py").write_text(BAD.format(i=i))
    return folder


def _children() -> dict[int, int]:
    """pid -> parent pid of every process now alive (zombies left out: they are gone)."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            parents[int(name)] = int(fields[1])
    return parents


def _descendants(root: int) -> set[int]:
    parents = _children()
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _run(args, fault: str | None = None, timeout: float = 60, prefix=()):
    """Run `tapecheck lint ARGS`, sampling its descendants every 10 ms: (result, most at once, all seen)."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop(parallel.FAULT_ENV, None)
    if fault is not None:
        env[parallel.FAULT_ENV] = fault
    command = [*prefix, sys.executable, "-m", "tapecheck", "lint", "--no-cache", "--output-format", "concise", *args]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most, seen = 0, set()
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        now = _descendants(process.pid)
        seen |= now
        most = max(most, len(now))
        time.sleep(0.01)
    out, err = process.communicate(timeout=max(1, deadline - time.monotonic()))
    return subprocess.CompletedProcess(command, process.returncode, out, err), most, seen


def _finding_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if " TAP101 " in line]


def test_fault_hook_is_inert_and_the_clean_run_lints_everything(project):
    result, most, _ = _run(["-j", str(JOBS), str(project)])
    assert result.returncode == 1, result.stderr  # ten findings
    assert len(_finding_lines(result.stdout)) == FILES
    assert "could not be linted" not in result.stdout
    assert 1 <= most <= JOBS + 1  # the workers (and at most a helper the pool may start)


def test_a_worker_killed_once_mid_run_loses_nothing(project, tmp_path):
    marker = tmp_path / "killed"
    result, most, _ = _run(["-j", str(JOBS), str(project)], fault=f"kill-once:train_3.py:{marker}")
    assert marker.exists()  # the fault did fire: a worker was SIGKILLed
    assert len(_finding_lines(result.stdout)) == FILES, result.stdout  # the retried files were linted
    assert "could not be linted" not in result.stdout
    assert most <= BOUND


def test_a_file_that_kills_its_worker_every_time_is_named_and_the_rest_is_linted(project):
    result, most, _ = _run(["-j", str(JOBS), str(project)], fault="kill:train_3.py")
    lines = result.stdout.splitlines()
    died = [line for line in lines if "train_3.py" in line and "not linted" in line]
    assert len(died) == 1, result.stdout  # on a line of its own, naming the file
    assert "died on this file" in died[0]
    assert len(_finding_lines(result.stdout)) == FILES - 1  # every other file was linted
    assert f"{FILES} files; 1 file could not be linted" in result.stdout
    assert result.returncode == 1
    assert most <= BOUND


def test_every_file_killing_its_worker_stays_within_the_cap(project):
    faults = ";".join(f"kill:train_{i}.py" for i in range(FILES))
    result, most, seen = _run(["-j", str(JOBS), str(project)], fault=faults)
    not_linted = [line for line in result.stdout.splitlines() if "not linted" in line]
    assert len(not_linted) == FILES, result.stdout  # each on its own line
    assert sum("kept dying, and this run started the most processes it may" in line for line in not_linted) == FILES - parallel.MAX_RESTARTS
    assert len(seen) <= BOUND  # processes ever started by the run, not only at once
    assert most <= BOUND
    assert result.returncode == 1


def test_workers_that_raise_before_their_task_leave_and_the_files_are_linted_here(project):
    result, most, seen = _run(["-j", str(JOBS), str(project)], fault="init-raise")
    assert len(_finding_lines(result.stdout)) == FILES, result.stdout + result.stderr
    assert "Traceback" not in result.stderr  # the worker leaves with os._exit: no parent code, no noise
    assert len(seen) <= JOBS + 1 + 1  # the pool's workers, then one that never answered: no more
    assert result.returncode == 1


def test_the_parent_killed_by_a_timeout_leaves_no_worker_behind(project):
    env = dict(os.environ, PYTHONPATH=ROOT, **{parallel.FAULT_ENV: "hang:train_0.py;hang:train_1.py"})
    command = [sys.executable, "-m", "tapecheck", "lint", "--no-cache", "-j", str(JOBS), str(project)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    deadline = time.monotonic() + 30
    while len(workers) < JOBS and time.monotonic() < deadline:
        workers |= _descendants(process.pid)
        time.sleep(0.02)
    assert len(workers) >= JOBS  # both workers hang on their files
    process.send_signal(signal.SIGKILL)  # as `timeout -s KILL` does
    process.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and workers & set(_children()):
        time.sleep(0.05)
    left = workers & set(_children())
    for pid in left:  # never leave them to the machine, whatever the outcome
        os.kill(pid, signal.SIGKILL)
    assert not left, "orphaned workers still ran 10 s after their parent was killed"


def _as_unprivileged():
    """A prefix running the command as uid 65534 (root ignores `ulimit -u`), still able to read
    this checkout and the interpreter (CAP_DAC_OVERRIDE, ambient)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: RLIMIT_NPROC does not apply to root")
    return (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=+dac_override", "--ambient-caps=+dac_override")


def test_ulimit_u_low_lints_everything_in_one_process(project):
    # Under `ulimit -u 1` neither a process nor a thread can start: the pool never starts and
    # the files are linted by the lint process itself.
    prefix = _as_unprivileged()
    if prefix:  # the unprivileged user must reach the files: a world-readable copy
        shared = tempfile.mkdtemp(prefix="tapecheck-ulimit-")
        os.chmod(shared, 0o755)
        project = shutil.copytree(project, os.path.join(shared, "proj"))
        os.chmod(project, 0o755)
        for name in os.listdir(project):
            os.chmod(os.path.join(project, name), 0o644)
    try:
        _lint_under_ulimit(prefix, project)
    finally:
        if prefix:
            shutil.rmtree(shared)


def _lint_under_ulimit(prefix, project):
    inner = " ".join([sys.executable, "-m", "tapecheck", "lint", "--no-cache", "--output-format", "concise",
                      "-j", str(JOBS), str(project)])
    env_prefix = (*prefix, "bash", "-c", f"ulimit -u 1; cd {ROOT}; exec {inner}")
    process = subprocess.run(env_prefix, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                             timeout=120)
    assert len(_finding_lines(process.stdout)) == FILES, process.stdout + process.stderr
    assert "could not be linted" not in process.stdout
    assert process.returncode == 1
    check = subprocess.run((*prefix, "bash", "-c", f"ulimit -u 1; exec {sys.executable} -c 'import os; os.fork()'"),
                           capture_output=True, text=True, timeout=60)
    assert "BlockingIOError" in check.stderr  # the limit is real: the same command cannot fork


def test_a_worker_never_starts_processes():
    # The guard itself, in a real forked child: it refuses, the parent may.
    assert parallel.may_start_processes()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer and leave without returning into pytest
        try:
            os.write(write, b"1" if parallel.may_start_processes() else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.waitpid(pid, 0)
    assert answer == b"0"
    assert parallel._choose_jobs(4, 100, 10**7, parallel.RULES) == 4
    assert parallel._choose_jobs(10**6, 10**6, 10**9, parallel.RULES) == parallel.MAX_WORKERS
