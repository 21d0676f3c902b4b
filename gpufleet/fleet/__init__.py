"""Day 2, across stacks and hosts: promotion from stage to stage and its ledger (:mod:`~gpufleet.fleet.promote`,
:mod:`~gpufleet.fleet.promote_ledger`), what a host's GPU faults call for (:mod:`~gpufleet.fleet.remediation`), the
DCGM diagnostic a stage requires (:mod:`~gpufleet.fleet.dcgm_diag`), and sizing models onto GPUs
(:mod:`~gpufleet.fleet.sizing`)."""
