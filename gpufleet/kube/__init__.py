"""What becomes Kubernetes objects: the GPU software's Helm releases and values (:mod:`~gpufleet.kube.gpu_software`,
rendered by helm in :mod:`~gpufleet.kube.charts`), node labels (:mod:`~gpufleet.kube.labels`), where each DaemonSet
lands (:mod:`~gpufleet.kube.scheduling`), DRA (:mod:`~gpufleet.kube.dra`), node auto-provisioning
(:mod:`~gpufleet.kube.nap`), Kueue queues (:mod:`~gpufleet.kube.queues`), monitoring and its dashboard
(:mod:`~gpufleet.kube.monitoring`, :mod:`~gpufleet.kube.dashboard`), GPU fault handling on nodes
(:mod:`~gpufleet.kube.node_remediation`) and KubeVirt's GPU VMs (:mod:`~gpufleet.kube.kubevirt`)."""
