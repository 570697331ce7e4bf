"""Compare logbus's Protobuf diff (schema_registry.protobuf_diff) with the examples of Confluent's own protobuf
SchemaDiffTest (protobuf-provider/src/test/resources in confluentinc/schema-registry; not copied here: pass that
directory). Each example names an original and an updated schema (text, or a .proto file of that directory), their
references and dependencies, the differences Confluent reports and whether the change is compatible. Prints every
disagreement and the totals; exit code 1 when a verdict disagrees.

    .venv/bin/python bench/protobuf_diff_conformance.py path/to/schema-registry/protobuf-provider/src/test/resources
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "platform"))

from schema_registry import protobuf_diff, protobuf_schema  # noqa: E402


def side(case: dict, prefix: str, resources: Path) -> protobuf_diff.Side:
    text = case[f"{prefix}_schema"]
    if text.endswith(".proto"):
        text = (resources / text).read_text()
    deps = {d["name"]: d.get("dependency") or (resources / d["name"]).read_text()
            for d in case.get(f"{prefix}_dependencies", [])
            if d.get("dependency") or not protobuf_schema.is_builtin(d["name"])}  # protoc has the well-known ones
    fd, found = protobuf_schema.parse(text, deps)
    refs = {r["name"]: (r["subject"], r["version"]) for r in case.get(f"{prefix}_references", [])}
    return protobuf_diff.Side(fd, found, refs)


def main(resources: Path) -> int:
    total = same_diffs = same_verdicts = 0
    for name in ("diff-schema-examples.json", "diff-schema-examples-with-meta.json"):
        for case in json.loads(re.sub(r",(\s*[}\]])", r"\1", (resources / name).read_text())):
            total += 1
            try:
                found = protobuf_diff.differences(side(case, "original", resources), side(case, "update", resources))
            except Exception as exc:  # noqa: BLE001 (a report, not a service)
                print(f"{name}: {case['description']}\n  logbus    cannot compare: {exc}")
                continue
            got = sorted(f"{kind} {where}" for kind, where in found)
            compatible = all(kind in protobuf_diff.COMPATIBLE for kind, _ in found)
            same_verdicts += compatible == case["compatible"]
            same_diffs += got == sorted(case["changes"])
            if got != sorted(case["changes"]) or compatible != case["compatible"]:
                print(f"{name}: {case['description']}\n  logbus    {got} compatible={compatible}\n"
                      f"  Confluent {sorted(case['changes'])} compatible={case['compatible']}")
    print(f"{total} examples: verdicts agree {same_verdicts}/{total}, difference lists agree {same_diffs}/{total}")
    return 0 if same_verdicts == total else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
