"""What is Azure's: AKS's naming and limits (:mod:`~gpufleet.azure.aks`), the AgentPool API a pool needs
(:mod:`~gpufleet.azure.aks_api`), the AKS secure baseline and its audit (:mod:`~gpufleet.azure.baseline`), what a
stack costs at Azure's prices (:mod:`~gpufleet.azure.cost`) and where those come from (:mod:`~gpufleet.azure.prices`,
the Retail Prices API and the price tables), and whether the subscription can deploy it: each pool's size offered
in the region and zones, and vCPU quota (:mod:`~gpufleet.azure.preflight`, read through :mod:`~gpufleet.azure.arm`)."""
