"""The ``distributed:`` config section."""

from __future__ import annotations

from dataclasses import dataclass

from evorl.config.errors import require


@dataclass(frozen=True)
class DistributedConfig:
    """Data parallelism over devices and processes (``jax.distributed``)."""

    #: Split the environments over every device (of every process) and average gradients.
    multi_devices: bool = False
    #: ``host:port`` of process 0; with ``num_processes`` and ``process_id`` this starts
    #: ``jax.distributed`` (multi-host training; implies ``multi_devices``).
    coordinator_address: str | None = None
    #: How many processes take part (with ``coordinator_address``).
    num_processes: int | None = None
    #: This process's index, in ``[0, num_processes)``; process 0 writes the run folder.
    process_id: int | None = None
    #: Let JAX detect the cluster instead (SLURM, Open MPI, Kubernetes, or the
    #: ``JAX_COORDINATOR_ADDRESS`` environment variable with the cluster's process ids).
    auto: bool = False
    #: A process silent for this long is declared dead and the others stop with an error.
    heartbeat_timeout_seconds: int = 30
    #: How long ``jax.distributed.initialize`` waits for every process to join.
    initialization_timeout_seconds: int = 300
    #: With several devices, what is split across them: ``envs`` (each agent's environments;
    #: gradients averaged over devices) or ``population`` (whole agents on each device, no
    #: communication: for populations, PBT and ES; ``num_seeds`` x variants must divide evenly).
    layout: str = "envs"

    @property
    def multi_process(self) -> bool:
        return self.auto or self.coordinator_address is not None

    def validate(self, where: str) -> None:
        given = [self.coordinator_address is not None, self.num_processes is not None, self.process_id is not None]
        require(all(given) or not any(given),
                f"{where}: coordinator_address, num_processes and process_id go together (got "
                f"{self.coordinator_address!r}, {self.num_processes!r}, {self.process_id!r}).")
        require(not (self.auto and any(given)),
                f"{where}.auto detects the cluster; do not also set coordinator_address/num_processes/process_id.")
        if self.coordinator_address is not None:
            host, _, port = str(self.coordinator_address).rpartition(":")
            require(bool(host) and port.isdigit() and 0 < int(port) < 65536,
                    f"{where}.coordinator_address = {self.coordinator_address!r} must be host:port (process 0's "
                    f"address and a free port, e.g. 10.0.0.1:1234).")
        if self.num_processes is not None and self.process_id is not None:  # together (above)
            require(self.num_processes >= 1, f"{where}.num_processes must be >= 1, got {self.num_processes}.")
            require(0 <= self.process_id < self.num_processes,
                    f"{where}.process_id must be in [0, {self.num_processes}), got {self.process_id}.")
        require(self.heartbeat_timeout_seconds >= 1, f"{where}.heartbeat_timeout_seconds must be >= 1.")
        require(self.layout in ("envs", "population"),
                f"{where}.layout must be 'envs' or 'population', got {self.layout!r}.")
