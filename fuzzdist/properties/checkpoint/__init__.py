"""Distributed checkpoints: what ``torch.distributed.checkpoint`` (DCP) saves is what it loads,
bit for bit, into any other sharding.

Two properties, on CPU ranks over gloo, each example in its own directory (drawn in the driver with
``tempfile.mkdtemp`` under ``base_dir``, shared by every rank, removed after the example, also when
it fails):

``check(pool, case)``: a drawn state dict (plain tensors of every dtype ``fst.dtypes()`` yields and
every layout; DTensors with drawn Shard/Replicate placements on a drawn 1-D or 2-D CPU mesh; nested
dicts and lists holding tensors; non-tensor values: ints beyond 64 bits, floats, strings, bytes,
None, bools, lists and tuples of them) is written with ``dcp.save`` (or ``dcp.async_save``, waiting
on its future) and then

* read back with ``dcp.load`` on every rank into a state dict of the same keys, pre-allocated in a
  *different* drawn layout (each DTensor on its own drawn mesh and placements; the tensors filled
  with a decoy that differs from the saved value in every element).  After the load every rank's
  local shard of every DTensor, and every plain tensor, equals the value rebuilt from its seed
  (``torch.chunk`` pieces, mesh dim 0 first: the pieces of every rank together are the full value),
  bitwise, in the tensors the caller allocated; every non-tensor value equals the saved one (same
  type, same pickle);
* with ``single_process`` drawn, read back by rank 0 alone with ``dcp.load(..., no_dist=True)``
  into plain full-size tensors (the checkpoint at world size 1, whatever world size wrote it),
  which must equal the values rebuilt from the seeds.

What the docs promise, and the readings checked:

* ``dcp.load``: "Each rank will try to read the least amount of data necessary to fulfill the
  requested `state_dict`. When loading ShardedTensor or DTensor instances, each rank only reads
  data for their local shards" (resharding), "All tensors in ``state_dict`` must be allocated on
  their destination device *prior to* calling this function" (so the tensors are loaded into the
  caller's tensors: checked on the objects allocated), "All non-tensor data is loaded using
  `torch.load()` and modified in place on state_dict" (non-tensor values come back in the dict).
* ``no_dist``: "If ``True``, this function will assume the intent is to load a checkpoint without
  using cross-rank synchronization", and the note "If no process group is initialized, this
  function will assume the intent is to load a checkpoint into the local process ... when using
  regular Tensors": the world-size-1 load uses plain tensors only.
* ``dcp.async_save``: "Returns: Future: A future holding the resultant Metadata object from
  `save`": the checkpoint is complete once ``result()`` returns on every rank.
* ``DefaultLoadPlanner``: ``flatten_state_dict`` "Handle state_dict with nested dicts"; lists are
  traversed when they hold tensors or dicts (``_traverse.traverse_state_dict``: "``visitor`` will
  only be applied to elements in a list or a tuple, if the container contains tensors or
  mappings"), other values are saved whole.

Not drawn, and why: plain tensors or non-tensor values that differ between ranks (DCP treats a
plain tensor as replicated and keeps one rank's copy; the docs don't say whose), keys holding
``"."`` (the flattened key joins the path with ``"."``, so ``{"a.b": x}`` and ``{"a": {"b": y}}``
are one key), tuples holding tensors (a tuple is saved whole, by pickle), Partial placements (not
a value: a pending reduction), different key sets on different ranks ("Mismatched keys may result in
hangs or errors").  A DTensor is built with ``DTensor.from_local`` from the piece the seed gives,
with no communication, so every dtype is drawn for DTensors too (DCP exchanges only plans and
metadata, by object collectives).

``check_model(pool, case)``: a tiny MLP and its optimizer under DDP or FSDP2 (``fully_shard`` on
a 1-D or HSDP mesh), whose parameters and optimizer state (SGD momentum buffers, Adam moments
and step) are set to values rebuilt from seeds, saved with ``get_state_dict`` and ``dcp.save``,
then loaded with ``get_state_dict``, ``dcp.load`` and ``set_state_dict`` into a fresh model built
with other values under a drawn, possibly different, parallelism (and, with ``single_process``, an
unwrapped model on rank 0 with ``no_dist=True``).  After ``set_state_dict`` every rank's
parameters, optimizer state tensors and the optimizer's learning rate equal the saved ones, bit
for bit.  The docs: ``get_state_dict`` returns "a model and optimizer state_dict that can be
resharded with a different number of trainers and/or different parallelisms"; ``set_state_dict``
is "the counterpart of ``get_state_dict`` to set the state_dict to the model and optimizers".

The implementations under test are keywords: ``check(pool, case, save=..., load=...)``.  ``save``
takes ``(state_dict, checkpoint_id, asynchronous)`` and ``load`` takes ``(state_dict,
checkpoint_id, no_dist)``; both default to DCP's own (``dcp_save``/``dcp_load``) and must be
importable on the ranks.

Generalises torch's DCP tests (fixed state dicts and world sizes) to drawn state dicts, dtypes,
layouts, meshes, placements and parallelisms.  Importing this module raises ImportError where torch
has no ``torch.distributed.checkpoint`` with ``save``/``load`` or no DTensor.

Modules: ``state_dict.py`` (the state-dict round trip), ``model_state.py`` (the model-state round
trip), ``known_bugs.py`` (the torch bugs this family meets, listed in :mod:`fuzzdist.known_bugs.entries`).
"""

from __future__ import annotations

from fuzzdist.properties.checkpoint.model_state import (
    OPTIMIZERS,
    PARALLELISMS,
    ModelCase,
    Parallelism,
    build_model,
    check_model,
    check_seeded_state,
    dsd_set_state_dict,
    model_cases,
    model_save_and_load,
    parallelisms,
    seeded,
    seeded_step,
    set_seeded_state,
)
from fuzzdist.properties.checkpoint.state_dict import (
    HAS_ASYNC_SAVE,
    HAS_NO_DIST_LOAD,
    MAX_BYTES,
    MAX_ENTRIES,
    SEEDS,
    CheckpointCase,
    DTensorLeaf,
    Leaf,
    Node,
    Placements,
    TensorLeaf,
    ValueLeaf,
    check,
    checkpoint_cases,
    dcp_load,
    dcp_save,
    decoy_of,
    new_checkpoint_dir,
    run_in_checkpoint_dir,
    save_and_load,
)

__all__ = [
    "CheckpointCase",
    "DTensorLeaf",
    "HAS_ASYNC_SAVE",
    "HAS_NO_DIST_LOAD",
    "Leaf",
    "MAX_BYTES",
    "MAX_ENTRIES",
    "ModelCase",
    "Node",
    "OPTIMIZERS",
    "PARALLELISMS",
    "Parallelism",
    "Placements",
    "SEEDS",
    "TensorLeaf",
    "ValueLeaf",
    "build_model",
    "check",
    "check_model",
    "check_seeded_state",
    "checkpoint_cases",
    "dcp_load",
    "dcp_save",
    "decoy_of",
    "dsd_set_state_dict",
    "model_cases",
    "model_save_and_load",
    "new_checkpoint_dir",
    "parallelisms",
    "run_in_checkpoint_dir",
    "save_and_load",
    "seeded",
    "seeded_step",
    "set_seeded_state",
]
