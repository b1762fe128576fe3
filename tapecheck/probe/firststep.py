"""Cuts named on the first step: the op, its line and the call path from the tape.

In eager code Keras 3 raises "No gradients provided for any variable" on the
first step whose gradients are all None, so a cut must be named from that one
step. Three kinds of evidence, cheapest first:

- traced code (`tf.function`, `fit`, a `train_step` override): the graph keeps
  each op's producer and creation stack (`op.traceback`), so the op, its line
  and every user frame between the tape and it are known (diagnose.graph_cut_frames);
- eager code: the first recording of each tape line runs under an op callback
  (`FirstStepTrace`), which notes each op's type and tensor ids and, for an op
  without a gradient only, the user frames that made it. One recording per tape
  line per probe pays that; later steps run untouched (ops are armed again only
  where a cut stays unknown, as before). A NumPy round trip leaves no op: the
  target, or what it was made from, was not made by TensorFlow;
- the static model: lint's TAP104 finding for that `gradient` call, or for the
  loss given to `compile()` under `fit` (locate.py), names `.numpy()`, NumPy or
  `float()` on their line with the call path, which no run-time record has.

The message is worded as lint's TAP104 ("`tf.round()` (the `Round` op) in
`star_error` (line 13) has no gradient, and ..."), and each "line N" says what
is on it.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import re

from tapecheck.probe import optrace, sites

_OP_WHAT = {
    "Round": "`tf.round()`", "Rint": "`tf.math.rint()`", "Floor": "`tf.floor()`", "Ceil": "`tf.math.ceil()`",
    "Sign": "`tf.sign()`", "ArgMax": "`tf.argmax()`", "ArgMin": "`tf.argmin()`",
    "StopGradient": "`tf.stop_gradient()`", "PreventGradient": "`tf.raw_ops.PreventGradient`",
    "Equal": "the comparison `==`", "NotEqual": "the comparison `!=`", "Less": "the comparison `<`",
    "LessEqual": "the comparison `<=`", "Greater": "the comparison `>`", "GreaterEqual": "the comparison `>=`",
    "FloorDiv": "the floor division `//`", "FloorMod": "the modulo `%`", "OneHot": "`tf.one_hot()`",
    "Cast": "the cast to an integer dtype (`tf.cast`)",
}
_OP_TYPE = re.compile(r"^`(\w+)`")
# Float in, int out, but no value flows through them: a shape is not a cut (a bias under a second derivative).
_MAX_FIRST = 4096  # tape lines remembered as already traced once, per probe


def op_type(label: str | None) -> str | None:
    found = _OP_TYPE.match(label or "")
    return found.group(1) if found else None


def op_what(label: str | None) -> str:
    """"`tf.round()` (the `Round` op)": what the user wrote, and the op TensorFlow ran."""
    kind = op_type(label)
    if kind is None:
        return "an op without a gradient"
    what = _OP_WHAT.get(kind)
    return f"{what} (the `{kind}` op)" if what else f"the `{kind}` op"


class FirstStepTrace(optrace.EagerOpTrace):
    """The eager op trace, also armed on the first recording of each user tape line."""

    def __init__(self):
        super().__init__()
        self.traced_once: set[tuple] = set()

    def begin(self, info) -> None:
        key = (info.site.path, info.site.line) if info.site else None
        if (key is not None and key not in self.traced_once and getattr(self.local, "info", None) is None
                and _eager()):
            if len(self.traced_once) >= _MAX_FIRST:
                self.traced_once.clear()
            self.traced_once.add(key)
            self.armed.add(key)
        super().begin(info)
        if getattr(self.local, "info", None) is info:
            info.cut_frames = {}

    def close(self) -> None:
        super().close()
        self.traced_once.clear()


def _eager() -> bool:
    from tensorflow.python.eager import context

    return context.executing_eagerly()


def where(path: str, line: int, reporting: str) -> str:
    """"line 9", or "line 9 of losses.py" for a line of another file."""
    if not path or not reporting or os.path.abspath(path) == os.path.abspath(reporting):
        return f"line {line}"
    return f"line {line} of {os.path.basename(path)}"


def _calls(frames, tape_first, site, fit):
    """The user frames from the one that holds the tape (or the `fit` call) to the op, outermost first."""
    start = None
    for i, (path, line, _) in enumerate(frames):
        if site is None or path != site.path:
            continue
        if (line == site.line) if fit else (tape_first is not None and tape_first <= line <= site.line):
            start = i
    if start is None:
        return None
    return frames[start:]


def tape_name(site) -> str:
    text = linecache.getline(site.path, site.line) if site is not None else ""
    found = re.search(r"(\w+)\s*\.\s*(?:gradient|jacobian|batch_jacobian)\s*\(", text)
    return found.group(1) if found else "tape"


def cut_message(label, frames, site, tape_first, target: str, per_source: bool, fit: bool = False) -> str | None:
    """Lint's TAP104 wording for a run-time op; None when its frames do not lead back to the tape."""
    if not frames:
        return None
    chain = _calls(frames, tape_first, site, fit)
    if chain is None:
        return None
    reporting = chain[-1][0]
    op_path, op_line, op_fn = chain[-1]
    what = op_what(label)
    depends = "depends on source {names} only through it" if per_source else \
        f"`{target}` depends on the sources only through it" if target else "the target depends on the sources only through it"
    if fit:
        head = f"{what} in `{op_fn}` ({where(op_path, op_line, reporting)}) has no gradient"
        if len(chain) < 2:
            return None
        path = f"`{chain[1][2]}` (run by `fit`, {where(site.path, site.line, reporting)})" + "".join(
            f", then `{chain[i][2]}` (called at {where(chain[i - 1][0], chain[i - 1][1], reporting)})"
            for i in range(2, len(chain)))
        return (f"{head}, and the loss depends on the model's output only through it; the tape `fit` records "
                f"reaches it through {path}: every gradient is None and training fails with "
                "\"No gradients provided for any variable\"")
    gradient = f"`{tape_name(site)}.gradient` ({where(site.path, site.line, reporting)})"
    tail = f"{gradient} returns None for it" if per_source else f"{gradient} returns None for every variable"
    if len(chain) == 1:
        return f"{what} at {where(op_path, op_line, reporting)} has no gradient, and {depends}: {tail}"
    path = ", then ".join(
        f"`{chain[i][2]}` (called at {where(chain[i - 1][0], chain[i - 1][1], reporting)})" for i in range(1, len(chain)))
    return (f"{what} in `{op_fn}` ({where(op_path, op_line, reporting)}) has no gradient, and {depends}; "
            f"the tape reaches it through {path}: {tail}")


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def placed(cause, site, info, target: str):
    """The cause of an all-None (or one source's None) gradient, with the op, its line and its call path.

    Returns (cause, extra details). A cause whose op the run found keeps that op
    and line, worded as lint's; one it could not place takes lint's finding for
    this `gradient` call (a NumPy round trip, a copy through `.numpy()`); else
    it is left as it was, at the `gradient` call.
    """
    from tapecheck.probe import locate

    if cause.code != "TAP104" or cause.cause not in ("target-cut-off", "no-differentiable-path") or site is None:
        return cause, {}
    per_source = cause.cause == "no-differentiable-path"
    tape_first = info.site.line if info is not None and info.site is not None else None
    if cause.at is not None:
        frames = cause.frames
        if frames is None and info is not None and getattr(info, "cut_frames", None):
            frames = info.cut_frames.get(cause.at)
        text = cut_message(cause.op, frames, site, tape_first, target, per_source)
        extra = {"call_path": _path_details(frames, site, tape_first)} if frames else {}
        if text is None:
            return cause, extra
        return dataclasses.replace(cause, text=text), extra
    static = locate.cut_for_gradient(site.path, site.line, tape_first)
    if static is None:
        return cause, {}
    text = _escape(static.message)
    runtime = _runtime_note(cause, info)
    if runtime:
        text += f" ({runtime})"
    at = sites.Site(site.path, static.line, 1)
    return (dataclasses.replace(cause, text=text, op=static.what or cause.op, at=at, certain=True),
            {"located_by": "static pass"})


def _runtime_note(cause, info) -> str:
    if getattr(info, "ops", None) is None:
        return ""
    if "not made by any TensorFlow op" in (cause.text or ""):
        return "seen on the first step: no TensorFlow op in the tape's block made the target"
    return "seen on the first step: the tape recorded no differentiable path from the sources to the target"


def _path_details(frames, site, tape_first, fit=False):
    chain = _calls(frames, tape_first, site, fit) or frames
    return [f"{sites.display_path(path)}:{line} ({fn})" for path, line, fn in chain]


def fit_cause(targets, sources, fit_site):
    """Keras's own `fit` tape gave None for every variable: the cut in the loss (or `call`) it ran.

    Traced (`fit`'s default): the graph names the op and its frames. Else lint's
    TAP104 for a loss given to `compile()`. Else what the probe knows, at the
    user's `fit` line: never TAP101, the forward pass ran inside Keras's tape.
    """
    from tapecheck.probe import diagnose, locate

    label, at, frames = None, None, None
    for source in list(sources or ())[:8]:  # a cut on the model's path, not one on the labels'
        label, at, frames = diagnose.graph_cut_frames(targets, source)
        if label is not None:
            break
    if label is None:
        label, at, frames = diagnose.graph_cut_frames(targets, None)
    hint = ("Keep the loss differentiable: no rounding, argmax, comparisons, int casts, `stop_gradient` "
            "or `.numpy()` between `y_pred` and the returned loss.")
    if at is not None:
        text = cut_message(label, frames, fit_site, None, "", False, fit=True) if fit_site is not None else None
        if text is None:
            text = (f"{op_what(label)} ({where(at.path, at.line, at.path)}) has no gradient, and the loss `fit` "
                    "computes depends on the model's output only through it: every gradient is None")
        cause = diagnose.Cause("TAP104", "target-cut-off", _escape(text), hint, label, at, frames=frames)
        details = {"call_path": _path_details(frames, fit_site, None, fit=True)} if frames and fit_site else {}
        return cause, details
    if fit_site is not None:
        static = locate.cut_for_fit(fit_site.path, fit_site.line)
        if static is not None:
            return (diagnose.Cause("TAP104", "target-cut-off", _escape(static.message), hint, static.what or None,
                                   sites.Site(fit_site.path, static.line, 1)),
                    {"located_by": "static pass"})
    return (diagnose.Cause(
        "TAP104", "target-cut-off",
        "every gradient `fit` computed on its own tape is None: the forward pass ran inside that tape, so the loss "
        "(given to `compile()`, or computed by the model) does not reach {names} through differentiable ops "
        "(the probe found no op on the way to name)", hint), {})
