"""Sources the design tests share: every fixture, every rule's VALID/INVALID example and
doc block, and the corners of positions, as `(name, bytes)` pairs."""

from __future__ import annotations

import re
from pathlib import Path

from tapecheck.rules import RULES

ROOT = Path(__file__).resolve().parents[1]
CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

# Corners of positions: parentheses, decorators, semicolons, comments, CRLF, no final
# newline, an empty module, f-strings, match, lambdas, walrus, star-args, async.
TRICKY = {
    "parens.py": "x = ((a) + (b))\ny = (f)(  (g)(1)  )\nz = ( ( tf.GradientTape() ) )\n",
    "decorated.py": "@a.b\n@c(d)\n\n# comment\nasync def f(x, *a, y=1, **k) -> int:\n    await g(x); return (yield)\n",
    "semicolons.py": "import tensorflow as tf; t = tf.GradientTape(); u = 1\nif t: a = 1; b = 2\n",
    "crlf.py": "import tensorflow as tf\r\nwith tf.GradientTape() as tape:\r\n    y = x * x\r\ng = tape.gradient(y, x)\r\n",
    "cr_split.py": "x = '''a\r\nb'''\r\n# c\r\n",
    "no_newline.py": "import tensorflow as tf\nwith tf.GradientTape() as t:\n    y = f(x)",
    "empty.py": "",
    "only_comments.py": "# GradientTape\n\n# metrics\n",
    "fstrings.py": "m = metrics.Mean()\nprint(f\"{m.result():.3f} {x!r} {y=}\", f'{{}}')\n",
    "match.py": "match cmd:\n    case [x, *rest] if x > 0:\n        tape = tf.GradientTape()\n    case {'k': v, **kw}:\n        pass\n    case _:\n        pass\n",
    "lambda_walrus.py": "f = lambda a, /, b=(1), *c, d, **e: (n := a + b)\nxs = [y for y in range(3) if (z := y)]\n",
    "classes.py": "class M(keras.Model):\n    '''Doc.'''\n    def train_step(self, data):\n        with tf.GradientTape() as tape:\n            loss = self.compiled_loss(data)\n        return {m.name: m.result() for m in self.metrics}\n",
    "try_with.py": "try:\n    with a as (b, c), d:\n        pass\nexcept* E as e:\n    raise\nelse:\n    del x[0], y\nfinally:\n    global q\n",
}


def fixture_sources():
    for path in sorted((ROOT / "fixtures").rglob("*.py")):
        yield str(path.relative_to(ROOT)), path.read_bytes()


def rule_sources():
    for rule in RULES:
        for kind in ("valid", "invalid"):
            for index, source in enumerate(getattr(rule, kind)):
                yield f"{rule.code}-{kind}-{index}.py", source.encode()
        for index, block in enumerate(CODE_BLOCK.findall(rule.doc)):
            yield f"{rule.code}-doc-{index}.py", block.encode()


SOURCES = list(fixture_sources()) + list(rule_sources()) + [(k, v.encode()) for k, v in TRICKY.items()]
