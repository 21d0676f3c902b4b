"""Helpers every layer shares, with no knowledge of GPUs, Kubernetes or Azure: YAML read with its line numbers
(:mod:`~gpufleet.common.yamldoc`), findings placed at ``file:line`` and "did you mean" (:mod:`~gpufleet.common.
diagnostics`), and data handed over by another tool as plain values (:mod:`~gpufleet.common.plaindata`)."""
