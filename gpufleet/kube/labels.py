"""The Kubernetes node labels and taints gpufleet derives or relies on: each name once, for the planners, the spec's
rules (which refuse them set by hand), the Pulumi program, the roles' filters and the tests. Constants only."""

from __future__ import annotations

POOL_LABEL = "gpufleet.io/pool"
GPU_MODEL_LABEL = "gpufleet.io/gpu-model"
# A bare-metal host's group: on its BareMetalHost (gpufleet.baremetal.metal3), and what the Kueue ResourceFlavor of its
# group selects its node by (gpufleet.kube.queues; gpufleet sets it on no node: docs/queues.md says how).
HOST_GROUP_LABEL = "gpufleet.io/host-group"
# The kubelet sets it on its node (the host name): how objects made for one host (its KubeVirt VMs) select its node.
HOSTNAME_LABEL = "kubernetes.io/hostname"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
# The GPU Operator skips its driver daemonset on nodes labelled so (used for AKS-driver pools in a cluster
# where other pools have `driver: operator`).
DEPLOY_DRIVER_LABEL = "nvidia.com/gpu.deploy.driver"
# ... and every operand (driver, toolkit, device plugin, GFD, DCGM, MIG manager...) on nodes labelled
# nvidia.com/gpu.deploy.operands=false (GPU Operator "Getting Started", section Operands:
# docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/getting-started.html); gpufleet sets it on pools
# whose GPU stack AKS manages (gpu_management: managed), where the standalone device plugin does not run either (they
# lack nvidia.com/gpu.present).
DEPLOY_OPERANDS_LABEL = "nvidia.com/gpu.deploy.operands"
# AKS puts this label and taint on every spot pool's nodes itself; a pool that does not list them too shows a diff
# after every refresh (the azurerm provider documents the same), and the GPU daemonsets must tolerate the taint.
AKS_SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
AKS_SPOT_TAINT = f"{AKS_SPOT_LABEL}=spot:NoSchedule"
# The standalone device plugin chart's DaemonSet runs only on nodes that NFD found an NVIDIA PCI device on, or that
# carry this label (k8s-device-plugin v0.20.0, templates/daemonset-device-plugin.yml); its NFD is off by default,
# so gpufleet labels the GPU nodes of clusters that use that chart. (The GPU Operator sets it itself from NFD.)
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# With sandbox workloads on, the GPU Operator reads a node's GPU workload from this label: container (the default,
# when the label is absent), vm-passthrough or vm-vgpu; it deploys each workload's operands there and no others
# (gpu-operator controllers/state_manager.go, gpuStateLabels). gpufleet sets it on VM host groups.
GPU_WORKLOAD_CONFIG_LABEL = "nvidia.com/gpu.workload.config"
# The vGPU device manager's named config for a vm-vgpu node (an entry of its ConfigMap; "default" when absent).
VGPU_CONFIG_LABEL = "nvidia.com/vgpu.config"
# Advertiser none (docs/kubernetes.md): the GPU Operator adds nvidia.com/gpu.deploy.<operand>=true to a GPU node only
# where the label is unset, so "false" keeps that operand off the node (gpu-operator v26.7.0 controllers/
# state_manager.go, gpuStateLabels; controllers/nodelabeling_controller.go updateGPUClusterStateLabels). Under a
# ClusterPolicy the device plugin's label; under a GPUCluster the DRA driver's kubelet plugin's and those of the
# operands that reach the GPUs through a DRA admin claim (its validator, DCGM, DCGM exporter: manifests/
# state-dra-validation, state-dcgm, state-dcgm-exporter), which would wait forever for a device on a node without one.
DEPLOY_DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
DEPLOY_DRA_DRIVER_LABEL = "nvidia.com/gpu.deploy.dra-driver"
DRA_OPERAND_LABELS = (
    DEPLOY_DRA_DRIVER_LABEL,
    "nvidia.com/gpu.deploy.dra-validator",
    "nvidia.com/gpu.deploy.dcgm-dra",
    "nvidia.com/gpu.deploy.dcgm-exporter-dra",
)
# The AMD GPU Operator (docs/amd.md, gpufleet.kube.amd_operator). gpufleet puts AMD_GPU_OPERATOR_LABEL=true on the AMD
# pools and host groups the operator serves (every AMD one but those of advertiser none), and its DeviceConfig selects
# the nodes that carry it and NFD's AMD_GPU_FEATURE_LABEL=true (set by NFD from the chart's NodeFeatureRule
# amd-gpu-label-nfd-rule, on nodes with an AMD Instinct PCI function): exactly the planned nodes, once NFD has seen
# their GPUs (without NFD's label the operator strips its node labeller's labels again: ROCm/gpu-operator v1.5.1
# internal/controllers/device_config_reconciler.go, handleNodeLabeller).
AMD_GPU_OPERATOR_LABEL = "gpufleet.io/amd-gpu-operator"
AMD_GPU_FEATURE_LABEL = "feature.node.kubernetes.io/amd-gpu"
# The Device Config Manager applies the partition profile a node's label names (gpu-operator docs/dcm/
# applying-partition-profiles.rst); gpufleet sets it from an AMD pool's or host group's amd_partitions (managed_by:
# operator) to the layout's profile, an entry of the DCM ConfigMap gpufleet writes.
DCM_PROFILE_LABEL = "dcm.amd.com/gpu-config-profile"
