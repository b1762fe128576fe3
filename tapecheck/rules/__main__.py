"""`python -m tapecheck.rules`: write rules/<CODE>.md from each rule's docstring."""

from pathlib import Path

from tapecheck.rules import RULES

target = Path(__file__).resolve().parents[2] / "rules"
target.mkdir(exist_ok=True)
for rule in RULES:
    (target / f"{rule.code}.md").write_text(rule.doc, encoding="utf-8")
    print(f"wrote rules/{rule.code}.md")
