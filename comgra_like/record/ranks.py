"""Which process of a distributed job this is, and which ranks record (docs/FORMAT.md,
"Recording ranks").

The rank and world size come from ``torch.distributed`` when it is initialized, else from
the environment variables every launcher sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``:
torchrun, ``torch.multiprocessing`` recipes, SLURM wrappers). Nothing here talks to the
other ranks while training runs; :func:`any_rank` is the one collective, for a user who
wants a dynamic recording decision to be the same on every rank.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigurationError
from ..format.layout import MAX_RANK

ALL = "all"


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the job: ``source`` is ``torch.distributed``, ``env`` or
    ``single`` (no job: rank 0 of 1)."""

    rank: int
    world_size: int
    local_rank: int
    source: str

    @property
    def distributed(self) -> bool:
        return self.source != "single"


def _env_int(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise ConfigurationError(
            f"the environment variable {name}={text!r} is not an integer; launchers set it "
            "to this process's number (unset it, or start the job with torchrun)") from None


def detect() -> RankInfo:
    """Rank and world size of this process (see the module's docstring)."""
    local = _env_int("LOCAL_RANK") or 0
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return RankInfo(dist.get_rank(), dist.get_world_size(), local, "torch.distributed")
    except ImportError:  # pragma: no cover - torch without distributed support
        pass
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None and world is None:
        return RankInfo(0, 1, 0, "single")
    if rank is None or world is None:
        raise ConfigurationError(
            f"only one of RANK ({rank}) and WORLD_SIZE ({world}) is set; a distributed job "
            "sets both (unset the other for a single-process run)")
    if world < 1 or not 0 <= rank < world or rank > MAX_RANK:
        raise ConfigurationError(
            f"RANK={rank} and WORLD_SIZE={world} do not fit: the rank must be in "
            f"0..WORLD_SIZE-1 (and WORLD_SIZE at least 1)")
    return RankInfo(rank, world, local, "env")


def recording_ranks(ranks: str | int | Iterable[int], world_size: int) -> tuple[int, ...]:
    """The ranks that record, sorted: ``"all"``, one rank, or several (any iterable)."""
    if isinstance(ranks, str):
        if ranks != ALL:
            raise ConfigurationError(
                f"ranks={ranks!r}: pass 'all', one rank (e.g. 0) or a list of ranks "
                "(e.g. [0, 7] or range(0, world_size, 8))")
        return tuple(range(world_size))
    if isinstance(ranks, bool):
        raise ConfigurationError(f"ranks={ranks!r}: pass 'all', one rank or a list of ranks")
    chosen = [ranks] if isinstance(ranks, int) else ranks
    try:
        chosen = sorted({int(r) for r in chosen if not isinstance(r, bool)})
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"ranks={ranks!r}: pass 'all', one rank (an int) or a list of ints") from None
    if not chosen:
        raise ConfigurationError("ranks is empty: name at least one rank that records "
                                 "(or pass comgra_is_active=False to record nothing)")
    outside = [r for r in chosen if not 0 <= r < world_size]
    if outside:
        raise ConfigurationError(
            f"ranks {outside} are not ranks of this job (world size {world_size}): choose "
            f"from 0..{world_size - 1}")
    return tuple(chosen)


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on any rank (an all-reduce with MAX; every rank must call
    it, at the same point of the loop). Without torch.distributed: ``flag``.

    For dynamic recording ("record when the loss spikes"): each rank decides from its own
    data, so ranks may disagree; pass ``override__recording_is_active=any_rank(spike)``
    to ``start_batch`` to record the step on every recording rank when any rank saw it.
    """
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return bool(flag)
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def common_time() -> float:
    """Now, the same on every rank: rank 0's clock, broadcast (every rank must call it, at
    the same point). For names made from the time (a default trial id) that must not
    differ between ranks whose clocks straddle a second. Without a job: ``time.time()``;
    RANK/WORLD_SIZE without a process group cannot agree: a ConfigurationError."""
    import time

    where = detect()
    if not where.distributed or where.world_size == 1:
        return time.time()
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise ConfigurationError(
            f"rank {where.rank} of {where.world_size} (RANK/WORLD_SIZE are set) has no "
            "torch.distributed process group to agree with the other ranks on a trial id "
            "made from the time; pass trial_id= (the same on every rank), or call "
            "dist.init_process_group() first")
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    now = torch.tensor([time.time()], dtype=torch.float64, device=device)
    dist.broadcast(now, src=0)
    return float(now.item())
