"""ACLs of a standalone broker (no zookeeper.connect): one JSON file in the first log dir, written atomically.

The file holds ``{"version":1,"bindings":[{"resourceType":..,"name":..,"patternType":..,"principal":..,
"host":..,"operation":..,"permissionType":..}]}``; a missing file is an empty ACL set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from broker.security.authorizer import Acl

FILE_NAME = "acls.json"


class AclFileStore:
    def __init__(self, log_dir: str | Path):
        self.path = Path(log_dir) / FILE_NAME

    def load(self) -> set[Acl]:
        try:
            body = json.loads(self.path.read_text())
        except FileNotFoundError:
            return set()
        return {Acl(b["resourceType"], b["name"], b["patternType"], b["principal"], b["host"], b["operation"],
                    b["permissionType"]) for b in body.get("bindings", [])}

    def save(self, acls) -> None:
        bindings = [{"resourceType": a.resource_type, "name": a.name, "patternType": a.pattern_type,
                     "principal": a.principal, "host": a.host, "operation": a.operation,
                     "permissionType": a.permission}
                    for a in sorted(acls, key=lambda a: (a.resource_type, a.name, a.pattern_type, a.principal,
                                                         a.host, a.operation, a.permission))]
        tmp = self.path.with_suffix(".json.tmp")
        with open(tmp, "w") as out:
            json.dump({"version": 1, "bindings": bindings}, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.path)

    def add(self, acls) -> None:
        self.save(self.load() | set(acls))

    def remove(self, acls) -> None:
        self.save(self.load() - set(acls))
