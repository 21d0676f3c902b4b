"""The validated stack description: one per stage x region (``Pulumi.<stage>-<region>.yaml``).

- :mod:`gpufleet.spec.types` and :mod:`gpufleet.spec.models`: the shapes a stack file may take (pydantic models);
- :mod:`gpufleet.spec.rules` and :mod:`gpufleet.spec.owners`: the checks that need the catalog or more than one
  object of a stack;
- :mod:`gpufleet.spec.load`: ``load_stack``, the one loader the CLI, the Pulumi program and the Ansible plugins
  share: an invalid stack fails with ``file:line: key.path: message`` before any resource or host is touched;
- :mod:`gpufleet.spec.files`: where a project's stack files are.

The package imports nothing itself: code that needs only the models (most of gpufleet) does not load the rules.
"""
