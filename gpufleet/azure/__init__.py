"""What is Azure's: AKS's naming and limits (:mod:`~gpufleet.azure.aks`), the AgentPool API a pool needs
(:mod:`~gpufleet.azure.aks_api`), the AKS secure baseline and its audit (:mod:`~gpufleet.azure.baseline`), and what a
stack costs at Azure's prices (:mod:`~gpufleet.azure.cost`)."""
