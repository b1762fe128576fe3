"""The program model's share of a lint run: parse and walk into facts, against the rules
(which build the model and query it). Prints CPU seconds and ratios from one run.

    python benchmarks/model_share.py                 # installed tensorflow+keras
    python benchmarks/model_share.py PATH...         # another tree

One process, one pass over the files tapecheck parses (those its screen admits), each with
the cyclic collector paused and its model closed after, as the engine does: for
each, the facts are built (read, parse, walk), then every rule runs on them; the first
rule that asks builds the model (`tapecheck.model.model_of`), the others reuse it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args(argv)
    paths = args.paths
    if not paths:
        import importlib.util

        paths = [os.path.dirname(importlib.util.find_spec(name).origin) for name in ("tensorflow", "keras")]
    from tapecheck.lint.engine import may_fire
    from tapecheck.lint.source import LintError, facts_of as _facts, no_cyclic_collection, read_source
    from tapecheck.lint.files import discover
    from tapecheck.model import model_of
    from tapecheck.rules import RULES

    files, _ = discover(paths)
    clock = time.process_time
    facts_s = model_s = rules_s = 0.0
    per_rule: dict[str, float] = {}
    parsed = 0
    for path in files:
        if not path.endswith(".py"):
            continue
        try:
            source = read_source(path)
        except LintError:
            continue
        if not may_fire(source, RULES):
            continue
        with no_cyclic_collection():  # as the engine lints a file
            start = clock()
            try:
                facts = _facts(source, path)
            except LintError:
                continue
            middle = clock()
            model_of(facts)  # built here, timed apart from the queries
            built = clock()
            for rule in RULES:
                if rule.check is not None:
                    before = clock()
                    list(rule.check(facts))
                    per_rule[rule.code] = per_rule.get(rule.code, 0.0) + clock() - before
            end = clock()
            facts.model.close()
        parsed += 1
        facts_s += middle - start
        model_s += built - middle
        rules_s += end - built
    total = facts_s + model_s + rules_s
    print(f"{len(files)} files, {parsed} parsed")
    print(f"facts (read, parse, walk): {facts_s:7.2f} s CPU")
    print(f"model built:               {model_s:7.2f} s CPU  ({model_s / facts_s:.3f}x the facts)")
    print(f"rules (querying it):       {rules_s:7.2f} s CPU  ({rules_s / facts_s:.3f}x the facts)")
    print(f"model + rules share of the run: {(model_s + rules_s) / total:.1%}")
    slowest = sorted(per_rule.items(), key=lambda item: -item[1])[:6]
    print("slowest rules: " + ", ".join(f"{code} {seconds:.2f} s" for code, seconds in slowest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
