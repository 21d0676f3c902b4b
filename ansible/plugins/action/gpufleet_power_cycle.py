"""Action gpufleet_power_cycle: cut a host's power and give it back through its Redfish BMC, from the controller.

It runs where ansible-playbook runs (an action plugin, never on the host, which loses power): gpufleet's BMC client
(gpufleet.baremetal.bmc.Bmc.power_cycle) with the host's ``gpufleet_bmc`` variable ``{url, system_id,
credentials_file}``, the credentials file holding ``{"user": ..., "password": ...}`` (mode 0600; the lab's inventory
points at the lab's). It returns changed; the play then waits for the host to answer again
(ansible.builtin.wait_for_connection).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"timeout"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        from gpufleet.baremetal.bmc import Bmc, BmcError, Endpoint

        result = super().run(tmp, task_vars)
        bmc = (task_vars or {}).get("gpufleet_bmc")
        if not isinstance(bmc, dict) or not {"url", "system_id", "credentials_file"} <= set(bmc):
            return {**result, "failed": True,
                    "msg": "the host has no BMC: its inventory sets no gpufleet_bmc {url, system_id, credentials_file}"
                           " (power-cycle needs one; the policy's xid_actions can name reboot instead)"}  # fmt: skip
        if self._play_context.check_mode:
            return {**result, "changed": True, "msg": f"would power-cycle system {bmc['system_id']} ({bmc['url']})"}
        try:
            creds = json.loads(Path(str(bmc["credentials_file"])).read_text(encoding="utf-8"))
            endpoint = Endpoint(str(bmc["url"]), creds["user"], creds["password"], retry_seconds=30)
            steps: list[str] = []
            with Bmc(endpoint) as client:
                client.power_cycle(str(bmc["system_id"]), float(self._task.args.get("timeout", 300)), steps.append)
        except (OSError, ValueError, KeyError, BmcError) as exc:
            return {**result, "failed": True, "msg": f"power cycle through {bmc['url']} failed: {exc}"}
        return {**result, "changed": True, "steps": steps,
                "msg": f"power-cycled system {bmc['system_id']} through {bmc['url']}"}  # fmt: skip
