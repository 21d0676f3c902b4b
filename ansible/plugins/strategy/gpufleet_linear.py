"""gpufleet's default strategy: Ansible's ``linear``, with tasks run through Mitogen for Ansible.

Mitogen keeps one Python interpreter per host for the whole play and runs modules in it, instead of starting
Python and unpacking an AnsiballZ payload for every task (about 2.5 s per task on an emulated lab host, well
under a second through Mitogen). Task order, check mode, facts, handlers and failures are ``linear``'s; only the
connection and module execution go through Mitogen. ``ANSIBLE_STRATEGY=linear`` runs without it.
"""

from __future__ import annotations

import ansible_mitogen.loaders
import ansible_mitogen.strategy

_Linear = ansible_mitogen.loaders.strategy_loader.get("linear", class_only=True)


class StrategyModule(ansible_mitogen.strategy.StrategyMixin, _Linear):
    """``linear`` with Mitogen's connection and module runner."""
