"""Bare-metal GPU hosts created by a stack: :mod:`infra.baremetal.provider` drives each host's BMC itself (Redfish
through sushy, engine ``redfish``); :mod:`infra.baremetal.metal3` hands the hosts to Metal3/Ironic on a management
cluster (engine ``metal3``)."""

from __future__ import annotations

import pulumi


def secret_config(key: str) -> pulumi.Output[str]:
    """A stack's secret config value by its full key (``gpufleet:bmc_password``), as a secret ``Output``."""
    namespace, _, name = key.rpartition(":")
    return pulumi.Config(namespace or None).require_secret(name)
