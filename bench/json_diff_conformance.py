"""Compare logbus's JSON Schema diff (schema_registry.json_diff) with the example files of Confluent's own
SchemaDiffTest (json-schema-provider/src/test/resources/diff-*.json in confluentinc/schema-registry; not copied
here: pass their paths). Each example names an original and an updated schema, the differences Confluent reports
(kind and JSON path) and whether the change is compatible. Prints every disagreement and the totals; exit code 1
when a verdict (compatible or not) disagrees.

    .venv/bin/python bench/json_diff_conformance.py path/to/schema-registry/json-schema-provider/src/test/resources/diff-*.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "platform"))

from schema_registry import json_diff, json_schema  # noqa: E402


def main(paths: list[str]) -> int:
    total = same_diffs = same_verdicts = 0
    for path in paths:
        text = re.sub(r",(\s*[}\]])", r"\1", Path(path).read_text())  # the files have trailing commas
        for case in json.loads(text):
            total += 1
            original = json_schema.parse(json.dumps(case["original_schema"]))
            update = json_schema.parse(json.dumps(case["update_schema"]))
            found = json_diff.differences(original, update)
            got = sorted(f"{kind} {where}" for kind, where in found)
            compatible = all(kind in json_diff.COMPATIBLE for kind, _ in found)
            same_verdicts += compatible == case["compatible"]
            same_diffs += got == sorted(case["changes"])
            if got != sorted(case["changes"]) or compatible != case["compatible"]:
                print(f"{Path(path).name}: {case['description']}\n  logbus    {got} compatible={compatible}\n"
                      f"  Confluent {sorted(case['changes'])} compatible={case['compatible']}")
    print(f"{total} examples: verdicts agree {same_verdicts}/{total}, difference lists agree {same_diffs}/{total}")
    return 0 if same_verdicts == total else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
