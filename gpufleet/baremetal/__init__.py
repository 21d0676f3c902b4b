"""BMC-managed servers: Redfish (:mod:`~gpufleet.baremetal.bmc`, used by the Pulumi provider and the lab), Metal3's
BareMetalHosts (:mod:`~gpufleet.baremetal.metal3`) and the Ansible inventory of a stack's hosts
(:mod:`~gpufleet.baremetal.inventory`)."""
