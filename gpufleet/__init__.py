"""gpufleet: infrastructure as code for GPU hosts.

The library never imports pulumi or ansible at module level: validation and planning stay fast and run
anywhere. The Pulumi program (infra/) and the Ansible plugins import gpufleet, not the other way round.
"""

__version__ = "0.1.0"
