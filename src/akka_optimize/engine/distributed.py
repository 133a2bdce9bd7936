"""Ranks of a supervised run on several devices (DESIGN.md "Where a run executes").

A run on N devices is one attempt whose worker runs under ``torch.distributed.run`` with N
ranks on one node: NCCL on CUDA, gloo on CPU (how CI tests it). Every rank trains; only
rank 0 talks to the service. This module holds what the engine needs of the process
group, all of it through ``torch.distributed`` and FSDP2 (``fully_shard``):

- :func:`init_ranks` joins the group ``torch.distributed.run`` describes in the environment.
- :func:`rank_share` splits an update's conversations between the ranks, so every
  conversation trains, the remainder included (seeds/001 "Other changes").
- :func:`shard_model` shards the LoRA model with FSDP2 (``execution.memory.sharding``
  ``full``, the default) or keeps a full replica per rank (``none``), whose gradients
  :func:`reduce_replica_grads` sums in one all-reduce per update.
- :func:`all_sum`, :func:`any_rank`, :func:`local_sq_sum` and :func:`full_tensor` keep the
  loss, the stop decision, the norms and the saves identical on every rank.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any, NoReturn

import torch
from torch import Tensor

from ..forkserver import exit_now
from .errors import EngineError

SHARDINGS = ("full", "none")
"""Values of ``execution.memory.sharding``: FSDP2 shards (``full``) or a replica per rank."""


def world() -> tuple[int, int]:
    """``(rank, world size)`` of the joined process group; ``(0, 1)`` outside one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def env_rank() -> int:
    """This process's rank as ``torch.distributed.run`` sets it (``RANK``; 0 without it)."""
    return int(os.environ.get("RANK", "0") or 0)


def init_ranks(ranks: int, device_type: str) -> None:
    """Join the process group of ``ranks`` ranks described by the environment (``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` from ``torch.distributed.run``) with
    NCCL on CUDA and gloo on CPU; nothing for one rank or a group already joined. On CUDA
    the rank's device is ``LOCAL_RANK``.

    Raises:
        EngineError: the environment names another world size than ``ranks`` (the worker
            was not started with ``--nproc-per-node ranks``).
    """
    import torch.distributed as dist

    if ranks <= 1:
        return
    if not dist.is_initialized():
        size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if size != ranks:
            raise EngineError(
                f"execution.gpus {ranks}: this worker runs with {size} rank(s); a run on "
                f"several devices starts under torch.distributed.run --nproc-per-node {ranks}.",
                field="execution.gpus",
            )
        if device_type == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0") or 0))
        backend = "nccl" if device_type == "cuda" else "gloo"
        dist.init_process_group(backend, timeout=timedelta(hours=2))
    if dist.get_world_size() != ranks:
        raise EngineError(
            f"execution.gpus {ranks}: the process group has {dist.get_world_size()} rank(s).",
            field="execution.gpus",
        )


def rank_share(rows: list[Any], rank: int, size: int) -> list[Any]:
    """The contiguous share of ``rows`` that ``rank`` of ``size`` trains: shares differ by
    at most one row, the first ``len(rows) % size`` ranks take the extra one, and a rank
    may get none (an update smaller than the ranks: the epoch's remainder)."""
    base, extra = divmod(len(rows), size)
    start = rank * base + min(rank, extra)
    return rows[start : start + base + (1 if rank < extra else 0)]


def all_sum(values: list[float]) -> list[float]:
    """``values`` summed over every rank (float64, one all-reduce); as given on one rank."""
    import torch.distributed as dist

    if world()[1] == 1:
        return list(values)
    out = torch.tensor(values, dtype=torch.float64, device=comm_device())
    dist.all_reduce(out)
    return [float(v) for v in out.cpu()]


def any_rank(flag: bool) -> bool:
    """Whether ``flag`` is true on any rank (every rank gets the same answer)."""
    return all_sum([1.0 if flag else 0.0])[0] > 0


def max_over_ranks(value: int) -> int:
    """The largest ``value`` over the ranks."""
    import torch.distributed as dist

    if world()[1] == 1:
        return value
    t = torch.tensor([value], dtype=torch.int64, device=comm_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def comm_device() -> torch.device:
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard_model(
    body: Any,
    sharding: str,
    reduce_dtype: torch.dtype = torch.float32,
    prefetch: bool = True,
    offload: bool = False,
) -> None:
    """Shard ``body`` (the transformer body the engine calls) with FSDP2: each decoder layer
    (of ``body.language_model`` in a multimodal body, whose towers stay unsharded) and then
    the body itself, so parameters, gradients and optimizer state are split across
    the ranks. Gradients are summed in ``reduce_dtype`` (``dtypes.reduce``), not averaged
    (the engine divides by the update's supervised tokens). ``prefetch``
    (``engine.prefetch_weights``) gathers the next layer's weights while the current one
    runs, forward and backward; false gathers each layer when it runs (no implicit backward
    prefetch either). ``offload`` (``execution.memory.offload.weights`` and ``.optimizer``)
    keeps each shard and its gradient in host memory (FSDP2's ``CPUOffloadPolicy``, pinned
    on CUDA): the layer's weights are gathered to the device when it runs, and the
    optimizer steps on the host shards. ``sharding == "none"`` leaves a full replica on
    every rank.

    The tied output head shares the body's embedding, which the body (the root) keeps
    gathered after its forward, so the head reads the full matrix."""
    if sharding == "none":
        return
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    kw: dict[str, Any] = {"mp_policy": MixedPrecisionPolicy(reduce_dtype=reduce_dtype)}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    language = getattr(body, "language_model", body)  # a multimodal body (Gemma 4)
    layers = list(language.layers)
    # The towers (vision, audio) of a multimodal body never run in a text run: left out of
    # FSDP (each rank keeps its frozen copy), so the root's gather does not bring their
    # weights in on every forward. As units of their own they would fail FSDP2's
    # post-backward, which expects every unit to have run forward.
    towers = (
        set()
        if language is body
        else {p for m in body.children() if m is not language for p in m.parameters()}
    )
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(body, **kw, ignored_params=towers or None)
    for module in [*layers, body]:  # each FSDP module has its own reduction
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
    for i, layer in enumerate(layers):
        nxt, prev = layers[i + 1 : i + 2], layers[i - 1 : i] if i else []
        layer.set_modules_to_forward_prefetch(nxt if prefetch else [])
        layer.set_modules_to_backward_prefetch(prev if prefetch else [])


def offloaded(body: Any) -> bool:
    """Whether FSDP2 keeps ``body``'s shards in host memory (:func:`shard_model`)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    for m in body.modules():
        state = getattr(m, "_get_fsdp_state", None)
        group = getattr(state(), "_fsdp_param_group", None) if state else None
        if group is not None and isinstance(group.offload_policy, CPUOffloadPolicy):
            return True
    return False


def set_gradient_sync(body: Any, sync: bool) -> None:
    """Whether the next backward reduces gradients across ranks (FSDP2 only)."""
    if hasattr(body, "set_requires_gradient_sync"):
        body.set_requires_gradient_sync(sync)


def reduce_replica_grads(params: list[Tensor], dtype: torch.dtype = torch.float32) -> None:
    """Sum the gradients of full replicas over the ranks in one all-reduce in ``dtype``
    (``dtypes.reduce``; sharding ``none``: gradients are combined once per update). A
    missing gradient counts as 0."""
    import torch.distributed as dist

    if world()[1] == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1).to(dtype) for p in params])
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p.grad))  # back to the grad's dtype
        offset += n


def is_sharded(t: Tensor) -> bool:
    """Whether ``t`` is a DTensor (an FSDP2 shard)."""
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def local(t: Tensor) -> Tensor:
    """This rank's part of ``t`` (its shard, or ``t`` itself)."""
    return t.to_local() if is_sharded(t) else t


def local_sq_sum(tensors: list[Tensor]) -> float:
    """Sum of squares of this rank's parts of ``tensors`` (float64)."""
    return sum(float(local(t).detach().double().pow(2).sum()) for t in tensors)


def global_norm(tensors: list[Tensor], sharded: bool) -> float:
    """L2 norm over ``tensors`` together: of the shards summed over the ranks when
    ``sharded``, else of the (replicated) tensors as they are."""
    sq = local_sq_sum(tensors)
    return (all_sum([sq])[0] if sharded else sq) ** 0.5


def full_tensor(t: Tensor) -> Tensor:
    """The whole of ``t`` on CPU (a collective for a DTensor: every rank must call it)."""
    return (t.full_tensor() if is_sharded(t) else t).detach().cpu().contiguous()


def shard_like(param: Tensor, full: Tensor) -> Tensor:
    """``full`` placed like ``param`` (its DTensor shard), or ``full`` itself."""
    if not is_sharded(param):
        return full
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(
        full.to(param.to_local().device), param.device_mesh, param.placements, src_data_rank=None
    )


def replica_difference(flat: Tensor) -> float:
    """The largest absolute difference between this rank's ``flat`` and rank 0's, over
    every rank (0.0 when the replicas agree; a collective)."""
    import torch.distributed as dist

    if world()[1] == 1:
        return 0.0
    dev = comm_device()
    mine = flat.to(dev)
    first = mine.clone()
    dist.broadcast(first, src=0)
    diff = torch.tensor([float((mine - first).abs().max())], dtype=torch.float64, device=dev)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff.item())


def finish_ranks() -> None:
    """Leave the process group, when one was joined."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def exit_rank(code: int) -> NoReturn:
    """End a rank's process with ``code`` once its work is done and the group left: the
    exit handlers run and the streams are flushed, as at a normal exit, but the
    interpreter's teardown is skipped. That teardown, after a gloo group, can abort the
    process (libstdc++ "terminate called without an active exception", exit -6: seen once
    in CI on two CPU ranks under load, torch 2.13; pytorch/pytorch#179291 describes
    gloo's worker threads outliving the interpreter), and ``torch.distributed.run`` then
    reports a finished launch as failed."""

    exit_now(code)


def torch_dtype(name: str) -> torch.dtype:
    """``fp32`` → ``torch.float32``, ``bf16`` → ``torch.bfloat16``."""
    return torch.bfloat16 if name == "bf16" else torch.float32
