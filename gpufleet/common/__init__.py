"""Helpers every layer shares, with no knowledge of GPUs, Kubernetes or Azure: YAML read with its line numbers
(:mod:`~gpufleet.common.yamldoc`), findings placed at ``file:line`` and "did you mean" (:mod:`~gpufleet.common.
diagnostics`), data handed over by another tool as plain values (:mod:`~gpufleet.common.plaindata`), and crash-safe
writes of a user's files (:mod:`~gpufleet.common.atomic`)."""
