"""``logbus prometheus``: Debian's Prometheus (``/usr/bin/prometheus``) with the topology's scrape targets and
logbus' alert rules, and the generation of its configuration.

The configuration is JSON (valid YAML, which Prometheus reads): one job per kind of service (broker, mirror,
counter, audit), each target labelled with its datacenter, a 5 s scrape and rule evaluation interval, and the
rules of ``config/prometheus/alerts.yml`` (tested with ``promtool test rules``,
``config/prometheus/alerts_test.yml``). ``run`` replaces the process with Prometheus (``exec``), so a
supervisor's signals and ``kill -9`` reach Prometheus itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "prometheus" / "alerts.yml"
INTERVAL = "5s"


def config(targets: dict[str, list[tuple[str, dict]]], rule_files: list[str], schemes: dict[str, dict] | None = None,
           interval: str = INTERVAL, alertmanagers: list[str] | None = None) -> str:
    """``targets``: job → [(host:port, labels)]; ``schemes``: job → extra scrape settings (``scheme``,
    ``tls_config``); ``alertmanagers``: host:port of the Alertmanagers that firing alerts are sent to."""
    jobs = []
    for job, items in targets.items():
        groups: dict[str, list[str]] = {}
        for address, labels in items:
            groups.setdefault(json.dumps(labels, sort_keys=True), []).append(address)
        jobs.append({"job_name": job, **(schemes or {}).get(job, {}),
                     "static_configs": [{"targets": sorted(addrs), "labels": json.loads(key)}
                                        for key, addrs in sorted(groups.items())]})
    timeout = "4s" if interval == INTERVAL else interval  # (at most the interval)
    alerting = {"alerting": {"alertmanagers": [{"static_configs": [{"targets": sorted(alertmanagers)}]}]}} \
        if alertmanagers else {}
    return json.dumps({"global": {"scrape_interval": interval, "evaluation_interval": interval,
                                  "scrape_timeout": timeout}, **alerting,
                       "rule_files": rule_files, "scrape_configs": jobs}, indent=1) + "\n"


def binary(name: str = "prometheus", package: str = "prometheus") -> str:
    found = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
    if found is None:
        raise FileNotFoundError(f"{name} not found: install Debian's {package} package (bash scripts/setup)")
    return found


def exec_debian(verb: str, name: str, package: str, config: str, data_dir: str, flags: list[str]) -> int:
    """Replace this process with Debian's ``name`` given ``config`` and ``flags`` (``logbus prometheus`` and
    ``logbus alertmanager``); 2 with a one-line message when the binary or the config file is missing."""
    try:
        program = binary(name, package)
    except FileNotFoundError as exc:
        print(f"logbus: {verb}: {exc}", file=sys.stderr)
        return 2
    if not Path(config).is_file():
        print(f"logbus: {verb}: no config file {config}", file=sys.stderr)
        return 2
    os.makedirs(data_dir, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(program, [program, f"--config.file={config}", *flags, "--log.level=warn"])  # it is this process now
    return 1  # not reached


def run(args) -> int:
    return exec_debian("prometheus", "prometheus", "prometheus", args.config, args.data_dir,
                       [f"--storage.tsdb.path={args.data_dir}", f"--web.listen-address={args.listen}",
                        f"--storage.tsdb.retention.time={args.retention}"])
