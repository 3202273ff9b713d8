"""The run tags that place a run on its target's host. Pure code.

Every run of a target carries `hyperloom/host` (the instance's run queue limits it to
one run per unique value), or on a host that declares its GPUs `hyperloom/slotted-host`
(the queue lets as many runs onto it as it has devices: `hyperloom instance-config`
writes one limit per such host; each run then leases a slot, core/fleet/slots.py), and
the Celery queue of that host (dagster-celery's run
launcher routes on it, so the host's own worker runs it). Under Kubernetes, with
`HYPERLOOM_K8S_NODE_LABEL` set, a run also carries a node selector on that label.
"""

from __future__ import annotations

import json
from typing import Mapping

HOST_TAG = "hyperloom/host"
SLOTTED_HOST_TAG = "hyperloom/slotted-host"
CELERY_QUEUE_TAG = "dagster-celery/queue"
K8S_CONFIG_TAG = "dagster-k8s/config"
K8S_NODE_LABEL_ENV = "HYPERLOOM_K8S_NODE_LABEL"


def celery_queue(host: str) -> str:
    """The Celery queue of a host: the worker started for that host listens on it alone."""
    return f"hyperloom-{host}"


def host_run_tags(host: str, environ: Mapping[str, str], slotted: bool = False) -> dict[str, str]:
    tags = {SLOTTED_HOST_TAG if slotted else HOST_TAG: host, CELERY_QUEUE_TAG: celery_queue(host)}
    label = environ.get(K8S_NODE_LABEL_ENV)
    if label:
        tags[K8S_CONFIG_TAG] = json.dumps({"pod_spec_config": {"node_selector": {label: host}}}, sort_keys=True)
    return tags


# The instance's run queue: at most one run in progress per host.
HOST_TAG_CONCURRENCY_LIMIT = {"key": HOST_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 1}


def slotted_host_limits(devices: Mapping[str, int]) -> list[dict]:
    """The run queue's limit for each host that declares its GPUs: at most a run per device
    (a run needs one at least; one that needs more waits in the fleet for its slot)."""
    return [{"key": SLOTTED_HOST_TAG, "value": host, "limit": count} for host, count in sorted(devices.items())]
