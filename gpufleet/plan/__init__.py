"""The plan of a stack: what a valid stack describes, resolved against the hardware catalog and decided once.

- :mod:`gpufleet.plan.model`: the typed plan (frozen dataclasses) the Pulumi program, the roles and the CLI read.
- :mod:`gpufleet.plan.build`: :func:`plan_stack`, the planners put together (pure: no I/O).
- :mod:`gpufleet.plan.hosts`: a stack file's plan cached by its content, and the host view the Ansible lookup
  ``gpufleet_plan`` hands the roles.

The package imports nothing itself: the modules that fill the plan's types import :mod:`gpufleet.plan.model`
without loading the planners.
"""
