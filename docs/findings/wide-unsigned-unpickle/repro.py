"""wide-unsigned-unpickle: uint16/uint32/uint64 and float8 tensors pickle but don't unpickle.

Tensor.__reduce_ex__ pickles the tensors of the dtypes in torch.storage._new_dtypes() (uint16,
uint32, uint64, the float8 family, and also complex32, float4_e2m1fn_x2 and the bits types) with
their UntypedStorage, which pickles itself through the legacy torch.save format; the legacy loader
then reads storage_type.dtype, which UntypedStorage lacks.  So pickle.loads(pickle.dumps(t))
raises AttributeError (the verdict).  For a uint16 tensor the script also tries the other paths that
serialise tensors and names which fail: torch.save in the legacy format (torch.load with and without
weights_only), and all_gather_object on a 1-rank gloo group fail the same way; torch.save's default
(zip) format, copy.deepcopy and a multiprocessing Pipe (torch's own reductions, shared memory) work.

    python docs/findings/wide-unsigned-unpickle/repro.py

Prints one line; exits 1 while the bug reproduces ("BUG: ..."), 0 once torch gets it right ("FIXED: ...").
"""
import copy
import io
import multiprocessing as mp
import pickle
import sys
import traceback

import torch

NAMES = ["uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
         "float8_e8m0fnu"]


def main():
    failed, errors = [], set()
    dtypes = [getattr(torch, name) for name in NAMES if hasattr(torch, name)]
    for dtype in dtypes:
        t = torch.arange(8, dtype=torch.uint8).view(dtype)  # any bytes will do: 8 / itemsize elements
        data = pickle.dumps(t)  # succeeds
        try:
            back = pickle.loads(data)
        except Exception as e:
            failed.append(str(dtype).removeprefix("torch."))
            errors.add(f"{type(e).__name__}: {e}")
            continue
        if back.dtype != dtype or not torch.equal(back.view(torch.uint8), t.view(torch.uint8)):
            failed.append(f"{str(dtype).removeprefix('torch.')} (came back different)")
    if failed:
        broken, fine = other_paths()
        print(f"BUG: pickle.loads(pickle.dumps(t)) fails for {', '.join(failed)}: {' | '.join(sorted(errors))}; "
              f"for uint16 also {', '.join(broken) or 'nothing else'}; works: {', '.join(fine)}")
        return 1
    print(f"FIXED: tensors of {', '.join(str(d).removeprefix('torch.') for d in dtypes)} pickle and unpickle")
    return 0


def other_paths():
    """Which other ways of serialising a uint16 tensor fail (the first list) and which work (the second)."""
    import torch.distributed as dist

    t = torch.arange(8, dtype=torch.uint8).view(torch.uint16)

    def saved(legacy, weights_only):
        buffer = io.BytesIO()
        torch.save(t, buffer, _use_new_zipfile_serialization=not legacy)
        buffer.seek(0)
        return torch.load(buffer, weights_only=weights_only)

    def piped():
        a, b = mp.Pipe()
        a.send(t)
        return b.recv()

    def gathered():
        if not dist.is_initialized():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        out = [None]
        dist.all_gather_object(out, t)
        return out[0]

    paths = {"legacy torch.save + torch.load(weights_only=False)": lambda: saved(True, False),
             "legacy torch.save + torch.load(weights_only=True)": lambda: saved(True, True),
             "all_gather_object (1 gloo rank)": gathered,
             "torch.save (zip) + torch.load": lambda: saved(False, True),
             "copy.deepcopy": lambda: copy.deepcopy(t),
             "multiprocessing Pipe": piped}
    broken, fine = [], []
    for name, path in paths.items():
        try:
            back = path()
            ok = back.dtype == t.dtype and torch.equal(back.view(torch.uint8), t.view(torch.uint8))
        except Exception:  # noqa: BLE001 - any failure of the path is what is reported
            ok = False
        (fine if ok else broken).append(name)
    return broken, fine


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:  # the script itself failed: neither verdict
        traceback.print_exc()
        sys.exit(2)
