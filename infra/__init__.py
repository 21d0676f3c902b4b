"""gpufleet's Pulumi program: an AKS cluster with GPU pools and the GPU software, per stack (``<stage>-<region>``).

``__main__.py`` is what ``pulumi up`` runs; :mod:`infra.program` builds the components of :mod:`infra.aks` and
:mod:`infra.gpu_software` from the validated stack and its plan (:mod:`gpufleet.plan`).
"""
