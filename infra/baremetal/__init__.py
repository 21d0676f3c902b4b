"""Bare-metal GPU hosts created by a stack: :mod:`infra.baremetal.provider` drives each host's BMC itself (Redfish
through sushy, engine ``redfish``); :mod:`infra.baremetal.metal3` hands the hosts to Metal3/Ironic on a management
cluster (engine ``metal3``)."""
