"""What runs on a host or reads one: the facts a host shows (:mod:`~gpufleet.host.hostfacts`, :mod:`~gpufleet.host.
driverstate`, :mod:`~gpufleet.host.owners`, :mod:`~gpufleet.host.vfio`: standard library only, shipped to hosts as
Ansible module_utils), and the planners of one host: its NVIDIA driver (:mod:`~gpufleet.host.driver`), NUMA pinning
(:mod:`~gpufleet.host.topology`), GPU VMs (:mod:`~gpufleet.host.virt`, :mod:`~gpufleet.host.virt_xml`) and Slurm's
GPU resources (:mod:`~gpufleet.host.slurm`). The Ansible roles call them through ansible/plugins."""
